"""A change of the decision (rule or extraction version) re-decides cached generations: the
engine is not asked again, the decisions follow the new code and record its versions."""

from __future__ import annotations

import re

import pyarrow.parquet as pq

from orandcar_builder.dataset.recheck import recheck
from orandcar_builder.pipeline import build
from orandcar_builder.records import Generation
from orandcar_builder.verify import choice, extract, math_answer

from .conftest import write_png, write_pool

REPLIES = {
    # The reply: a sentence of reasoning first, then its own answer boxed.
    "area": "The area of the rectangle ABEF is 4 x 2 = 8 cm^2.\nThe ratio is 4.8 / 8.\n\n\\boxed{0.6}",
    "mc": "The angle at C is twice the angle at A.\n\nTherefore, the correct answer is (C).\n\n\\boxed{C}",
    "plain": "12",
}


class CountingEngine:
    """Answers from REPLIES and counts the requests it was asked."""

    kind = "counting"
    can_judge = False

    def __init__(self):
        self.asked = []

    def fingerprint(self):
        return {"kind": self.kind, "replies": sorted(REPLIES.items())}

    def generate(self, requests):
        self.asked.extend(r.item_id for r in requests)
        return [Generation(item_id=r.item_id, text=REPLIES[r.item_id], think="", final_answer=REPLIES[r.item_id],
                           finish_reason="stop", model="counting") for r in requests]


def _pool(tmp_path):
    write_png(tmp_path / "a.png")
    write_png(tmp_path / "b.png", colour=(10, 200, 10))
    return write_pool(tmp_path / "pool.jsonl", [
        {"id": "area", "image": "a.png", "question": "What is the area of ABEF?", "answer": "8", "family": "math"},
        {"id": "mc", "image": "b.png", "question": "Which angle?", "answer": "C", "family": "multiple_choice",
         "options": ["30°", "45°", "60°", "75°"]},
        {"id": "plain", "image": "b.png", "question": "How many?", "answer": "12", "family": "math"},
    ])


def _decisions(work):
    return {row["id"]: row for row in pq.read_table(work / "decisions.parquet").to_pylist()}


def test_decisions_record_the_extraction_and_the_span_the_model_wrote(tmp_path):
    result = build(_pool(tmp_path), tmp_path / "out", work=tmp_path / "work", engine=CountingEngine(),
                   progress=False)
    assert result.ok, result.problems
    rows = _decisions(tmp_path / "work")
    area, mc, plain = rows["area"], rows["mc"], rows["plain"]
    # The boxed 0.6 decides: the 8 the first line mentions does not pass.
    assert (area["route"], area["extraction"], area["decided_text"], area["rule_passed"]) == (
        "rejected", "boxed", "0.6", False)
    assert (mc["route"], mc["extraction"], mc["candidate"], mc["accepted_text"]) == ("accepted", "boxed", "statement", "C")
    assert (plain["extraction"], plain["candidate"], plain["accepted_text"]) == ("", "full", "12")
    assert {r["extraction_version"] for r in rows.values()} == {extract.EXTRACTION_VERSION}
    for row in rows.values():  # the accepted answer is a piece of what the model wrote
        if row["route"] == "accepted":
            assert row["accepted_text"] in row["final_answer"]
    assert recheck(result.out).ok


def test_a_version_bump_redecides_from_the_cache_without_asking_the_engine(tmp_path, monkeypatch):
    pool, work = _pool(tmp_path), tmp_path / "work"
    first_engine = CountingEngine()
    first = build(pool, tmp_path / "out1", work=work, engine=first_engine, progress=False)
    assert first.ok and sorted(first_engine.asked) == ["area", "mc", "plain"]
    assert _decisions(work)["mc"]["route"] == "accepted"

    # A new extraction without the boxed pattern, and new rule versions.
    monkeypatch.setattr(extract, "EXTRACTION_VERSION", "test-bump")
    monkeypatch.setattr(extract, "BOXED", re.compile(r"\\unboxed\{"))  # no \boxed is found any more
    monkeypatch.setattr(choice, "VERSION", "test-bump")
    monkeypatch.setattr(math_answer, "VERSION", "test-bump")
    monkeypatch.setattr("orandcar_builder.verify.EXTRACTION_VERSION", "test-bump")

    second_engine = CountingEngine()
    second = build(pool, tmp_path / "out2", work=work, engine=second_engine, progress=False)
    assert second.ok, second.problems
    assert second_engine.asked == []  # every generation came from the cache
    rows = _decisions(work)
    assert {r["extraction_version"] for r in rows.values()} == {"test-bump"}
    assert {r["rule_version"] for r in rows.values()} == {"test-bump"}
    # Without \boxed the statement "the correct answer is (C)" decides the same item...
    assert (rows["mc"]["extraction"], rows["mc"]["accepted_text"]) == ("answer_is", "(C)")
    # ...and the reasoning line with 8 still does not pass: the conclusion is 4.8 / 8, not 8.
    assert rows["area"]["route"] == "rejected"
    assert second.report["rules"] == {"choice": "test-bump", "math": "test-bump"}
