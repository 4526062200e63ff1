"""Final-answer extraction and the decisions it leads to, on fixed reply shapes.

The shapes are those of real replies: a chain of thought that ends with ``\\boxed{..}``, "the
answer is (C)", an "Answer:" line, a lone letter; answers first and explanations after; and
sentences of reasoning that mention a value without answering with it.
"""

from __future__ import annotations

import pytest

from orandcar_builder.verify import verify
from orandcar_builder.verify.candidates import final_answer_candidates
from orandcar_builder.verify.extract import (
    EXAMPLES,
    EXTRACTION_PATTERNS,
    STATEMENT_PATTERNS,
    conclusion,
    conclusion_number,
    extract,
)
from orandcar_builder.verify.extract import STATEMENTS as STATEMENT_PAIRS
from orandcar_builder.verify.shape import is_sentence

# (reply, (pattern, span) or None)
STATEMENTS = [
    ("\\boxed{C}", ("boxed", "C")),
    ("\\boxed{\\text{C}}", ("boxed", "C")),
    ("\\boxed{\\textbf{(B)}}", ("boxed", "(B)")),
    ("So $x = \\boxed{\\frac{1}{2}}$.", ("boxed", "\\frac{1}{2}")),
    ("\\boxed{1} first, then \\boxed{2}", ("boxed", "2")),  # the last one
    ("\\fbox{42}", ("boxed", "42")),
    ("\\boxed{\\{1, 2\\}}", ("boxed", "\\{1, 2\\}")),
    ("The answer is \\boxed{5} and the answer is 6.", ("boxed", "5")),  # boxed outranks any statement
    ("\\boxed{unbalanced", ("boxed", "")),  # a box never closed boxes nothing (a cut reply)
    ("\\boxed{B \\boxed{C}}", ("boxed", "B \\boxed{C}")),  # the outermost box: it names two
    ("<answer><answer>A</answer>B</answer>", ("answer_tag", "")),  # tags that do not pair tag nothing
    ("The answer is B.</answer>", ("answer_tag", "")),
    ("<answer>B</answer>\n<answer></answer>", ("answer_tag", "")),  # the last container decides, empty
    ("\\boxed{}", ("boxed", "")),  # an empty last box boxes nothing: no earlier box, no other statement
    ("The answer is (C).\n\n\\boxed{C}", ("boxed", "C")),
    ("ANSWER: A\n\nHmm, actually, ANSWER: B", ("answer_label_inline", "B")),  # the later correction
    ("I pick B. Final answer: E", ("answer_label_inline", "E")),
    ("After all that, final answer: (C).", ("answer_label_inline", "(C)")),
    ("Answer: A, B", ("answer_label", "A, B")),  # a comma before a lone capital does not end the span
    ("<answer>C</answer>", ("answer_tag", "C")),
    ("It reads STOP.\n<answer>\n  (b)\n</answer>", ("answer_tag", "(b)")),
    ("<answer></answer> The sign says STOP.", ("answer_tag", "")),
    ("Reasoning.\n\n$$(B)$$", ("last_line_letter", "B")),
    ("Thinking.\nB\nD", ("last_line_letter", "B\nD")),  # two lone letters: the span holds both
    ("After checking the diagram, C.", ("last_line_letter", "C")),  # the last clause is one letter
    ("The count is four; D", ("last_line_letter", "D")),
    ("The points are A, B, C", None),  # a list of letters is no pick
    ("So I choose C because the arrow points left.", ("i_pick", "C")),
    ("I will go with (b).", ("i_pick", "b")),
    ("I choose a different approach here.", None),  # "a" followed by a word: the article
    ("First I think (A). But wait, reconsidering: (B) is correct.", ("letter_correct", "B")),
    ("A seems correct given the reflection.", ("letter_correct", "A")),
    ("Option (B) is correct.", ("option_correct", "(B)")),  # not letter_correct: the option pattern's own shape
    ("Therefore, (B). Note (A) is a common trap, as is (D).", ("therefore_letter", "B")),
    ("答えは：D", ("answer_ja", "D")),
    ("정답은: C", ("answer_ko", "C")),
    ("답: a", ("answer_ko", "a")),
    ("选D，因为它与图片一致。", ("option_zh", "D")),
    ("Conclusion: (B). Eliminated: (A), (C), (D).", ("answer_label", "(B)")),
    ("<answer>The answer is c.</answer>", ("answer_tag", "c")),  # a statement inside a container
    ("Therefore, the correct answer is (C) 60°.", ("answer_is", "(C) 60°")),
    ("The answer is (E).", ("answer_is", "(E)")),
    ("So the answer is 1", ("answer_is", "1")),
    ("the answer is 3.14.", ("answer_is", "3.14")),
    ("The answer is 3. In 3 years it doubles.", ("answer_is", "3")),
    ("The final answer is: 15", ("answer_is", "15")),
    ("The correct answer is **(A) yes**.\n\nThe RGB values are close.", ("answer_is", "(A) yes")),
    ("The answer is (B). No yellow bikes are there.", ("answer_is", "(B)")),
    ("So the answer is no, there are not more buses.", ("answer_is", "no")),
    ("The answer is (1, 2), clearly.", ("answer_is", "(1, 2)")),
    ("the answer is 5, 6, 7", ("answer_is", "5, 6, 7")),
    ("the answer is 1,000 cats", ("answer_is", "1,000 cats")),
    ("The final integer answer is 12 meters.", ("answer_is", "12 meters")),
    ("My answer would be B.", ("answer_is", "B")),
    ("The most likely answer is (D).", ("answer_is", "(D)")),
    ("The answer is:\n\nB", ("last_line_letter", "B")),  # the later of two statements of the same B
    ("The answer is not A.", None),
    ("If the answer is A, the angle is 30°.", None),
    ("We check whether the answer is 5.", None),
    ("The wrong answer is A.", None),
    ("I wonder which answer is right.", None),
    ("The answer is A.\nWait, no: the answer is B.", ("answer_is", "B")),  # the last statement
    ("Answer: B", ("answer_label", "B")),
    ("The triangle is isosceles.\n**Answer:** B", ("answer_label", "B")),
    ("**Answer: C**", ("answer_label", "C")),
    ("### Final answer\n\n42", ("answer_label", "42")),
    ("Final Answer: $\\frac{3}{4}$", ("answer_label", "$\\frac{3}{4}$")),
    ("Correct answer: (D)", ("answer_label", "(D)")),
    ("Answering this needs care: 5", None),
    ("Let me find the answer: first, the area.", None),  # "answer:" mid-line is no label
    ("The correct option is (B).", ("option_is", "(B)")),
    ("The best choice is C.", ("option_is", "C")),
    ("The correct option letter is D.", ("option_is", "D")),
    ("The option letter is D.", ("option_is", "D")),
    ("The first option is a triangle.", None),
    ("Option (B) is correct.", ("option_correct", "(B)")),
    ("Choice C is the right one.", ("option_correct", "C")),
    ("Therefore, option C, garter snakes would decrease, is the correct answer.", ("option_correct", "C")),
    ("Option B is not correct.", None),
    ("所以，答案是 (C) 12。", ("answer_zh", "(C) 12")),
    ("答案:D", ("answer_zh", "D")),
    ("最终答案：7", ("answer_zh", "7")),
    ("因此，∠FAE的度数为52.5°，选项为C。", ("option_zh", "C")),
    ("故选B", ("option_zh", "B")),
    ("所以选项B是正确答案。", ("option_correct_zh", "B")),
    ("Looking at the figure.\n\n(B)", ("last_line_letter", "B")),
    ("Looking at the figure.\n**C**", ("last_line_letter", "C")),
    ("No, the orange is not larger than the car. B", ("last_line_letter", "B")),
    ("If the trees died, the porcupines would decrease. (C)", ("last_line_letter", "C")),
    ("B", None),  # a one-line reply is the protocol's whole answer, not a statement
    ("Looking at the figure.\nB is the larger one", None),
    ("A square has four sides.\nA cube has six faces.", None),
    ("", None),
    ("No statement here, only 42 apples.", None),
]


