"""``orandcar card --options FILE`` is checked as strictly as a recipe's [dataset] section (one
JSON Schema, card.options.OPTIONS_SCHEMA): a wrong type, an empty name, an unknown key, a key
given twice or an alias is one error naming the file, the key and its line; the card is untouched."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from orandcar_builder.card.errors import CardError
from orandcar_builder.card.options import OPTIONS_SCHEMA, CardOptions
from orandcar_builder.cli import main

BAD = [
    ("tags: notalist\n", "line 1: tags must be a list, not a string ('notalist')"),
    ("pretty_name: x\nlicense: 5\n", "line 2: license must be a string, not an integer (5)"),
    ("language: [en, 3]\n", "line 1: language.1 must be a string, not an integer (3)"),
    ("task_categories: {a: b}\n", "line 1: task_categories must be a list, not a mapping"),
    ("pretty_name: ''\n", "line 1: pretty_name must not be empty"),
    ("pretty_name: 2024\n", "pretty_name must be a string, not an integer"),
    ("license_link: 2020-01-01\n", "license_link must be a string, not date"),
    ("gated: 'no'\n", "line 1: gated must be true or false, not a string ('no')"),
    ("gated: 1\n", "gated must be true or false, not an integer"),
    ("gated_fields:\n  Name: txt\n", "line 1: gated_fields.Name must be one of text, checkbox"),
    ("gated_fields: [Name, text]\n", "gated_fields must be a mapping, not a list"),
    ("gated_prompt: null\n", "gated_prompt must be a string, not null"),
    ("licence: mit\n", "line 1: unknown card option 'licence'; did you mean 'license'?"),
    ("tags: [a]\ntags: [b]\n", "gives the key 'tags' twice (line 2)"),
    ("license: &l mit\nlicense_name: *l\n", "uses an alias (*l, line 2)"),
    ("- a\n- b\n", "card options must be a mapping"),
]


@pytest.mark.parametrize("text,message", BAD)
def test_bad_options_are_refused_with_key_and_line(tmp_path, text, message):
    path = tmp_path / "card.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CardError) as info:
        CardOptions.from_yaml(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value), str(info.value)


def test_every_problem_is_listed_at_once_in_line_order(tmp_path):
    path = tmp_path / "card.yaml"
    path.write_text("licence: mit\ntags: x\nlicense: 5\n", encoding="utf-8")
    with pytest.raises(CardError) as info:
        CardOptions.from_yaml(path)
    text = str(info.value)
    assert "3 problem(s)" in text and text.index("line 1:") < text.index("line 2:") < text.index("line 3:")


def test_good_options_and_nulls_where_an_option_may_be_absent(tmp_path):
    path = tmp_path / "card.yaml"
    path.write_text("license: cc-by-4.0\nlicense_name: null\ntags: [ocr]\nlanguage:\ngated: yes\n"
                    "gated_fields:\n  Name: text\n  Use: {type: select, options: [research, other]}\n", encoding="utf-8")
    options = CardOptions.from_yaml(path)
    assert options.license == "cc-by-4.0" and options.license_name is None and options.tags == ("ocr",)
    assert options.language == () and options.gated is True
    assert dict(options.gated_fields)["Use"] == {"type": "select", "options": ["research", "other"]}


def test_the_schema_names_exactly_the_card_options():
    assert set(OPTIONS_SCHEMA["properties"]) == {f.name for f in dataclasses.fields(CardOptions)}


def test_the_card_command_exits_2_and_keeps_the_card(sample_copy, sample_build, tmp_path):
    import json

    result, _ = sample_build
    report = tmp_path / "report.json"
    report.write_text(json.dumps(result.report), encoding="utf-8")
    path = tmp_path / "card.yaml"
    path.write_text("pretty_name: Mine\ntags: notalist\n", encoding="utf-8")
    before = (sample_copy / "README.md").read_bytes()
    res = CliRunner().invoke(main, ["card", str(sample_copy), "--work", str(tmp_path), "--options", str(path)])
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(path) in errors[0] and "line 2: tags must be a list" in errors[0]
    assert (sample_copy / "README.md").read_bytes() == before
