"""A decision record is made from the admitted row's columns (``steps.decided_rows``), without an
Admitted item or an Outcome. Checked two ways:

- against the records' codecs through an Outcome (``records.decision_row(*steps.outcome_of(...))``,
  ``outcome_record`` of a failed Outcome), value for value and column for column, on a build's
  items with every kind of answer; these share ``steps._answered`` and the generation's and
  decision's columns with the code under test, so
- each record of hand-written items (two references, no options, options given as an empty
  list, actions, a failed request with an empty error) is also checked against what its item and
  answer say, written out here: the outcome, the generation's columns and ``verify``'s decision;
  and the Ray actor's records against the local executor's.
"""

from __future__ import annotations

import pytest

from orandcar_builder.executors.steps import decided_rows, outcome_of
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
    """The record of a failed item through an Outcome (what the steps made before)."""
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


# --- expectations written out, not derived from the code under test ----------------------------

def _row(item_id: str, family: str, references: list, options=None, actions=None, source=None) -> dict:
    """An admitted row as records.admitted_row writes it."""
    import json

    return {"order": int(item_id[1:]), "id": item_id, "where": f"pool.jsonl:{item_id[1:]}",
            "image": "/data/img/a.png", "image_sha256": "ab" * 32, "question": "What is shown?",
            "references": references, "family": family, "options": options,
            "source": json.dumps(source or {"dataset": "ds", "split": "val", "id": item_id, "origin": "benchmark",
                                            "image": None, "image_sha256": None}, sort_keys=True),
            "policy": "p1", "actions": actions}


def _generation(item_id: str, final: str, finish: str = "stop", think: str = "", unsupported=None) -> Generation:
    return Generation(item_id, f"<think>{think}</think>{final}" if think else final, think, final, finish, "m",
                      revision="r1", unsupported=unsupported, prompt="P", prompt_tokens=7, completion_tokens=3)


_CASES = [
    # (row, generation, error, the outcome columns expected)
    (_row("q1", "scene_text", ["EXIT"]), _generation("q1", "The answer is EXIT.", think="it reads EXIT"), None,
     {"route": "accepted", "accepted_text": "EXIT", "verifier": "alnum", "wrong_vlm": "", "reason": None,
      "think": "it reads EXIT", "extraction": "answer_is"}),
    (_row("q2", "vqa", ["cat", "kitten"], options=[]), _generation("q2", "dog"), None,
     {"route": "rejected", "accepted_text": "", "verifier": "", "wrong_vlm": "dog", "reason": "wrong_answer"}),
    (_row("q3", "multiple_choice", ["B"], options=["red", "blue"], actions=["normalised"]),
     _generation("q3", "The answer is (B)."), None,
     {"route": "accepted", "verifier": "choice", "wrong_vlm": "", "reason": None}),
    (_row("q4", "scene_text", ["EXIT"]), _generation("q4", "", unsupported="no images"), None,
     {"route": "rejected", "accepted_text": "", "verifier": "", "wrong_vlm": "", "reason": "no_answer",
      "rule": None, "unsupported": "no images"}),
    (_row("q5", "scene_text", ["EXIT"]),  # cut off inside its reasoning: no final answer
     Generation("q5", "<think>EX", "EX", "", "length", "m", revision="r1", prompt="P", prompt_tokens=7,
                completion_tokens=3), None,
     {"route": "rejected", "accepted_text": "", "verifier": "", "wrong_vlm": "", "reason": "truncated",
      "rule": None}),
    (_row("q6", "scene_text", ["EXIT"]), _generation("q6", "EXIT", finish="abort"), None,
     {"route": "failed", "accepted_text": "", "verifier": "", "wrong_vlm": "", "reason": "generation_failed",
      "text": None, "think": None, "rule": None,
      "error": "the engine did not complete the generation (finish_reason 'abort')"}),
    (_row("q7", "scene_text", ["EXIT"]), None, "HTTP 500 from https://user:pw@example.org/v1",
     {"route": "failed", "accepted_text": "", "verifier": "", "wrong_vlm": "", "reason": "generation_failed",
      "text": None, "model": None, "rule": None}),
    (_row("q8", "scene_text", ["EXIT"]), None, "",
     {"route": "failed", "reason": "generation_failed", "error": "the engine gave no answer"}),
]


