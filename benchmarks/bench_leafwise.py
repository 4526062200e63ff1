"""A row group written a leaf column at a time (``dataset/leafwise.py``) against pyarrow's
``ParquetWriter.write_table`` of the same contiguous table, in one process, alternated.

The rows are bench_build's kind (a small PNG, a question of a few hundred characters, one-word
answers, the clean_meta of a synthetic pool) in the RS_think schema, one row group of about
``--mb`` MB of Arrow data written to an in-memory sink. Both files are compared byte for byte;
printed: each way's seconds per turn and the ratio of the medians. (Memory is bench_write's and
bench_memory's: a fresh process per measurement.)

    .venv/bin/python benchmarks/bench_leafwise.py
    .venv/bin/python benchmarks/bench_leafwise.py --mb 100 --repeat 5
"""

from __future__ import annotations

import argparse
import hashlib
import io
import statistics
import sys
import time
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from orandcar_builder.dataset.features import features
from orandcar_builder.dataset.leafwise import LeafwiseWriter, leaves, table_columns


def make_table(megabytes: float) -> pa.Table:
    schema = features("RS_think").arrow_schema
    rows, size, i = [], 0, 0
    while size < megabytes * 1e6:
        png = hashlib.sha256(str(i).encode()).digest() * 3
        question = f"<image>\nWhat is written in image {i}? Answer with the word only. " * 4
        rows.append({
            "image": {"bytes": png, "path": f"{i}.png"}, "image_sha256": hashlib.sha256(png).hexdigest(),
            "qa": [{"question": question, "think": "", "answer": f"word{i % 977}", "org_answer": f"word{i % 977}",
                    "verifier": "scene_text"} for _ in range(2)],
            "clean_meta": {"policy": "p", "sources": [{"dataset": "synthetic", "split": "test", "id": f"q{i}",
                                                       "origin": "benchmark", "family": "scene_text",
                                                       "references": [f"word{i % 977}"], "options": None}],
                           "actions": ["kept"]}})
        size += len(question) * 2 + 200
        i += 1
    table = pa.Table.from_pylist(rows, schema=schema)
    return pa.Table.from_arrays([column.combine_chunks() for column in table.columns], schema=schema)


def write_whole(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, table.schema, compression="snappy") as writer:
        writer.write_table(table, row_group_size=table.num_rows)
    return sink.getvalue()


def write_leafwise(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    writer = LeafwiseWriter(sink, table.schema, compression="snappy")
    writer.write_row_group(table.num_rows, leaves(table.schema, table_columns(table)))
    writer.close()
    return sink.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="the row group's Arrow size, MB")
    parser.add_argument("--repeat", type=int, default=5, help="turns of both ways, alternated")
    args = parser.parse_args(argv)
    table = make_table(args.mb)
    print(f"row group: {table.num_rows:,} rows, {table.nbytes / 1e6:.1f} MB of Arrow data", flush=True)
    seconds: dict[str, list[float]] = {"whole": [], "leafwise": []}
    files: dict[str, bytes] = {}
    for turn in range(args.repeat):
        for name, write in (("whole", write_whole), ("leafwise", write_leafwise)):
            files.pop(name, None)
            t0 = time.perf_counter()
            files[name] = write(table)
            seconds[name].append(time.perf_counter() - t0)
            print(f"turn {turn + 1}  {name:<8} {seconds[name][-1]:6.3f} s", flush=True)
    same = files["whole"] == files["leafwise"]
    ratio = statistics.median(seconds["leafwise"]) / statistics.median(seconds["whole"])
    print(f"same bytes: {same}   leafwise / whole (median seconds): {ratio:.3f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
