"""Each rule rejection records its kind in the work dir; the report, the summary, the card and
the review page count the kinds per family and show the yield (issue 21)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from orandcar_builder.pipeline import build
from orandcar_builder.pipeline.report import format_summary
from orandcar_builder.records import Generation

from .conftest import write_png, write_pool

OPTIONS = ["$\\frac{1}{2}$", "$\\frac{1}{4}$", "$\\frac{1}{8}$", "$\\frac{3}{4}$"]
REPLIES = {
    "right": "The probability is \\boxed{\\frac{1}{4}}.",  # a value equal to option B's: accepted
    "wrong": "So the answer is (C).",  # one pick, not the reference: the model's error
    "several": "It is A or B.",  # two letters: the rule finds no single pick
    "nothing": "\\boxed{0.3}",  # a value equal to no option
    "prose": "I could not make out the figure well enough to say anything about it.",
}


class Replies:
    kind = "fixed-replies"
    can_judge = False

    def fingerprint(self):
        return {"kind": self.kind}

    def generate(self, requests):
        return [Generation(item_id=r.item_id, text=REPLIES[r.item_id], think="", final_answer=REPLIES[r.item_id],
                           finish_reason="stop", model="fixed") for r in requests]


def test_kinds_reach_the_decisions_the_report_the_card_and_the_review_page(tmp_path):
    write_png(tmp_path / "a.png")
    pool = write_pool(tmp_path / "pool.jsonl", [
        {"id": name, "image": "a.png", "question": f"What is the probability ({name})?", "answer": "B",
         "family": "multiple_choice", "options": OPTIONS} for name in REPLIES])
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine=Replies(), progress=False)
    assert result.ok, result.problems
    rows = {r["id"]: r for r in pq.read_table(tmp_path / "work" / "decisions.parquet").to_pylist()}
    assert {name: rows[name]["reject_kind"] for name in REPLIES} == {
        "right": None, "wrong": "wrong_pick", "several": "several_picks", "nothing": "no_option_matched",
        "prose": "no_pick"}
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert report["reject_kinds"] == {"multiple_choice": {
        "no_pick": 1, "wrong_pick": 1, "several_picks": 1, "no_option_matched": 1}}
    assert report["yield"] == {"multiple_choice": {
        "qa": 5, "accepted_by_rule": 1, "promoted_by_judge": 0, "rejected_no_pick": 3}}
    summary = format_summary(result)
    assert ("yield     multiple_choice        1 accepted by the rule, 0 promoted by the judge, "
            "3 rejected with no pick found, of 5 QA items") in summary
    card = (tmp_path / "out" / "README.md").read_text()
    assert "| family | accepted by rule | promoted by judge | no_pick | wrong_pick | several_picks | no_option_matched |" in card
    assert "| `multiple_choice` | 1 | 0 | 1 | 1 | 1 | 1 |" in card
    page = (tmp_path / "work" / "report.html").read_text()
    assert "rejected, no pick found" in page
    assert "<code>several_picks</code> 1" in page
