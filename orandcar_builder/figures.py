"""The build's figures: one ``BuildFigures`` value, written as work/report.json.

The pipeline makes it once the dataset is written (``pipeline.report.build_figures``) and adds
this run's timings and cache counts; the card (``card/``), the review page (``review/``), the
release block (``release.py``) and the CLI's summary read its attributes. ``to_json()`` gives
report.json's content, key for key in the order it always had; ``from_json(data)`` reads one
back. A report written by an older build may lack entries: each attribute is then None (what a
reader shows as "not recorded"); a value is kept as it was read, so a reader that needs a mapping
still checks it has one (the types below are what a build writes, not a promise about a file
read back). Nothing here imports the package: every level may read the figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Optional


def _mapping(value: Any) -> dict:
    """``value`` when it is a mapping, else an empty one (a figure an older report lacks)."""
    return value if isinstance(value, dict) else {}


@dataclass
class JudgeFigures:
    """report.json's ``judge`` entry: the judge's engine, its prompt version and its verdicts."""

    engine: Optional[dict] = None  # the judge engine's public fingerprint
    prompt_version: Optional[str] = None
    judged: Optional[int] = None
    verdicts: Optional[dict] = None  # label -> count (vocab.VERDICT_LABELS)
    unparseable: Optional[int] = None
    promoted: Optional[int] = None
    overturns_by_family: Optional[dict] = None
    calibration: Optional[dict] = None  # judge.CalibrationReport.to_dict(), or None

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Any) -> Optional["JudgeFigures"]:
        """The judge entry ``data`` (None: no judge ran, or the report holds no mapping there)."""
        if not isinstance(data, dict):
            return None
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})


@dataclass
class FamilyYield:
    """One family's entry of report.json's ``yield``: what a build keeps of its QA items, and how
    much of what it throws away is the rule's (no pick found)."""

    qa: Optional[int] = None
    accepted_by_rule: Optional[int] = None
    promoted_by_judge: Optional[int] = None
    rejected_no_pick: Optional[int] = None

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Any) -> "FamilyYield":
        data = _mapping(data)
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})


def _yields_from_json(data: Any) -> Optional[dict[str, FamilyYield]]:
    if not isinstance(data, dict):
        return None
    return {family: FamilyYield.from_json(entry) for family, entry in data.items()}


# report.json's keys that are not Python names (field name -> key)
_KEYS = {"yield_": "yield"}


@dataclass
class BuildFigures:
    """Everything a build measured, in report.json's order. The deterministic figures come first
    (the card renders from them: two builds of the same pool give the same ones); ``build_failed``
    is written only when the build failed; the run's own figures (``timings_s``, ``cache``,
    ``validation_problems``, ``stages``) vary from run to run and no card shows them."""

    pool: Optional[str] = None  # the pool file's name
    limit: Optional[int] = None
    items: Optional[int] = None  # pool lines read
    admitted: Optional[int] = None
    dropped: Optional[int] = None
    dropped_by_reason: Optional[dict] = None
    accepted: Optional[int] = None
    rejected: Optional[int] = None
    failed: Optional[int] = None
    rejected_by_reason: Optional[dict] = None
    accepted_by_verifier: Optional[dict] = None
    families: Optional[dict] = None  # family -> counts (qa, accepted, rejected, rejected_<reason>)
    rules: Optional[dict] = None  # rule -> version
    rules_by_family: Optional[dict] = None
    reject_kinds: Optional[dict] = None
    yield_: Optional[dict[str, FamilyYield]] = None  # report.json's "yield", by family
    configs: Optional[dict] = None  # the writer's summary: config -> rows, qa, shards, bytes, ...
    cleaning: Optional[dict] = None  # the cleaning's own figures (clean.policy)
    engine: Optional[dict] = None  # the engine's public fingerprint
    generation: Optional[dict] = None  # how the answers were produced (model, revision, temperature, ...)
    judge: Optional[JudgeFigures] = None
    recipe: Optional[dict] = None  # the recipe that ran, as the card shows it
    reproduce: Optional[dict] = None  # the command, the versions and the git commit of the code
    build_failed: Optional[str] = None  # why the build is a failed build (pipeline/failure.py)
    timings_s: Optional[dict] = None
    cache: Optional[dict] = None  # pass -> the cache's counts (cache.CacheStats)
    validation_problems: Optional[list] = None
    stages: Optional[list] = None  # each stage's timings and counters, in the order they ran

    def to_json(self) -> dict:
        """work/report.json's content. ``build_failed`` and the run's figures appear only once
        set (the figures the card renders from have neither)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "build_failed" and value is None:
                continue
            if f.name in _RUN_FIELDS and value is None and all(getattr(self, n) is None for n in _RUN_FIELDS):
                continue
            if isinstance(value, JudgeFigures):
                value = value.to_json()
            elif f.name == "yield_" and value is not None:
                value = {family: entry.to_json() for family, entry in value.items()}
            out[_KEYS.get(f.name, f.name)] = value
        return out

    @classmethod
    def from_json(cls, data: Any) -> "BuildFigures":
        """The figures of a report.json's content (``to_json``'s inverse); an entry it lacks is None."""
        data = _mapping(data)
        values = {f.name: data.get(_KEYS.get(f.name, f.name)) for f in fields(cls)}
        values["judge"] = JudgeFigures.from_json(values["judge"])
        values["yield_"] = _yields_from_json(values["yield_"])
        return cls(**values)

    @classmethod
    def of(cls, figures: Any) -> "BuildFigures":
        """``figures`` itself, or the figures of a report.json content given as a mapping."""
        return figures if isinstance(figures, cls) else cls.from_json(figures)

    def replace(self, **changes: Any) -> "BuildFigures":
        return dataclasses.replace(self, **changes)


_RUN_FIELDS = ("timings_s", "cache", "validation_problems", "stages")
