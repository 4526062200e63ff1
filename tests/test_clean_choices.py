"""Multiple-choice normalisation: prose options to a lettered block, reference to a bare letter."""

from __future__ import annotations

import pytest

from orandcar_builder.clean.choices import (
    ACTION_NORMALISED,
    ACTION_REFERENCE_LETTERED,
    normalise_choices,
    parse_prose_options,
    resolve_reference,
)
from orandcar_builder.families import DEFAULT_FAMILIES
from orandcar_builder.prompts import has_lettered_block, option_block, question_text

BLOCK = "A. cat\nB. dog\nC. bird"

# (question, reference, expected question, expected letter): one case per prose shape.
PROSE_SHAPES = [
    ("What animal is this? Options: cat, dog, bird", "dog", f"What animal is this?\n{BLOCK}", "B"),
    ("What animal is this? Options: cat, dog, or bird.", "bird", f"What animal is this?\n{BLOCK}", "C"),
    ("What animal is this? (A) cat (B) dog (C) bird", "B", f"What animal is this?\n{BLOCK}", "B"),
    ("What animal is this? A) cat B) dog C) bird", "(C)", f"What animal is this?\n{BLOCK}", "C"),
    ("What animal is this? A. cat B. dog C. bird", "cat", f"What animal is this?\n{BLOCK}", "A"),
    ("What animal is this? A: cat B: dog C: bird", "C.", f"What animal is this?\n{BLOCK}", "C"),
    ("What animal is this? Choose from: cat, dog, bird.", "Dog.", f"What animal is this?\n{BLOCK}", "B"),
    ("What animal is this? Choices: cat; dog; bird", "bird", f"What animal is this?\n{BLOCK}", "C"),
    ("Which animal is shown? Choose from cat, dog or bird", "dog", f"Which animal is shown?\n{BLOCK}", "B"),
    ("Which animal is shown? Options:\n- cat\n- dog\n- bird", "dog", f"Which animal is shown?\n{BLOCK}", "B"),
    ("Which animal is shown? Answer choices: [cat, dog, bird]", "b", f"Which animal is shown?\n{BLOCK}", "B"),
    ("Which animal is shown? Choices: (a) cat (b) dog (c) bird. Answer with the option's letter.", "B. dog",
     f"Which animal is shown?\n{BLOCK}\nAnswer with the option's letter.", "B"),
    ("Which colour? Options: red, black and white, or blue", "black and white",
     "Which colour?\nA. red\nB. black and white\nC. blue", "B"),
    ("Which animal is shown? A: cat B: dog C: bird\nAnswer with the letter only.", "C",
     f"Which animal is shown?\n{BLOCK}\nAnswer with the letter only.", "C"),
    ("Which animal is shown, (A) cat, (B) dog, or (C) bird?", "bird", f"Which animal is shown\n{BLOCK}", "C"),
    ("Which animal is shown? Select one of the following: 'cat', 'dog', 'bird'", "'dog'", f"Which animal is shown?\n{BLOCK}", "B"),
    ("Which animal is shown? Options: cat / dog / bird", "CAT", f"Which animal is shown?\n{BLOCK}", "A"),
    ("Pick one of the following: cat, dog, bird", "dog", f"Pick one of the following:\n{BLOCK}", "B"),
    ("How many? Options: 1,000, 2,000, 3,500", "2,000", "How many?\nA. 1,000\nB. 2,000\nC. 3,500", "B"),
    ("Which one? Options: (A) cat (B) dog (C) bird", "A", f"Which one?\n{BLOCK}", "A"),
    ("Which animal is shown? Options:\ncat\ndog\nbird\nAnswer with one letter.", "bird",
     f"Which animal is shown?\n{BLOCK}\nAnswer with one letter.", "C"),
]


@pytest.mark.parametrize("question, reference, expected_question, letter", PROSE_SHAPES)
def test_prose_shapes_become_a_lettered_block(question, reference, expected_question, letter):
    result = normalise_choices(question, reference, None)
    assert result.problem is None
    assert result.question == expected_question
    assert result.reference == letter
    assert result.action == ACTION_NORMALISED
    assert has_lettered_block(result.question)
    assert list(result.options) == [line[3:] for line in result.question.split("\n") if line[:3] in {"A. ", "B. ", "C. "}]


