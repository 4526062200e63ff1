"""The records that flow between stages, and their row codecs. Plain dataclasses; no stage imports
another's internals.

``Outcome`` and its Arrow codec (``OUTCOME_FIELDS``, ``outcome_record``, ``outcome_from_record``)
are the record ``executors.steps.outcome_of`` writes to ``work/decisions.parquet`` and routing reads back: they
live here so that neither side imports the other. So do the work files' schemas and row codecs:
``admitted_row``/``admitted_from_row`` (work/admitted.parquet, ``ADMITTED_SCHEMA``) and
``decision_row``/``generation_from_row``/``decision_from_row``/``with_verdict``
(work/decisions.parquet, ``DECISION_SCHEMA``), which admit, the executors, the judge pass and the
review page read without importing each other.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Optional

import pyarrow as pa

from .images import ImageRef
from .vocab import ACCEPTED

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
    reference: str | tuple[str, ...]  # the source's answer: one text, or several for a multi-answer family
    family: str
    options: Optional[tuple[str, ...]] = None
    source: Source = field(default_factory=Source)
    where: str = ""  # "pool.jsonl:12": for messages

    @property
    def references(self) -> list[str]:
        return [self.reference] if isinstance(self.reference, str) else list(self.reference)


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
    final_answer: str  # the reply with its reasoning split off: what rules and the judge read
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
    text: str  # that candidate's text exactly as the model wrote it (stripped): a substring of the final answer
    score: float
    passed: bool
    extraction: str = ""  # the final-answer pattern whose statement decided ("boxed", ...); "" when none applied
    extraction_version: str = ""  # verify.extract.EXTRACTION_VERSION of the extraction that ran
    reject_kind: str = ""  # for a rejection, one of vocab.REJECT_KINDS (no pick, wrong pick, ...); "" when passed


@dataclass(frozen=True)
class Verdict:
    label: str  # CORRECT / WRONG / UNSURE
    raw: str
    model: str


@dataclass(frozen=True)
class Outcome:
    """Everything routing needs about one QA item, in pool order."""

    order: int
    item_id: str
    image: ImageRef
    question: str  # the exact text the model received
    references: tuple[str, ...]
    options: tuple[str, ...]
    family: str
    source: dict  # {dataset, split, id, origin}
    policy: str
    actions: tuple[str, ...]
    route: str  # vocab.ACCEPTED or vocab.REJECTED (vocab.FAILED: not routed)
    think: str = ""
    accepted_text: str = ""  # accepted: the candidate that passed (or the judge-promoted final answer): the row's ``answer``
    verifier: str = ""  # accepted: the rule name, or vocab.JUDGE_VERIFIER
    wrong_vlm: str = ""  # rejected: what the model said
    reason: Optional[str] = None  # rejected: one of vocab.REJECT_REASONS; failed: vocab.FAIL_REASONS


SOURCE_TYPE = pa.struct([("dataset", pa.string()), ("split", pa.string()), ("id", pa.string()),
                         ("origin", pa.string())])
# The columns of a decision record that describe its outcome (``outcome_record``); ``think``
# is the generation's reasoning, which an accepted outcome carries.
OUTCOME_FIELDS: tuple[pa.Field, ...] = (
    pa.field("order", pa.int64()),
    pa.field("id", pa.string()),
    pa.field("family", pa.string()),
    pa.field("image_sha256", pa.string()),
    pa.field("image", pa.string()),
    pa.field("question", pa.string()),
    pa.field("references", pa.list_(pa.string())),
    pa.field("options", pa.list_(pa.string())),
    pa.field("source", SOURCE_TYPE),
    pa.field("policy", pa.string()),
    pa.field("actions", pa.list_(pa.string())),
    pa.field("think", pa.string()),
    pa.field("route", pa.string()),
    pa.field("accepted_text", pa.string()),
    pa.field("verifier", pa.string()),
    pa.field("wrong_vlm", pa.string()),
    pa.field("reason", pa.string()),
)
OUTCOME_COLUMNS = tuple(f.name for f in OUTCOME_FIELDS)


def outcome_record(outcome: Outcome) -> dict:
    """The outcome's columns of a decision record (see OUTCOME_FIELDS), except ``think``,
    which the record takes from the generation."""
    return {
        "order": outcome.order, "id": outcome.item_id, "family": outcome.family,
        "image_sha256": outcome.image.sha256, "image": outcome.image.path,
        "question": outcome.question, "references": list(outcome.references),
        "options": list(outcome.options), "source": dict(outcome.source), "policy": outcome.policy,
        "actions": list(outcome.actions), "route": outcome.route, "accepted_text": outcome.accepted_text,
        "verifier": outcome.verifier, "wrong_vlm": outcome.wrong_vlm, "reason": outcome.reason,
    }


def outcome_from_record(record: dict) -> Outcome:
    """The Outcome a decision record describes (the inverse of ``outcome_record``)."""
    route_to = record["route"]
    return Outcome(
        order=record["order"], item_id=record["id"],
        image=ImageRef(path=record["image"], sha256=record["image_sha256"]),
        question=record["question"], references=tuple(record["references"]),
        options=tuple(record["options"] or ()), family=record["family"],
        source=dict(record["source"]), policy=record["policy"], actions=tuple(record["actions"] or ()),
        route=route_to, think=(record["think"] or "") if route_to == ACCEPTED else "",
        accepted_text=record["accepted_text"] or "", verifier=record["verifier"] or "",
        wrong_vlm=record["wrong_vlm"] or "", reason=record["reason"],
    )


# --- the work files between stages ------------------------------------------------------------
# work/admitted.parquet: one row per admitted item, in pool order (the admit stage writes it, the
# executors read it).
ADMITTED_SCHEMA = pa.schema([
    ("order", pa.int64()), ("id", pa.string()), ("where", pa.string()), ("image", pa.string()),
    ("image_sha256", pa.string()), ("question", pa.string()), ("references", pa.list_(pa.string())),
    ("family", pa.string()), ("options", pa.list_(pa.string())), ("source", pa.string()),
    ("policy", pa.string()), ("actions", pa.list_(pa.string())),
])

_GENERATION_FIELDS = [
    ("text", pa.string()), ("final_answer", pa.string()), ("finish_reason", pa.string()),
    ("unsupported", pa.string()), ("model", pa.string()), ("revision", pa.string()), ("prompt", pa.string()),
    ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()),
]
_DECISION_FIELDS = [
    ("rule", pa.string()), ("rule_version", pa.string()), ("candidate", pa.string()),
    ("score", pa.float64()), ("rule_passed", pa.bool_()),
    # The final-answer extraction that fed the rule: the pattern whose statement decided ("" when
    # none applied) and verify.extract.EXTRACTION_VERSION; ``decided_text`` is the text the rule
    # passed or scored best on (a substring of ``final_answer``).
    ("extraction", pa.string()), ("extraction_version", pa.string()), ("decided_text", pa.string()),
    # For a rejection, what kind it is (vocab.REJECT_KINDS): the model's wrong pick, or nothing
    # the rule could read as one; null for an accepted item and for an older work dir.
    ("reject_kind", pa.string()),
]
_VERDICT_FIELDS = [("verdict", pa.string()), ("verdict_raw", pa.string())]
# work/decisions.parquet: one record per QA item, the outcome (OUTCOME_FIELDS), the generation,
# the rule's decision and the judge's verdict (the generate stage writes it, the judge stage adds
# verdicts, routing, calibrate and the review page read it).
DECISION_SCHEMA = pa.schema(
    list(OUTCOME_FIELDS) + [pa.field(n, t) for n, t in _GENERATION_FIELDS + _DECISION_FIELDS + _VERDICT_FIELDS]
    + [pa.field("error", pa.string())]
)


# --- the row codecs of the work files -----------------------------------------------------------
# admitted.parquet (ADMITTED_SCHEMA)

def admitted_row(admitted: Admitted) -> dict:
    item = admitted.item
    return {
        "order": admitted.order, "id": item.id, "where": item.where, "image": item.image.path,
        "image_sha256": item.image.sha256, "question": item.question,
        "references": item.references, "family": item.family,
        "options": list(item.options) if item.options is not None else None,
        # vars(): the same dict as Source.to_dict() (flat fields) without asdict's deep copy.
        "source": json.dumps(vars(item.source), sort_keys=True), "policy": admitted.policy,
        "actions": list(admitted.actions),
    }


def admitted_from_row(row: dict) -> Admitted:
    """The Admitted item an ``admitted_row`` describes (a single reference comes back as a str)."""
    references = tuple(row["references"])
    item = PoolItem(
        id=row["id"], image=ImageRef(path=row["image"], sha256=row["image_sha256"]),
        question=row["question"], reference=references[0] if len(references) == 1 else references,
        family=row["family"], options=tuple(row["options"]) if row["options"] is not None else None,
        source=Source(**json.loads(row["source"])), where=row["where"],
    )
    return Admitted(item=item, order=row["order"], policy=row["policy"], actions=tuple(row["actions"] or ()))


# decisions.parquet (DECISION_SCHEMA)

def decision_row(outcome: Outcome, generation: Generation, decision: Optional[Decision],
                 verdict: Optional[Verdict] = None) -> dict:
    return {
        **outcome_record(outcome), **generation_columns(generation), **decision_columns(decision),
        "verdict": verdict.label if verdict else None,
        "verdict_raw": verdict.raw if verdict else None,
        "error": None,
    }


def generation_columns(generation: Generation) -> dict:
    """The generation's columns of a decision record."""
    return {
        "text": generation.text, "think": generation.think,
        "final_answer": generation.final_answer, "finish_reason": generation.finish_reason,
        "unsupported": generation.unsupported, "model": generation.model,
        "revision": generation.revision, "prompt": generation.prompt,
        "prompt_tokens": generation.prompt_tokens, "completion_tokens": generation.completion_tokens,
    }


