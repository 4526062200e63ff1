"""The judge pass inside a build: only CORRECT promotes; WRONG, UNSURE and unparseable never do."""

from __future__ import annotations

import json

import datasets
import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.pipeline import build

from .conftest import SAMPLES


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, ocr_engine):
    """The sample pool's OCR generations as a replay file, and the ids the rule rejected."""
    root = tmp_path_factory.mktemp("recorded")
    gens = root / "gens.jsonl"
    result = build(SAMPLES / "pool.jsonl", root / "out", work=root / "work", engine=ocr_engine,
                   progress=False, export_generations=gens)
    decisions = datasets.Dataset.from_parquet(str(root / "work" / "decisions.parquet"))
    # Only items the rule decided and rejected go to the judge (not no_answer / truncated ones).
    rejected = [d["id"] for d in decisions if d["rule_passed"] is False]
    accepted = [d["id"] for d in decisions if d["rule_passed"] is True]
    assert any(d["rule_passed"] is None for d in decisions), "the sample pool has items the engine cannot answer"
    assert len(rejected) >= 4
    return gens, rejected, accepted, result


REPLIES = [
    "The candidate matches the reference apart from case.\nVerdict: CORRECT",
    "<think>compare 'x' and 'y'</think>They differ.\nVerdict: WRONG",
    "The reference looks garbled.\nVerdict: UNSURE",
    "I think this might be fine, hard to say",
]


def test_judge_promotes_only_correct(tmp_path, recorded):
    gens, rejected, accepted, _ = recorded
    verdicts = tmp_path / "verdicts.jsonl"
    lines = [{"id": item_id, "text": REPLIES[i % len(REPLIES)]} for i, item_id in enumerate(rejected)]
    lines += [{"id": item_id, "text": "Verdict: CORRECT"} for item_id in accepted]  # calibration replies
    verdicts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = build(SAMPLES / "pool.jsonl", tmp_path / "out", work=tmp_path / "work", engine_name="replay",
                   engine_options={"replay": gens}, judge="replay", judge_options={"replay": verdicts},
                   calibrate=10, progress=False)
    assert result.ok, result.problems
    expected = {item_id: REPLIES[i % len(REPLIES)] for i, item_id in enumerate(rejected)}
    decisions = {d["id"]: d for d in datasets.Dataset.from_parquet(str(tmp_path / "work" / "decisions.parquet"))}
    for item_id, reply in expected.items():
        d = decisions[item_id]
        assert d["rule_passed"] is False
        if reply.endswith("CORRECT"):
            assert (d["route"], d["verifier"], d["verdict"]) == ("accepted", "judge", "CORRECT")
            assert d["accepted_text"] == d["final_answer"].strip()
        elif reply.endswith("WRONG"):
            assert (d["route"], d["reason"]) == ("rejected", "wrong_answer")
        else:
            assert (d["route"], d["reason"], d["verdict"]) == ("rejected", "unsure", "UNSURE")
    judge = result.report["judge"]
    n_correct = sum(1 for r in expected.values() if r.endswith("CORRECT"))
    assert judge["promoted"] == n_correct and judge["judged"] == len(rejected)
    assert judge["unparseable"] == sum(1 for r in expected.values() if r is REPLIES[3])
    assert judge["calibration"]["n"] == 10 and judge["calibration"]["agreed"] == 10
    assert result.report["accepted_by_verifier"]["judge"] == n_correct
    rows = datasets.load_dataset(str(result.out), "RS_nothink", split="train")
    assert sum(qa["verifier"] == "judge" for row in rows for qa in row["qa"]) == n_correct


def test_rerun_asks_nothing_new_and_cli_reports_judge(tmp_path, recorded):
    gens, rejected, _, _ = recorded
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps({"id": i, "text": "Verdict: WRONG"}) + "\n" for i in rejected))
    args = ["build", str(SAMPLES / "pool.jsonl"), "-o", str(tmp_path / "out"), "--work", str(tmp_path / "work"),
            "--engine", "replay", "--replay", str(gens), "--judge", "replay", "--judge-replay", str(verdicts),
            "--no-progress"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    assert f"judge: {len(rejected)} QA items judged, 0 promoted" in first.output
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    cache = json.loads((tmp_path / "work" / "report.json").read_text())["cache"]
    assert cache["generate"]["asked"] == 0 and cache["generate"]["hits"] == cache["generate"]["total"]
    assert cache["judge"]["asked"] == 0


def test_engine_that_cannot_judge_is_refused(tmp_path, ocr_engine):
    from orandcar_builder.pipeline import BuildError

    with pytest.raises(BuildError, match="cannot run the text-only judge"):
        build(SAMPLES / "pool.jsonl", tmp_path / "out", work=tmp_path / "work", engine=ocr_engine,
              judge="same", progress=False)