def test_at_least_ten_prose_shapes_are_covered():
    assert len(PROSE_SHAPES) >= 10


@pytest.mark.parametrize(
    "question, reference, why",
    [
        ("Which animal? Options: cat, dog, bird", "cow", "matches none"),
        ("Which animal? Options: cat, Cat, bird", "cat", "options A and B have the same text"),
        ("Which animal? (A) cat (B) dog", "C", "matches none"),
        ("Which animal? (A) cat (B) dog", "A. dog", "other than option"),
        ("Which letter? Options: B, A", "A", "matches several"),  # text names option B, letter names option A
    ],
)
def test_a_reference_naming_no_option_or_several_is_unresolvable(question, reference, why):
    result = normalise_choices(question, reference, None)
    assert result.problem is not None and why in result.problem
    assert result.question == question and result.action is None


@pytest.mark.parametrize(
    "question",
    [
        "Which animal?\nA. cat\nB. dog",
        "Which animal?\n(A) cat\n(B) dog\nOptions: cat, dog",
        "Which animal?\n  A) cat\n  B) dog",
    ],
)
def test_a_question_with_a_lettered_block_is_left_byte_for_byte(question):
    """The question is untouched; the block's options are recorded and a text reference becomes
    its letter, so the choice rule can decide the item."""
    result = normalise_choices(question, "dog", None)
    assert result.question is question and result.problem is None
    assert result.reference == "B" and result.options == ("cat", "dog") and result.action == "mc_reference_lettered"
    letter = normalise_choices(question, "B", None)
    assert letter.question is question and letter.reference == "B" and letter.options == ("cat", "dog")
    unresolvable = normalise_choices(question, "horse", None)
    assert unresolvable.problem is not None and "matches none" in unresolvable.problem


@pytest.mark.parametrize(
    "question",
    [
        "What is written in the image?",
        "What options are shown on the menu?",
        "Is the light red or green?",
        "Read the sign: what does it say?",
        "Plan A. Then what?",
        "Find (a) the area and (b) the perimeter of the square.",  # a question in parts
        "Compute a) the sum b) the product.",
        "Options: cat",  # one option is no choice
    ],
)
def test_ordinary_questions_are_not_taken_for_multiple_choice(question):
    assert parse_prose_options(question) is None
    result = normalise_choices(question, "x", None)
    assert result.question is question and result.action is None and result.problem is None


def test_structured_options_get_a_letter_reference_and_keep_the_question():
    result = normalise_choices("Which animal?", "dog", ("cat", "dog"))
    assert (result.question, result.reference, result.options, result.action) == ("Which animal?", "B", ("cat", "dog"), ACTION_REFERENCE_LETTERED)
    unchanged = normalise_choices("Which animal?", "B", ("cat", "dog"))
    assert unchanged.action is None and unchanged.reference == "B"
    assert normalise_choices("Which animal?", "cow", ("cat", "dog")).problem is not None


def test_multi_answer_references_must_agree_on_one_letter():
    assert normalise_choices("Which? Options: cat, dog", ("dog", "B"), None).reference == "B"
    assert "different options" in normalise_choices("Which? Options: cat, dog", ("dog", "cat"), None).problem


def test_normalised_question_gets_no_second_block_in_the_prompt():
    result = normalise_choices("What animal is this? Options: cat, dog, bird", "dog", None)
    prompt = question_text(result.question, DEFAULT_FAMILIES["multiple_choice"], result.options)
    assert prompt.count(option_block(result.options)) == 1


def test_normalising_twice_changes_nothing():
    for question, reference, _, _ in PROSE_SHAPES:
        first = normalise_choices(question, reference, None)
        second = normalise_choices(first.question, first.reference, first.options)
        assert (second.question, second.reference, second.action) == (first.question, first.reference, None)


@pytest.mark.parametrize(
    "reference, expected",
    [("dog", 1), (" Dog. ", 1), ("B", 1), ("(b)", 1), ("B)", 1), ("B: dog", 1), ("“dog”", 1), ("Z", None), ("", None)],
)
def test_resolve_reference(reference, expected):
    result = resolve_reference(reference, ["cat", "dog", "bird"])
    assert (result if isinstance(result, int) else None) == expected


