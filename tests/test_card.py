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
from orandcar_builder.dataset.features import features
from orandcar_builder.dataset.validate import read_card_yaml, validate_folder
from orandcar_builder.pipeline import build
from orandcar_builder.vocab import CONFIGS

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
    """What a reader wants first (sizes, counts, sources, examples), then how it was made, the
    reference sections and the rules last; the contents list every section, in order."""
    expected = [
        "At a glance", "Counts per family", "Source datasets", "Examples", "How the data was produced",
        "How to reproduce", "What `answer` holds", "Cleaning", "Schema", "How a match is decided",
        "Second pass: the judge", "Access and license",
    ]
    assert sections(sample_card) == expected
    from orandcar_builder.dataset.contents import CONTENTS_END, CONTENTS_START

    listed = sample_card.split(CONTENTS_START, 1)[1].split(CONTENTS_END, 1)[0]
    assert re.findall(r"^- \[(.*)\]\(#[a-z0-9_-]+\)$", listed, re.MULTILINE) == expected
    assert "- [What `answer` holds](#what-answer-holds)" in listed
    assert "- [Second pass: the judge](#second-pass-the-judge)" in listed
    assert sample_card.index(CONTENTS_END) < sample_card.index("\n## At a glance")


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
    pattern = re.compile(r"!\[[^\]]*\]\((examples/[^)]+)\)\n\n`image` [^\n]*\n`image_sha256` `([0-9a-f]{64})` ·")
    shown = pattern.findall(sample_card)
    assert len(shown) == 3 * len(CONFIGS)
    for relative, sha in shown:
        assert hashlib.sha256((built_sample / relative).read_bytes()).hexdigest() == sha
    files = sorted(p.name for p in (built_sample / "examples").iterdir())
    assert files == sorted([Path(r).name for r, _ in shown] + [Path(ACCEPTANCE_CHART).name])
    assert validate_folder(built_sample) == []


_ESCAPE = re.compile(r"\\(n|r|t|x[0-9a-f]{2}|u[0-9a-f]{4}|\|)")


def _code_span_value(span: str) -> str:
    """The text of an inline code span as markdown.code_span wrote it (a value without a backslash
    of its own: every backslash in it is an escape)."""
    marker = re.match(r"`+", span).group(0)
    assert span.endswith(marker), span
    inner = span[len(marker):-len(marker)]
    if inner.startswith(" ") and inner.endswith(" ") and inner.strip(" "):
        inner = inner[1:-1]

    def unescape(m: re.Match) -> str:
        code = m.group(1)
        return {"n": "\n", "r": "\r", "t": "\t", "|": "|"}.get(code) or chr(int(code[1:], 16))

    return _ESCAPE.sub(unescape, inner)


def _cell_value(cell: str, label: str, blocks: dict) -> object:
    """A value as an example shows it: inline code, *empty*, *null*, or named and in a block."""
    cell = cell.strip()
    if cell == "*empty*":
        return ""
    if cell == "*null*":
        return None
    if re.fullmatch(r"[\d,]+ characters?, in full below", cell):
        return blocks[label]
    assert cell.startswith("`"), (label, cell)
    return _code_span_value(cell)


def shown_examples(card: str) -> list[dict]:
    """Every example of a card, read back: config, row index, the row's facts, and per QA item
    its fields and its source's, each value decoded from what the card shows."""
    body = card.split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for part in re.split(r"^#### ", body, flags=re.MULTILINE)[1:]:
        head = re.match(r"`([^`]+)`, row ([\d,]+) of", part)
        blocks = {m.group(1): m.group(3) for m in re.finditer(
            r"<details><summary><code>([^<]+)</code> \([\d,]+ characters?\)</summary>\n\n(`{3,})text\n(.*?)\n\2\n",
            part, flags=re.DOTALL)}
        facts = dict(re.findall(r"^`(image_sha256|clean_meta\.policy|clean_meta\.actions)` (.*?)(?: ·)?$", part,
                                re.MULTILINE))
        example = {"config": head.group(1), "index": int(head.group(2).replace(",", "")) - 1, "items": [],
                   "facts": {k: _cell_value(v, k, blocks) for k, v in facts.items()}}
        for table in re.findall(r"^\| field \|.*?(?=\n\n|\Z)", part, flags=re.MULTILINE | re.DOTALL):
            header, _, *rows = table.splitlines()
            columns = [int(c) for c in re.findall(r"`qa\[(\d+)\]`", header)]
            assert columns == list(range(len(example["items"]), len(example["items"]) + len(columns))), header
            example["items"] += [{"qa": {}, "source": {}} for _ in columns]
            _read_lines(example, rows, columns, blocks)
        out.append(example)
    return out


