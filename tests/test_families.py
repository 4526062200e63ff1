"""The family registry: every family names a registered rule and its own instruction; the
registry is a value (``Families``) that nothing changes in place."""

import pickle

import pytest

from orandcar_builder.errors import UnknownNameError
from orandcar_builder.families import DEFAULT_FAMILIES, Families, Family
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
    assert {name: family.rule for name, family in DEFAULT_FAMILIES.items()} == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_family_is_complete(name):
    family = DEFAULT_FAMILIES[name]
    assert family.rule in RULE_MODULES
    get_rule(family.rule)
    assert family.instruction.strip() == family.instruction and family.instruction.endswith(".")
    assert "\n" not in family.instruction
    assert family.description


def test_instructions_are_distinct():
    instructions = [f.instruction for f in DEFAULT_FAMILIES.values()]
    assert len(set(instructions)) == len(instructions)


def test_multiple_choice_asks_for_the_letter():
    family = DEFAULT_FAMILIES["multiple_choice"]
    assert "letter" in family.instruction
    text = question_text("Which animal barks?", family, ["cat", "dog"])
    assert text == "Which animal barks?\nA. cat\nB. dog\n" + family.instruction


def test_unknown_family_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="did you mean 'chart_qa'") as info:
        DEFAULT_FAMILIES["chartqa"]
    assert "known: chart_qa, doc_vqa" in str(info.value)
    assert "chartqa" not in DEFAULT_FAMILIES and DEFAULT_FAMILIES.get("chartqa") is None
    assert ["a", "list"] not in DEFAULT_FAMILIES  # an unhashable name is no family's, not a TypeError
    with pytest.raises(UnknownNameError):
        DEFAULT_FAMILIES.rule_for("chartqa", ["a", "b"])  # options do not hide an unknown family


def test_a_name_given_twice_fails():
    with pytest.raises(ValueError, match="'vqa' given twice"):
        Families([DEFAULT_FAMILIES["vqa"], Family(name="vqa", rule="vqa", instruction="x", description="x")])
    with pytest.raises(TypeError, match="Family records"):
        Families(["vqa"])


def test_items_with_options_are_decided_by_the_choice_rule():
    assert DEFAULT_FAMILIES.rule_for("vqa") == "vqa"
    assert DEFAULT_FAMILIES.rule_for("vqa", ["red", "blue"]) == "choice"
    assert DEFAULT_FAMILIES.rule_for("multiple_choice", ["a", "b"]) == "choice"
    assert DEFAULT_FAMILIES.rule_for("doc_vqa", []) == "anls"


def test_overlay_makes_a_new_value_and_changes_nothing():
    before = dict(DEFAULT_FAMILIES)
    shorter = Family(name="vqa", rule="exact", instruction="One word.", description="", separator=" ")
    added = Family(name="receipts", rule="anls", instruction="Give the total.", description="Receipts.")
    mine = DEFAULT_FAMILIES.overlay([shorter, added])
    assert list(mine) == [*EXPECTED, "receipts"]  # replaced where it stands, the new one after
    assert mine["vqa"] is shorter and mine.rule_for("vqa") == "exact" and mine.rule_for("receipts") == "anls"
    assert dict(DEFAULT_FAMILIES) == before and "receipts" not in DEFAULT_FAMILIES
    assert DEFAULT_FAMILIES.overlay(None) is DEFAULT_FAMILIES
    assert mine != DEFAULT_FAMILIES and mine == DEFAULT_FAMILIES.overlay([shorter, added])
    assert hash(mine) == hash(DEFAULT_FAMILIES.overlay([shorter, added]))
    with pytest.raises(AttributeError):
        mine._by_name = {}
    with pytest.raises(TypeError):
        mine["vqa"] = added  # a Mapping, not a dict


def test_a_registry_pickles_as_it_is():
    mine = DEFAULT_FAMILIES.overlay([Family(name="receipts", rule="anls", instruction="Total.", description="")])
    again = pickle.loads(pickle.dumps(mine))
    assert again == mine and list(again) == list(mine) and isinstance(again, Families)


def test_the_prompt_is_the_one_of_the_family_given():
    mine = DEFAULT_FAMILIES.overlay([Family(name="vqa", rule="vqa", instruction="One word.", description="",
                                            separator=" ")])
    assert question_text("What colour?", mine["vqa"]) == "What colour? One word."
    assert question_text("What colour?", DEFAULT_FAMILIES["vqa"]) == "What colour?\n" + DEFAULT_FAMILIES["vqa"].instruction
    empty = Family(name="bare", rule="exact", instruction="", description="")
    assert question_text("What colour? ", empty) == "What colour?"
