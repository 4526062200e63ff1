"""The end-to-end CPU slice: sample pool -> rapidocr -> alnum -> three configs -> validate -> load."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import datasets
import pytest
from click.testing import CliRunner
from PIL import Image

from orandcar_builder.cli import main
from orandcar_builder.dataset.features import features
from orandcar_builder.pipeline import build
from orandcar_builder.vocab import CONFIGS

from .conftest import SAMPLES, dataset_files, write_png, write_pool


def _load(folder: Path, config: str) -> datasets.Dataset:
    return datasets.load_dataset(str(folder), config, split="train")


@pytest.mark.parametrize("config", CONFIGS)
def test_load_dataset_features_rows_images(sample_build, config):
    result, _ = sample_build
    ds = _load(result.out, config)
    assert ds.features == features(config)
    assert ds.num_rows == result.report["configs"][config]["rows"] > 0
    for row in ds.cast_column("image", datasets.Image(decode=False)):
        assert hashlib.sha256(row["image"]["bytes"]).hexdigest() == row["image_sha256"]
        assert len(row["qa"]) == len(row["clean_meta"]["sources"]) >= 1
    first = ds[0]["image"]  # decoded by datasets
    assert isinstance(first, Image.Image) and first.width > 0


def test_images_are_the_original_files(sample_build):
    result, _ = sample_build
    originals = {hashlib.sha256(p.read_bytes()).hexdigest(): p.read_bytes() for p in (SAMPLES / "images").iterdir()}
    ds = _load(result.out, "rejected").cast_column("image", datasets.Image(decode=False))
    for row in ds:
        assert row["image"]["bytes"] == originals[row["image_sha256"]]


def test_question_is_byte_identical_to_what_the_engine_received(sample_build):
    result, engine = sample_build
    sent = Counter((r.image.sha256, r.question) for r in engine.requests)
    stored = Counter()
    for config in ("RS_nothink", "rejected"):  # RS_think holds the same accepted QA as RS_nothink
        for row in _load(result.out, config):
            for qa in row["qa"]:
                stored[(row["image_sha256"], qa["question"])] += 1
    assert stored == sent
    from orandcar_builder.families import DEFAULT_FAMILIES

    for request in engine.requests:  # the family's instruction is appended, options rendered as a block
        assert request.question.endswith("\n" + DEFAULT_FAMILIES[request.family].instruction)
        if request.family == "multiple_choice":
            assert "\nA. " in request.question and "\nB. " in request.question


def test_accounting_and_demo_shape(sample_build):
    report = sample_build[0].report
    assert set(report["rules"]) == {"alnum", "anls", "vqa", "relaxed", "choice", "math", "exact"}
    assert report["accepted_by_verifier"].get("choice", 0) > 0
    unsupported = (sample_build[0].work / "unsupported.jsonl").read_text().splitlines()
    assert len(unsupported) == report["rejected_by_reason"]["no_answer"]
    assert report["items"] == report["dropped"] + report["accepted"] + report["rejected"]
    assert report["accepted"] > 0 and report["rejected"] > 0
    configs = report["configs"]
    assert configs["RS_think"]["qa"] == configs["RS_nothink"]["qa"] == report["accepted"]
    assert configs["rejected"]["qa"] == report["rejected"]


def test_accepted_answer_is_the_models_text_and_rejected_answer_the_reference(sample_build):
    result, _ = sample_build
    decisions = {r["id"]: r for r in datasets.Dataset.from_parquet(str(result.work / "decisions.parquet"))}
    from orandcar_builder.families import DEFAULT_FAMILIES

    for row in _load(result.out, "RS_think"):
        for qa, src in zip(row["qa"], row["clean_meta"]["sources"]):
            assert qa["org_answer"] == src["references"][0]
            assert qa["verifier"] == DEFAULT_FAMILIES[src["family"]].rule and qa["think"] == ""
    model_answers = {d["final_answer"] for d in decisions.values()}
    reasons = Counter()
    for row in _load(result.out, "rejected"):
        for qa, src in zip(row["qa"], row["clean_meta"]["sources"]):
            assert qa["answer"] == src["references"][0]
            assert qa["wrong_vlm"] in model_answers
            reasons[qa["reason"]] += 1
            if qa["reason"] == "no_answer":  # the OCR engine cannot answer these families
                assert src["family"] not in ("scene_text", "multiple_choice") and qa["wrong_vlm"] == ""
    assert reasons["wrong_answer"] > 0 and reasons["no_answer"] > 0


def test_rows_group_qa_items_of_one_image(sample_build):
    """One row per image per config, holding that config's QA items of the image."""
    result, engine = sample_build
    per_image = Counter(r.image.sha256 for r in engine.requests)
    in_rows = Counter()
    for config in ("RS_nothink", "rejected"):
        shas = [row["image_sha256"] for row in _load(result.out, config)]
        assert len(set(shas)) == len(shas), f"{config}: an image has two rows"
        for row in _load(result.out, config):
            in_rows[row["image_sha256"]] += len(row["qa"])
    assert in_rows == per_image
    assert any(n > 1 for n in per_image.values()), "the sample pool has images with two questions"


