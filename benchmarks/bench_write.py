"""The write stage alone: the row group held in memory until it is written, against the row group
spilled to disk while it fills (``dataset/writer.py``, ``_GroupSpill``), on the same work dir.

For each size a synthetic pool (bench_build's) is built once with bench_memory's engine, which
holds nothing; then ``write_configs`` of the configs the build's own process writes (RS_think,
then rejected) runs on that build's work/decisions.parquet in a fresh child process per turn,
``--repeat`` times, the two ways alternated. "held" sets ``writer.SPILL_BYTES`` beyond any row
group, which is the writer as it was before the spill (chunks gathered in memory, then combined a
column at a time). Each child reports its peak RSS above its RSS before the write (VmHWM, reset
first), pyarrow's own peak and its wall and CPU seconds; the shards of both ways are compared
byte for byte.

    .venv/bin/python benchmarks/bench_write.py --sizes 200000 1000000
    .venv/bin/python benchmarks/bench_write.py --sizes 50000 --repeat 3 --json write.json

``--against TREE`` compares another checkout of the package instead (``git worktree add TREE
COMMIT``): the two ways are then "base" (the child imports the package from TREE) and "this" (this
checkout), each with its writer's defaults, on the same work dir, and their shards are compared.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import make_pool  # noqa: E402

CONFIGS = ("RS_think", "rejected")  # what the build's process writes (RS_nothink: the second process)
WAYS = ("held", "spilled")


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def child(work: Path, out: Path, way: str) -> dict:
    import importlib

    importlib.import_module("datasets")  # as in the build's process
    import pyarrow as pa

    from orandcar_builder.dataset import writer
    from orandcar_builder.pipeline.stages.write import write_configs

    if way == "held":
        writer.SPILL_BYTES = 1 << 62
    start = _status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # VmHWM from here
    t0, c0 = time.perf_counter(), os.times()
    summary = write_configs(work / "decisions.parquet", out, CONFIGS, max_shard_bytes=writer.DEFAULT_MAX_SHARD_BYTES)
    c1 = os.times()
    return {"way": way, "seconds": round(time.perf_counter() - t0, 2),
            "cpu_s": round(c1.user + c1.system - c0.user - c0.system, 2),
            "rss_rise_mb": round(_status_mb("VmHWM") - start, 1),
            "arrow_pool_peak_mb": round(pa.default_memory_pool().max_memory() / 2**20, 1),
            "row_groups": {config: summary[config]["arrow_bytes"] for config in CONFIGS}}


def build(root: Path, size: int) -> Path:
    """bench_memory's build of the pool (its engine holds nothing); returns the work dir."""
    make_pool(root, size)
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("bench_memory.py")), "--child", "--root",
                           str(root), "--engine", "synthetic", "--max-shard-bytes", str(256 * 1024 * 1024)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"build failed:\n{proc.stderr[-3000:]}")
    return root / "work"


def same_shards(a: Path, b: Path) -> bool:
    names = sorted(p.relative_to(a) for p in a.rglob("*.parquet"))
    return names == sorted(p.relative_to(b) for p in b.rglob("*.parquet")) and all(
        filecmp.cmp(a / name, b / name, shallow=False) for name in names)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000], help="QA items per pool")
    parser.add_argument("--repeat", type=int, default=2, help="turns of both ways, alternated")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--against", type=Path, default=None,
                        help="another checkout of the package: compare its writer with this one's")
    parser.add_argument("--child", nargs=3, metavar=("WORK", "OUT", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        work, out, way = args.child
        print(json.dumps(child(Path(work), Path(out), way)))
        return 0
    ways = ("base", "this") if args.against else WAYS
    figures = []
    for size in args.sizes:
        root = Path(tempfile.mkdtemp(prefix=f"bench_write_{size}_"))
        try:
            work = build(root, size)
            for turn in range(args.repeat):
                for way in ways:
                    out = root / way
                    shutil.rmtree(out, ignore_errors=True)
                    env = dict(os.environ)
                    if way == "base":
                        env["PYTHONPATH"] = str(args.against.resolve())
                    elif args.against:
                        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
                    proc = subprocess.run([sys.executable, __file__, "--child", str(work), str(out), way],
                                          capture_output=True, text=True, check=False, env=env)
                    if proc.returncode != 0:
                        raise SystemExit(f"write failed:\n{proc.stderr[-3000:]}")
                    fig = {"size": size, "turn": turn, **json.loads(proc.stdout.strip().splitlines()[-1])}
                    figures.append(fig)
                    print(f"{size:>8} QA  {way:<8} rise {fig['rss_rise_mb']:6.1f} MiB  Arrow pool peak "
                          f"{fig['arrow_pool_peak_mb']:6.1f} MiB  {fig['seconds']:6.2f} s  CPU {fig['cpu_s']:6.2f} s",
                          flush=True)
                print(f"{'':>12}same shards: {same_shards(root / ways[0], root / ways[1])}", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
