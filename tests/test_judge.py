"""The judge pass through an engine: prompt, requests, promotion paths, calibration."""

from __future__ import annotations

import json
from typing import Sequence

import pytest

from orandcar_builder.errors import OrandCarError
from orandcar_builder.images import ImageRef
from orandcar_builder.judge import (
    JUDGE_FAMILY,
    JUDGE_PROMPT_TEMPLATE,
    JUDGE_PROMPT_VERSION,
    CalibrationReport,
    JudgeItem,
    calibrate,
    calibration_sample,
    candidate_answer,
    format_calibration,
    judge,
    judge_prompt,
    judge_request,
    needs_judge,
    overturns_by_family,
    promotion,
    sample_key,
)
from orandcar_builder.records import Decision, Generation, Request, Verdict
from orandcar_builder.vocab import VERDICT_CORRECT as CORRECT
from orandcar_builder.vocab import VERDICT_UNSURE as UNSURE
from orandcar_builder.vocab import VERDICT_WRONG as WRONG


class ScriptedJudge:
    """An Engine that answers each request with the reply scripted for its item id."""

    kind = "scripted"
    can_judge = True

    def __init__(self, replies: dict[str, str], model: str = "scripted-judge", finish: dict | None = None):
        self.replies = replies
        self.model = model
        self.finish = finish or {}
        self.seen: list[Request] = []

    def fingerprint(self) -> dict:
        return {"kind": self.kind, "model": self.model}

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        self.seen.extend(requests)
        out = []
        for r in requests:
            text = self.replies[r.item_id]
            out.append(
                Generation(
                    item_id=r.item_id,
                    text=text,
                    think="",
                    final_answer=text,
                    finish_reason=self.finish.get(r.item_id, "stop"),
                    model=self.model,
                )
            )
        return out


class NotAJudge(ScriptedJudge):
    kind = "rapidocr"
    can_judge = False


def gen(answer: str, think: str = "", unsupported: str | None = None, text: str | None = None) -> Generation:
    raw = text if text is not None else (f"<think>{think}</think>{answer}" if think else answer)
    return Generation("qa-1", raw, think, answer, "stop", "vlm", unsupported=unsupported)


REJECTED = Decision("alnum", "1", "full", "x", 0.0, False)
ACCEPTED = Decision("alnum", "1", "full", "x", 1.0, True)


# --- the prompt ---------------------------------------------------------------------------

QUESTION = "What is the length of side $x$ if $\\frac{L}{n-1}$ holds? {not a placeholder}\nAnswer with a number."
REFERENCES = ["\\frac{L}{n-1}", "L/(n-1)"]


def test_prompt_holds_question_references_and_candidate_verbatim():
    prompt = judge_prompt(QUESTION, REFERENCES, "L / (n - 1)")
    assert QUESTION in prompt
    for ref in REFERENCES:
        assert f"<reference>\n{ref}\n</reference>" in prompt
    assert "<candidate>\nL / (n - 1)\n</candidate>" in prompt
    assert JUDGE_PROMPT_VERSION == "1" and "{question}" in JUDGE_PROMPT_TEMPLATE


def test_prompt_accepts_a_single_reference_string():
    assert judge_prompt("Q?", "bridgestone", "Bridgestone") == judge_prompt("Q?", ["bridgestone"], "Bridgestone")


def test_prompt_asks_to_compare_not_solve_and_names_the_verdicts():
    prompt = judge_prompt("Q?", ["a"], "b").lower()
    assert "do not solve the question" in prompt
    assert "numbers must agree" in prompt
    assert "unsure only when the reference" in prompt
    for line in ("verdict: correct", "verdict: wrong", "verdict: unsure"):
        assert line in prompt


def test_judge_request_has_no_image_and_nothing_of_the_reasoning():
    image = ImageRef(path="/pool/images/crop-0001.png", sha256="ab" * 32)
    generation = gen("Bridgestone", think="The sign is blurry; secret chain of thought")
    leaked = gen("<think>leaked reasoning</think>\nBridgestone")
    for g in (generation, leaked):
        request = judge_request(("qa-1", "What brand is shown?", ["bridgestone"], candidate_answer(g)))
        assert request.image is None and request.family == JUDGE_FAMILY and request.item_id == "qa-1"
        assert "<candidate>\nBridgestone\n</candidate>" in request.question
        assert "reasoning" not in request.question and "chain of thought" not in request.question
        assert "<think>" not in request.question
        assert image.sha256 not in request.question and image.name not in request.question
        assert "<image>" not in request.question and "image_url" not in request.question


# --- which answers go to the judge, where verdicts route ------------------------------------


