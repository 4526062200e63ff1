"""The build's tail after generation, stage by stage, in wall and CPU seconds: ``bench_build.py``'s
build (the same synthetic pool and replay engine), with each step of the tail timed from outside:
order (``sort_by_order``), side files, write (route + shards, the process writing configs apart
included), card, validate and the review page; and the time the cyclic garbage collector took in
each. CPU seconds are those of the build's process and its ended children (the admission workers,
the write stage's second process), so on a machine shared with other jobs they say what the
work cost where the wall clock says how long it waited.

    .venv/bin/python benchmarks/bench_tail.py --items 200000
    PYTHONPATH=/tmp/base .venv/bin/python benchmarks/bench_tail.py --items 50000   # another tree
    .venv/bin/python benchmarks/bench_tail.py --items 50000 --in-process           # no second process

Prints one line per step (wall s, CPU s, GC s) and the whole build's.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from bench_build import run_ours  # benchmarks/ is on sys.path when a script runs
from synthetic import make_pool, warm_page_cache

STEPS = ("order", "side files", "write", "card", "validate", "review")


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Steps:
    """Wall, CPU and GC seconds per step, the steps timed by wrapping the functions that run them."""

    def __init__(self):
        self.figures = {name: [0.0, 0.0, 0.0] for name in STEPS}
        self.current = None
        self._gc_start = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif self.current is not None:
            self.figures[self.current][2] += time.perf_counter() - self._gc_start

    def wrap(self, owner, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            outer, self.current = self.current, name
            t0, c0 = time.perf_counter(), _cpu()
            try:
                return original(*args, **kwargs)
            finally:
                self.figures[name][0] += time.perf_counter() - t0
                self.figures[name][1] += _cpu() - c0
                self.current = outer

        setattr(owner, attribute, timed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000, help="QA items in the synthetic pool")
    parser.add_argument("--workdir", type=Path, default=None, help="where to build (default: a temp dir, removed)")
    parser.add_argument("--in-process", action="store_true",
                        help="write every config in the build's process (no second process for the write stage)")
    args = parser.parse_args(argv)

    import orandcar_builder.review as review
    from orandcar_builder.pipeline.stages import card, generate, validate, write

    if args.in_process and hasattr(write, "APART_MIN_DECISIONS"):
        write.APART_MIN_DECISIONS = 1 << 62
    steps = Steps()
    steps.wrap(generate, "sort_by_order", "order")
    steps.wrap(generate, "side_files", "side files")
    steps.wrap(write.WriteStage, "run", "write")
    steps.wrap(card.CardStage, "run", "card")
    steps.wrap(validate.ValidateStage, "run", "validate")
    steps.wrap(review, "review_after_build", "review")

    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench_tail_"))
    try:
        pool, replay = make_pool(root, args.items)
        warm_page_cache(root)
        with open("/proc/loadavg") as fh:
            load = fh.read().split()[0]
        c0 = _cpu()
        ours, report = run_ours(pool, replay, root / "out", root / "work")
        cpu = _cpu() - c0
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{args.items} QA, load average {load} before the build")
    print(f"{'step':<12}{'wall s':>9}{'CPU s':>9}{'GC s':>8}")
    for name, (wall, step_cpu, in_gc) in steps.figures.items():
        print(f"{name:<12}{wall:9.2f}{step_cpu:9.2f}{in_gc:8.2f}")
    tail = [sum(f[i] for f in steps.figures.values()) for i in range(3)]
    print(f"{'tail':<12}{tail[0]:9.2f}{tail[1]:9.2f}{tail[2]:8.2f}")
    print(f"{'build':<12}{ours:9.2f}{cpu:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
