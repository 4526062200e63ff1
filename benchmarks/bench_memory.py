"""Peak memory (RSS) of a whole build at several pool sizes, each measured in a fresh process.

The pools are bench_build's synthetic pools (N QA over N/2 small PNGs). The engine answers from
the item id with the same texts as bench_build's recordings but holds nothing (the replay engine
keeps every recording in memory, which would measure the engine, not the builder); ``--engine
replay`` measures with it anyway. For each size a child process runs one build and reports, from
the kernel's high-water mark (VmHWM, reset through /proc/self/clear_refs as each stage starts):

- ``floor``: RSS after importing the builder and its libraries, before any work;
- per stage, its peak: ``admit`` (read and clean the pool: work/admitted.parquet,
  dropped.jsonl), ``generate`` (prompt, generate, verify: work/decisions.parquet), ``route``
  (RoutePlan: the rows' grouping), ``write`` (the three configs' shards), ``tally`` (the
  report's counts), ``card`` and ``validate``;
- ``after admit``: RSS when the admit stage has returned (what it leaves allocated);
- ``rest``: the peak of every stage after admit; ``build``: the peak over the whole build;
- ``largest child``: the high-water mark of the largest process the build started and waited for
  (the write stage's second process, ``pipeline/writeproc.py``, from 50k decisions on two cores).

    .venv/bin/python benchmarks/bench_memory.py                    # 10000 and 100000 QA
    .venv/bin/python benchmarks/bench_memory.py --sizes 10000 50000 --engine replay
    .venv/bin/python benchmarks/bench_memory.py --sizes 20000 100000 --trace 12   # where it grows

``--trace N`` also runs the child under tracemalloc (slower; its RSS figures then include
tracemalloc's own records): as each stage ends it records the Python heap's peak during the stage,
what is still allocated, pyarrow's pool, and the N largest allocations by file:line; with two or
more sizes the lines that grew most from the first size to the last are printed per stage.

Target: the build's peak does not grow with the pool beyond the writer's buffer (one row group,
at most writer.ROW_GROUP_MAX_BYTES of Arrow data) and fixed-size buffers (spill.py's dict
threshold and Bloom filter, RoutePlan's bucket).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import answer_text, make_pool  # noqa: E402

from orandcar_builder.dataset.writer import DEFAULT_MAX_SHARD_BYTES  # noqa: E402


class SyntheticEngine:
    """Answers item ``q<k>`` with ``synthetic.answer_text(k)``; keeps nothing between calls."""

    kind = "synthetic"
    can_judge = False

    def fingerprint(self) -> dict:
        return {"kind": self.kind, "version": 1}

    def generate(self, requests):
        from orandcar_builder.engines.reasoning import make_generation

        out = []
        for request in requests:
            text, finish = answer_text(int(request.item_id[1:]))
            out.append(make_generation(request, text, finish, model="synthetic"))
        return out


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise KeyError(key)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


# (stage, module, attribute that runs it), in build order: the build's stages (orandcar_builder/pipeline/stages)
# and, inside the write stage, its route, write and tally steps.
STAGES = (("admit", "admit", "AdmitStage.run"), ("generate", "generate", "_generate"),
          ("route", "write", "RoutePlan"), ("write", "write", "write_configs"), ("tally", "write", "tally"),
          ("card", "card", "write_card"), ("validate", "validate", "validate_folder"))


def _trace_point(top: int) -> dict:
    """The Python heap as a stage ends: its peak since the last point, what is held, pyarrow's
    pool, and the ``top`` largest allocations by file:line (this script's own frames left out)."""
    import tracemalloc

    import pyarrow as pa

    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)))
    lines = [(f"{s.traceback[0].filename.rsplit('site-packages/', 1)[-1]}:{s.traceback[0].lineno}",
              round(s.size / 1024, 1), s.count) for s in snapshot.statistics("lineno")[:top]]
    return {"peak_mb": round(peak / 2**20, 1), "held_mb": round(held / 2**20, 1),
            "arrow_mb": round(pa.total_allocated_bytes() / 2**20, 1), "top": lines}


def child(root: Path, engine_name: str, max_shard_bytes: int, trace: int = 0) -> dict:
    import importlib

    importlib.import_module("datasets")  # the build's validation and card import it: part of the floor

    import orandcar_builder.card as card_module
    import orandcar_builder.pipeline as build_module
    from orandcar_builder.engines.replay import ReplayEngine
    from orandcar_builder.pipeline.stages import admit, generate, validate, write

    floor = _status_mb("VmRSS")
    peaks: dict[str, float] = {}
    starts: dict[str, float] = {}  # RSS as each stage starts
    gaps: list[float] = []  # peaks between stages
    after_admit: list[float] = []
    traced: dict[str, dict] = {}

    def measured(name: str, run):
        def stage(*args, **kwargs):
            gaps.append(_status_mb("VmHWM"))
            _reset_peak()
            starts.setdefault(name, _status_mb("VmRSS"))
            out = run(*args, **kwargs)
            peaks[name] = max(peaks.get(name, 0.0), _status_mb("VmHWM"))
            if name == "admit":
                after_admit.append(_status_mb("VmRSS"))
            if trace:
                traced[name] = _trace_point(trace)
            _reset_peak()
            return out
        return stage

    modules = {"admit": admit, "generate": generate, "write": write, "card": card_module, "validate": validate}
    for name, module, attribute in STAGES:
        owner = modules[module]
        *path, attribute = attribute.split(".")
        for part in path:  # a stage's method: AdmitStage.run
            owner = getattr(owner, part)
        setattr(owner, attribute, measured(name, getattr(owner, attribute)))
    if trace:
        import tracemalloc

        tracemalloc.start()
    _reset_peak()
    t0 = time.perf_counter()
    engine = ReplayEngine(root / "replay.jsonl") if engine_name == "replay" else SyntheticEngine()
    # overlap_admit=False: the admit stage runs alone first, so its peak is measured on its own
    # (on the local executor it otherwise runs inside the generate stage).
    result = build_module.build(root / "pool.jsonl", root / "out", work=root / "work", engine=engine, progress=False,
                                max_shard_bytes=max_shard_bytes, overlap_admit=False)
    if not result.ok:
        raise SystemExit(f"build failed validation: {result.problems[:3]}")
    gaps.append(_status_mb("VmHWM"))
    rest = max([v for k, v in peaks.items() if k != "admit"] + gaps[1:])
    # clear_refs resets ru_maxrss too: the build's peak is the largest of the parts.
    import resource

    # The largest process the build started (the write stage's second process, ``writeproc``): its
    # own high-water mark, beside this one's.
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"items": result.report["items"], "floor_mb": round(floor, 1), "child_peak_mb": round(children, 1),
            "stage_start_mb": {name: round(starts[name], 1) for name, _, _ in STAGES},
            "stage_peak_mb": {name: round(peaks[name], 1) for name, _, _ in STAGES},
            "admit_peak_mb": round(peaks["admit"], 1), "after_admit_mb": round(after_admit[0], 1),
            "rest_peak_mb": round(rest, 1), "build_peak_mb": round(max(peaks["admit"], rest, gaps[0]), 1),
            "seconds": round(time.perf_counter() - t0, 2), **({"trace": traced} if trace else {})}


