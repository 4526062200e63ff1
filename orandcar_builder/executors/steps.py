"""The per-item steps of the generation stage: the request an admitted item makes
(``make_request``), its string-rule outcome (``outcome_of``) and its decision record
(``decided_row``, or ``failed_row`` for an item with no generation).

An executor (``local``, ``ray``) decides where these run; the steps do not know. The records they
read and write, and their row codecs (``admitted_row``/``admitted_from_row`` for
``work/admitted.parquet``, ``decision_row``/``generation_from_row``/``decision_from_row`` for
``work/decisions.parquet``), live in ``records.py``. An accepted ``answer`` is the decided text:
the span of the reply's explicit final-answer statement when it made one ("C" from
"\\boxed{C}"), else the passing candidate, always as the model wrote it.
"""

from __future__ import annotations

from typing import Optional

from ..cache import is_complete
from ..engines.reasoning import answer_status
from ..families import Families
from ..images import ImageRef
from ..interrupts import raise_if_interrupted
from ..prompts import question_text
from ..records import (
    DECISION_SCHEMA,
    Admitted,
    Decision,
    Generation,
    Outcome,
    Request,
    admitted_from_row,
    decision_row,
    outcome_record,
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


def _common(admitted: Admitted, request: Request) -> dict:
    item = admitted.item
    return dict(
        order=admitted.order, item_id=item.id, image=item.image, question=request.question,
        references=tuple(item.references), options=tuple(item.options or ()), family=item.family,
        source={"dataset": item.source.dataset, "split": item.source.split, "id": item.source.id,
                "origin": item.source.origin},
        policy=admitted.policy, actions=admitted.actions,
    )


def outcome_of(admitted: Admitted, request: Request, generation: Generation,
               families: Families) -> tuple[Outcome, Optional[Decision]]:
    """The string-rule outcome for one QA item, and the rule's decision where one was made; the
    rule is the one ``families`` (the build's registry) gives the item.

    An engine that could not answer, a reasoning that never ended (``truncated``) and an empty
    final answer (``no_answer``) are rejected without a rule decision; they never go to the judge.
    """
    item = admitted.item
    common = _common(admitted, request)
    answer = generation.final_answer
    if generation.unsupported:
        return Outcome(route=REJECTED, wrong_vlm="", reason=NO_ANSWER, **common), None
    # Leaked reasoning alone is no answer: the rule and the judge would see nothing else.
    status = answer_status(strip_reasoning(answer), generation.finish_reason)
    if status != ANSWER_OK:
        return Outcome(route=REJECTED, wrong_vlm=answer, reason=status, **common), None
    decision = verify(families.rule_for(item.family, item.options), answer, item.references, item.options,
                      question=request.question)
    if decision.passed:
        return Outcome(route=ACCEPTED, think=generation.think, accepted_text=decision.text,
                       verifier=decision.rule, **common), decision
    return Outcome(route=REJECTED, wrong_vlm=answer, reason=WRONG_ANSWER, **common), decision


# --- decision records -----------------------------------------------------------------------


def failed_row(admitted: Admitted, request: Request, error: str) -> dict:
    """The record of an item with no generation: route ``failed``, the error kept for the report
    (without a URL's user-info or anything shaped like a credential: ``redact.scrub``)."""
    outcome = Outcome(route=FAILED, reason=GENERATION_FAILED, **_common(admitted, request))
    row = {name: None for name in DECISION_SCHEMA.names}
    row.update(outcome_record(outcome))
    row["error"] = scrub(error)
    return row


def decided_row(admitted: Admitted, request: Request, generation: Generation, families: Families) -> dict:
    """The decision record of one item. A generation the engine did not complete (a finish
    reason other than stop or length, e.g. an abort) is never decided: it is not cached either,
    so deciding it would let a rerun change the dataset; the item is recorded as failed and a
    rerun asks for it again."""
    if not is_complete(generation):
        return failed_row(admitted, request, f"the engine did not complete the generation "
                                             f"(finish_reason {generation.finish_reason!r})")
    outcome, decision = outcome_of(admitted, request, generation, families)
    return decision_row(outcome, generation, decision)


def decided_rows(items, families: Families) -> list[dict]:
    """The decision records of answered items, each ``(admitted row, its request or None, its
    generation or None, the error of a failed request)``: ``decided_or_failed``, or ``failed_row``
    where there is no generation. A None request is made again from the row (``make_request``:
    the one ``request_of_row`` made). The same here and on the decider's process
    (``executors.decider``)."""
    out = []
    for row, request, generation, error in items:
        admitted = admitted_from_row(row)
        if request is None:
            request = make_request(admitted, families)
        if generation is None:
            out.append(failed_row(admitted, request, error or "the engine gave no answer"))
        else:
            out.append(decided_or_failed(admitted, request, generation, families))
    return out


def decided_or_failed(admitted: Admitted, request: Request, generation: Generation, families: Families) -> dict:
    """``decided_row``, or a failed record (``decision_failed``) when the rule raises: one item
    never sinks the rest."""
    try:
        return decided_row(admitted, request, generation, families)
    except Exception as exc:
        raise_if_interrupted(exc)
        row = failed_row(admitted, request, f"{type(exc).__name__}: {exc}")
        return {**row, "reason": DECISION_FAILED}
