"""The vocabulary is spelled once: the JSON Schemas and the loading definition (the published
contract of the dataset) enumerate exactly vocab's configs, split, shard names and reasons, so a
name renamed on one side only fails here instead of in a user's ``load_dataset``."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest
import yaml

from orandcar_builder import vocab
from orandcar_builder.dataset.features import loading_definition_path
from orandcar_builder.dataset.validate import SCHEMA_DIR, json_schema
from orandcar_builder.review.charts import REASON_COLOURS
from orandcar_builder.verify import RULE_MODULES


def _enums(node, path=()):
    """(path of property names, enum list) for every ``enum`` in a JSON Schema."""
    if isinstance(node, dict):
        if "enum" in node:
            yield path, node["enum"]
        for key, value in node.items():
            yield from _enums(value, path + (key,) if key not in ("properties", "items") else path)
    elif isinstance(node, list):
        for value in node:
            yield from _enums(value, path)


def _definition() -> dict:
    return yaml.safe_load(Path(loading_definition_path()).read_text(encoding="utf-8"))


def test_vocab_tuples_are_made_of_their_names():
    # the names, in this order, are the configs of the published loading definition
    assert vocab.CONFIGS == (vocab.CONFIG_THINK, vocab.CONFIG_NOTHINK, vocab.CONFIG_REJECTED) == tuple(
        c["config_name"] for c in _definition()["configs"])
    assert vocab.ROUTES == (vocab.ACCEPTED, vocab.REJECTED, vocab.FAILED)
    assert set(vocab.RECHECKED_REASONS) | set(vocab.COUNTED_REASONS) == set(vocab.REJECT_REASONS)
    assert not set(vocab.RECHECKED_REASONS) & set(vocab.COUNTED_REASONS)
    assert not set(vocab.REJECT_REASONS) & set(vocab.FAIL_REASONS)
    assert set(vocab.ANSWER_STATUSES) - {vocab.ANSWER_OK} <= set(vocab.REJECT_REASONS)
    assert vocab.CONFIG_ROUTE == {**{c: vocab.ACCEPTED for c in vocab.ACCEPTED_CONFIGS},
                                  vocab.CONFIG_REJECTED: vocab.REJECTED}
    for names in (vocab.CONFIGS, vocab.ROUTES, vocab.REJECT_REASONS, vocab.FAIL_REASONS, vocab.VERDICT_LABELS):
        assert len(set(names)) == len(names), names


def test_one_json_schema_per_config():
    assert sorted(p.stem for p in SCHEMA_DIR.glob("*.json")) == sorted(vocab.CONFIGS)
    for config in vocab.CONFIGS:
        assert json_schema(config)["$id"].endswith(f"/{config}.json")


def test_the_rejected_schema_enumerates_exactly_the_reject_reasons():
    enums = dict(_enums(json_schema(vocab.CONFIG_REJECTED)))
    assert enums == {("qa", "reason"): list(vocab.REJECT_REASONS)}


@pytest.mark.parametrize("config", vocab.ACCEPTED_CONFIGS)
def test_accepted_schemas_enumerate_nothing_and_admit_every_verifier(config):
    schema = json_schema(config)
    assert list(_enums(schema)) == []  # a new enum here must come from vocab (and this test)
    qa = schema["properties"]["qa"]["items"]["properties"]
    pattern = re.compile(qa["verifier"]["pattern"])
    for verifier in (*RULE_MODULES, vocab.JUDGE_VERIFIER):
        assert pattern.search(verifier), verifier
    assert "reason" not in qa and "wrong_vlm" not in qa


def test_the_loading_definition_names_vocab_configs_split_and_shards():
    definition = _definition()
    assert tuple(c["config_name"] for c in definition["configs"]) == vocab.CONFIGS
    assert tuple(definition["features"]) == vocab.CONFIGS
    for block in definition["configs"]:
        config = block["config_name"]
        assert [f["split"] for f in block["data_files"]] == [vocab.SPLIT]
        (data_files,) = block["data_files"]
        assert data_files["path"] == f"{config}/{vocab.SHARD_GLOB.removesuffix('.parquet')}"
        # the glob the Hub resolves, vocab's glob and vocab's pattern agree on the writer's names
        for index, total in ((0, 1), (3, 12), (99998, 99999)):
            name = vocab.shard_name(index, total)
            assert fnmatch.fnmatch(f"{config}/{name}", data_files["path"])
            assert fnmatch.fnmatch(name, vocab.SHARD_GLOB)
            assert vocab.SHARD_NAME.match(name).groups() == (f"{index:05d}", f"{total:05d}")


def test_the_loading_definition_gives_each_route_its_fields():
    qa_fields = {config: [f["name"] for f in next(c for c in features if c["name"] == "qa")["list"]]
                 for config, features in _definition()["features"].items()}
    for config, route in vocab.CONFIG_ROUTE.items():
        if route == vocab.ACCEPTED:
            assert "verifier" in qa_fields[config] and "reason" not in qa_fields[config]
        else:
            assert {"wrong_vlm", "reason"} <= set(qa_fields[config]) and "verifier" not in qa_fields[config]
    assert "think" in qa_fields[vocab.CONFIG_THINK] and "think" not in qa_fields[vocab.CONFIG_NOTHINK]


def test_the_review_charts_colour_every_reject_reason_in_vocab_order():
    assert tuple(REASON_COLOURS) == vocab.REJECT_REASONS


_ENUM_KEY = re.compile(r'"enum"\s*:')
_ENUM_LIST = re.compile(r'"enum"\s*:\s*\[([^\]]*)\]')
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def test_schema_enums_in_the_json_text_are_vocab_strings():
    """Belt and braces over ``_enums``: the raw text of each schema file, not its parsed tree, is
    scanned; every ``"enum"`` key holds a flat list, and every string in it is one of vocab's names."""
    known = set(vocab.CONFIGS) | set(vocab.ROUTES) | set(vocab.REJECT_REASONS) | set(vocab.FAIL_REASONS)
    lists = 0
    for path in sorted(SCHEMA_DIR.glob("*.json")):
        text = path.read_text(encoding="utf-8")
        found = _ENUM_LIST.findall(text)
        assert len(found) == len(_ENUM_KEY.findall(text)), (path.name, "an enum that is not a flat list")
        assert len(found) == len(list(_enums(json.loads(text)))), path.name  # the walker misses none
        for body in found:
            values = [json.loads(quoted) for quoted in _JSON_STRING.findall(body)]
            assert values and set(values) <= known, (path.name, values)
        lists += len(found)
    assert lists, "no enum found in the schema files: the scan looks at nothing"
