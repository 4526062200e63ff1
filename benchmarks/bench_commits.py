"""The generation cache's commit buffer alone (``executors.generation.CommitBuffer``), as a fast
engine's build uses it: N finished generations added 64 at a time by a caller that does some work
of its own between two adds (busy CPU, ``--work-us`` per generation, standing for the build's
main thread classifying and deciding), then ``close``. Prints the caller's wall seconds for the
adds, its own thread's CPU seconds (of which the work is ``N * work-us``), the close, and the
process's CPU (the writer thread included). Run it with another tree on PYTHONPATH to time that
tree's buffer, the trees alternated:

    for t in /tmp/base /work/main /tmp/base /work/main; do
        PYTHONPATH=$t .venv/bin/python benchmarks/bench_commits.py; done

``--ages``: instead, how long each of 4,000 generations added one at a time (``--work-us`` of
the caller's work after each) waits from its add to the end of the transaction that commits it:
the buffer's time bound when the writer shares the interpreter lock with a busy caller.

    .venv/bin/python benchmarks/bench_commits.py --ages --work-us 1000
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from pathlib import Path

from orandcar_builder.executors.generation import CommitBuffer
from orandcar_builder.records import Generation


def _work(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def ages(work_us: float, n: int = 4000) -> None:
    from orandcar_builder.cache import GenerationCache

    added: dict[str, float] = {}
    committed: dict[str, float] = {}
    put_many = GenerationCache.put_many

    def timed(self, fingerprint, entries):
        result = put_many(self, fingerprint, entries)
        now = time.monotonic()
        for key, _ in entries:
            committed[key] = now
        return result

    GenerationCache.put_many = timed  # type: ignore[method-assign]
    folder = tempfile.mkdtemp(prefix="bench-commits-")
    try:
        with CommitBuffer(Path(folder) / "generations.sqlite", {"engine": "replay"}) as buffer:
            for i in range(n):
                key = f"k{i}"
                added[key] = time.monotonic()
                buffer.add(key, Generation(str(i), "A", "", "A", "stop", "replay"))
                _work(work_us / 1e6)
            end = time.monotonic()
    finally:
        GenerationCache.put_many = put_many  # type: ignore[method-assign]
        shutil.rmtree(folder, ignore_errors=True)
    waits = sorted(committed[k] - added[k] for k in added if committed[k] < end)  # not the ones close() committed
    print(f"{n} generations, {work_us:g} us of work after each: from add to commit at most "
          f"{waits[-1] * 1000:.0f} ms, median {waits[len(waits) // 2] * 1000:.0f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--work-us", type=float, default=20.0, help="the caller's own CPU per generation")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--ages", action="store_true", help="the wait from add to commit instead")
    args = parser.parse_args()
    if args.ages:
        ages(args.work_us)
        return
    n, per = args.items, 64
    generations = [Generation(item_id=f"q{i}", text=f"Word{i}", final_answer=f"Word{i}", think=None,
                              finish_reason="stop", model="replay") for i in range(n)]
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]
    for _ in range(args.repeat):
        folder = tempfile.mkdtemp(prefix="bench-commits-")
        try:
            t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            with CommitBuffer(Path(folder) / "generations.sqlite", {"engine": "replay"}) as buffer:
                for start in range(0, n, per):
                    buffer.add_many(list(zip(keys[start:start + per], generations[start:start + per])))
                    _work(per * args.work_us / 1e6)
                t1, c1 = time.perf_counter(), time.thread_time()
            t2, p2 = time.perf_counter(), time.process_time()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{n} generations: adds {t1 - t0:.2f} s wall, caller CPU {c1 - c0:.2f} s (its own work "
              f"{n * args.work_us / 1e6:.2f}); close {t2 - t1:.2f} s; process CPU {p2 - p0:.2f} s", flush=True)


if __name__ == "__main__":
    main()
