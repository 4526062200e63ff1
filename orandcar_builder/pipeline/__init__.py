"""``orandcar build``: the whole pipeline over a work dir, streaming, as a list of stages.

pool --admit--> work/admitted.parquet, work/dropped.jsonl
--generate (prompt, generate, verify on an executor: local or ray)--> work/decisions.parquet
--judge (reads and rewrites decisions)--> --write (route: rows by image; the configs' shards)-->
dataset folder --card--> README.md --validate.

Each stage (``stages/``) reads what the previous one wrote and handles it in chunks, so memory
does not grow with the pool beyond a chunk and the open shard: what must see every item
(repeated ids and QA, images already written, the grouping of rows by image) is kept on disk in
the work dir (spill.py, route.RoutePlan). Every pool line ends in exactly one place: dropped
(work/dropped.jsonl, with a reason), accepted or rejected; an item with no complete generation
(an engine error, or a finish reason other than stop/length) is counted as ``failed`` with its
reason in work/failed.jsonl and asked again by the next run. Timings and paths go to the work
dir only; the dataset folder depends on nothing but the pool, the engine's outputs and the code,
so two builds of the same pool give the same bytes.

The settings of a build are one ``BuildConfig`` (``config.py``; a recipe fills it with
``with_recipe``); ``run_build(config, objects)`` runs it (``runner.py``; the CLI calls it);
``build(pool, out, **settings)`` is the keyword form for library callers and tests.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

# The names below are loaded on first use (PEP 562), so that a process that needs only a part of
# the package (the admission's own process: ``admitproc``, ``reuse``, ``workfiles``) does not
# import the whole build (the dataset writer and its ``datasets`` import: a second of start-up).
_EXPORTS = {
    "BuildConfig": "config", "BuildError": "config", "BuildObjects": "config",
    "BuildFailed": "failure",
    "format_summary": "report", "reproducible": "report",
    "BuildResult": "runner", "build": "runner", "run_build": "runner",
    "BuildContext": "work", "StageStats": "work",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and readers
    from .config import BuildConfig, BuildError, BuildObjects
    from .failure import BuildFailed
    from .report import format_summary, reproducible
    from .runner import BuildResult, build, run_build
    from .work import BuildContext, StageStats

__all__ = ["BuildConfig", "BuildContext", "BuildError", "BuildFailed", "BuildObjects", "BuildResult", "StageStats",
           "build", "format_summary", "reproducible", "run_build"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