@pytest.mark.parametrize("reply, expected", STATEMENTS)
def test_extract(reply, expected):
    assert extract(reply) == expected
    if expected is not None:
        assert expected[1] in reply  # the span is text the model wrote


def test_at_least_sixty_shapes_and_every_statement_pattern():
    assert len(STATEMENTS) >= 60
    found = {expected[0] for _, expected in STATEMENTS if expected}
    assert found == {"boxed", "answer_tag", "last_line_letter", *STATEMENT_PATTERNS}


def test_the_statement_patterns_and_which_mark_their_span():
    assert STATEMENT_PATTERNS == ("answer_is", "answer_label_inline", "answer_label", "i_pick", "letter_correct",
                                  "therefore_letter", "option_is", "option_correct", "answer_zh", "option_zh",
                                  "option_correct_zh", "answer_ja", "answer_ko")
    # extract() takes the group that matched as the span of a pattern with groups, the rest of the
    # sentence otherwise
    assert [name for name, pattern in STATEMENT_PAIRS if pattern.groups] == [
        "i_pick", "letter_correct", "therefore_letter", "option_correct", "option_correct_zh", "answer_ja", "answer_ko"]
    assert all(pattern.groups <= 2 for _, pattern in STATEMENT_PAIRS)


@pytest.mark.parametrize("name, reply, span", EXAMPLES)
def test_the_cards_examples(name, reply, span):
    assert name in EXTRACTION_PATTERNS
    assert (name, span) in [(extraction, text) for _, text, extraction in final_answer_candidates(reply, True)]


