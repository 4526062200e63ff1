"""Shards' row groups: bounded by bytes (the writer today) against a fixed 100 rows (before).

Writes ``--rows`` rows of the rejected config with ``write_dataset`` (each row: one of
synthetic.py's 16x16 PNGs, about 100 bytes, or ``--image-kb`` KiB of incompressible bytes behind
a PNG signature, and two QA items), then rewrites each shard's rows with
``pq.write_table(..., row_group_size=100)``: the bytes the writer gave before its row groups were
bounded by bytes (it then wrote exactly that, see the old tests/test_writer.py). For each layout
it prints the shard bytes, the row groups, the footer's size and the best of ``--repeat``
``datasets.load_dataset("parquet", ...)`` runs, each into a fresh cache folder, and checks that
both layouts read back the same rows.

    .venv/bin/python benchmarks/bench_row_groups.py --rows 100000 --json bench_row_groups.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow.parquet as pq  # noqa: E402
from synthetic import png  # noqa: E402

from orandcar_builder.dataset.writer import write_dataset  # noqa: E402
from orandcar_builder.files import PNG_SIGNATURE  # noqa: E402
from orandcar_builder.vocab import CONFIG_REJECTED, WRONG_ANSWER  # noqa: E402

OLD_ROW_GROUP_ROWS = 100


def _rows(n: int, image_kb: int):
    for i in range(n):
        data = png(i) if not image_kb else PNG_SIGNATURE + os.urandom(image_kb * 1024 - len(PNG_SIGNATURE))
        qa = [{"question": f"What word is shown, item {2 * i + j}?", "answer": f"Word{i % 997}x",
               "wrong_vlm": f"Other{i % 13}", "reason": WRONG_ANSWER} for j in range(2)]
        sources = [{"dataset": "synthetic", "split": "train", "id": str(2 * i + j), "origin": "benchmark",
                    "family": "scene_text", "references": [f"Word{i % 997}x"], "options": []} for j in range(2)]
        yield {"image": {"bytes": data, "path": f"img/{i}.png"}, "image_sha256": hashlib.sha256(data).hexdigest(),
               "qa": qa, "clean_meta": {"policy": "bench", "sources": sources, "actions": []}}


def _layout(shards: list[Path]) -> dict:
    metas = [pq.ParquetFile(path).metadata for path in shards]
    return {"shards": len(shards), "bytes": sum(p.stat().st_size for p in shards),
            "row_groups": sum(m.num_row_groups for m in metas),
            "footer_bytes": sum(m.serialized_size for m in metas),
            "largest_row_group_rows": max(m.row_group(g).num_rows for m in metas for g in range(m.num_row_groups))}


def _load_seconds(shards: list[Path], repeat: int, scratch: Path) -> tuple[float, object]:
    import datasets

    datasets.disable_progress_bars()
    best, loaded = float("inf"), None
    for attempt in range(repeat):
        cache = scratch / f"cache-{attempt}"
        start = time.perf_counter()
        loaded = datasets.load_dataset("parquet", data_files=[str(p) for p in shards], split="train",
                                       cache_dir=str(cache))
        best = min(best, time.perf_counter() - start)
        if attempt < repeat - 1:
            del loaded
            shutil.rmtree(cache, ignore_errors=True)
    return best, loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--image-kb", type=int, default=0, help="0: synthetic.py's 16x16 PNGs")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        summary = write_dataset(tmp / "after", {CONFIG_REJECTED: _rows(args.rows, args.image_kb)})
        write_seconds = time.perf_counter() - start
        after = [tmp / "after" / rel for rel in summary[CONFIG_REJECTED]["shards"]]
        before = []
        for path in after:
            target = tmp / "before" / path.name
            target.parent.mkdir(exist_ok=True)
            pq.write_table(pq.read_table(path), target, row_group_size=OLD_ROW_GROUP_ROWS, compression="snappy")
            before.append(target)
        results = {"rows": args.rows, "image_kb": args.image_kb, "write_seconds_after": round(write_seconds, 2)}
        loaded = {}
        for name, shards in (("before", before), ("after", after)):
            results[name] = _layout(shards)
            seconds, loaded[name] = _load_seconds(shards, args.repeat, tmp / f"load-{name}")
            results[name]["load_dataset_seconds"] = round(seconds, 3)
        same = loaded["before"].data.table.equals(loaded["after"].data.table)
        results["same_rows"] = same
        results["load_ratio_before_over_after"] = round(results["before"]["load_dataset_seconds"]
                                                        / results["after"]["load_dataset_seconds"], 2)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if not same:
        sys.exit("the two layouts read back different rows")


if __name__ == "__main__":
    main()
