"""A family name the dataset's schema refuses is an error when the recipe is read (naming the
recipe file, the key and its line), not a validation failure after the whole generation; and a
recipe past the JSON bounds (files.MAX_JSON_DEPTH, an integer past Python's digit limit) is one error."""

from __future__ import annotations

import jsonschema
import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.dataset.validate import json_schema
from orandcar_builder.recipe import RecipeError, parse_recipe

from .conftest import SAMPLES

FAMILY_SCHEMA = json_schema("rejected")["properties"]["clean_meta"]["properties"]["sources"]["items"]["properties"]["family"]


def recipe(name_key: str) -> str:
    return f'format = 1\n\n[dataset]\npretty_name = "x"\n\n[families.{name_key}]\ninstruction = "Answer."\nrule = "exact"\n'


@pytest.mark.parametrize("key,name", [("Bad-Name", "Bad-Name"), ('"9lives"', "9lives"), ("UPPER", "UPPER"),
                                      ('"with space"', "with space"), ('"caf\u00e9"', "caf\u00e9"), ('""', ""),
                                      ('"a.b"', "a.b"), ('"_lead"', "_lead")])
def test_a_family_name_the_dataset_schema_refuses_is_refused_at_read(key, name):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(name, FAMILY_SCHEMA)  # the schema itself refuses it
    with pytest.raises(RecipeError) as info:
        parse_recipe(recipe(key), source="my.toml")
    message = str(info.value)
    assert message.startswith("my.toml: 1 problem(s): line 6: family name ") and repr(name) in message
    assert "clean_meta.sources.family" in message


def test_the_message_suggests_a_name_the_schema_allows():
    with pytest.raises(RecipeError, match="did you mean 'bad_name'"):
        parse_recipe(recipe("Bad-Name"))


@pytest.mark.parametrize("name", ["my_family", "chart2", "scene_text"])
def test_names_the_schema_allows_are_read(name):
    assert name in parse_recipe(recipe(name)).families


def test_build_stops_before_generating(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(recipe("Bad-Name"), encoding="utf-8")
    work = tmp_path / "work"
    res = CliRunner().invoke(main, ["build", str(SAMPLES / "pool.jsonl"), "-o", str(tmp_path / "out"), "--work",
                                    str(work), "--recipe", str(path), "--no-progress"])
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(path) in errors[0] and "Bad-Name" in errors[0]
    assert not (work / "decisions.parquet").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("value,message", [
    ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
    ("{a = " * 3000 + "1" + "}" * 3000, "nested deeper than 64 levels"),
    ("[" * 70 + "]" * 70, "nested deeper than 64 levels"),  # within the stack: the bound
    ("9" * 5001, "holds an integer of more than"),
])
def test_a_recipe_nested_too_deep_or_with_too_long_a_number_is_one_error(value, message):
    with pytest.raises(RecipeError, match=f"my.toml: not read: it (is|holds) .*{message.split()[-1]}"):
        parse_recipe(f"format = 1\n[engine]\nname = \"rapidocr\"\nx = {value}\n", source="my.toml")