def measure(root: Path, engine_name: str, max_shard_bytes: int, trace: int = 0) -> dict:
    shutil.rmtree(root / "out", ignore_errors=True)
    shutil.rmtree(root / "work", ignore_errors=True)
    proc = subprocess.run([sys.executable, __file__, "--child", "--root", str(root), "--engine", engine_name,
                           "--max-shard-bytes", str(max_shard_bytes), "--trace", str(trace)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _print_trace_growth(a: dict, b: dict, top: int) -> None:
    """Per stage, the allocation lines held at its end that grew most from size a to size b."""
    for name in b["trace"]:
        before = {line: kib for line, kib, _ in a["trace"][name]["top"]}
        grown = sorted(((kib - before.get(line, 0.0), line, kib) for line, kib, _ in b["trace"][name]["top"]),
                       reverse=True)[:top]
        print(f"{name}: heap peak {a['trace'][name]['peak_mb']} -> {b['trace'][name]['peak_mb']} MiB; held lines "
              f"grown most ({a['size']} -> {b['size']} QA, KiB):")
        for growth, line, kib in grown:
            print(f"    {growth:+10.1f}  ({kib:10.1f})  {line}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="QA items per pool")
    parser.add_argument("--engine", choices=("synthetic", "replay"), default="synthetic")
    parser.add_argument("--max-shard-bytes", type=int, default=DEFAULT_MAX_SHARD_BYTES,
                        help="the build's shard bound (default: the builder's, 256 MiB); an open shard's "
                             "footer grows with its rows, so a smaller bound shows the build without it")
    parser.add_argument("--trace", type=int, default=0, metavar="N",
                        help="also trace the Python heap (tracemalloc): per stage its peak and the N largest "
                             "allocations by file:line")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.root, args.engine, args.max_shard_bytes, args.trace)))
        return 0

    figures = []
    for size in args.sizes:
        root = Path(tempfile.mkdtemp(prefix=f"bench_memory_{size}_"))
        try:
            make_pool(root, size)
            fig = {"size": size, "engine": args.engine, "max_shard_bytes": args.max_shard_bytes,
                   **measure(root, args.engine, args.max_shard_bytes, args.trace)}
            figures.append(fig)
            stages = "  ".join(f"{name} {fig['stage_start_mb'][name]:.1f}->{peak:.1f}"
                               for name, peak in fig["stage_peak_mb"].items())
            print(f"{size:>8} QA  floor {fig['floor_mb']:6.1f}  admit peak {fig['admit_peak_mb']:6.1f}  "
                  f"after admit {fig['after_admit_mb']:6.1f}  rest peak {fig['rest_peak_mb']:6.1f}  "
                  f"build peak {fig['build_peak_mb']:6.1f} MiB  largest child {fig['child_peak_mb']:6.1f} MiB  "
                  f"({fig['seconds']:.1f}s)\n"
                  f"{'':>12}stages (RSS at start -> peak): {stages}", flush=True)
            if args.trace:
                print("            Python heap per stage (peak / held at its end / pyarrow pool, MiB): " + "  ".join(
                    f"{name} {t['peak_mb']}/{t['held_mb']}/{t['arrow_mb']}" for name, t in fig["trace"].items()))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if args.trace and len(figures) > 1:
        _print_trace_growth(figures[0], figures[-1], args.trace)
    if len(figures) > 1:
        a, b = figures[0], figures[-1]
        extra = b["size"] - a["size"]
        for key, name in (("build_peak_mb", "whole build"), ("admit_peak_mb", "admit stage"),
                          ("rest_peak_mb", "after admit")):
            growth = b[key] - a[key]
            print(f"peak growth {a['size']} -> {b['size']} QA, {name:<11}: {growth:+7.1f} MiB "
                  f"({growth * 1024 / extra:.2f} KiB per extra QA item)")
        growth = (b["rest_peak_mb"] - b["after_admit_mb"]) - (a["rest_peak_mb"] - a["after_admit_mb"])
        print(f"growth of the stages after admit above what admit left: {growth:+.1f} MiB")
        print("peak growth per stage: " + "  ".join(
            f"{name} {b['stage_peak_mb'][name] - a['stage_peak_mb'][name]:+.1f}" for name in a["stage_peak_mb"]) + " MiB")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
