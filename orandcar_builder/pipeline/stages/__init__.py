"""The build's stages, in order (``stages_for``). Each is given what it reads, as arguments, and
returns a typed result (``work.py``); the runner hands each result to the stages after it:

=========  ==========================================  ============================================
stage      reads                                       writes
=========  ==========================================  ============================================
admit      the pool file and its images                work/admitted.parquet, work/dropped.jsonl
generate   work/admitted.parquet (or admit's rows),    work/decisions.parquet (pool order), prompts,
           work/cache                                  unsupported, failed .jsonl, work/cache
judge      work/decisions.parquet, work/cache          work/decisions.parquet (with verdicts)
write      work/decisions.parquet, the images          the dataset's shards
card       the build's figures, the recipe that ran    README.md, examples/
validate   the dataset folder                          the problems found
=========  ==========================================  ============================================

On an executor that takes the admitted rows as they come (``streams_admission``: local and ray)
admission overlaps generation: there is no separate admit stage, the generate stage consumes the
admitted rows as they come (and reports admit's time and counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

from ..config import BuildConfig, BuildObjects
from .admit import Admission, AdmitStage
from .card import CardStage
from .generate import GenerateStage, open_cache, open_engines
from .judge import JudgeStage
from .validate import ValidateStage
from .write import WriteStage


def overlaps(config: BuildConfig, executor) -> bool:
    """Whether admission runs inside the generate stage: on an executor that takes the admitted rows
    as they come (its ``streams_admission``), unless turned off."""
    return config.overlap_admit and bool(getattr(executor, "streams_admission", False))


@dataclass(frozen=True)
class StagePlan:
    """The stages one build runs: admit and judge may be absent. Iterating gives those present, in order."""

    admit: Optional[AdmitStage]
    generate: GenerateStage
    judge: Optional[JudgeStage]
    write: WriteStage
    card: CardStage
    validate: ValidateStage

    def __iter__(self) -> Iterator:
        stages = (self.admit, self.generate, self.judge, self.write, self.card, self.validate)
        return iter([stage for stage in stages if stage is not None])


def stages_for(config: BuildConfig, objects: BuildObjects, executor) -> StagePlan:
    """The stages a build with ``config`` runs on ``executor``."""
    overlap = overlaps(config, executor)
    judged = objects.judge_engine is not None or config.judge != "none"
    return StagePlan(admit=None if overlap else AdmitStage(), generate=GenerateStage(overlapped=overlap),
                     judge=JudgeStage() if judged else None, write=WriteStage(), card=CardStage(),
                     validate=ValidateStage())


__all__ = ["Admission", "AdmitStage", "CardStage", "GenerateStage", "JudgeStage", "StagePlan", "ValidateStage",
           "WriteStage", "open_cache", "open_engines", "overlaps", "stages_for"]
