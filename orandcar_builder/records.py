"""The records that flow between stages. Plain dataclasses; no stage imports another's internals."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from .images import ImageRef

BENCHMARK_ORIGIN = "benchmark"


@dataclass(frozen=True)
class Source:
    """Where a QA item came from, as its source records it."""

    dataset: str = ""
    split: str = ""
    id: str = ""
    origin: str = BENCHMARK_ORIGIN  # "benchmark" or the name of a mixed pool, e.g. "InfinityMM"
    image: Optional[str] = None  # the image locator the source records (path), if any
    image_sha256: Optional[str] = None  # the image hash the source records, if any

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PoolItem:
    """One QA item of the pool, before cleaning. ``question`` has no instruction appended."""

    id: str
    image: ImageRef
    question: str
    answer: str | tuple[str, ...]
    family: str
    options: Optional[tuple[str, ...]] = None
    source: Source = field(default_factory=Source)
    where: str = ""  # "pool.jsonl:12": for messages

    @property
    def references(self) -> list[str]:
        return [self.answer] if isinstance(self.answer, str) else list(self.answer)


@dataclass(frozen=True)
class Admitted:
    """A pool item after cleaning, with the policy that admitted it and what cleaning did."""

    item: PoolItem
    order: int  # position in the pool; rows and QA items follow it
    policy: str
    actions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dropped:
    """A pool line or item that did not make it, with where and why."""

    where: str  # file:line
    reason: str  # short machine-readable reason, e.g. "malformed_json"
    detail: str  # human-readable explanation
    id: Optional[str] = None

    def to_dict(self) -> dict:
        return {"where": self.where, "id": self.id, "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True)
class Request:
    """What an engine is asked: the exact question text and the image it refers to."""

    item_id: str
    question: str  # byte-identical to what the model receives
    family: str
    image: Optional[ImageRef] = None  # None for text-only (judge) requests


@dataclass(frozen=True)
class Generation:
    """An engine's answer to one request.

    ``unsupported`` is set (with an explanation) when the engine cannot answer this kind of
    request at all; such items are rejected as ``no_answer`` instead of being fed noise.
    """

    item_id: str
    text: str  # raw output, reasoning included where the model wrote it inline
    think: str
    answer: str
    finish_reason: str  # "stop" or "length"
    model: str
    revision: str = ""
    unsupported: Optional[str] = None
    prompt: Optional[str] = None  # the rendered model input, where the engine exposes it
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None


@dataclass(frozen=True)
class Decision:
    """A rule's decision on one answer; enough to recompute it."""

    rule: str
    rule_version: str
    candidate: str  # "statement", "full", "first_line" or "first_paragraph"; the one that passed or scored best
    text: str  # that candidate's text exactly as the model wrote it (stripped): a substring of the answer
    score: float
    passed: bool
    extraction: str = ""  # the final-answer pattern whose statement decided ("boxed", ...); "" when none applied
    extraction_version: str = ""  # verify.extract.EXTRACTION_VERSION of the extraction that ran


@dataclass(frozen=True)
class Verdict:
    label: str  # CORRECT / WRONG / UNSURE
    raw: str
    model: str