def _read_lines(example: dict, rows: list[str], columns: list[int], blocks: dict) -> None:
    for line in rows:
        cells = re.split(r"(?<!\\) \| ", line[2:-2])
        field, values = cells[0], cells[1:]
        assert len(values) == len(columns), line
        for i, cell in zip(columns, values):
            if field.startswith("source ("):
                spans = re.findall(r"(`+)(.*?)\1|(\*empty\*|\*null\*)", cell)
                for key, (marker, text, plain) in zip(("dataset", "split", "id"), spans):
                    value = _cell_value(plain or f"{marker}{text}{marker}", "", blocks)
                    example["items"][i]["source"][key] = value
            elif field.startswith("`source."):
                key = field.strip("`")[len("source."):]
                example["items"][i]["source"][key] = _cell_value(cell, f"clean_meta.sources[{i}].{key}", blocks)
            elif cell != "–":
                key = field.strip("`")
                example["items"][i]["qa"][key] = _cell_value(cell, f"qa[{i}].{key}", blocks)


def _as_shown(value):
    return value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def test_examples_show_every_value_of_their_rows_exactly(sample_card, built_sample):
    """Each example, read back from the card (inline code decoded, blocks read), is its stored row:
    every field of every QA item and of its source, the sha256, the policy and the actions."""
    from orandcar_builder.card.examples import read_row
    from orandcar_builder.dataset.info import shard_paths

    examples = shown_examples(sample_card)
    assert len(examples) == 3 * len(CONFIGS)
    for example in examples:
        row = read_row(shard_paths(built_sample, example["config"]), example["index"])
        meta = row["clean_meta"]
        assert example["facts"] == {"image_sha256": row["image_sha256"], "clean_meta.policy": meta["policy"],
                                    "clean_meta.actions": _as_shown(meta["actions"])}
        assert [item["qa"] for item in example["items"]] == [{k: _as_shown(v) for k, v in q.items()} for q in row["qa"]]
        assert [item["source"] for item in example["items"]] == [{k: _as_shown(v) for k, v in s.items()}
                                                                  for s in meta["sources"]]
    questions = [item["qa"]["question"] for example in examples for item in example["items"]]
    assert all("\n" in q and len(q) < 300 for q in questions)  # short, multi-line: shown inline
    assert "in full below" not in sample_card.split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]


def test_examples_show_awkward_values_exactly_inline_or_in_a_block(sample_copy, sample_build):
    """Values inline code can show (escaped line breaks, tabs, pipes, backticks) stay in their cell;
    a long one, one with a backslash or a space at an end goes to a folded block; all read back."""
    import pyarrow as pa

    from orandcar_builder.card.examples import INLINE_VALUE_MAX_CHARS

    shard = sample_copy / "RS_think" / "train-00000-of-00001.parquet"
    table = pq.read_table(shard)
    rows = table.to_pylist()
    item = {"question": "Tab\there | pipe `tick` \u2028 and\r\nlines", "think": "x" * (INLINE_VALUE_MAX_CHARS + 1),
            "answer": " lead", "org_answer": "back\\slash", "verifier": ""}
    rows[0]["qa"] = [item, {**item, "question": "Q" * INLINE_VALUE_MAX_CHARS, "think": "short"}]
    rows[0]["clean_meta"]["sources"] = [{**rows[0]["clean_meta"]["sources"][0], "dataset": "a/b | c", "id": "7"}] * 2
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    card = render_card(sample_copy, sample_build[0].report)
    (first, *_) = [e for e in shown_examples(card) if e["config"] == "RS_think"]
    assert [i["qa"] for i in first["items"]] == rows[0]["qa"]
    assert first["items"][0]["source"]["dataset"] == "a/b | c" and first["items"][1]["source"]["id"] == "7"
    part = card.split("#### `RS_think`, row 1 of", 1)[1].split("####", 1)[0]
    inline = {line.split(" | ")[0] for line in part.splitlines() if line.startswith("| `") and "in full below" not in line}
    assert {"| `question`", "| `verifier`"} <= inline
    for label in ("qa[0].think", "qa[0].answer", "qa[0].org_answer", "qa[1].answer"):
        assert f"<details><summary><code>{label}</code>" in part, label
    assert "<details><summary><code>qa[1].question</code>" not in part  # exactly the limit: inline