@pytest.mark.parametrize("reply, value, number", [
    ("Therefore, the range of the numbers in the set is 7 miles.", "7 miles", "7"),
    ("So, there are 4 queries that have a p-value lower than 0.50.", "4 queries that have a p-value lower than 0.50",
     "4"),
    ("Thus the nail is about 2 inches long.\n\nI hope this helps! Let me know if you have questions.",
     "about 2 inches long", "2"),
    ("The difference is 89 - 25 = **64%**.", "64%", "64%"),
    ("There are two bars with values smaller than 0.", "two bars", "two"),
    ("The ratio of male to female is 1:2, which means there is one male for every two.", "1:2", None),
    ("The smaller vehicle, which is a bus, can carry 1 person.", "a bus", "1"),
    ("So the answer is 1982 with an income of $931,441.", "1982", "1982"),
    ("Chase will spend $18.", None, "18"),
    ("That leaves:\n2", None, "2"),
    ("The ratio is 3:1.", "3:1", None),  # no number stands alone right after the verb
    ("The function value first reaches 2 at the point (1, 2).", None, None),  # several numbers, no verb
    ("The area cannot be 12.", None, None),  # a denial concludes nothing
    ("It is not 5.", None, None),
    ("I hope this helps!", None, None),
    ("The largest city is Tokyo.", "Tokyo", None),
])
def test_conclusions(reply, value, number):
    assert conclusion(reply) == value
    assert conclusion_number(reply) == number


@pytest.mark.parametrize("text, sentence", [
    ("The area of the rectangle ABEF is 4 x 2 = 8 cm^2.", True),
    ("If you look at the tower from above, you will see a square.", True),
    ("There are 5 of them", True),
    ("8 cm^2", False),
    ("\\frac{1}{2} meters", False),
    ("45 degrees", False),
    ("(B) no", False),
    ("1 employee per year", False),
])
def test_sentences(text, sentence):
    assert is_sentence(text) is sentence


LETTERS = ["A", "B", "C", "D", "E"]
ANGLES = ["30°", "45°", "60°", "75°"]
YES_NO = ["Yes", "No"]