def test_two_builds_are_byte_identical(tmp_path, ocr_engine, sample_build):
    first = sample_build[0].out
    second = build(SAMPLES / "pool.jsonl", tmp_path / "again", work=tmp_path / "work", engine=ocr_engine, progress=False)
    files = dataset_files(first)
    assert files == dataset_files(second.out)
    for rel in files:
        assert (first / rel).read_bytes() == (second.out / rel).read_bytes(), rel


def test_small_shards(tmp_path, ocr_engine):
    result = build(SAMPLES / "pool.jsonl", tmp_path / "out", work=tmp_path / "work", engine=ocr_engine,
                   max_shard_bytes=40_000, progress=False)
    assert result.ok, result.problems
    assert len(result.report["configs"]["RS_think"]["shards"]) > 1
    assert _load(result.out, "RS_think").num_rows == result.report["configs"]["RS_think"]["rows"]


def test_bad_pool_lines_are_dropped_with_file_line_and_reason(tmp_path, ocr_engine):
    good = write_png(tmp_path / "img" / "good.png")
    (tmp_path / "img" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    base = {"image": "img/good.png", "question": "What is written?", "answer": "x", "family": "scene_text"}
    pool = write_pool(tmp_path / "pool.jsonl", [
        {**base, "id": "ok-1"},
        '{"id": "half", "image": ',
        {**base, "id": "missing", "image": "img/nope.png"},
        {**base, "id": "corrupt", "image": "img/broken.png"},
        {**base, "id": "fam", "family": "scene_txt"},
        {**base, "id": "ok-1"},
        {**base, "id": "empty", "question": "  "},
        b"\xff\xfe not utf-8",
        ["not", "an", "object"],
        {**base, "id": "noanswer", "answer": None},
    ])
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine=ocr_engine, progress=False)
    assert result.ok, result.problems
    dropped = [json.loads(line) for line in (tmp_path / "work" / "dropped.jsonl").read_text().splitlines()]
    by_line = {d["where"]: d["reason"] for d in dropped}
    assert by_line == {
        "pool.jsonl:2": "malformed_json", "pool.jsonl:3": "image_missing", "pool.jsonl:4": "image_undecodable",
        "pool.jsonl:5": "unknown_family", "pool.jsonl:6": "duplicate_id", "pool.jsonl:7": "empty_field",
        "pool.jsonl:8": "not_utf8", "pool.jsonl:9": "malformed_line", "pool.jsonl:10": "bad_field",
    }
    assert "did you mean 'scene_text'" in next(d["detail"] for d in dropped if d["reason"] == "unknown_family")
    report = result.report
    assert report["items"] == 10 and report["dropped"] == 9 and report["admitted"] == 1
    assert report["dropped_by_reason"]["image_missing"] == 1
    assert good.exists()


def test_cli_build_and_validate(tmp_path):
    runner = CliRunner()
    out, work = tmp_path / "OrandCar", tmp_path / "work"
    res = runner.invoke(main, ["build", str(SAMPLES / "pool.jsonl"), "-o", str(out), "--work", str(work),
                               "--limit", "6", "--no-progress", "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert "validation: ok" in res.output and "pool pool.jsonl: 6 lines, one QA item each: 6 admitted" in res.output
    res = runner.invoke(main, ["validate", str(out)])
    assert res.exit_code == 0 and res.output.strip().endswith(": ok")
    res = runner.invoke(main, ["build", str(tmp_path / "nope.jsonl"), "-o", str(out)])
    assert res.exit_code == 2 and "pool file not found" in res.output


def test_prose_options_are_normalised_and_decided_by_the_choice_rule(tmp_path):
    """A vqa item whose options were flattened into prose: cleaning renders a lettered block and
    rewrites the reference to a letter; the choice rule decides it and recheck agrees."""
    from orandcar_builder.dataset.recheck import recheck

    write_png(tmp_path / "img" / "shapes.png")
    pool = write_pool(tmp_path / "pool.jsonl", [
        {"id": "mc", "image": "img/shapes.png", "question": "What colour is the square? Options: red, blue, green",
         "answer": "blue", "family": "vqa"},
    ])
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"id": "mc", "text": "(B) blue", "finish_reason": "stop"}) + "\n")
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay",
                   engine_options={"replay": replay}, progress=False)
    assert result.ok, result.problems
    assert result.report["accepted_by_verifier"] == {"choice": 1}
    assert "choice" in result.report["rules"] and "vqa" not in result.report["rules"]
    row = _load(result.out, "RS_nothink")[0]
    qa, source = row["qa"][0], row["clean_meta"]["sources"][0]
    assert qa["org_answer"] == "B" and source["options"] == ["red", "blue", "green"]
    assert "\nA. red\nB. blue\nC. green\n" in qa["question"] and qa["answer"] == "(B) blue"
    assert recheck(result.out).ok
    assert result.report["rules_by_family"] == {"vqa": ["choice"]}
    assert "| `vqa` | `choice` |" in (result.out / "README.md").read_text()