@pytest.mark.parametrize("case", range(len(_CASES)))
def test_a_record_holds_what_its_item_and_answer_say(case):
    """Each record written out against its item: the item's columns as the row holds them, the
    outcome its answer leads to, the generation's columns, and the rule's decision as ``verify``
    makes it."""
    from orandcar_builder.prompts import question_text
    from orandcar_builder.verify import verify

    row, generation, error, expected = _CASES[case]
    (record,) = decided_rows([(row, None, generation, error)], DEFAULT_FAMILIES)
    options = tuple(row["options"]) if row["options"] is not None else None
    assert record["question"] == question_text("What is shown?", DEFAULT_FAMILIES[row["family"]], options)
    item = {"order": row["order"], "id": row["id"], "family": row["family"], "image_sha256": "ab" * 32,
            "image": "/data/img/a.png", "references": row["references"], "options": row["options"] or [],
            "source": {"dataset": "ds", "split": "val", "id": row["id"], "origin": "benchmark"}, "policy": "p1",
            "actions": row["actions"] or [], "verdict": None, "verdict_raw": None}
    assert {name: record[name] for name in item} == item
    assert {name: record[name] for name in expected if name != "error"} == \
        {name: value for name, value in expected.items() if name != "error"}
    if "error" in expected:
        assert record["error"] == expected["error"]
    if record["route"] == "failed":
        assert record["rule"] is None and record["text"] is None and record["model"] is None
        assert record["error"] and "pw@" not in record["error"]
        return
    assert record["error"] is None
    assert (record["text"], record["final_answer"], record["finish_reason"], record["model"], record["revision"],
            record["prompt"], record["prompt_tokens"], record["completion_tokens"]) == \
        (generation.text, generation.final_answer, generation.finish_reason, "m", "r1", "P", 7, 3)
    assert record["think"] == generation.think  # the generation's, whatever the route
    if expected.get("rule", "") is None:
        assert all(record[name] is None for name in ("rule", "rule_version", "candidate", "score", "rule_passed",
                                                     "extraction", "extraction_version", "decided_text",
                                                     "reject_kind"))
        return
    rule = DEFAULT_FAMILIES.rule_for(row["family"], options)
    decision = verify(rule, generation.final_answer, row["references"], options, question=record["question"])
    assert (record["rule"], record["rule_version"], record["candidate"], record["score"], record["rule_passed"],
            record["extraction"], record["extraction_version"], record["decided_text"], record["reject_kind"]) == \
        (decision.rule, decision.rule_version, decision.candidate, decision.score, decision.passed,
         decision.extraction, decision.extraction_version, decision.text, decision.reject_kind or None)
    assert record["accepted_text"] == (decision.text if record["route"] == "accepted" else "")


class _Scripted:
    """An engine with a stream of its own that answers each request as _CASES says (a failed
    Completion where the case has no generation)."""

    kind = "scripted"

    def fingerprint(self):
        return {"kind": self.kind}

    def stream(self, requests):
        from orandcar_builder.engines.base import Completion

        by_id = {row["id"]: (generation, error) for row, generation, error, _ in _CASES}
        for request in requests:
            generation, error = by_id[request.item_id]
            yield Completion(request, generation=generation, error=None if generation else error)


class _ScriptedFactory:
    def create(self):
        return _Scripted()


