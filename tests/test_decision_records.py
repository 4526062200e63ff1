"""A decision record is made from the admitted row's columns (``steps.decided_rows``), without an
Admitted item or an Outcome; it must equal, value for value and column for column, the record
the records' codecs make through them: ``records.decision_row(*steps.outcome_of(...))`` for a
decided item, ``outcome_record`` of a failed Outcome for the others."""

from __future__ import annotations

import pytest

from orandcar_builder.executors.steps import decided_or_failed, decided_rows, failed_row, outcome_of
from orandcar_builder.families import DEFAULT_FAMILIES
from orandcar_builder.records import (
    DECISION_SCHEMA,
    Generation,
    Outcome,
    admitted_from_row,
    decision_row,
    outcome_record,
)
from orandcar_builder.redact import scrub
from orandcar_builder.vocab import DECISION_FAILED, FAILED, GENERATION_FAILED

from .test_decider import _answered, _pool


def _failed_outcome(admitted, request, error: str, reason: str = GENERATION_FAILED) -> dict:
    """The record of a failed item through an Outcome (what failed_row made before)."""
    item = admitted.item
    outcome = Outcome(order=admitted.order, item_id=item.id, image=item.image, question=request.question,
                      references=tuple(item.references), options=tuple(item.options or ()), family=item.family,
                      source={"dataset": item.source.dataset, "split": item.source.split, "id": item.source.id,
                              "origin": item.source.origin},
                      policy=admitted.policy, actions=admitted.actions, route=FAILED, reason=reason)
    row = dict.fromkeys(DECISION_SCHEMA.names)
    row.update(outcome_record(outcome))
    row["error"] = scrub(error)
    return row


def _through_outcome(row, request, generation, error) -> dict:
    admitted = admitted_from_row(row)
    if generation is None:
        return _failed_outcome(admitted, request, error or "the engine gave no answer")
    if generation.finish_reason not in ("stop", "length") and generation.unsupported is None:
        return _failed_outcome(admitted, request, f"the engine did not complete the generation "
                                                  f"(finish_reason {generation.finish_reason!r})")
    try:
        outcome, decision = outcome_of(admitted, request, generation, DEFAULT_FAMILIES)
    except ValueError as exc:
        return _failed_outcome(admitted, request, f"ValueError: {exc}", DECISION_FAILED)
    return decision_row(outcome, generation, decision)


def _same(got: dict, want: dict) -> None:
    assert list(got) == list(want) and set(got) == set(DECISION_SCHEMA.names)  # the same columns, in the same order
    assert got == want


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    """Admitted rows with every kind of answer (MixedEngine's: right, wrong, with reasoning, cut
    off, unsupported, incomplete, failed), a reply with leaked reasoning only, and options."""
    root = tmp_path_factory.mktemp("records")
    got = _answered(_pool(root / "pool"), root)
    row, request, _, _ = next(i for i in got if i[0]["options"])
    got.append((row, request, Generation(row["id"], "<think>so", "", "<think>so", "stop", "m"), None))
    return got


def test_records_made_from_the_row_are_the_outcomes_records(items):
    kinds = set()
    records = decided_rows([(row, request.question, generation, error) for row, request, generation, error in items],
                           DEFAULT_FAMILIES)
    for item, record in zip(items, records, strict=True):
        _same(record, _through_outcome(*item))
        kinds.add((record["route"], record["reason"], record["rule"] is not None))
    # accepted, wrong answers, no answer (unsupported), truncated, empty, failed requests and
    # incomplete generations all came through
    assert {("accepted", None, True), ("rejected", "wrong_answer", True), ("rejected", "no_answer", False),
            ("rejected", "truncated", False), ("failed", "generation_failed", False)} <= kinds


def test_a_question_not_given_is_made_from_the_row(items):
    without = decided_rows([(row, None, generation, error) for row, _, generation, error in items], DEFAULT_FAMILIES)
    given = decided_rows([(row, request.question, generation, error) for row, request, generation, error in items],
                         DEFAULT_FAMILIES)
    assert without == given


def test_the_admitted_items_records_are_the_rows_records(items):
    """decided_or_failed and failed_row (the Ray executor's driver: Admitted items) give the
    records decided_rows gives for their rows."""
    for row, request, generation, error in items:
        admitted = admitted_from_row(row)
        if generation is None:
            got = failed_row(admitted, request, error)
        else:
            got = decided_or_failed(admitted, request, generation, DEFAULT_FAMILIES)
        _same(got, decided_rows([(row, request.question, generation, error)], DEFAULT_FAMILIES)[0])


def test_a_rule_that_raises_fails_its_item_only(items, monkeypatch):
    import orandcar_builder.executors.steps as steps

    real = steps.verify

    def verify(rule, answer, references, options=None, question=""):
        if rule == "choice":
            raise ValueError("the rule broke on https://user:secret@example.org/x")
        return real(rule, answer, references, options, question=question)

    monkeypatch.setattr(steps, "verify", verify)
    records = decided_rows([(row, request.question, generation, error) for row, request, generation, error in items],
                           DEFAULT_FAMILIES)
    broken = [r for r in records if r["reason"] == DECISION_FAILED]
    assert broken and all(r["route"] == FAILED and r["options"] and "secret" not in r["error"] for r in broken)
    assert any(r["route"] == "accepted" for r in records)  # the other families were decided
    for item, record in zip(items, records, strict=True):
        _same(record, _through_outcome(*item))
