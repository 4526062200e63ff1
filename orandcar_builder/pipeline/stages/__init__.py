"""The build's stages, in order (``stages_for``). Each reads what the earlier ones left in the work
dir and in ``BuildWork``, and writes its own:

=========  =========================================  =============================================
stage      reads                                      writes
=========  =========================================  =============================================
admit      the pool file and its images               work/admitted.parquet, work/dropped.jsonl
generate   work/admitted.parquet (or admit's rows),   work/decisions.parquet (pool order), prompts,
           work/cache                                 unsupported, failed .jsonl, work/cache
judge      work/decisions.parquet, work/cache         work/decisions.parquet (with verdicts)
write      work/decisions.parquet, the images         the dataset's shards; the report's figures
card       the report's figures, the recipe           README.md
validate   the dataset folder                         the problems found
=========  =========================================  =============================================

On the local executor admission overlaps generation: there is no separate admit stage, the
generate stage consumes the admitted rows as they come (and reports admit's time and counts).
"""

from __future__ import annotations

from ..config import BuildConfig, BuildObjects
from .admit import Admission, AdmitStage
from .card import CardStage
from .generate import GenerateStage
from .judge import JudgeStage
from .validate import ValidateStage
from .write import WriteStage


def overlaps(config: BuildConfig, executor) -> bool:
    """Whether admission runs inside the generate stage: on the local executor, unless turned off."""
    return config.overlap_admit and executor.name == "local"


def stages_for(config: BuildConfig, objects: BuildObjects, executor) -> list:
    """The stages a build with ``config`` runs on ``executor``, in order."""
    overlap = overlaps(config, executor)
    stages: list = [] if overlap else [AdmitStage()]
    stages.append(GenerateStage(overlapped=overlap))
    if objects.judge_engine is not None or config.judge != "none":
        stages.append(JudgeStage())
    return stages + [WriteStage(), CardStage(), ValidateStage()]


__all__ = ["Admission", "AdmitStage", "CardStage", "GenerateStage", "JudgeStage", "ValidateStage", "WriteStage",
           "overlaps", "stages_for"]
