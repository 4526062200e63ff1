"""Build recipes: the TOML format, its JSON Schema, errors that name the key and its line, and the
shipped recipe of the published dataset."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from orandcar_builder.families import DEFAULT_FAMILIES as FAMILIES
from orandcar_builder.recipe import (
    DEFAULT_SEPARATOR,
    RECIPE_SCHEMA,
    RecipeError,
    key_line,
    parse_recipe,
    read_recipe,
    shipped_recipe_path,
)

from .conftest import REPO

PUBLISHED_INSTRUCTION = ("Answer this question using the text in the image directly without any other context. "
                         "Answer in short without any other content.")


def test_the_schema_is_a_valid_json_schema():
    Draft202012Validator.check_schema(RECIPE_SCHEMA)


def test_the_shipped_recipe_reads_and_reproduces_the_published_scene_text_prompt():
    path = shipped_recipe_path()
    assert path == REPO / "recipes" / "orandcar.toml"
    recipe = read_recipe(path)
    scene = recipe.families["scene_text"]
    assert (scene.rule, scene.separator, scene.instruction) == ("alnum", " ", PUBLISHED_INSTRUCTION)
    assert recipe.engine["name"] == "vllm" and recipe.judge == {"name": "same"} and recipe.calibration == 60
    # every other family keeps the code's instruction and the newline separator
    for name, family in FAMILIES.items():
        if name != "scene_text":
            assert recipe.families[name].instruction == family.instruction
            assert recipe.families[name].separator == DEFAULT_SEPARATOR and recipe.families[name].rule == family.rule
    assert recipe.changed_families == ("scene_text",)
    json.dumps(recipe.to_dict())  # the resolved recipe is plain data (manifest, card)


BAD = """\
format = 1

[dataset]
repo = "my-org/OrandCar"
pretty_nam = "OrandCar"

[engine]
name = "vllm"
modle = "Qwen/Qwen3-VL-8B-Thinking"

[calibration]
size = "60"

[families.scene_text]
instrucion = "Say it."
rule = "alnm"

