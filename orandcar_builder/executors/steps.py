"""The per-item steps of the generation stage: the request an admitted item makes
(``make_request``, ``request_of_row``), its string-rule outcome (``outcome_of``) and the decision
records of answered items (``decided_rows``, failed records included). A record is made from the
admitted row's columns and the rule's decision directly: it equals ``records.decision_row`` of
``outcome_of``'s Outcome, without making an Admitted item, an Outcome or their parts for each
item (tests/test_decision_records.py).

An executor (``local``, ``ray``) decides where these run; the steps do not know. The records they
read and write, and their row codecs (``admitted_row``/``admitted_from_row`` for
``work/admitted.parquet``, ``decision_row``/``generation_from_row``/``decision_from_row`` for
``work/decisions.parquet``), live in ``records.py``. An accepted ``answer`` is the decided text:
the span of the reply's explicit final-answer statement when it made one ("C" from
"\\boxed{C}"), else the passing candidate, always as the model wrote it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

from ..cache import is_complete
from ..engines.reasoning import answer_status
from ..families import Families
from ..images import ImageRef
from ..interrupts import raise_if_interrupted
from ..prompts import question_text
from ..records import (
    DECISION_SCHEMA,
    SOURCE_TYPE,
    Admitted,
    Decision,
    Generation,
    Outcome,
    Request,
    Source,
    admitted_row,
    decision_columns,
    generation_columns,
    outcome_from_record,
)
from ..redact import scrub
from ..verify import verify
from ..verify.candidates import strip_reasoning
from ..vocab import (
    ACCEPTED,
    ANSWER_OK,
    DECISION_FAILED,
    FAILED,
    GENERATION_FAILED,
    NO_ANSWER,
    REJECTED,
    WRONG_ANSWER,
)

# The error recorded on an item that asked the same request as an earlier item whose request failed.
SAME_REQUEST_FAILED = "the same request failed for an earlier item"

# --- the steps ------------------------------------------------------------------------------


def make_request(admitted: Admitted, families: Families) -> Request:
    """The request of one item: its question as ``families`` (the build's registry) asks it."""
    item = admitted.item
    return Request(
        item_id=item.id,
        question=question_text(item.question, families[item.family], item.options),
        family=item.family,
        image=item.image,
    )


def request_of_row(row: dict, families: Families) -> Request:
    """``make_request`` of the item an admitted row (``records.admitted_row``) describes, without
    making the whole item (``admitted_from_row``): what an executor needs before the item is decided."""
    options = row["options"]
    return Request(
        item_id=row["id"],
        question=question_text(row["question"], families[row["family"]],
                               tuple(options) if options is not None else None),
        family=row["family"],
        image=ImageRef(path=row["image"], sha256=row["image_sha256"]),
    )


def _answered(family: str, references: list[str], options: Optional[tuple[str, ...]], question: str,
              generation: Generation, families: Families) -> tuple[dict, Optional[Decision]]:
    """The outcome fields the answer decides (``route``, and those of ``accepted_text``,
    ``verifier``, ``wrong_vlm``, ``reason`` that differ from an Outcome's defaults; an accepted
    outcome carries the generation's ``think`` too), and the rule's decision where one was made:
    ``outcome_of``'s work, on the item's fields."""
    answer = generation.final_answer
    if generation.unsupported:
        return {"route": REJECTED, "wrong_vlm": "", "reason": NO_ANSWER}, None
    # Leaked reasoning alone is no answer: the rule and the judge would see nothing else.
    status = answer_status(strip_reasoning(answer), generation.finish_reason)
    if status != ANSWER_OK:
        return {"route": REJECTED, "wrong_vlm": answer, "reason": status}, None
    decision = verify(families.rule_for(family, options), answer, references, options, question=question)
    if decision.passed:
        return {"route": ACCEPTED, "accepted_text": decision.text, "verifier": decision.rule}, decision
    return {"route": REJECTED, "wrong_vlm": answer, "reason": WRONG_ANSWER}, decision


def outcome_of(admitted: Admitted, request: Request, generation: Generation,
               families: Families) -> tuple[Outcome, Optional[Decision]]:
    """The string-rule outcome for one QA item, and the rule's decision where one was made; the
    rule is the one ``families`` (the build's registry) gives the item.

    An engine that could not answer, a reasoning that never ended (``truncated``) and an empty
    final answer (``no_answer``) are rejected without a rule decision; they never go to the judge.
    """
    row = admitted_row(admitted)
    fields, decision = _answered(row["family"], *_rule_inputs(row), request.question, generation, families)
    record = {**_item_columns(row, request.question), **_UNANSWERED, **fields, "think": generation.think}
    return outcome_from_record(record), decision


# --- decision records -----------------------------------------------------------------------
# A decision record (records.DECISION_SCHEMA) is made here from the admitted row's columns as the
# record holds them (``_item_columns``), never through an Outcome: ``outcome_record(outcome_of(...))``
# gives the same columns at some fifteen microseconds more per item (the item's, the image's, the
# source's and the outcome's records built and read).

# The outcome columns an answer leaves as an Outcome's defaults leave them (records.outcome_record).
_UNANSWERED = {"route": None, "accepted_text": "", "verifier": "", "wrong_vlm": "", "reason": None}
# The columns of a record before any value: DECISION_SCHEMA's names, in order.
_EMPTY_RECORD = dict.fromkeys(DECISION_SCHEMA.names)


def _item_columns(row: dict, question: str) -> dict:
    """The outcome columns an admitted row (``records.admitted_row``) gives a decision record
    asked with ``question``, as ``outcome_record`` gives them, before the route."""
    return {
        "order": row["order"], "id": row["id"], "family": row["family"], "image_sha256": row["image_sha256"],
        "image": row["image"], "question": question, "references": list(row["references"]),
        "options": list(row["options"] or ()),
        "source": _source_fields(row["source"]),
        "policy": row["policy"], "actions": list(row["actions"] or ()),
    }


# Source's fields, each with its default (every field has one), and those a record keeps.
_SOURCE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Source)}
_RECORD_SOURCE_FIELDS = tuple(field.name for field in SOURCE_TYPE)


