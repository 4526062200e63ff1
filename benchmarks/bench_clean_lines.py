"""The admission's CPU per pool line: ``clean.pool_file.clean_lines`` alone, on one process.
(issue 27 item 1: the admission is the build's critical path once it runs in a process of its own)

Makes bench_build's synthetic pool (``synthetic.make_pool``: N QA items over N/2 16x16 PNGs of
about 100 bytes, five families) in ``--dir`` (kept and reused), then runs ``clean_lines`` over it
with ``workers=1`` (``--workers``) in a fresh interpreter per run, from each ``--source`` tree in turn (this
checkout by default; point one at an older checkout to compare), alternating the trees run after
run so that a change in the machine's load falls on both alike. Each run reports the CPU seconds
of the loop (``time.process_time``: the machine is shared, wall time is noise) and the records it
yielded, which must be the same for every tree (count of admitted and dropped, the report); then
the CPU seconds of the image checks alone (``images.check_image`` once per image file, which no
tree here changes), so that the rest, the per-line Python work, can be read off.

    .venv/bin/python benchmarks/bench_clean_lines.py --items 50000 200000
    git archive a838389 | tar -x -C /tmp/before && \\
        .venv/bin/python benchmarks/bench_clean_lines.py --source /tmp/before --source .
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# One run, in a fresh interpreter whose orandcar_builder is the given tree's.
_RUN = r"""
import json, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from orandcar_builder.clean.pool_file import clean_lines
from orandcar_builder.records import Admitted
pool, spill, workers = sys.argv[2], sys.argv[3], int(sys.argv[4])
admitted = dropped = 0
report = {}
t0, w0 = time.process_time(), time.perf_counter()
for record in clean_lines(pool, report, spill_dir=spill, workers=workers):
    if isinstance(record, Admitted):
        admitted += 1
    else:
        dropped += 1
cpu, wall = time.process_time() - t0, time.perf_counter() - w0
# The image checks alone (read, decode, sha256, containment; images.py, the same in every tree):
# once per distinct image, as clean_lines does with this pool.
import os
from orandcar_builder.images import ImagePolicy, check_image
folder = os.path.join(os.path.dirname(os.path.abspath(pool)), "img")
paths = [os.path.join(folder, name) for name in os.listdir(folder)]
root, policy = os.path.realpath(os.path.dirname(os.path.abspath(pool))), ImagePolicy()
t1 = time.process_time()
for path in paths:
    check_image(path, root, policy)
images = time.process_time() - t1
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "images_cpu_s": images, "admitted": admitted,
                  "dropped": dropped, "report": report}))
"""


def make_pool(root: Path, n: int) -> Path:
    """bench_build's pool of ``n`` QA items under ``root`` (reused when already made)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from synthetic import make_pool as synthetic_pool

    stamp = root / "made.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == {"items": n}:
        return root / "pool.jsonl"
    root.mkdir(parents=True, exist_ok=True)
    pool, _ = synthetic_pool(root, n)
    stamp.write_text(json.dumps({"items": n}))
    return pool


def run_once(source: Path, pool: Path, workers: int = 1) -> dict:
    with tempfile.TemporaryDirectory() as spill:
        out = subprocess.run([sys.executable, "-c", _RUN, str(source), str(pool), spill, str(workers)],
                             check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, nargs="+", default=[50000])
    parser.add_argument("--source", action="append", help="source tree whose orandcar_builder runs (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per tree and size")
    parser.add_argument("--workers", type=int, default=1,
                        help="admission processes; above 1 the CPU seconds are those of the reading process only")
    parser.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "orandcar-bench-clean-lines"))
    args = parser.parse_args(argv)
    sources = [Path(s).resolve() for s in (args.source or [str(REPO)])]

    figures = []
    for n in args.items:
        pool = make_pool(Path(args.dir) / str(n), n)
        runs: dict[Path, list[dict]] = {s: [] for s in sources}
        for _ in range(args.repeat):
            for source in sources:
                runs[source].append(run_once(source, pool, args.workers))
        counts = {(r["admitted"], r["dropped"], json.dumps(r["report"], sort_keys=True))
                  for rs in runs.values() for r in rs}
        if len(counts) != 1:
            raise SystemExit(f"{n} items: the trees yield different records or reports")
        for source in sources:
            cpu = [r["cpu_s"] for r in runs[source]]
            images = min(r["images_cpu_s"] for r in runs[source])
            row = {"items": n, "source": str(source), "cpu_s_min": round(min(cpu), 2),
                   "cpu_s_median": round(statistics.median(cpu), 2),
                   "us_per_line": round(min(cpu) / n * 1e6, 1),
                   "image_checks_cpu_s_min": round(images, 2),
                   "us_per_line_besides_image_checks": round((min(cpu) - images) / n * 1e6, 1),
                   "wall_s_min": round(min(r["wall_s"] for r in runs[source]), 2),
                   "admitted": runs[source][0]["admitted"], "dropped": runs[source][0]["dropped"]}
            figures.append(row)
            if args.workers > 1:  # the image checks ran on the workers: no "rest" to read off
                del row["image_checks_cpu_s_min"], row["us_per_line_besides_image_checks"]
                split = ""
            else:
                split = (f"; the image checks alone {row['image_checks_cpu_s_min']} s, "
                         f"the rest {row['us_per_line_besides_image_checks']} us/line")
            print(f"{n:>8} items  {source}: CPU min {row['cpu_s_min']} s, median {row['cpu_s_median']} s "
                  f"({row['us_per_line']} us/line{split}), wall min {row['wall_s_min']} s", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
