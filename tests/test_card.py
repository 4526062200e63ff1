"""The dataset card: header that datasets and the Hub read, figures from the build, examples
stored beside it, a golden copy of the sample card, and byte-for-byte determinism."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from datasets.info import DatasetInfosDict
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard, DatasetCardData

from orandcar_builder.card import (
    ACCEPTANCE_CHART,
    NOT_RECORDED,
    CardError,
    CardOptions,
    code_blocks,
    code_span,
    fence,
    image_extension,
    render_card,
    rewrite_card,
    write_card,
)
from orandcar_builder.build import build
from orandcar_builder.dataset.features import features
from orandcar_builder.vocab import CONFIGS
from orandcar_builder.dataset.validate import read_card_yaml, validate_folder

from .conftest import SAMPLES
from .update_golden import GOLDEN

UPDATE_GOLDEN = "python -m tests.update_golden"  # rewrites the golden card when a change is intended
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sample_card(built_sample) -> str:
    return (built_sample / "README.md").read_text(encoding="utf-8")


def sections(markdown: str) -> list[str]:
    """The level-2 headings, in order (code blocks skipped)."""
    inside = {line for _, code in code_blocks(markdown) for line in code.splitlines()}
    return [line[3:] for line in markdown.splitlines() if line.startswith("## ") and line not in inside]


def test_golden_sample_card(sample_card):
    """The sample card is byte for byte the reviewed golden copy (this test never writes it)."""
    assert GOLDEN.is_file(), f"no golden card: run `{UPDATE_GOLDEN}` and review it"
    expected = GOLDEN.read_text(encoding="utf-8")
    assert sample_card == expected, (
        f"the sample card differs from {GOLDEN.name}; if the change is intended, run `{UPDATE_GOLDEN}` "
        "and review the diff")


def test_the_golden_update_script_writes_the_sample_card(tmp_path):
    from .update_golden import main

    target = tmp_path / "golden" / "sample_card.md"
    assert main([str(target)]) == 0
    assert target.read_bytes() == GOLDEN.read_bytes()


def test_card_sections(sample_card):
    assert sections(sample_card) == [
        "At a glance", "How the data was produced", "How to reproduce", "What `answer` holds", "How a match is decided",
        "Second pass: the judge", "Cleaning", "Counts per family", "Schema", "Examples", "Access and license",
    ]


def test_metadata_configs_parse_the_header_to_the_three_configs(sample_card):
    card = DatasetCard(sample_card)
    configs = MetadataConfigs.from_dataset_card_data(card.data)
    assert list(configs) == list(CONFIGS)
    for config in CONFIGS:
        assert configs[config]["data_files"] == [{"split": "train", "path": f"{config}/train-*"}]


def test_dataset_info_matches_features_and_shards(sample_card, sample_build):
    result, _ = sample_build
    infos = DatasetInfosDict.from_dataset_card_data(DatasetCard(sample_card).data)
    assert list(infos) == list(CONFIGS)
    for config in CONFIGS:
        info = infos[config]
        assert info.features == features(config)
        assert info.splits["train"].num_examples == result.report["configs"][config]["rows"]
        assert info.download_size == result.report["configs"][config]["bytes"]
        assert info.dataset_size == info.splits["train"].num_bytes > 0


def test_gating_keys_parse_with_huggingface_hub(sample_card):
    data = DatasetCard(sample_card).data
    assert isinstance(data, DatasetCardData)
    assert data.extra_gated_prompt and data.extra_gated_button_content
    fields = data.extra_gated_fields
    assert fields["Name"] == "text" and fields["Country"] == "country"
    assert "checkbox" in fields.values()
    assert data.license == "other" and "visual-question-answering" in data.task_categories
    # The header round-trips through DatasetCardData unchanged.
    header = read_card_yaml_text(sample_card)
    assert DatasetCardData(**header).to_dict() == header


def read_card_yaml_text(text: str) -> dict:
    end = text.find("\n---", 4)
    return yaml.safe_load(text[4:end])


def test_options_change_the_header(sample_build):
    result, _ = sample_build
    options = CardOptions.from_mapping({
        "license": "cc-by-4.0", "license_name": None, "tags": ["ocr"], "gated_heading": "Request access",
        "gated_fields": {"Name": "text", "Use": {"type": "select", "options": ["research", "other"]}},
    })
    header = read_card_yaml_text(render_card(result.out, result.report, options=options))
    assert header["license"] == "cc-by-4.0" and "license_name" not in header and header["tags"] == ["ocr"]
    assert header["extra_gated_heading"] == "Request access"
    assert header["extra_gated_fields"]["Use"] == {"type": "select", "options": ["research", "other"]}
    ungated = read_card_yaml_text(render_card(result.out, result.report, options=CardOptions(gated=False)))
    assert not any(key.startswith("extra_gated") for key in ungated)


def test_unknown_option_names_the_source(tmp_path):
    path = tmp_path / "card.yaml"
    path.write_text("licence: mit\n", encoding="utf-8")
    with pytest.raises(CardError, match=r"card\.yaml: .*line 1: unknown card option 'licence'; did you mean 'license'"):
        CardOptions.from_yaml(path)


def test_figures_come_from_the_report(sample_card, sample_build):
    result, _ = sample_build
    report = result.report
    for config in CONFIGS:
        s = report["configs"][config]
        assert f"| `{config}` | {s['rows']:,} | {s['qa']:,} | {len(s['shards'])} |" in sample_card
    total = sum(s["bytes"] for s in report["configs"].values())
    assert f"({total:,} bytes;" in sample_card
    for family, counts in report["families"].items():
        assert f"| `{family}` |" in sample_card
        assert f"| {counts['qa']:,} | {counts.get('accepted', 0):,} |" in sample_card
    assert "No second pass ran for this build." in sample_card
    assert report["cleaning"]["policy"] in sample_card


def test_examples_show_the_original_image_files(sample_card, built_sample):
    pattern = re.compile(r"!\[[^\]]*\]\((examples/[^)]+)\)\n\n\| field \| value \|\n\| --- \| --- \|\n"
                         r"\| `image` \|[^\n]*\n\| `image_sha256` \| `([0-9a-f]{64})` \|")
    shown = pattern.findall(sample_card)
    assert len(shown) == 3 * len(CONFIGS)
    for relative, sha in shown:
        assert hashlib.sha256((built_sample / relative).read_bytes()).hexdigest() == sha
    files = sorted(p.name for p in (built_sample / "examples").iterdir())
    assert files == sorted([Path(r).name for r, _ in shown] + [Path(ACCEPTANCE_CHART).name])
    assert validate_folder(built_sample) == []


def test_wrong_vlm_is_shown_in_full_with_its_length(sample_card):
    shown = re.findall(r"`qa(?:\[\d+\])?\.wrong_vlm` \(([\d,]+) characters?\)(?::\n\n(`{3,})text\n(.*?)\n\2|: empty\.)",
                       sample_card, flags=re.DOTALL)
    assert len(shown) >= 3
    for count, _, text in shown:
        assert int(count.replace(",", "")) == len(text)


def test_rendering_is_deterministic(sample_copy, sample_build):
    result, _ = sample_build
    first = render_card(sample_copy, result.report)
    assert render_card(sample_copy, result.report) == first
    before = {p.name: p.read_bytes() for p in (sample_copy / "examples").iterdir()}
    (sample_copy / "examples" / "stale.png").write_bytes(b"old")
    write_card(sample_copy, result.report)
    assert (sample_copy / "README.md").read_text(encoding="utf-8") == first
    assert {p.name: p.read_bytes() for p in (sample_copy / "examples").iterdir()} == before
    assert read_card_yaml(sample_copy / "README.md")["configs"][0]["config_name"] == CONFIGS[0]


def test_rendering_does_not_depend_on_the_hash_seed(built_sample, sample_build, tmp_path):
    result, _ = sample_build
    from orandcar_builder.verify import RULE_MODULES, get_rule

    report = {**result.report, "rules": {name: get_rule(name).VERSION for name in sorted(RULE_MODULES)}}
    here = render_card(built_sample, report)
    report_path = tmp_path / "report.json"
    report_path.write_text(json.dumps(report), encoding="utf-8")
    script = ("import sys, json; from pathlib import Path; from orandcar_builder.card import render_card; "
              "sys.stdout.write(render_card(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script, str(built_sample), str(report_path)], env=env, cwd=REPO,
                         capture_output=True, check=True).stdout.decode("utf-8")
    assert out == here


def test_missing_optional_figures_are_not_recorded(sample_build):
    result, _ = sample_build
    report = {k: v for k, v in result.report.items() if k not in ("generation", "engine", "cleaning", "judge")}
    text = render_card(result.out, report)
    assert f"| model revision | {NOT_RECORDED} |" in text and f"| reasoning | {NOT_RECORDED} |" in text
    assert "No second pass ran" in text
    bare = render_card(result.out, {})  # no figures at all: still a card, never a crash
    assert "No item reached a rule in this build." in bare and NOT_RECORDED in bare


def test_generation_and_judge_are_rendered(sample_build):
    result, _ = sample_build
    report = copy.deepcopy(result.report)
    report["generation"] = {"model": "Org/VLM-8B", "revision": "0123abc", "engine": "vllm", "temperature": 0.0,
                            "reasoning": True, "max_tokens": 16384}
    report["judge"] = {
        "engine": {"kind": "vllm", "model": "Org/VLM-8B"},
        "verdicts": {"CORRECT": 2, "WRONG": 5, "UNSURE": 1}, "unparseable": 1, "promoted": 2,
        "calibration": {"requested": 60, "n": 60, "agreed": 59, "by_family": {"scene_text": {"n": 60, "agreed": 59}}},
        "overturns_by_family": {"scene_text": {"judged": 8, "promoted": 2, "wrong": 5, "unsure": 1}},
    }
    text = render_card(result.out, report)
    assert "| model | `Org/VLM-8B` |" in text and "| model revision | `0123abc` |" in text
    assert "| temperature | 0 |" in text and "| max new tokens | 16,384 |" in text
    assert "| reasoning | enabled" in text
    assert "agreed with the string rule on 59 of 60 items the rule had accepted (98.3%)" in text
    assert "| `CORRECT` | 2 (25.0%) |" in text and "| answers promoted to accepted | 2 |" in text
    from orandcar_builder.judge import JUDGE_PROMPT_TEMPLATE

    assert any(code == JUDGE_PROMPT_TEMPLATE + "\n" for info, code in code_blocks(text) if info == "text")
    report["judge"] = {"verdicts": {}}  # a judge entry with almost nothing in it
    assert "| calibration | not recorded |" in render_card(result.out, report)


def test_cleaning_figures_are_rendered_whatever_their_shape(sample_build):
    result, _ = sample_build
    report = copy.deepcopy(result.report)
    report["cleaning"] = {"policy": "p/1", "threshold": 0.1, "shares": {"vqa": 0.25},
                          "purity": {"families": {"vqa": {"mixed": 8, "off_task_share": 0.5}}, "note": None}}
    text = render_card(result.out, report)
    assert "| vqa | 8 | 0.5 (50.0%) |" in text and "| threshold | 0.1 |" in text and "`p/1`" in text


def test_a_build_from_other_rule_code_is_refused(sample_build):
    result, _ = sample_build
    report = {**result.report, "rules": {"alnum": "0"}}
    with pytest.raises(CardError, match="alnum version 0"):
        render_card(result.out, report)


@pytest.mark.parametrize("text", ["plain", "has ``` inside", "````\nfour\n````", "", "ends with `"])
def test_fences_hold_any_text(text):
    markdown = "before\n\n" + fence(text) + "\n\nafter\n"
    assert code_blocks(markdown) == [("text", text + "\n" if text else "\n")]


def test_code_span_escapes_table_pipes():
    assert code_span("a|b") == "`a\\|b`"
    assert code_span("x `y` z") == "``x `y` z``"


def test_card_of_a_judged_build(sample_build, tmp_path):
    """A real second pass (replayed generations and judge replies) as the build reports it."""
    result, _ = sample_build
    decisions = pq.read_table(result.work / "decisions.parquet").to_pylist()
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps({"id": d["id"], "text": d["text"], "finish_reason": d["finish_reason"]}) + "\n"
                            for d in decisions), encoding="utf-8")
    replies = {}
    for i, d in enumerate(d for d in decisions if d["reason"] == "wrong_answer"):
        replies[d["id"]] = ("Same word.\nVerdict: CORRECT", "They differ.\nVerdict: WRONG")[i % 2]
    for i, d in enumerate(d for d in decisions if d["route"] == "accepted"):
        replies[d["id"]] = "Verdict: WRONG" if i == 0 else "Verdict: CORRECT"
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in replies.items()), encoding="utf-8")
    judged = build(SAMPLES / "pool.jsonl", tmp_path / "out", work=tmp_path / "work", engine_name="replay",
                   engine_options={"replay": gens}, judge="replay", judge_options={"replay": verdicts},
                   calibrate=len(replies), progress=False)
    assert judged.ok, judged.problems
    judge = judged.report["judge"]
    calibration = judge["calibration"]
    assert judge["promoted"] > 0 and calibration["n"] > calibration["agreed"]
    text = (judged.out / "README.md").read_text(encoding="utf-8")
    assert "No second pass ran" not in text
    assert f"| answers judged | {judge['judged']:,} |" in text
    assert f"| answers promoted to accepted | {judge['promoted']:,} |" in text
    assert (f"agreed with the string rule on {calibration['agreed']} of {calibration['n']} items the rule had "
            "accepted") in text
    assert "The calibration items where the judge did not confirm the rule:" in text
    assert "or `judge`" in text
    assert validate_folder(judged.out) == []


def test_rewrite_from_the_saved_report_gives_the_same_card(sample_build, sample_copy, tmp_path):
    result, _ = sample_build
    built = (sample_copy / "README.md").read_bytes()
    (sample_copy / "README.md").write_text("---\nconfigs: []\n---\nold\n", encoding="utf-8")
    path = rewrite_card(sample_copy, result.work / "report.json")
    assert path.read_bytes() == built
    options = tmp_path / "card.yaml"
    options.write_text("pretty_name: OrandCar preview\ngated: false\n", encoding="utf-8")
    text = rewrite_card(sample_copy, result.work / "report.json", repo_id="me/preview",
                        options_path=options).read_text(encoding="utf-8")
    assert "# OrandCar preview" in text and 'load_dataset("me/preview", "rejected"' in text
    assert "extra_gated_prompt" not in text
    with pytest.raises(CardError, match="cannot read the build report"):
        rewrite_card(sample_copy, tmp_path / "missing.json")


def test_image_extension_from_bytes_then_name():
    png = (SAMPLES / "images" / "scene_00.png").read_bytes()
    assert image_extension(png, "renamed.jpg") == ("png", "PNG")
    assert image_extension(b"not an image", "photo.JPG") == ("jpg", "JPG")
    assert image_extension(b"not an image", "no-extension")[0] == "bin"
    assert image_extension(b"not an image", "../../evil.p/ng")[0] == "bin"
    # named by the same signatures as every other image the project sends or stores (files.image_format)
    assert image_extension(b"\xff\xd8\xff\xe0" + bytes(20), "x.png") == ("jpg", "JPEG")
    assert image_extension(b"II*\x00" + bytes(20), None) == ("tif", "TIFF")
    assert image_extension(b"RIFF\x00\x00\x00\x00WEBPVP8 ", "x.png") == ("webp", "WEBP")


def _refuse_to_read(path, *args, **kwargs):
    raise AssertionError(f"the card read shard {path} back for its sizes")


def test_dataset_info_comes_from_the_writer_without_opening_a_shard(tmp_path, ocr_engine, monkeypatch):
    """The build's card takes rows and bytes from what the writer counted: with the reader of the
    measuring fallback made to fail, the sample still builds, and its dataset_info is what the
    shards hold (measured afterwards, and checked by validate)."""
    from orandcar_builder.dataset import info

    monkeypatch.setattr(info, "open_parquet", _refuse_to_read)
    result = build(SAMPLES / "pool.jsonl", tmp_path / "OrandCar", work=tmp_path / "work", engine=ocr_engine,
                   progress=False)
    assert result.ok, result.problems
    for config, written in result.report["configs"].items():
        assert [s["path"] for s in written["shard_sizes"]] == written["shards"]
    monkeypatch.undo()
    header = read_card_yaml(result.out / "README.md")
    assert header["dataset_info"] == info.dataset_info(info.measured_sizes(result.out))
    assert (result.out / "README.md").read_bytes() == GOLDEN.read_bytes()


def test_without_a_writer_summary_the_card_measures_the_shards(sample_build, sample_copy, monkeypatch):
    """A report without the writer's counts (an older report), or whose counts do not describe the
    folder, makes the card measure the shards; the card is the same."""
    from orandcar_builder.dataset import info

    result, _ = sample_build
    built = (sample_copy / "README.md").read_text(encoding="utf-8")
    old_report = copy.deepcopy(result.report)
    for written in old_report["configs"].values():
        del written["shard_sizes"], written["arrow_bytes"]
    assert render_card(sample_copy, old_report) == built
    wrong = copy.deepcopy(result.report)
    wrong["configs"]["rejected"]["shard_sizes"][0]["bytes"] += 1  # not the file in the folder
    assert render_card(sample_copy, wrong) == built
    monkeypatch.setattr(info, "open_parquet", _refuse_to_read)
    assert render_card(sample_copy, result.report) == built  # the summary describes the folder: no read
    for report in (old_report, wrong):
        with pytest.raises(AssertionError, match="read shard"):
            render_card(sample_copy, report)


def test_the_acceptance_chart_is_linked_exactly_when_it_is_drawn():
    # The card's link and write_card's image come from one test: a linked chart always has bytes.
    from orandcar_builder.card.sections import acceptance_chart_png, has_acceptance_chart
    from orandcar_builder.vocab import ACCEPTED, REJECTED

    for families, shown in (({}, False), ({"vqa": {"qa": 0}}, False),
                            ({"vqa": {"qa": 2, ACCEPTED: 1, REJECTED: 1}}, True)):
        report = {"families": families}
        assert has_acceptance_chart(report) is shown
        assert (acceptance_chart_png(report) is not None) is shown
