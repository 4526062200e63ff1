"""The judge pass on the replay engine (lines ``{"id", "text"}``), directly and through the cache."""

from __future__ import annotations

import json

import pytest

from orandcar_builder.cache import CacheStats, GenerationCache
from orandcar_builder.engines.replay import ReplayEngine, ReplayMissingError
from orandcar_builder.executors.generation import generate_through_cache
from orandcar_builder.judge import (
    JudgeItem,
    calibrate,
    calibration_sample,
    format_calibration,
    judge,
    promotion,
)
from orandcar_builder.vocab import VERDICT_CORRECT as CORRECT
from orandcar_builder.vocab import VERDICT_UNSURE as UNSURE
from orandcar_builder.vocab import VERDICT_WRONG as WRONG

# Rule rejects sent to the judge, with the judge's recorded replies.
REJECTS = [
    (JudgeItem("qa-1", "What brand is on the tyre?", ("bridgestone",), "Bridgestone tyres", "scene_text"),
     "<think>\nThe candidate adds 'tyres' but names the same brand.\n</think>\n\nVerdict: CORRECT"),
    (JudgeItem("qa-2", "What is the value of x?", ("\\frac{L}{n-1}",), "\\frac{L}{n}", "math"),
     "The denominators differ (n versus n-1).\n\n**Verdict: WRONG**"),
    (JudgeItem("qa-3", "How many people are there?", ("0",), "There is no finite answer.", "math"),
     "The reference is a plain number; the candidate refuses.\nVerdict: UNSURE"),
    (JudgeItem("qa-4", "What colour is the bus?", ("yellow",), "It is yellow.", "vqa"),
     "Verdict: not correct... no wait, it is yellow. Verdict: CORRECT or WRONG"),
    (JudgeItem("qa-5", "What year is shown?", ("1998",), "1998.", "vqa"),
     "</think>The candidate matches the reference.\nCORRECT"),
]


def write_replay(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def judge_replay(tmp_path):
    return write_replay(tmp_path / "judge.jsonl", [{"id": it.item_id, "text": text} for it, text in REJECTS])


def test_promotion_paths_on_replay(judge_replay):
    verdicts = judge(ReplayEngine(judge_replay), [it for it, _ in REJECTS])
    assert [(v.label, v.parseable) for v in verdicts] == [
        (CORRECT, True), (WRONG, True), (UNSURE, True), (UNSURE, False), (CORRECT, True),
    ]
    assert [v.raw for v in verdicts] == [text for _, text in REJECTS]
    routes = [promotion(v) for v in verdicts]
    assert routes == [
        ("accepted", None), ("rejected", "wrong_answer"), ("rejected", "unsure"),
        ("rejected", "unsure"), ("accepted", None),
    ]


def test_a_truncated_recording_is_unparseable(tmp_path):
    path = write_replay(tmp_path / "judge.jsonl", [
        {"id": "qa-1", "text": "<think>The candidate is correct if the brand", "finish_reason": "length"},
        {"id": "qa-2", "text": "So the candidate is correct", "finish_reason": "length"},
    ])
    verdicts = judge(ReplayEngine(path), [it for it, _ in REJECTS[:2]])
    assert [(v.label, v.parseable) for v in verdicts] == [(UNSURE, False), (UNSURE, False)]


def test_a_missing_recording_names_the_item(judge_replay):
    extra = JudgeItem("qa-99", "Q?", ("a",), "b", "vqa")
    with pytest.raises(ReplayMissingError, match="qa-99"):
        judge(ReplayEngine(judge_replay), [extra])


def test_judge_through_the_generation_cache(judge_replay, tmp_path):
    items = [it for it, _ in REJECTS]
    with GenerationCache(tmp_path / "cache" / "judge.sqlite") as cache:
        first, second = CacheStats(), CacheStats()
        engine = ReplayEngine(judge_replay)
        run1 = judge(engine, items, generate=lambda e, r: generate_through_cache(e, r, cache, stats=first))
        run2 = judge(engine, items, generate=lambda e, r: generate_through_cache(e, r, cache, stats=second))
    assert run1 == run2
    assert (first.asked, second.asked, second.hits) == (5, 0, 5)


def accepted_pool():
    """Items the rule accepted, with the replies a judge recorded on them (one disagreement)."""
    pool = []
    for family, count in (("scene_text", 6), ("math", 4), ("vqa", 3)):
        for i in range(count):
            pool.append(JudgeItem(f"{family}-{i}", f"{family} question {i}?", (f"ref {i}",), f"ref {i}", family))
    replies = {it.item_id: f"Both say 'ref {it.item_id[-1]}'.\nVerdict: CORRECT" for it in pool}
    return pool, replies


def test_calibration_on_a_replayed_run(tmp_path):
    pool, replies = accepted_pool()
    sample = calibration_sample(pool, 9)
    assert [it.family for it in sample] == ["math", "scene_text", "vqa"] * 3
    replies[sample[3].item_id] = "The candidate omits the unit the reference requires.\nVerdict: WRONG"
    path = write_replay(tmp_path / "calib.jsonl", [{"id": k, "text": v} for k, v in replies.items()])
    report = calibrate(ReplayEngine(path), pool, 9)
    assert (report.agreed, report.n) == (8, 9)
    assert [r.item.item_id for r in report.disagreements] == [sample[3].item_id]
    assert report.judge_models == ["replay"]
    data = json.loads(json.dumps(report.to_dict()))
    assert data["agreed"] == 8 and data["n"] == 9 and data["agreement"] == 0.8889
    assert data["by_family"] == {"math": {"n": 3, "agreed": 2}, "scene_text": {"n": 3, "agreed": 3},
                                 "vqa": {"n": 3, "agreed": 3}}
    assert "agreed with the string rule on 8/9 rule-accepted items (88.9%)" in format_calibration(report)