@pytest.mark.parametrize("n_items,tables", [(7, [3, 3, 1]), (12, [3, 3, 3, 1])])
def test_a_row_of_many_qa_items_makes_more_tables_not_a_wider_one(sample_copy, sample_build, n_items, tables):
    import pyarrow as pa

    from orandcar_builder.card.examples import QA_ITEMS_SHOWN

    shard = sample_copy / "rejected" / "train-00000-of-00001.parquet"
    table = pq.read_table(shard)
    rows = table.to_pylist()
    item, source = rows[0]["qa"][0], rows[0]["clean_meta"]["sources"][0]
    rows[0]["qa"] = [{**item, "question": f"Question {i}?"} for i in range(n_items)]
    rows[0]["clean_meta"]["sources"] = [{**source, "id": str(i)} for i in range(n_items)]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    card = render_card(sample_copy, sample_build[0].report)
    part = card.split("#### `rejected`, row 1 of", 1)[1].split("####", 1)[0]
    headers = [line for line in part.splitlines() if line.startswith("| field |")]
    assert [h.count("`qa[") for h in headers] == tables
    (first, *_) = [e for e in shown_examples(card) if e["config"] == "rejected"]
    shown = min(n_items, QA_ITEMS_SHOWN)
    assert [i["qa"]["question"] for i in first["items"]] == [f"Question {i}?" for i in range(shown)]
    assert [i["source"]["id"] for i in first["items"]] == [str(i) for i in range(shown)]
    assert (f"{n_items - QA_ITEMS_SHOWN} more QA items, not shown." in part) is (n_items > QA_ITEMS_SHOWN)


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
    for written in result.report["configs"].values():
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


def test_the_contents_follow_the_headings_whatever_they_hold():
    from orandcar_builder.dataset.contents import CONTENTS_END, CONTENTS_START, anchor, heading_text, with_contents

    body = (f"# Title\n\n{CONTENTS_START}\nstale\n{CONTENTS_END}\n\n## What `answer` holds\n\n```python\n"
            "## not a heading (in code)\n```\n\n## Notes\n\n## Notes\n\n~~~~\n## also code\n~~~~\n\n"
            "## Ünïcode & *marks*: 100% \\_done\\_\n\n### a level-3 heading\n")
    text = with_contents(body)
    listed = text.split(CONTENTS_START, 1)[1].split(CONTENTS_END, 1)[0]
    assert re.findall(r"\(#([^)]*)\)", listed) == ["what-answer-holds", "notes", "notes-1",
                                                   "ünïcode--marks-100-_done_"]
    assert "stale" not in text and text.count(CONTENTS_START) == 1
    assert with_contents(text) == text  # made again: the same
    assert with_contents("no markers\n## A\n") == "no markers\n## A\n"
    assert heading_text("``a`b`` and \\*x\\*") == "a`b and *x*" and anchor("Second pass: the judge") == "second-pass-the-judge"


