"""What a build's stages are given (``BuildContext``) and what each returns (its result).

A stage is an object with a ``name`` and a ``run(context, ...)`` method (datatrove's step shape)
that takes the context and the results of the earlier stages it needs, as arguments, and returns
its own typed result; every result carries the stage's ``StageStats`` (its seconds and counters).
Nothing is left in a shared bag for a later stage to find: the runner (``runner.run_build``)
hands each stage what it reads.

==========  ===============================================  ==========================================
stage       receives                                         returns
==========  ===============================================  ==========================================
admit       the ``Admission`` (the pool, streamed)           ``AdmitResult``: admitted, drops, cleaning
generate    the engine, the cache, the ``Admission``         ``GenerateResult``: the admission's result,
                                                             the generations' facts, the cache's counts
judge       the judge engine, the cache                      ``JudgeResult``: the judge's figures and
                                                             the cache's counts
write       (the decisions in the work dir)                  ``WriteResult``: the writer's summary, the
                                                             decisions' tally
card        the ``BuildFigures``, the recipe that ran        ``CardResult``
validate    (the dataset folder)                             ``ValidateResult``: the problems found
==========  ===============================================  ==========================================

The engines and the cache are opened by the runner before the stages (``Engines``,
``stages.open_engines``), so the judge stage is handed its engine, not left to find one the
generate stage made; the figures are made by the runner from the results, between write and card.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..cache import CacheStats
from ..engines.base import Engine
from ..figures import JudgeFigures
from ..workdir import WorkDir
from .config import BuildConfig, BuildObjects

if TYPE_CHECKING:
    from .report import Tally


@dataclass
class StageStats:
    """One stage's run: ``timings`` (seconds by name, as report.json's ``timings_s`` shows them;
    usually just the stage's own name, sometimes its parts, e.g. generate and verify) and
    ``counters`` (report.json's ``stages``)."""

    name: str
    timings: dict[str, float] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self.start


@dataclass
class BuildContext:
    """What every stage is given: the settings, the live objects, the folder the dataset is
    written to (``out``: the staged folder beside the user's ``-o``), the work dir and the
    executor. ``on_close`` registers what must be closed when the build ends, however it ends."""

    config: BuildConfig
    objects: BuildObjects
    out: Path
    work: WorkDir
    executor: Any  # executors.Executor
    _closers: list[Callable[[], None]] = field(default_factory=list)

    def on_close(self, close: Callable[[], None]) -> None:
        """Run ``close()`` when the build ends (last registered, first run)."""
        self._closers.append(close)

    def close(self) -> None:
        error: Optional[BaseException] = None
        while self._closers:
            try:
                self._closers.pop()()
            except BaseException as exc:  # the others still run; the first error is raised
                error = error or exc
        if error is not None:
            raise error


@dataclass(frozen=True)
class Engines:
    """The build's engine and its judge (None: no judge pass), opened before the stages."""

    engine: Engine
    judge: Optional[Engine] = None


@dataclass
class AdmitResult:
    """What admission left: the items admitted, the drops by reason and the cleaning's figures."""

    admitted: int
    dropped: Counter
    cleaning: dict
    stats: Optional[StageStats] = None  # None when admission ran inside the generate stage

    @classmethod
    def of(cls, admission, stats: Optional[StageStats] = None) -> "AdmitResult":
        """The result of a finished ``stages.admit.Admission``."""
        if not admission.done:
            raise RuntimeError("the admission's result was asked before every pool line was admitted")  # a bug
        return cls(admission.admitted, Counter(admission.dropped), admission.clean_report, stats)


@dataclass
class GenerationFacts:
    """What the generate stage learnt from the generations, for the figures and the card."""

    models: set = field(default_factory=set)
    revisions: set = field(default_factory=set)
    failed: int = 0


@dataclass
class GenerateResult:
    admitted: AdmitResult  # the admission it ran (overlapped) or was given, finished
    facts: GenerationFacts
    cache_stats: CacheStats  # report.json's cache.generate
    stats: StageStats


@dataclass
class JudgeResult:
    figures: JudgeFigures  # report.json's judge entry
    cache_stats: CacheStats  # report.json's cache.judge
    stats: StageStats


@dataclass
class WriteResult:
    configs: dict  # the writer's summary per config (rows, qa, shards, bytes, ...)
    tally: "Tally"  # the decisions' counts
    stats: StageStats


@dataclass
class CardResult:
    stats: StageStats


@dataclass
class ValidateResult:
    problems: list[str]
    stats: StageStats