@pytest.mark.parametrize(
    "question, expected",
    [
        ("Which?\nA. cat\nB. dog", True),
        ("Which?\n(A) cat\n(B) dog", True),
        ("Which?\nA) cat\nB) dog", True),
        ("Which?\nA: cat\nB: dog", True),
        ("I. Read the passage.\nA. cat\nB. dog", True),  # an earlier lettered line does not hide the block
        ("Which? (A) cat (B) dog", False),  # inline: prose, not a block
        ("Which?\nA. cat", False),
        ("Which?\nB. dog\nA. cat", False),
        ("A man walks.\nBy the river.", False),
    ],
)
def test_has_lettered_block(question, expected):
    assert has_lettered_block(question) is expected


def test_option_block_letters_each_option_on_its_own_line():
    assert option_block(["cat", "dog", "bird"]) == BLOCK
    with pytest.raises(ValueError, match="27 options"):
        option_block([str(i) for i in range(27)])


def test_inline_options_spanning_lines_are_not_taken_apart():
    assert parse_prose_options("Which? (A) cat\nand more (B) dog") is None


def test_list_like_text_in_a_free_text_family_is_not_a_multiple_choice(tmp_path):
    """'A: 30 degrees, B: 60 degrees' in a math question whose answer names no option: the item
    is admitted unchanged; the same shape in the multiple_choice family is dropped."""
    from orandcar_builder.clean import clean
    from orandcar_builder.images import ImageRef
    from orandcar_builder.records import Dropped, PoolItem

    from .conftest import write_png

    image = ImageRef.from_file(write_png(tmp_path / "t.png"))
    question = "In triangle ABC, A: 30 degrees, B: 60 degrees. What is angle C?"
    items = [PoolItem(id="m", image=image, question=question, reference="90", family="math", where="p:1"),
             PoolItem(id="c", image=image, question=question, reference="90", family="multiple_choice", where="p:2")]
    math_item, mc_item = list(clean(items, {}))
    assert not isinstance(math_item, Dropped) and math_item.item.question == question
    assert math_item.item.reference == "90" and math_item.item.options is None
    assert isinstance(mc_item, Dropped) and mc_item.reason == "mc_unresolvable"


@pytest.mark.parametrize(
    "question, answer, options, why",
    [
        ("Where?", "C", ["market", "garden", "garden", "river"], "options B and C have the same text 'garden'"),
        ("Where?", "garden", ["market", "Garden.", " garden ", "river"], "options B and C have the same text"),
        ("Where?", "A", ["market", "", "river"], "option B is blank"),
        ("Where?", "A", ["market", "   ", "river"], "option B is blank"),
        ("Where?\nA. market\nB. garden\nC. garden", "C", None, "options B and C have the same text"),
        ("Where? Options: market, garden, garden", "A", None, "options B and C have the same text"),
    ],
)
def test_repeated_or_blank_options_are_dropped_with_their_reason(question, answer, options, why):
    from orandcar_builder.clean.choices import BAD_OPTIONS

    result = normalise_choices(question, answer, options)
    assert result.reason == BAD_OPTIONS and why in result.problem


def test_bad_options_carry_the_items_own_options_only():
    # Given or lettered in the question: kept on the result; found in the prose: not the item's, None.
    for question, options in (("Where?", ["market", "garden", "garden"]),
                              ("Where?\nA. market\nB. garden\nC. garden", None)):
        result = normalise_choices(question, "C", options)
        assert (result.question, result.reference, result.options) == (question, "C", ("market", "garden", "garden"))
    question = "Where? Options: market, garden, garden"
    result = normalise_choices(question, "A", None)
    assert (result.question, result.reference, result.options, result.action) == (question, "A", None, None)


def test_repeated_options_drop_the_item_in_cleaning(tmp_path):
    from orandcar_builder.clean import clean
    from orandcar_builder.images import ImageRef
    from orandcar_builder.records import Dropped, PoolItem
    from tests.conftest import write_png

    image = ImageRef.from_file(write_png(tmp_path / "a.png"))
    item = PoolItem(id="x", image=image, question="Where is it?", reference="C", family="multiple_choice",
                    options=("market", "garden", "garden", "river"))
    [record] = list(clean([item], {}))
    assert isinstance(record, Dropped) and record.reason == "mc_bad_options" and "'garden'" in record.detail
