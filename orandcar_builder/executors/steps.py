"""The per-item steps of the generation stage, and the records they read and write.

An executor (``local``, ``ray``) decides where these run; the steps do not know. Records travel
between stages as parquet rows:

- ``work/admitted.parquet`` (ADMITTED_SCHEMA): an ``Admitted`` item per row
  (``admitted_row`` / ``admitted_from_row``);
- ``work/decisions.parquet`` (DECISION_SCHEMA): one row per QA item in pool order: the outcome
  (records.OUTCOME_FIELDS), the generation, the rule's decision (rule and version, the candidate
  and the text it decided on, the final-answer extraction pattern and version), the judge's
  verdict, and for an item whose generation failed (route ``failed``) the error. An accepted
  ``answer`` is the decided text: the span of the reply's explicit final-answer statement when it
  made one ("C" from "\\boxed{C}"), else the passing candidate, always as the model wrote it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Optional

from ..cache import is_complete
from ..engines.reasoning import answer_status
from ..families import Families
from ..images import ImageRef
from ..interrupts import raise_if_interrupted
from ..judge import candidate_answer, promotion
from ..prompts import question_text
from ..records import (
    DECISION_SCHEMA,
    Admitted,
    Decision,
    Generation,
    Outcome,
    PoolItem,
    Request,
    Source,
    Verdict,
    outcome_from_record,
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
    JUDGE_VERIFIER,
    NO_ANSWER,
    REJECTED,
    WRONG_ANSWER,
)

# The error recorded on an item that asked the same request as an earlier item whose request failed.
SAME_REQUEST_FAILED = "the same request failed for an earlier item"

# --- admitted items -------------------------------------------------------------------------


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


def apply_verdict(outcome: Outcome, generation: Generation, verdict: Verdict) -> Outcome:
    """The outcome after the judge: only CORRECT promotes, with the model's whole final answer."""
    route_to, reason = promotion(verdict)
    if route_to == ACCEPTED:
        return replace(outcome, route=ACCEPTED, think=generation.think,
                       accepted_text=candidate_answer(generation), verifier=JUDGE_VERIFIER,
                       wrong_vlm="", reason=None)
    return replace(outcome, reason=reason)


# --- decision records -----------------------------------------------------------------------


def decision_row(outcome: Outcome, generation: Generation, decision: Optional[Decision],
                 verdict: Optional[Verdict] = None) -> dict:
    return {
        **outcome_record(outcome),
        "text": generation.text, "think": generation.think,
        "final_answer": generation.final_answer, "finish_reason": generation.finish_reason,
        "unsupported": generation.unsupported, "model": generation.model,
        "revision": generation.revision, "prompt": generation.prompt,
        "prompt_tokens": generation.prompt_tokens, "completion_tokens": generation.completion_tokens,
        "rule": decision.rule if decision else None,
        "rule_version": decision.rule_version if decision else None,
        "candidate": decision.candidate if decision else None,
        "score": decision.score if decision else None,
        "rule_passed": decision.passed if decision else None,
        "extraction": decision.extraction if decision else None,
        "extraction_version": decision.extraction_version if decision else None,
        "decided_text": decision.text if decision else None,
        "reject_kind": (decision.reject_kind or None) if decision else None,
        "verdict": verdict.label if verdict else None,
        "verdict_raw": verdict.raw if verdict else None,
        "error": None,
    }


def failed_row(admitted: Admitted, request: Request, error: str) -> dict:
    """The record of an item with no generation: route ``failed``, the error kept for the report
    (without a URL's user-info or anything shaped like a credential: ``redact.scrub``)."""
    outcome = Outcome(route=FAILED, reason=GENERATION_FAILED, **_common(admitted, request))
    row = {name: None for name in DECISION_SCHEMA.names}
    row.update(outcome_record(outcome))
    row["error"] = scrub(error)
    return row


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


def with_verdict(row: dict, verdict: Verdict) -> dict:
    """A decision record after the judge's ``verdict`` (see ``apply_verdict``)."""
    generation = generation_from_row(row)
    outcome = apply_verdict(outcome_from_record(row), generation, verdict)
    return {**row, **outcome_record(outcome), "verdict": verdict.label, "verdict_raw": verdict.raw}


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


def decided_or_failed(admitted: Admitted, request: Request, generation: Generation, families: Families) -> dict:
    """``decided_row``, or a failed record (``decision_failed``) when the rule raises: one item
    never sinks the rest."""
    try:
        return decided_row(admitted, request, generation, families)
    except Exception as exc:
        raise_if_interrupted(exc)
        row = failed_row(admitted, request, f"{type(exc).__name__}: {exc}")
        return {**row, "reason": DECISION_FAILED}
