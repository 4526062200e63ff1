"""The family registry: every family names a registered rule and its own instruction."""

import pytest

from orandcar_builder.errors import UnknownNameError
from orandcar_builder.families import FAMILIES, Family, get_family, register
from orandcar_builder.prompts import question_text
from orandcar_builder.verify import RULE_MODULES, get_rule

EXPECTED = {
    "scene_text": "alnum",
    "doc_vqa": "anls",
    "vqa": "vqa",
    "chart_qa": "relaxed",
    "multiple_choice": "choice",
    "math": "math",
    "generic": "exact",
}


def test_the_shipped_families_and_their_rules():
    assert {name: family.rule for name, family in FAMILIES.items()} == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_family_is_complete(name):
    family = get_family(name)
    assert family.rule in RULE_MODULES
    get_rule(family.rule)
    assert family.instruction.strip() == family.instruction and family.instruction.endswith(".")
    assert "\n" not in family.instruction
    assert family.description


def test_instructions_are_distinct():
    instructions = [f.instruction for f in FAMILIES.values()]
    assert len(set(instructions)) == len(instructions)


def test_multiple_choice_asks_for_the_letter():
    assert "letter" in get_family("multiple_choice").instruction
    text = question_text("Which animal barks?", "multiple_choice", ["cat", "dog"])
    assert text == ("Which animal barks?\nA. cat\nB. dog\n" + get_family("multiple_choice").instruction)


def test_unknown_family_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="did you mean 'chart_qa'") as info:
        get_family("chartqa")
    assert "known: chart_qa, doc_vqa" in str(info.value)


def test_registering_twice_fails():
    with pytest.raises(ValueError, match="registered twice"):
        register(Family(name="vqa", rule="vqa", instruction="x", description="x"))


def test_items_with_options_are_decided_by_the_choice_rule():
    from orandcar_builder.families import rule_for

    assert rule_for("vqa") == "vqa"
    assert rule_for("vqa", ["red", "blue"]) == "choice"
    assert rule_for("multiple_choice", ["a", "b"]) == "choice"
    assert rule_for("doc_vqa", []) == "anls"
