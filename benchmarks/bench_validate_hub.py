"""``orandcar validate ORG/NAME@REV``: requests made and bytes read, against the shards' size.

Writes a synthetic dataset folder with ``write_dataset`` (``--rows`` rows per config, each with an
image of ``--image-kb`` KiB of incompressible bytes, as photos are), cut into shards of at most
``--shard-mb`` MB, with a card whose ``configs`` and ``dataset_info`` describe them; pushes it to
the local Hub-protocol test server (tests/hubserver.py) and validates the tag there, footers only
and ``--exhaustive``. The server records every request, so the figures are counted, not estimated:
requests by kind, and the bytes of every response body the client read (files; the API's JSON
answers are counted apart). Run it for several ``--shard-mb`` to see the cost per shard.

    .venv/bin/python benchmarks/bench_validate_hub.py --rows 400 --image-kb 128 --shard-mb 64 16 4
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tests.hubserver import HubServer  # noqa: E402 - huggingface_hub is imported once HF_ENDPOINT is set

REPO = "bench-org/OrandCar"


def write_folder(folder: Path, rows: int, image_kb: int, shard_mb: float) -> dict:
    from bench_card import _rows

    from orandcar_builder.dataset.cardfile import join_card
    from orandcar_builder.dataset.features import configs_block
    from orandcar_builder.dataset.info import dataset_info
    from orandcar_builder.dataset.writer import write_dataset
    from orandcar_builder.vocab import CONFIGS

    summary = write_dataset(folder, {c: _rows(c, rows, image_kb * 1024) for c in CONFIGS},
                            max_shard_bytes=int(shard_mb * 1e6))
    sizes = {c: {"rows": s["rows"], "file_bytes": s["bytes"], "arrow_bytes": s["arrow_bytes"]}
             for c, s in summary.items()}
    header = {"license": "cc-by-4.0", "configs": configs_block(), "dataset_info": dataset_info(sizes)}
    (folder / "README.md").write_text(join_card(header, "# OrandCar (benchmark)\n"), encoding="utf-8")
    return summary


def counted(server: HubServer, run) -> dict:
    server.clear_log()
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    assert result.ok, result.problems[:5]
    log = server.log
    files = [r for r in log if r.route == "resolve" and r.method == "GET"]
    shards = [r for r in files if r.summary["path"].endswith(".parquet")]
    return {"requests": len(log), "by_route": dict(Counter(r.route for r in log)),
            "shard_reads": len(shards), "shard_bytes_read": sum(r.summary["bytes"] for r in shards),
            "file_bytes_read": sum(r.summary["bytes"] for r in files), "seconds": round(seconds, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400, help="rows per config")
    parser.add_argument("--image-kb", type=int, default=128, help="KiB of image bytes per row")
    parser.add_argument("--shard-mb", type=float, nargs="+", default=[64, 16, 4], help="shard bounds to run")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    figures = []
    with tempfile.TemporaryDirectory(prefix="orandcar-bench-validate-hub-") as root:
        with HubServer(Path(root) / "hub") as server:
            os.environ.update(HF_ENDPOINT=server.url, HF_TOKEN=server.token, HF_HUB_DISABLE_XET="1",
                              HF_HOME=str(Path(root) / "hf-home"), HF_HUB_DISABLE_PROGRESS_BARS="1")
            from orandcar_builder.publish import push
            from orandcar_builder.remote import validate_hub

            for number, shard_mb in enumerate(args.shard_mb):
                folder = Path(root) / f"OrandCar-{number}"
                summary = write_folder(folder, args.rows, args.image_kb, shard_mb)
                tag = f"v{number}"
                pushed = push(folder, REPO, tag=tag, progress=False, verify=False)
                assert not pushed.problems
                footers = counted(server, lambda tag=tag: validate_hub(f"{REPO}@{tag}"))
                full = counted(server, lambda tag=tag: validate_hub(f"{REPO}@{tag}", exhaustive=True))
                shard_count = sum(len(s["shards"]) for s in summary.values())
                shard_bytes = sum(s["bytes"] for s in summary.values())
                row = {"shard_mb": shard_mb, "shards": shard_count, "shard_bytes": shard_bytes,
                       "footers": footers, "exhaustive": full}
                figures.append(row)
                print(f"{shard_count} shards, {shard_bytes / 1e6:.1f} MB: footers {footers['requests']} requests "
                      f"({footers['shard_reads']} shard reads), {footers['shard_bytes_read'] / 1e6:.3f} MB of "
                      f"shards read ({100 * footers['shard_bytes_read'] / shard_bytes:.2f}%), "
                      f"{footers['seconds']}s; exhaustive {full['requests']} requests, "
                      f"{full['shard_bytes_read'] / 1e6:.1f} MB ({100 * full['shard_bytes_read'] / shard_bytes:.1f}%), "
                      f"{full['seconds']}s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
