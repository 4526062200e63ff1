"""Five parts of a rules-only rerun, timed alone on one build of a synthetic pool (bench_build's):
making the replay engine (``ReplayEngine(recordings)``, which reads the file, and, where the tree
on the path has it, ``lazy=True``, which only hashes it: what a rerun the cache answers whole
does), before any build in this process, and the tally of a build's decisions (``report.tally``),
its side files (``generate.side_files``: prompts.jsonl, unsupported.jsonl, failed.jsonl) and the
cache's lookups of every stored generation (``GenerationCache.get_many``, 64 keys a call as a
rerun's admitted rows come, CPU seconds) and the source fields of every decision record
(``steps._source_fields`` on the admitted rows' sources, CPU seconds), after one. Each is run ``--repeat`` times (the engine's
ways alternated); run the script with another tree on PYTHONPATH to time that tree's code on the
same kind of pool. ``--against TREE`` also makes the engine with TREE's ``engines/replay.py``, and
looks the generations up with TREE's ``cache.py`` and reads the sources with TREE's
``executors/steps.py`` (each loaded beside this tree's, its imports
from this tree), alternated with this tree's: the one comparison this 2-core machine's spread
between processes does not blur.

    .venv/bin/python benchmarks/bench_rerun_parts.py                      # 200000 QA
    .venv/bin/python benchmarks/bench_rerun_parts.py --against /tmp/base  # and the old replay module
    PYTHONPATH=/tmp/base .venv/bin/python benchmarks/bench_rerun_parts.py --items 50000
"""

from __future__ import annotations

import argparse
import gc
import inspect
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_build import run_ours  # noqa: E402
from synthetic import make_pool  # noqa: E402


def _seconds(call) -> float:
    gc.collect()
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def _module_of(tree: Path, name: str, path: str):
    """``tree``'s module at ``path`` (under orandcar_builder/) as a module of its own, ``name``,
    beside this tree's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, tree / "orandcar_builder" / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _replay_module(tree: Path):
    """``tree``'s engines/replay.py beside this tree's."""
    return _module_of(tree, "orandcar_builder.engines._replay_against", "engines/replay.py")


def _lookups(cache_class, path: Path, keys: list[str]) -> float:
    """CPU seconds ``cache_class(path).get_many`` takes for ``keys``, 64 a call."""
    with cache_class(path) as cache:
        gc.collect()
        t0 = time.process_time()
        found = sum(len(cache.get_many(keys[start:start + 64])) for start in range(0, len(keys), 64))
        seconds = time.process_time() - t0
    if found != len(keys):
        raise SystemExit(f"{found} of {len(keys)} keys found in {path}")
    return seconds


def _source_reads(read, sources: list[str]) -> float:
    """CPU seconds ``read`` (a ``_source_fields``) takes for every one of ``sources``."""
    gc.collect()
    t0 = time.process_time()
    for source in sources:
        read(source)
    return time.process_time() - t0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000, help="QA items in the synthetic pool")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, default=None,
                        help="another tree (e.g. a git archive of main) whose replay engine is timed beside this one's")
    args = parser.parse_args(argv)

    from orandcar_builder.cache import GenerationCache
    from orandcar_builder.engines.replay import ReplayEngine
    from orandcar_builder.executors.steps import _source_fields
    from orandcar_builder.families import DEFAULT_FAMILIES
    from orandcar_builder.pipeline.report import tally
    from orandcar_builder.pipeline.stages.generate import side_files
    from orandcar_builder.workdir import WorkDir

    root = Path(tempfile.mkdtemp(prefix="bench_rerun_parts_"))
    try:
        pool, replay = make_pool(root, args.items)
        # The engine first, in a fresh process as a build makes it (the build's objects would
        # slow every collection down), then the tally on a build's decisions.
        engines = {"replay engine, file read": lambda: ReplayEngine(replay)}
        if "lazy" in inspect.signature(ReplayEngine).parameters:
            engines["replay engine, lazy (hashed)"] = lambda: ReplayEngine(replay, lazy=True)
        if args.against is not None:
            other = _replay_module(args.against).ReplayEngine
            engines[f"{args.against.name}'s engine, file read"] = lambda: other(replay)
        caches = {"cache lookups (CPU)": GenerationCache}
        if args.against is not None:
            caches[f"{args.against.name}'s cache lookups (CPU)"] = _module_of(
                args.against, "orandcar_builder._cache_against", "cache.py").GenerationCache
        readers = {"source fields (CPU)": _source_fields}
        if args.against is not None:
            readers[f"{args.against.name}'s source fields (CPU)"] = _module_of(
                args.against, "orandcar_builder.executors._steps_against", "executors/steps.py")._source_fields
        times: dict[str, list[float]] = {name: [] for name in (*engines, "tally", "side files", *caches, *readers)}
        for _ in range(args.repeat):
            for name, call in engines.items():
                times[name].append(_seconds(call))
        run_ours(pool, replay, root / "out", root / "work")
        decisions = root / "work" / "decisions.parquet"
        for _ in range(args.repeat):
            times["tally"].append(_seconds(lambda: tally(decisions, DEFAULT_FAMILIES)))
            times["side files"].append(_seconds(lambda: side_files(WorkDir(root / "work"), None)))
        stored = WorkDir(root / "work").cache
        with GenerationCache(stored) as cache:  # in the order they were stored: the pool's
            keys = [key for (key,) in cache.connection.execute("SELECT key FROM generations ORDER BY rowid")]
        for _ in range(args.repeat):
            for name, cache_class in caches.items():
                times[name].append(_lookups(cache_class, stored, keys))
        sources = pq.read_table(WorkDir(root / "work").admitted, columns=["source"]).column("source").to_pylist()
        for _ in range(args.repeat):
            for name, read in readers.items():
                times[name].append(_source_reads(read, sources))
        print(f"{args.items:,} QA, replay file {replay.stat().st_size:,} bytes (tree: "
              f"{Path(inspect.getfile(tally)).resolve().parents[2]})")
        for name, values in times.items():
            print(f"  {name:<30} " + "  ".join(f"{v:.3f}" for v in values) + " s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