def test_source_datasets_are_counted_from_the_rows(tmp_path):
    import pyarrow as pa

    from orandcar_builder.card.sources import UNNAMED, source_counts, source_rows

    def shard(config, sources_per_row):
        (tmp_path / config).mkdir()
        rows = [{"clean_meta": {"policy": "p", "sources": sources}} for sources in sources_per_row]
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / config / "train-00000-of-00001.parquet")

    a = {"dataset": "org/A", "split": "test", "family": "vqa"}
    shard("RS_nothink", [[a, {**a, "split": "val"}], [{"dataset": "B|b", "split": "train", "family": "math"}]])
    shard("RS_think", [[a]] * 5)  # the same accepted items again: not counted twice
    shard("rejected", [[a, {"dataset": "", "split": None, "family": "generic"}], [{**a, "family": "doc_vqa"}]])
    counts = source_counts(tmp_path)
    assert {k: (v["accepted"], v["rejected"], list(v["splits"]), list(v["families"])) for k, v in counts.items()} == {
        "org/A": (2, 2, ["test", "val"], ["vqa", "doc_vqa"]), "B|b": (1, 0, ["train"], ["math"]),
        UNNAMED: (0, 1, [], ["generic"])}
    rows = source_rows(tmp_path)
    assert rows[0] == ["`org/A`", "`test`, `val`", "`doc_vqa`, `vqa`", "4", "2", "2", "50.0%"]
    assert rows[1][:2] == [f"*{UNNAMED}*", "–"] and rows[2][0] == "`B\\|b`"  # most items first, then by name


def test_the_sample_card_cites_its_source_datasets(sample_card, sample_build):
    report = sample_build[0].report
    section = sample_card.split("\n## Source datasets\n", 1)[1].split("\n## ", 1)[0]
    assert "Please cite them" in section
    total = report["accepted"] + report["rejected"]
    assert (f"| `orandcar-samples` | `test` | `chart_qa`, `doc_vqa`, `generic`, `math`, `multiple_choice`, "
            f"`scene_text`, `vqa` | {total} | {report['accepted']} | {report['rejected']} |") in section


def _nested(draw_text):
    from hypothesis import strategies as st

    source = st.one_of(st.none(), st.fixed_dictionaries(
        {"dataset": draw_text, "split": draw_text, "family": draw_text, "id": st.just("1")}))
    meta = st.one_of(st.none(), st.fixed_dictionaries({"policy": st.just("p"),
                                                      "sources": st.one_of(st.none(), st.lists(source, max_size=4))}))
    return st.lists(meta, max_size=30)


def test_sources_counted_column_wise_equal_row_by_row(tmp_path_factory):
    # The section counts batches of the written type column-wise (Arrow); the counts, their order
    # of first appearance and the splits and families must be those of reading row by row, with
    # null and empty names, null sources lists and null sources among them, across batches.
    import pyarrow as pa
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from orandcar_builder.card import sources as sources_module

    text = st.one_of(st.none(), st.sampled_from(["", "org/A", "B", "test", "val", "vqa", "math"]))
    kind = pa.struct([("policy", pa.string()), ("sources", pa.list_(pa.struct(
        [("dataset", pa.string()), ("split", pa.string()), ("family", pa.string()), ("id", pa.string())])))])

    @settings(max_examples=40, deadline=None)
    @given(nothink=_nested(text), rejected=_nested(text), batch=st.integers(1, 7))
    def check(nothink, rejected, batch):
        folder = tmp_path_factory.mktemp("sources")
        for config, rows in (("RS_nothink", nothink), ("rejected", rejected)):
            (folder / config).mkdir()
            table = pa.table({"clean_meta": pa.array(rows, kind)})
            pq.write_table(table, folder / config / "train-00000-of-00001.parquet")
        original = sources_module.BATCH_ROWS, sources_module._countable
        try:
            sources_module.BATCH_ROWS = batch
            columnar = sources_module.source_counts(folder)
            sources_module._countable = lambda kind: False
            row_by_row = sources_module.source_counts(folder)
        finally:
            sources_module.BATCH_ROWS, sources_module._countable = original
        assert list(columnar.items()) == list(row_by_row.items())
        assert {k: list(v["splits"]) for k, v in columnar.items()} == {k: list(v["splits"]) for k, v in row_by_row.items()}

    check()
