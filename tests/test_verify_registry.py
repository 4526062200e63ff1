"""The rule registry and ``verify``: candidates, leaked reasoning, input checks, module shape."""

import pytest

from orandcar_builder.errors import UnknownNameError
from orandcar_builder.verify import RULE_MODULES, candidates, get_rule, verify

REQUIRED = ("NAME", "VERSION", "CONSTANTS", "score", "passes", "reference_score")


@pytest.mark.parametrize("name", sorted(RULE_MODULES))
def test_rule_module_shape(name):
    rule = get_rule(name)
    assert rule.NAME == name
    for attr in REQUIRED:
        assert hasattr(rule, attr), attr
    for constant in rule.CONSTANTS:  # the card renders these by name
        assert hasattr(rule, constant), f"{name}.CONSTANTS names missing {constant}"
    assert rule.__doc__ and rule.__doc__.strip()


@pytest.mark.parametrize("name", sorted(RULE_MODULES))
def test_scores_stay_in_unit_interval(name):
    rule = get_rule(name)
    for prediction, refs in [("", ["x"]), ("x", ["x"]), ("ß", ["s"]), ("0", ["0"]), ("B", ["B"])]:
        assert 0.0 <= rule.score(prediction, refs, ["a", "b"]) <= 1.0


def test_unknown_rule_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="did you mean 'anls'"):
        get_rule("anl")
    with pytest.raises(KeyError):  # UnknownNameError is a KeyError too
        verify("exactt", "a", ["a"])


def test_candidates_and_which_one_decided():
    assert [label for label, _ in candidates("a\nb\n\nc")] == ["full", "first_line", "first_paragraph"]
    decision = verify("exact", "Paris\nIt is the capital of France.", ["paris"])
    assert (decision.candidate, decision.text, decision.passed) == ("first_line", "Paris", True)


def test_first_paragraph_candidate():
    decision = verify("exact", "New\nYork\n\nIt is a city.", ["new york"])
    assert (decision.candidate, decision.text, decision.passed) == ("first_paragraph", "New\nYork", True)
    decision = verify("anls", "New York\nCity\n\nExplanation follows.", ["new york city"])
    assert decision.passed and decision.candidate == "first_paragraph"


@pytest.mark.parametrize("answer", ["<think>it might be 3</think>4", "it might be 3</think>\n4"])
def test_leaked_reasoning_is_removed(answer):
    decision = verify("relaxed", answer, ["4"])
    assert decision.passed and decision.text == "4"


def test_best_rejected_candidate_is_recorded():
    decision = verify("anls", "invoice 1235\nsomething else entirely", ["invoice 1234"])
    assert not decision.passed
    assert decision.candidate == "first_line" and decision.score == pytest.approx(1 - 1 / 12)


def test_empty_answer_is_a_reject():
    decision = verify("alnum", "  <think>x</think> ", ["x"])
    assert (decision.candidate, decision.text, decision.score, decision.passed) == ("full", "", 0.0, False)


@pytest.mark.parametrize(
    "answer, references, options, message",
    [
        ("a", "a", None, "references must be a list of strings"),
        ("a", ["a", 1], None, "references must be a list of strings; 1 is a int"),
        ("a", None, None, "references must be a list of strings, got None"),
        ("a", ["a"], "AB", "options must be a list of strings"),
        (None, ["a"], None, "answer must be a string"),
    ],
)
def test_bad_inputs_are_named(answer, references, options, message):
    with pytest.raises(TypeError, match=message):
        verify("exact", answer, references, options)


def test_decision_records_rule_and_version():
    decision = verify("vqa", "yes", ["yes"])
    assert (decision.rule, decision.rule_version) == ("vqa", get_rule("vqa").VERSION)