# (reply, rule, references, options, passes, candidate that decided)
DECISIONS = [
    # The replies.
    ("The area of the rectangle ABEF is 4 x 2 = 8 cm^2.\nHence the ratio is 4.8 / 8.\n\n\\boxed{0.6}",
     "math", ["8"], None, False, "statement"),
    ("The area of the rectangle ABEF is 4 x 2 = 8 cm^2.\nHence the ratio is 4.8 / 8.\n\n\\boxed{0.6}",
     "math", ["0.6"], None, True, "statement"),
    ("The area of the rectangle ABEF is 4 x 2 = 8 cm^2.\nThe shaded part is half of it.\n\nSo the ratio is 0.6",
     "math", ["8"], None, False, "full"),
    ("If you look at the tower from above, you will see a square.", "choice", ["A"], LETTERS, False, "full"),
    ("Looking at each view in turn.\n\nTherefore, the correct answer is (C).\n\n\\boxed{C}",
     "choice", ["C"], ANGLES, True, "statement"),
    ("Angle ACB is inscribed in the semicircle, so it is 90°, and A is 30°.\nThe answer is (E).",
     "choice", ["E"], ["10°", "20°", "30°", "40°", "60°"], True, "statement"),
    # Picks of C in every written form.
    ("\\boxed{C}", "choice", ["C"], ANGLES, True, "statement"),
    ("\\boxed{\\text{C}}", "choice", ["C"], ANGLES, True, "statement"),
    ("(C) 60°", "choice", ["C"], ANGLES, True, "full"),
    ("C. 60°", "choice", ["C"], ANGLES, True, "full"),
    ("The correct answer is (C) 60°.", "choice", ["C"], ANGLES, True, "statement"),
    ("\\boxed{60^\\circ}", "choice", ["C"], ANGLES, True, "statement"),
    ("So the answer is D（75°）。", "choice", ["D"], ANGLES, True, "statement"),
    ("**Answer:** B", "choice", ["B"], ANGLES, True, "statement"),
    ("Let me think.\n**Answer:** B", "choice", ["B"], ANGLES, True, "statement"),
    # Two different options named: no pick.
    ("The answer is (D) quarter past.", "choice", ["D"], ["half", "quarter", "o'clock", "quarter to", "quarter past"],
     False, "statement"),
    ("The answer is (D) 140°.", "choice", ["D"], ["45°", "40°", "25°", "20°"], False, "statement"),
    ("The answer is A or B.", "choice", ["A"], ANGLES, False, "statement"),
    ("The answer is (E) quarter past.", "choice", ["E"], ["half", "quarter", "o'clock", "quarter to", "quarter past"],
     True, "statement"),
    ("Therefore, the answer is (B) sample A.", "choice", ["B"], ["neither", "sample A", "sample B"], True,
     "statement"),
    # Option text in prose: never a bare letter or a word prose is made of.
    ("It is a square.", "choice", ["A"], LETTERS, False, "full"),
    ("No idea, really.", "choice", ["B"], YES_NO, False, "full"),
    ("Yes, the function is even.", "choice", ["A"], YES_NO, True, "full"),
    ("No, Dark Orchid is not the maximum.", "choice", ["B"], YES_NO, True, "full"),
    ("Yes, but no: it depends.", "choice", ["A"], YES_NO, False, "full"),
    ("Therefore, the leaf shape is Linear.", "choice", ["C"], ["Lanceolate", "Heart-shaped", "Linear"], True,
     "conclusion"),
    # Free-form answers.
    ("12", "math", ["12"], None, True, "full"),
    ("The answer is 12 meters.", "math", ["12"], None, True, "statement"),
    ("Answer: \\frac{1}{2}", "math", ["0.5"], None, True, "statement"),
    ("x = 2", "math", ["2"], None, True, "full"),
    ("4 kg * $2 = $8\n\nChase will spend $8.\n\nI hope this helps!", "math", ["8"], None, True, "conclusion_number"),
    ("There are two bars with values below 40.", "math", ["2"], None, True, "conclusion_number"),
    ("There are two bars with values smaller than 0.", "math", ["0"], None, False, "full"),
    ("The ratio is 3:1.", "math", ["1"], None, False, "full"),
    ("The answer is 5 apples and 3 pears, so 8 fruits in all.", "math", ["3"], None, False, "statement"),
    ("It is 7, not 5.", "math", ["5"], None, False, "full"),
    ("4 x 2 = 8\n\nHalf of it is shaded, so the shaded area is 4.", "math", ["8"], None, False, "full"),
    ("4 x 2 = 8\n\nHalf of it is shaded, so the shaded area is 4.", "math", ["4"], None, True, "conclusion"),
    ("The total cannot be 12.", "math", ["12"], None, False, "full"),
    # Other rules keep the protocol's candidates and also take a statement.
    ("HARBOR", "alnum", ["HARBOR"], None, True, "full"),
    ("The answer is HARBOR.", "alnum", ["HARBOR"], None, True, "statement"),
    ("It is red. The sky is blue.", "vqa", ["blue"] * 10, None, False, "full"),
]


@pytest.mark.parametrize("reply, rule, references, options, passes, candidate", DECISIONS)
def test_decisions(reply, rule, references, options, passes, candidate):
    decision = verify(rule, reply, references, options)
    assert (decision.passed, decision.candidate) == (passes, candidate), decision
    assert decision.text in reply  # what would be stored as `answer` is the model's own text


def test_the_cards_example_of_a_sentence_of_reasoning_does_not_pass():
    """The card's matching section states this case (test_card_rules checks it does): a first line
    of reasoning that mentions the reference, in a reply whose last sentence concludes another
    value, is no accept."""
    reply = "The area of the rectangle ABEF is 4 x 2 = 8 cm^2.\n\nSo the ratio of the areas is 0.6."
    assert not verify("math", reply, ["8"]).passed