def _source_fields(source: str) -> dict:
    """The fields of an admitted row's source (its JSON text) that a decision record keeps
    (records.SOURCE_TYPE), as ``Source(**fields)`` has them; a key Source lacks is a TypeError.
    Read from the JSON object without making the Source (a frozen dataclass's ``__init__``: a
    third of this, per item decided) where its keys are Source's."""
    data = json.loads(source)
    if type(data) is not dict or not data.keys() <= _SOURCE_DEFAULTS.keys():
        Source(**data)  # raises the TypeError that names the key (or the non-object)
    return {name: data.get(name, _SOURCE_DEFAULTS[name]) for name in _RECORD_SOURCE_FIELDS}


def _rule_inputs(row: dict) -> tuple[list[str], Optional[tuple[str, ...]]]:
    """What the rule is given of an admitted row: its references, and its options (None: none)."""
    options = row["options"]
    return list(row["references"]), tuple(options) if options is not None else None


def _failed_record(columns: dict, error: str, reason: str = GENERATION_FAILED) -> dict:
    row = dict(_EMPTY_RECORD)
    row.update(columns)
    row.update(_UNANSWERED)
    row["route"], row["reason"], row["error"] = FAILED, reason, scrub(error)
    return row


def _decided_record(columns: dict, references: list[str], options: Optional[tuple[str, ...]],
                    generation: Generation, families: Families) -> dict:
    """The decision record of one answered item, from its columns (``_item_columns``) and the
    rule's inputs (``_rule_inputs``); a failed record (``decision_failed``) when the rule raises:
    one item never sinks the rest. A generation the engine did not complete (a finish reason other
    than stop or length, e.g. an abort) is never decided: it is not cached either, so deciding it
    would let a rerun change the dataset; the item is recorded as failed and a rerun asks for it
    again."""
    if not is_complete(generation):
        return _failed_record(columns, f"the engine did not complete the generation "
                                       f"(finish_reason {generation.finish_reason!r})")
    try:
        fields, decision = _answered(columns["family"], references, options, columns["question"], generation,
                                     families)
    except Exception as exc:  # the rule's error fails only its item
        raise_if_interrupted(exc)
        return _failed_record(columns, f"{type(exc).__name__}: {exc}", DECISION_FAILED)
    row = dict(columns)
    row.update(_UNANSWERED)
    row.update(fields)
    row.update(generation_columns(generation))
    row.update(decision_columns(decision))
    row.update(verdict=None, verdict_raw=None, error=None)
    return row


def decided_rows(items, families: Families) -> list[dict]:
    """The decision records of answered items, each ``(admitted row, the question its request
    asked or None, its generation or None, the error of a failed request)``: ``_decided_record``,
    or where there is no generation a failed record (``generation_failed``) that keeps the error,
    without a URL's user-info or anything shaped like a credential (``redact.scrub``). A None
    question is made again from the row (``request_of_row``'s). The same here, on the decider's
    process (``executors.decider``) and on the Ray executor's driver and actors."""
    out = []
    for row, question, generation, error in items:
        if question is None:
            question = request_of_row(row, families).question
        columns = _item_columns(row, question)
        if generation is None:
            out.append(_failed_record(columns, error or "the engine gave no answer"))
            continue
        out.append(_decided_record(columns, *_rule_inputs(row), generation, families))
    return out