@pytest.mark.parametrize(
    "generation, decision, expected",
    [
        (gen("Bridgestone"), REJECTED, True),
        (gen("Bridgestone"), ACCEPTED, False),
        (gen(""), REJECTED, False),
        (gen("   \n"), REJECTED, False),
        (gen("<think>only reasoning</think>"), REJECTED, False),
        (gen("", unsupported="rapidocr reads text only"), REJECTED, False),
        (gen("x", unsupported="rapidocr reads text only"), REJECTED, False),
    ],
)
def test_needs_judge(generation, decision, expected):
    assert needs_judge(generation, decision) is expected


@pytest.mark.parametrize(
    "label, expected",
    [
        (CORRECT, ("accepted", None)),
        (WRONG, ("rejected", "wrong_answer")),
        (UNSURE, ("rejected", "unsure")),
        ("correct", ("rejected", "unsure")),  # labels are exact; nothing loose promotes
        ("", ("rejected", "unsure")),
    ],
)
def test_promotion(label, expected):
    assert promotion(Verdict(label, "", "m")) == expected
    assert promotion(label) == expected


ITEMS = [
    ("qa-c", "What word is written?", ["bridgestone"], "Bridgestone"),
    ("qa-w", "What is 3+4?", ["7"], "8"),
    ("qa-u", "What is shown?", ["???"], "a cat"),
    ("qa-x", "What is 2+2?", ["4"], "four"),
]
REPLIES = {
    "qa-c": "Only the case differs.\nVerdict: CORRECT",
    "qa-w": "8 is not 7.\n**Verdict: WRONG**",
    "qa-u": "The reference is unusable.\nVerdict: UNSURE",
    "qa-x": "The candidate is right, I think.",
}


def test_judge_promotes_only_correct_and_counts_unparseable():
    engine = ScriptedJudge(REPLIES)
    verdicts = judge(engine, ITEMS)
    assert [v.label for v in verdicts] == [CORRECT, WRONG, UNSURE, UNSURE]
    assert [v.parseable for v in verdicts] == [True, True, True, False]
    assert [v.raw for v in verdicts] == [REPLIES[i[0]] for i in ITEMS]
    assert all(v.model == "scripted-judge" for v in verdicts)
    assert [promotion(v) for v in verdicts] == [
        ("accepted", None),
        ("rejected", "wrong_answer"),
        ("rejected", "unsure"),
        ("rejected", "unsure"),
    ]
    assert [r.item_id for r in engine.seen] == [i[0] for i in ITEMS]
    assert all(r.image is None and r.family == JUDGE_FAMILY for r in engine.seen)


def test_a_truncated_or_unsupported_judge_reply_is_unparseable():
    engine = ScriptedJudge({"qa-c": "the candidate is correct if the reference", "qa-w": "Verdict: CORRECT"},
                           finish={"qa-c": "length"})
    verdicts = judge(engine, ITEMS[:2])
    assert (verdicts[0].label, verdicts[0].parseable) == (UNSURE, False)
    assert (verdicts[1].label, verdicts[1].parseable) == (CORRECT, True)


def test_judge_uses_the_injected_generate():
    calls = []

    def cached_generate(engine, requests):
        calls.append([r.item_id for r in requests])
        return engine.generate(requests)

    verdicts = judge(ScriptedJudge(REPLIES), ITEMS[:2], generate=cached_generate)
    assert calls == [["qa-c", "qa-w"]] and [v.label for v in verdicts] == [CORRECT, WRONG]


def test_judge_rejects_an_engine_that_cannot_judge():
    with pytest.raises(OrandCarError, match="cannot run the text-only judge"):
        judge(NotAJudge(REPLIES), ITEMS)
    assert judge(NotAJudge(REPLIES), []) == []


def test_judge_rejects_replies_out_of_order():
    def shuffled(engine, requests):
        return list(reversed(engine.generate(requests)))

    with pytest.raises(OrandCarError, match="request order"):
        judge(ScriptedJudge(REPLIES), ITEMS[:2], generate=shuffled)
    with pytest.raises(OrandCarError, match="1 replies for 2 requests"):
        judge(ScriptedJudge(REPLIES), ITEMS[:2], generate=lambda e, r: e.generate(r[:1]))


def test_a_malformed_item_names_itself():
    with pytest.raises(TypeError, match="qa-bad"):
        judge(ScriptedJudge({}), [("qa-bad", "Q?")])


# --- calibration ---------------------------------------------------------------------------


def accepted(family: str, count: int) -> list[JudgeItem]:
    return [JudgeItem(f"{family}-{i}", f"Q{i}?", (f"r{i}",), f"r{i}", family) for i in range(count)]


POOL = accepted("scene_text", 20) + accepted("math", 6) + accepted("chart", 2)


