"""``choice``: one option letter extracted from the answer must be the reference letter."""

import pytest

from orandcar_builder.verify import choice, verify

OPTIONS = ["cat", "dog", "red fox", "fox"]


@pytest.mark.parametrize(
    "answer, letter",
    [
        ("B", "B"),
        ("(B)", "B"),
        ("B.", "B"),
        ("**B**", "B"),
        ("b", "B"),  # a bare letter may be lower case
        ("[b].", "B"),
        ("The answer is B", "B"),
        ("The answer is B.", "B"),
        ("Answer: **B**", "B"),
        ("B) dog", "B"),
        ("B. dog, because it barks", "B"),
        ("dog", "B"),  # the text of exactly one option
        ("Dog.", "B"),
        ("red fox", "C"),  # whole text first: not D, although "fox" occurs in it
        ("It is a dog.", "B"),  # one option's text inside, no letter standing alone
        ("It is a red fox.", "C"),  # "fox" occurs only inside "red fox": that longer option
        ("A or B", None),  # two letters extract nothing
        ("B, not C", None),
        ("The answer is B (B)", "B"),  # the same letter twice is still one letter
        ("E", None),  # not an option letter with four options
        ("the answer is b", None),  # a lower-case letter counts only when it is the whole answer
        ("", None),
        ("I don't know", None),
    ],
)
def test_extract_letter(answer, letter):
    assert choice.extract_letter(answer, OPTIONS) == letter


def test_without_options_every_letter_counts():
    assert choice.extract_letter("The answer is E") == "E"
    assert choice.extract_letter("I think C") == "C"  # "I" opening the text before a word is the pronoun
    assert choice.extract_letter("I or C") is None  # ... but a letter before a connective
    assert choice.extract_letter("I think C", OPTIONS) == "C"


def test_option_text_that_looks_like_a_letter():
    # The whole-answer option text is tried before letters: "A cat" is option B here, not A.
    assert choice.extract_letter("A cat", ["A dog", "A cat"]) == "B"


def test_duplicate_option_texts_are_ambiguous():
    assert choice.extract_letter("cat", ["cat", "cat", "dog"]) is None


@pytest.mark.parametrize("reference, letter", [("B", "B"), ("(B)", "B"), ("b.", "B"), ("dog", "B"), ("Z", None),
                                               ("something else", None)])
def test_reference_letter(reference, letter):
    assert choice.reference_letter(reference, OPTIONS) == letter


@pytest.mark.parametrize(
    "answer, reference, passed",
    [("B", "B", True), ("(b)", "B", True), ("dog", "B", True), ("A", "B", False), ("A or B", "B", False),
     ("B", "dog", True)],
)
def test_score(answer, reference, passed):
    assert choice.score(answer, [reference], OPTIONS) == float(passed)
    assert choice.reference_score(answer, [reference], OPTIONS) == float(passed)


def test_verify_passes_a_letter_followed_by_an_explanation():
    decision = verify("choice", "B\n\nThe animal in the picture barks.", ["B"], OPTIONS)
    assert decision.passed


def test_empty_options_count_as_none():
    assert verify("choice", "E", ["E"], []).passed
