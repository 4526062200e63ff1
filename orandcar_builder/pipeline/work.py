"""What the build's stages share (``BuildWork``) and what each hands back (``StageReport``).

A stage is an object with a ``name`` and ``run(work) -> StageReport`` (datatrove's step shape):
it reads the files and facts earlier stages left in ``work``, writes its own, and measures its
own time and counters. The runner (``runner.run_build``) runs the list ``stages.stages_for``
gives and gathers the reports into work/report.json's ``timings_s``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol

from ..cache import CacheStats, GenerationCache
from .config import BuildConfig, BuildObjects

# A work dir's manifest and one of the stages' parquet files: a dataset folder never holds them, so
# a command that wants a dataset folder can tell it was given a work dir.
MANIFEST = "manifest.json"
WORK_DIR_FILES = ("decisions.parquet", "admitted.parquet")


def is_work_dir(folder: Path) -> bool:
    """Whether ``folder`` is a build's work dir (its manifest and a stage's parquet file)."""
    folder = Path(folder)
    return (folder / MANIFEST).is_file() and any((folder / name).is_file() for name in WORK_DIR_FILES)


def built_output(work: Path) -> Optional[Path]:
    """The dataset folder the work dir's last build wrote, as its manifest names it (None: unknown)."""
    try:
        out = json.loads((Path(work) / MANIFEST).read_text(encoding="utf-8")).get("out")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(out) if isinstance(out, str) and out else None


@dataclass
class StageReport:
    """One stage's run: ``timings`` (seconds by name, as report.json's ``timings_s`` shows them;
    usually just the stage's own name, sometimes its parts, e.g. generate and verify) and
    ``counters``."""

    name: str
    timings: dict[str, float] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)


class Stage(Protocol):
    name: str

    def run(self, work: "BuildWork") -> StageReport:
        ...


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self.start


@dataclass
class GenerationFacts:
    """What the generate stage learnt from the generations, for the report and the card."""

    models: set = field(default_factory=set)
    revisions: set = field(default_factory=set)
    failed: int = 0


@dataclass
class BuildWork:
    """The state the stages share. ``out`` is the folder the dataset is written to (the staged
    folder beside the user's ``-o``); ``dir`` is the work dir (``config.work``). Fields below the
    paths are filled in as the stages run; each says which stage sets it."""

    config: BuildConfig
    objects: BuildObjects
    out: Path
    clean_report: dict = field(default_factory=dict)  # admit: the cleaning's figures
    admission: Any = None  # admit.Admission: the admitted rows and the drops (set up by the runner)
    executor: Any = None  # executors.Executor (runner)
    engine: Any = None  # generate: the build's engine
    judge_engine: Any = None  # generate (made with the build's engine): the judge, or None
    cache: Optional[GenerationCache] = None  # generate: work/cache/generations.sqlite, or None
    generation_stats: CacheStats = field(default_factory=CacheStats)  # generate
    facts: GenerationFacts = field(default_factory=GenerationFacts)  # generate
    judge_report: Optional[dict] = None  # judge
    judge_stats: Optional[CacheStats] = None  # judge: its cache's counts (report.json's cache.judge)
    report: Optional[dict] = None  # write: the build's figures (the card renders from them)
    ran: Any = None  # write: the recipe this build ran (recipe.Recipe)
    problems: list = field(default_factory=list)  # validate
    _closers: list = field(default_factory=list)

    @property
    def dir(self) -> Path:
        return self.config.work

    @property
    def admitted(self) -> int:
        return self.admission.admitted

    @property
    def dropped(self) -> Counter:
        return self.admission.dropped

    @property
    def decisions(self) -> Path:
        return self.dir / "decisions.parquet"

    def on_close(self, close) -> None:
        """Run ``close()`` when the build ends, however it ends (last registered, first run)."""
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