def decision_columns(decision: Optional[Decision]) -> dict:
    """The rule's decision's columns of a decision record (all null without one)."""
    if decision is None:
        return dict(_NO_DECISION)
    return {
        "rule": decision.rule, "rule_version": decision.rule_version, "candidate": decision.candidate,
        "score": decision.score, "rule_passed": decision.passed, "extraction": decision.extraction,
        "extraction_version": decision.extraction_version, "decided_text": decision.text,
        "reject_kind": decision.reject_kind or None,
    }


_NO_DECISION = dict.fromkeys(name for name, _ in _DECISION_FIELDS)


def generation_from_row(row: dict) -> Generation:
    """The generation a decision record holds."""
    return Generation(item_id=row["id"], text=row["text"] or "", think=row["think"] or "",
                      final_answer=row["final_answer"] or "", finish_reason=row["finish_reason"] or "",
                      model=row["model"] or "", revision=row["revision"] or "",
                      unsupported=row["unsupported"], prompt=row["prompt"],
                      prompt_tokens=row.get("prompt_tokens"), completion_tokens=row.get("completion_tokens"))


def decision_from_row(row: dict) -> Optional[Decision]:
    """The rule's decision a record holds (a record written before the extraction columns
    existed gives back empty ``text`` and extraction fields)."""
    if row["rule"] is None:
        return None
    return Decision(rule=row["rule"], rule_version=row["rule_version"], candidate=row["candidate"],
                    text=row.get("decided_text") or "", score=row["score"], passed=row["rule_passed"],
                    extraction=row.get("extraction") or "", extraction_version=row.get("extraction_version") or "",
                    reject_kind=row.get("reject_kind") or "")


def with_verdict(row: dict, outcome: Outcome, verdict: Verdict) -> dict:
    """The decision record ``row`` after the judge: its ``verdict`` and the ``outcome`` it led to
    (``judge.apply_verdict``)."""
    return {**row, **outcome_record(outcome), "verdict": verdict.label, "verdict_raw": verdict.raw}
