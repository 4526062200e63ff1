"""The card's sizes: taken from the writer's counts against measured on the shards.

Writes a synthetic dataset folder with ``write_dataset`` (``--rows`` rows per config, each with
an image of ``--image-kb`` KiB of incompressible bytes behind a PNG signature, as photos are),
then, in the same process, times:

- *measured*: ``card.config_sizes`` (``dataset.info.measured_sizes``), which reads every row
  group of every shard back for its Arrow size, as the card did before the writer counted;
- *from the writer*: ``card.card_sizes`` with the build report's writer summary, which opens no
  shard (it checks the shard names and file sizes against the folder);
- the whole ``render_card`` each way.

Both give the same figures (checked). Prints seconds and the ratio measured / from the writer.

    .venv/bin/python benchmarks/bench_card.py --rows 2000 --image-kb 256 --json bench_card.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orandcar_builder.dataset.writer import write_dataset  # noqa: E402
from orandcar_builder.files import PNG_SIGNATURE  # noqa: E402
from orandcar_builder.vocab import CONFIG_REJECTED, CONFIG_THINK, CONFIGS, WRONG_ANSWER  # noqa: E402


def _rows(config: str, n: int, image_bytes: int):
    for i in range(n):
        data = PNG_SIGNATURE + os.urandom(image_bytes - len(PNG_SIGNATURE))
        if config == CONFIG_REJECTED:
            qa = [{"question": f"What does sign {i} say?", "answer": "STOP", "wrong_vlm": "SLOW",
                   "reason": WRONG_ANSWER}]
        else:
            qa = [{"question": f"What does sign {i} say?", "answer": "STOP", "org_answer": "STOP",
                   "verifier": "alnum"}]
            if config == CONFIG_THINK:
                qa[0] = {"question": qa[0]["question"], "think": "The sign is red and octagonal.",
                         **{k: v for k, v in qa[0].items() if k != "question"}}
        source = {"dataset": "bench", "split": "test", "id": str(i), "origin": "benchmark", "family": "scene_text",
                  "references": ["STOP"], "options": []}
        yield {"image": {"bytes": data, "path": f"{i}.png"}, "image_sha256": hashlib.sha256(data).hexdigest(),
               "qa": qa, "clean_meta": {"policy": "bench", "sources": [source], "actions": []}}


def _timed(run, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000, help="rows per config")
    parser.add_argument("--image-kb", type=int, default=256, help="KiB of image bytes per row")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the best is kept")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    from orandcar_builder.card import card_sizes, config_sizes, render_card

    with tempfile.TemporaryDirectory(prefix="orandcar-bench-card-") as root:
        folder = Path(root) / "OrandCar"
        start = time.perf_counter()
        summary = write_dataset(folder, {c: _rows(c, args.rows, args.image_kb * 1024) for c in CONFIGS})
        write_s = time.perf_counter() - start
        report = {"configs": summary}
        old_report = {"configs": {c: {k: v for k, v in s.items() if k not in ("shard_sizes", "arrow_bytes")}
                                  for c, s in summary.items()}}
        measured_s, measured = _timed(lambda: config_sizes(folder, report), args.repeat)
        written_s, written = _timed(lambda: card_sizes(folder, report), args.repeat)
        assert measured == written, (measured, written)
        card_measured_s, text_measured = _timed(lambda: render_card(folder, old_report), args.repeat)
        card_written_s, text_written = _timed(lambda: render_card(folder, report), args.repeat)
        assert text_measured == text_written
        shard_bytes = sum(s["bytes"] for s in summary.values())
    figures = {
        "rows_per_config": args.rows, "image_kb": args.image_kb, "shard_bytes": shard_bytes,
        "write_s": round(write_s, 3),
        "sizes_measured_s": round(measured_s, 4), "sizes_from_writer_s": round(written_s, 4),
        "sizes_ratio": round(measured_s / written_s, 1),
        "card_measured_s": round(card_measured_s, 3), "card_from_writer_s": round(card_written_s, 3),
        "card_ratio": round(card_measured_s / card_written_s, 2),
    }
    print(f"{3 * args.rows} rows, {shard_bytes / 1e6:.1f} MB of shards (written in {write_s:.2f}s)")
    print(f"sizes: measured {measured_s:.4f}s, from the writer {written_s:.4f}s, ratio {figures['sizes_ratio']}")
    print(f"card:  measured {card_measured_s:.3f}s, from the writer {card_written_s:.3f}s, "
          f"ratio {figures['card_ratio']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