def test_a_block_the_ray_driver_decides_has_its_actors_records(monkeypatch):
    """A block its actor only generates (``GenerateAndDecide.generate``) and the Ray driver decides
    (``_Driver._decided_here``) has the records the actor makes deciding it itself, failed
    requests (an empty error too) included, and the actor's generations; the driver decides off
    its main thread, as the actor's concurrent calls do (the ``math`` rule's time limits hold on
    the main thread only)."""
    import threading
    from types import SimpleNamespace

    import pyarrow as pa

    from orandcar_builder.cache import engine_hash, generation_from_json
    from orandcar_builder.engines.base import public_fingerprint
    from orandcar_builder.executors import ray_data
    from orandcar_builder.executors.ray_data import ERROR_COLUMN, GENERATION_COLUMN, GenerateAndDecide, _Driver
    from orandcar_builder.records import ADMITTED_SCHEMA

    actor = GenerateAndDecide(_ScriptedFactory(), engine_hash(public_fingerprint(_Scripted())), DEFAULT_FAMILIES)
    block = pa.Table.from_pylist([row for row, _, _, _ in _CASES], schema=ADMITTED_SCHEMA)
    generated = actor.generate(block, 3)
    assert generated.column_names == [GENERATION_COLUMN, ERROR_COLUMN] and generated.num_rows == len(_CASES)
    threads = []

    def decided_rows_seen(items, families):
        threads.append(threading.current_thread() is threading.main_thread())
        return decided_rows(items, families)

    monkeypatch.setattr(ray_data, "decided_rows", decided_rows_seen)
    driver = SimpleNamespace(job=SimpleNamespace(families=DEFAULT_FAMILIES))
    records, generations = _Driver._decided_here(driver, block, generated)
    assert threads == [False]
    decided = actor.decide(block, 3)
    assert pa.Table.from_pylist(records, schema=DECISION_SCHEMA).equals(decided.drop_columns([GENERATION_COLUMN]))
    assert generations == [generation_from_json(blob) if blob is not None else None
                           for blob in decided.column(GENERATION_COLUMN).to_pylist()]
    assert generations == [generation for _, generation, _, _ in _CASES]


def test_the_ray_actor_writes_the_local_executors_records():
    """The Ray actor (``GenerateAndDecide``) decides its rows with ``decided_rows``: the records
    of the same answers are the local executor's, a failed request with an empty error included."""
    import pyarrow as pa

    from orandcar_builder.cache import engine_hash
    from orandcar_builder.engines.base import public_fingerprint
    from orandcar_builder.executors.ray_data import GENERATION_COLUMN, GenerateAndDecide
    from orandcar_builder.records import ADMITTED_SCHEMA

    actor = GenerateAndDecide(_ScriptedFactory(), engine_hash(public_fingerprint(_Scripted())), DEFAULT_FAMILIES)
    rows = [row for row, _, _, _ in _CASES]
    table = actor.decide(pa.Table.from_pylist(rows, schema=ADMITTED_SCHEMA), 3)
    local = pa.Table.from_pylist(decided_rows([(row, None, generation, error) for row, generation, error, _ in _CASES],
                                              DEFAULT_FAMILIES), schema=DECISION_SCHEMA)
    assert table.drop_columns([GENERATION_COLUMN]).equals(local)
    assert [blob is None for blob in table.column(GENERATION_COLUMN).to_pylist()] == \
        [generation is None for _, generation, _, _ in _CASES]


@pytest.mark.parametrize("source", [
    {"dataset": "d", "split": "s", "id": "1", "origin": "InfinityMM", "image": "a.png", "image_sha256": "ab"},
    {"dataset": "d"}, {}, {"origin": None, "id": ""}, {"dataset": "é\u2028", "split": None},
])
def test_a_records_source_fields_are_the_sources(source):
    """A record's source fields, read from the admitted row's JSON without making the Source,
    are what ``Source(**fields)`` has; a key Source lacks, or a source that is not a JSON
    object, is still the constructor's TypeError."""
    import dataclasses
    import json

    from orandcar_builder.executors.steps import _source_fields
    from orandcar_builder.records import Source

    assert all(f.default is not dataclasses.MISSING for f in dataclasses.fields(Source))  # the defaults read
    made = Source(**source)
    assert _source_fields(json.dumps(source)) == {"dataset": made.dataset, "split": made.split, "id": made.id,
                                                  "origin": made.origin}
    for damaged in ({**source, "license": "x"}, [source], "text"):
        with pytest.raises(TypeError):
            _source_fields(json.dumps(damaged))