def test_sample_is_stratified_and_deterministic():
    sample = calibration_sample(POOL, 9)
    families = [it.family for it in sample]
    # families take turns (by name) until the small ones run out
    assert families == ["chart", "math", "scene_text"] * 2 + ["math", "scene_text", "math"]
    assert [it.item_id for it in calibration_sample(list(reversed(POOL)), 9)] == [it.item_id for it in sample]
    math_ids = [it.item_id for it in sample if it.family == "math"]
    assert math_ids == sorted(math_ids, key=sample_key)


def test_a_larger_sample_extends_a_smaller_one_and_never_exceeds_the_pool():
    ids = lambda n: [it.item_id for it in calibration_sample(POOL, n)]  # noqa: E731
    assert ids(12)[:5] == ids(5)
    assert len(ids(1000)) == len(POOL) == len(set(ids(1000)))
    assert ids(0) == []
    with pytest.raises(ValueError):
        calibration_sample(POOL, -1)


def test_calibrate_judges_exactly_the_sample_and_lists_disagreements():
    sample = calibration_sample(POOL, 10)
    drawn = [it.item_id for it in sample]
    undrawn = next(it.item_id for it in POOL if it.item_id not in drawn)
    replies = {it.item_id: "Verdict: CORRECT" for it in POOL}
    replies[drawn[1]] = "The candidate has a different denominator.\nVerdict: WRONG"
    replies[drawn[4]] = "Both are fine I guess."
    replies[undrawn] = "Verdict: WRONG"  # not drawn: must not count
    engine = ScriptedJudge(replies)
    report = calibrate(engine, POOL, 10)
    assert [r.item_id for r in engine.seen] == drawn
    assert (report.requested, report.n, report.agreed, report.unparseable) == (10, 10, 8, 1)
    assert [r.item.item_id for r in report.disagreements] == [drawn[1], drawn[4]]
    assert report.by_family() == {
        "chart": {"n": 2, "agreed": 2},
        "math": {"n": 4, "agreed": 2},  # drawn[1] and drawn[4] are math items under this hash
        "scene_text": {"n": 4, "agreed": 4},
    }


def test_calibration_figures_on_a_fixed_judge():
    pool = accepted("scene_text", 4) + accepted("math", 4)
    replies = {it.item_id: "Verdict: CORRECT" for it in pool}
    replies["math-1"] = "Verdict: WRONG"
    replies["scene_text-2"] = "no idea"
    report = calibrate(ScriptedJudge(replies), pool, 8)
    assert (report.agreed, report.n, report.agreement, report.unparseable) == (6, 8, 0.75, 1)
    assert report.by_family() == {"math": {"n": 4, "agreed": 3}, "scene_text": {"n": 4, "agreed": 3}}
    data = json.loads(json.dumps(report.to_dict()))
    assert data["agreed"] == 6 and data["n"] == 8 and data["judge_models"] == ["scripted-judge"]
    assert data["prompt_version"] == JUDGE_PROMPT_VERSION
    assert {(d["id"], d["verdict"], d["parseable"]) for d in data["disagreements"]} == {
        ("math-1", WRONG, True),
        ("scene_text-2", UNSURE, False),
    }
    text = format_calibration(report)
    assert "agreed with the string rule on 6/8 rule-accepted items (75.0%)" in text
    assert "math: 3/4" in text and "scene_text: 3/4" in text
    assert "math-1 [math] WRONG" in text and "scene_text-2 [scene_text] UNSURE (unparseable)" in text


def test_calibrate_on_nothing():
    report = calibrate(NotAJudge({}), [], 60)
    assert (report.n, report.agreed, report.agreement) == (0, 0, None)
    assert json.loads(json.dumps(report.to_dict()))["disagreements"] == []
    assert "no rule-accepted items" in format_calibration(report)
    assert isinstance(report, CalibrationReport)


def test_overturns_by_family():
    rows = [
        ("math", Verdict(CORRECT, "", "m")),
        ("math", Verdict(WRONG, "", "m")),
        ("math", WRONG),
        ("scene_text", UNSURE),
        ("scene_text", None),  # not judged: empty answer
        ("chart", CORRECT),
    ]
    counts = overturns_by_family(rows)
    assert list(counts) == ["chart", "math", "scene_text"]
    assert counts["math"] == {"judged": 3, "promoted": 1, "wrong": 2, "unsure": 0}
    assert counts["scene_text"] == {"judged": 1, "promoted": 0, "wrong": 0, "unsure": 1}
    report = calibrate(ScriptedJudge({}), [], 0)
    text = format_calibration(report, overturns=counts)
    assert "math: 1 promoted of 3 judged (wrong 2, unsure 0)" in text