class _ScriptedEngine:
    """Answers each request with a scripted (text, finish_reason), keyed by item id."""

    kind = "scripted"
    can_judge = False

    def __init__(self, script):
        self.script = script

    def fingerprint(self):
        return {"kind": self.kind, "script": sorted(self.script.items())}

    def generate(self, requests):
        from orandcar_builder.records import Generation

        out = []
        for r in requests:
            text, finish = self.script[r.item_id]
            think, _, answer = text.rpartition("</think>") if "</think>" in text else ("", "", text)
            out.append(Generation(item_id=r.item_id, text=text, think=think, final_answer=answer.strip() if think else text,
                                  finish_reason=finish, model="scripted"))
        return out


def test_incomplete_and_reasoning_only_generations(tmp_path):
    """An aborted generation is never decided (failed, asked again on rerun); an answer made of
    leaked reasoning only is no_answer, not wrong_answer."""
    write_png(tmp_path / "a.png")
    base = {"image": "a.png", "question": "What is written?", "answer": "HARBOR", "family": "scene_text"}
    pool = write_pool(tmp_path / "pool.jsonl", [
        {**base, "id": "ok"}, {**base, "id": "abort", "question": "Which word?"},
        {**base, "id": "leak", "question": "Read it."}])
    engine = _ScriptedEngine({"ok": ("HARBOR", "stop"), "abort": ("HARBOR", "abort"),
                              "leak": ("<think>hmm</think><think>still</think>", "stop")})
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine=engine, progress=False)
    assert result.ok, result.problems
    report = result.report
    assert report["accepted"] == 1 and report["failed"] == 1
    assert report["rejected_by_reason"] == {"no_answer": 1}
    failed = [json.loads(x) for x in (tmp_path / "work" / "failed.jsonl").read_text().splitlines()]
    assert [f["id"] for f in failed] == ["abort"] and "finish_reason 'abort'" in failed[0]["detail"]


@pytest.mark.parametrize("line, reason", [
    ({"answer": ["", "HARBOR"]}, "empty_field"),
    ({"options": [f"o{i}" for i in range(27)], "family": "multiple_choice", "answer": "A"}, "bad_field"),
])
def test_more_bad_pool_fields(tmp_path, ocr_engine, line, reason):
    write_png(tmp_path / "a.png")
    good = {"id": "ok", "image": "a.png", "question": "What is written?", "answer": "HARBOR", "family": "scene_text"}
    pool = write_pool(tmp_path / "pool.jsonl", [good, {**good, "id": "x", **line}])  # a pool of only drops fails
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine=ocr_engine, progress=False)
    assert result.ok and result.report["dropped_by_reason"] == {reason: 1}


def test_bad_engine_setting_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(main, ["build", str(SAMPLES / "pool.jsonl"), "-o", str(tmp_path / "o"), "--work",
                                    str(tmp_path / "w"), "--engine-option", "bogus=1", "--no-progress"])
    assert res.exit_code == 2 and "engine 'rapidocr': bad setting" in res.output
    assert "Traceback" not in res.output


def test_build_applies_task_purity_while_streaming(tmp_path, ocr_engine):
    """The build measures purity shares in a first pass over the pool, then cleans items as they
    stream: a mixed collection half off-task loses all its items, benchmark items stay; the
    verdicts equal those of clean() holding every item."""
    from orandcar_builder.clean import clean
    from orandcar_builder.pool import read_pool

    for i in range(7):
        write_png(tmp_path / "img" / f"{i}.png", colour=(30 * i, 40, 50))
    lines = [{"id": f"b{i}", "image": f"img/{i}.png", "question": "What is written in the image?",
              "answer": "x", "family": "scene_text"} for i in range(3)]
    questions = ["What text is on the sign?", "Describe this image in detail.", "Read the word shown.",
                 "Write a story about this picture."]
    lines += [{"id": f"m{i}", "image": f"img/{3 + i}.png", "question": q, "answer": "x", "family": "scene_text",
               "source": {"origin": "InfinityMM"}} for i, q in enumerate(questions)]
    lines.insert(4, '{"id": "broken", ')  # a malformed line between them keeps its place
    pool = write_pool(tmp_path / "pool.jsonl", lines)
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine=ocr_engine, progress=False)
    assert result.ok, result.problems
    assert result.report["dropped_by_reason"] == {"malformed_json": 1, "task_purity": 4}
    assert result.report["cleaning"]["purity"]["families"]["scene_text"]["off_task_share"] == 0.5
    dropped = [json.loads(x) for x in (tmp_path / "work" / "dropped.jsonl").read_text().splitlines()]
    # every dropped line in pool order, the malformed one among the purity drops
    assert [d["where"] for d in dropped] == [f"pool.jsonl:{n}" for n in (4, 5, 6, 7, 8)]
    from orandcar_builder.records import Dropped

    held = list(clean([r for r in read_pool(pool) if not isinstance(r, Dropped)], {}, base_dir=tmp_path))
    assert [r.id for r in held if isinstance(r, Dropped)] == [d["id"] for d in dropped if d["reason"] == "task_purity"]