[families.charts]
instruction = "Read the value."
"""


def test_every_problem_names_its_key_and_line_with_did_you_mean():
    with pytest.raises(RecipeError) as caught:
        parse_recipe(BAD, source="bad.toml")
    message = str(caught.value)
    assert message.startswith("bad.toml: 6 problem(s): ")
    for expected in (
        "line 5: unknown key 'pretty_nam' in [dataset]; did you mean 'pretty_name'?",
        "line 9: unknown option 'modle' of the vllm engine in [engine]; did you mean 'model'?",
        "line 12: calibration.size must be an integer, not a string ('60')",
        "line 15: unknown key 'instrucion' in [families.scene_text]; did you mean 'instruction'?",
        "line 16: family 'scene_text': unknown rule 'alnm'; did you mean 'alnum'?",
        "line 18: family 'charts' is not one the code knows; did you mean 'chart_qa'?; a new family needs rule",
    ):
        assert expected in message, (expected, message)
    assert "\n" not in message  # one line: the CLI prints it as one error


@pytest.mark.parametrize("text,expected", [
    ("[engine]\nname = 'vlm'\n", "line 2: unknown engine 'vlm'; did you mean 'vllm'?"),
    ("[judge]\nname = 'sme'\n", "line 2: unknown judge 'sme'; did you mean 'same'?"),
    ("[engine]\nmodel = 'x'\n", "line 1: [engine] needs 'name'"),
    ("format = 2\n", "line 1: format 2 is not a recipe format this version reads"),
    ("[dataset]\ngated = 'yes'\n", "line 2: dataset.gated must be true or false, not a string ('yes')"),
    ("[dataset]\ngated_fields = { Name = 'txt' }\n", "line 2: dataset.gated_fields.Name must be one of text"),
    ("[dataset]\nrepo = 'OrandCar'\n", "line 2: dataset.repo: 'OrandCar' does not match"),
    ("[calibration]\nsize = -1\n", "line 2: calibration.size: -1 is less than the minimum of 0"),
    ("[families]\nscene_text = { separator = 3 }\n", "line 2: families.scene_text.separator must be a string"),
    ("dataset = 3\n", "line 1: dataset must be a table, not an integer (3)"),
    ("famlies = {}\n", "line 1: unknown key 'famlies' in the top level; did you mean 'families'?"),
    ("[families.scene_text]\ninstruction = 'x'\n[engine\n", "not valid TOML"),
])
def test_problems(text, expected):
    with pytest.raises(RecipeError, match=None) as caught:
        parse_recipe(text, source="r.toml")
    assert expected in str(caught.value), str(caught.value)


def test_a_new_family_needs_only_an_instruction_and_an_existing_rule():
    recipe = parse_recipe('[families.receipts]\ninstruction = "Give the total."\nseparator = "\\n\\n"\n'
                          'rule = "relaxed"\ndescription = "Totals read from receipts."\n')
    receipts = recipe.families["receipts"]
    assert (receipts.rule, receipts.instruction, receipts.separator) == ("relaxed", "Give the total.", "\n\n")
    assert list(recipe.families)[-1] == "receipts" and "receipts" not in FAMILIES  # nothing registered by reading
    assert recipe.to_dict()["families"]["receipts"]["description"] == "Totals read from receipts."


def test_key_line_finds_tables_values_and_dotted_keys():
    text = "a = 1\n[engine]\nname = 'x'\n\n[families.scene_text]\nrule = 'alnum'\n[families]\nvqa.rule = 'vqa'\n"
    assert key_line(text, ["a"]) == 1
    assert key_line(text, ["engine"]) == 2 and key_line(text, ["engine", "name"]) == 3
    assert key_line(text, ["families", "scene_text"]) == 5 and key_line(text, ["families", "scene_text", "rule"]) == 6
    assert key_line(text, ["families", "vqa", "rule"]) == 8 and key_line(text, ["families", "vqa"]) == 8
    assert key_line(text, ["nope"]) is None


def test_an_unreadable_recipe_is_named(tmp_path):
    with pytest.raises(RecipeError, match="missing.toml: cannot read the recipe"):
        read_recipe(tmp_path / "missing.toml")
    (tmp_path / "latin1.toml").write_bytes(b"x = '\xe9'\n")
    with pytest.raises(RecipeError, match="latin1.toml: the recipe is not UTF-8"):
        read_recipe(tmp_path / "latin1.toml")


def test_a_resolved_recipe_written_as_toml_reads_back_equal():
    from orandcar_builder.recipe import resolve, to_toml, tomllib

    text = '''
[dataset]
repo = "my-org/OrandCar"
tags = ["a", "b c"]
gated_prompt = "Agree to \\"the terms\\"\\n\\tplease \\u007f."
gated_fields = { Name = "text", "I agree: yes" = "checkbox", Role = { type = "select", options = ["x", "y"] } }

[engine]
name = "vllm"
model = "Qwen/Qwen3-VL-8B-Thinking"
max_tokens = 16384
chat_template_kwargs = { enable_thinking = true }
limit_mm_per_prompt = { image = 1 }

[families.odd_name]  # a name the dataset schema allows (quoted keys: gated_fields)
instruction = "Ünïcode – fine."
separator = "\\n\\n"
rule = "exact"
'''
    recipe = resolve(parse_recipe(text), engine_options={"seed": 7})
    data = recipe.to_dict()
    written = to_toml(data)
    assert tomllib.loads(written) == data
    assert parse_recipe(written).to_dict() == data  # and it is a valid recipe again


def test_toml_leaves_out_none_at_any_depth_and_quotes_hostile_keys():
    from orandcar_builder.recipe import to_toml, tomllib

    data = {"format": 1, "dataset": {"repo": "o/n", "license_name": None},
            "engine": {"name": "x", "opts": {"a": None, "b": [1, None, {"c": None, "d": "e"}]},
                       'we"ird.key = [x]\n': "\x00\x1f\x7f\u2028", "big": 2**63 - 1, "f": -0.0, "inf": float("inf")},
            "families": {"a.b": {"rule": "exact", "instruction": "'''\"\"\"", "separator": "\r\n"}}}
    written = to_toml(data)
    assert tomllib.loads(written) == {
        "format": 1, "dataset": {"repo": "o/n"},
        "engine": {"name": "x", "opts": {"b": [1, {"d": "e"}]}, 'we"ird.key = [x]\n': "\x00\x1f\x7f\u2028",
                   "big": 2**63 - 1, "f": -0.0, "inf": float("inf")},
        "families": {"a.b": {"rule": "exact", "instruction": "'''\"\"\"", "separator": "\r\n"}}}


_toml_scalars = st.one_of(st.text(), st.integers(min_value=-2**63, max_value=2**63 - 1), st.booleans(),
                          st.floats(allow_nan=False))
_toml_values = st.recursive(_toml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.dictionaries(st.text(max_size=8), _toml_values, max_size=4), max_size=4))
def test_any_table_of_json_values_is_written_as_toml_that_reads_back_equal(data):
    from orandcar_builder.recipe import to_toml, tomllib

    assert tomllib.loads(to_toml(data)) == data
