"""Reply shapes of today's models, each a fixed string with the decision it must get (issue 21).

The cases are written for these tests (no benchmark's text): option values in LaTeX, values with
units, boxes followed by a letter, negations the question asked for, decorated last lines, math
chains and ratios, and the wrong accepts that naive matching would make. Every case runs through
``verify`` exactly as a build decides a reply.
"""

import time

import pytest

from orandcar_builder.verify import verify
from orandcar_builder.verify.latex import clean_latex, latex_key
from orandcar_builder.vocab import NO_OPTION_MATCHED, NO_PICK, SEVERAL_PICKS, WRONG_PICK

FRACTIONS = [r"$\frac{1}{2}$", r"$\frac{1}{4}$", r"$\frac{1}{8}$", r"$\frac{3}{4}$"]
RADICALS = [r"$4\sqrt{2}$", r"$8$", r"$8-4\sqrt{2}$", r"$2\sqrt{3}$"]
POWERS = [r"$3 \cdot 2^{5}$", r"$2^{5}$", r"$3^{5}$", r"$5 \cdot 2^{3}$"]
ANGLES = [r"$\displaystyle 30^\circ$", r"$\displaystyle 45^\circ$", r"$\displaystyle 60^\circ$", r"$90°$"]
PI = [r"$2\pi$", r"$\pi$", r"$\frac{\pi}{2}$", r"$4\pi$"]
SETS = [r"$\left(1, 2\right)$", r"$\left[3, 4\right]$", r"$\{5, 6\}$", r"$(7, 8)$"]

# (reply, options, the letter the reply names or None)
LATEX_OPTIONS = [
    (r"So the probability is \boxed{\frac{1}{4}}.", FRACTIONS, "B"),
    (r"\boxed{\dfrac{1}{4}}", FRACTIONS, "B"),
    (r"\boxed{\tfrac14}", FRACTIONS, "B"),
    (r"The answer is $\frac{3}{4}$.", FRACTIONS, "D"),
    (r"The answer is $\frac{3}{4}$, which is option D.", FRACTIONS, "D"),
    (r"\boxed{0.25}", FRACTIONS, "B"),
    (r"\boxed{\frac{2}{8}}", FRACTIONS, "B"),
    (r"\boxed{0.3}", FRACTIONS, None),
    (r"The answer is $8 - 4\sqrt{2}$.", RADICALS, "C"),
    (r"\boxed{8-4\sqrt2}", RADICALS, "C"),
    (r"\boxed{8 - 4 \sqrt{2}}", RADICALS, "C"),
    (r"\boxed{4\sqrt{2}}", RADICALS, "A"),
    (r"\boxed{\sqrt{32}}", RADICALS, "A"),
    (r"\boxed{2\sqrt{3}}", RADICALS, "D"),
    (r"\boxed{\sqrt{12}}", RADICALS, "D"),
    (r"\boxed{8}", RADICALS, "B"),
    (r"\boxed{96}", POWERS, "A"),
    (r"\boxed{3\cdot 2^5}", POWERS, "A"),
    (r"\boxed{32}", POWERS, "B"),
    (r"\boxed{243}", POWERS, "C"),
    (r"\boxed{40}", POWERS, "D"),
    (r"\boxed{41}", POWERS, None),
    (r"The angle is \boxed{45^\circ}.", ANGLES, "B"),
    (r"\boxed{45°}", ANGLES, "B"),
    (r"\boxed{45^{\circ}}", ANGLES, "B"),
    (r"\boxed{\displaystyle 60^\circ}", ANGLES, "C"),
    (r"the answer is $90^\circ$", ANGLES, "D"),
    (r"\boxed{2\pi}", PI, "A"),
    (r"\boxed{\dfrac{\pi}{2}}", PI, "C"),
    (r"\boxed{\pi/2}", PI, "C"),
    (r"\boxed{4\pi}", PI, "D"),
    (r"\boxed{(1, 2)}", SETS, "A"),
    (r"\boxed{[3,4]}", SETS, "B"),
    (r"\boxed{(1, 2)}", [r"$(1, 2)$", r"$\{1, 2\}$", "$3$"], None),  # math-verify equates the two: no pick
    (r"\boxed{\frac{a+b}{2}}", ["$a+b$", "$a-b$", "$2a$", "$ab$"], None),  # a value inside a longer expression
    (r"\boxed{43.75}", ["25", "75", "50", "100"], None),  # a decimal split at its point names nothing
    ("The mean is 43.75 meters.", ["25", "75", "50", "100"], None),
    (r"\boxed{1: 2}", ["1", "2", "3", "4"], None),  # a ratio is not the number 2
    ("B", [r"\text{B}", "C", "D", "E"], None),  # the letter B, and the text of option A
    (r"\boxed{\frac{1}{2}}", [r"$\frac{1}{2}$", "$0.5$", "$2$", "$1$"], None),  # equal to two options
    (r"\boxed{\text{All except } E}", ["p", "q", "r", "s", "t"], None),
    (r"$\boxed{\text{(C)}}$", FRACTIONS, "C"),
    (r"Hence $\boxed{C}$.", RADICALS, "C"),
]

UNITS = [
    (r"\boxed{8\,\mathrm{kg}}", ["6 kg", "8 kg", "10 kg", "12 kg"], "B"),
    (r"\boxed{8 \text{ kg}}", ["6 kg", "8 kg", "10 kg", "12 kg"], "B"),
    (r"\boxed{8\mathrm{~kg}}", ["6 kg", "8 kg", "10 kg", "12 kg"], "B"),
    (r"\boxed{8 kg}", ["6 kg", "8 kg", "10 kg", "12 kg"], "B"),
    (r"\boxed{8\,\mathrm{kg}}", ["8 g", "16 g", "8 mg", "16 kg"], None),  # same number, other unit
    (r"\boxed{65^\circ}", ["$25°$", "$35°$", "$45°$", "$65°$"], "D"),
    ("The angle is $65^{\\circ}$.\n\n**Answer:** $65^\\circ$", ["$25°$", "$35°$", "$45°$", "$65°$"], "D"),
    (r"\boxed{12\,\text{cm}}", ["10 cm", "12 cm", "14 cm", "16 cm"], "B"),
    (r"\boxed{12\text{cm}}", ["10cm", "12cm", "14cm", "16cm"], "B"),
    (r"\boxed{12 \mathrm{cm}^2}", ["12 cm", "12 cm²", "24 cm²", "6 cm²"], "B"),
    (r"\boxed{5\sqrt{3}\,\text{m}}", ["5√3 m", "5 m", "3√5 m", "10 m"], "A"),
    (r"\boxed{3.5\,\mathrm{s}}", ["2.5 s", "3.5 s", "4.5 s", "5.5 s"], "B"),
    (r"\boxed{\$16}", ["$12", "$16", "$20", "$24"], "B"),
    (r"\boxed{25\%}", ["15%", "20%", "25%", "30%"], "C"),
    (r"\boxed{25\,\%}", ["15%", "20%", "25%", "30%"], "C"),
    (r"\boxed{40\ \mathrm{km/h}}", ["30 km/h", "40 km/h", "50 km/h", "60 km/h"], "B"),
    (r"\boxed{2\,\mathrm{L}}", ["1 L", "2 L", "3 L", "4 L"], "B"),
    (r"\boxed{100\,\mathrm{N}}", ["10 N", "50 N", "100 N", "200 N"], "C"),
    ("The answer is 45 degrees.", ["30 degrees", "45 degrees", "60 degrees", "90 degrees"], "B"),
    ("The answer is 45 degrees.", [r"$30^{\circ}$", r"$45^{\circ}$", r"$60^{\circ}$", "$90°$"], "B"),
    (r"\boxed{45^\circ}", ["30 degrees", "45 degrees", "60 degrees", "90 degrees"], "B"),
    (r"\boxed{9.8\,\mathrm{m/s^2}}", ["9.8 m/s^2", "10 m/s^2", "8.9 m/s^2", "1 m/s^2"], "A"),
    (r"\boxed{8\,\mathrm{kilograms}}", ["8 kg", "8 g", "16 kg", "4 kg"], None),  # units that are not the option's
]

LETTERS = ["w", "x", "y", "z"]
FIVE = ["10", "12", "14", "16", "20"]
# (reply, options, question, letter or None)
SHAPES = [
    ("We get \\boxed{x = 18}.\n\nTherefore, the final answer is (E).", FIVE, "", "E"),  # box names no option
    ("\\boxed{x = 18}. Answer: E", FIVE, "", "E"),
    ("\\boxed{12}\n\nSo the answer is (B).", FIVE, "", "B"),  # box and letter agree
    ("\\boxed{12}\n\nSo the answer is (C).", FIVE, "", None),  # box and letter disagree
    ("\\boxed{D}\n\n<answer>b</answer>", LETTERS, "", None),  # conflicting containers
    ("<answer>C</answer>", LETTERS, "", "C"),
    ("<think>hmm</think>The sign reads STOP.\n<answer>\n(c)\n</answer>", LETTERS, "", "C"),
    ("<answer>B</answer>\n<answer></answer>", LETTERS, "", None),
    ("<answer><answer>A</answer>B</answer>", LETTERS, "", None),
    ("\\boxed{C} and later \\boxed{}", LETTERS, "", None),
    ("\\boxed{B", LETTERS, "", None),
    ("\\boxed{B \\boxed{C}}", LETTERS, "", None),
    ("The pattern that could NOT be folded into a cube is (D).", LETTERS,
     "Which of the patterns could NOT be folded into a cube?", "D"),
    ("The pattern that could not be folded is (D).", LETTERS, "Which pattern can be folded?", None),
    ("Reasoning here.\n\n$$(B)$$", LETTERS, "", "B"),
    ("Reasoning here.\n\n**(B)**", LETTERS, "", "B"),
    ("Thinking.\nB\nD", LETTERS, "", None),
    ("The answer is B.\n(D)", LETTERS, "", None),
    ("A. Two birds\nB. Three birds\nC. Four birds\nD. Five birds\nI count four birds. Final answer: C.",
     ["Two birds", "Three birds", "Four birds", "Five birds"], "", "C"),
    ("A. Two birds\nB. Three birds\nC. Four birds\nD. Five birds\nI count four birds.",
     ["Two birds", "Three birds", "Four birds", "Five birds"], "", "C"),  # the listed options aside, C's text
    ("A. Two birds\nB. Three birds\nC. Four birds\nD. Five birds",
     ["Two birds", "Three birds", "Four birds", "Five birds"], "", None),
    ("ANSWER: A\n\nHmm, actually, ANSWER: B", LETTERS, "", "B"),
    ("I pick B. Final answer: E", LETTERS, "", None),  # E is no option among four
    ("Answer: A, B", LETTERS, "", None),
    ("Therefore, (B). Note (A) is a common trap, as is (D).", LETTERS, "", "B"),
    ("Vitamin B", LETTERS, "", None),
    ("the value of C", LETTERS, "", None),
    ("The answer is probably B.", LETTERS, "", None),
    ("After checking the diagram, C.", LETTERS, "", "C"),
    ("Final answer: C, since the arrow points left.", LETTERS, "", "C"),
    ("(b) the nucleus", ["the cell wall", "the nucleus", "the membrane"], "", "B"),
    ("(b) the membrane", ["the cell wall", "the nucleus", "the membrane"], "", None),
    ("(A) because it handles text better", ["model one", "model two"], "", "A"),
    ("(A) is wrong because it ignores the text", ["model one", "model two"], "", None),
    ("**B.** The object is a bus.", ["car", "bus", "tram"], "", "B"),
    ("(D) 140°", ["20°", "40°", "60°", "80°"], "", None),  # the value contradicts the letter
    ("So I choose C because the arrow points left.", LETTERS, "", "C"),
    ("I choose a different approach.", LETTERS, "", None),
    ("A cat", ["red", "blue", "green", "yellow"], "", None),
    ("A is correct because the figure has three sides.", LETTERS, "", "A"),
    ("答えはBです。", LETTERS, "", "B"),
    ("答えはB猫。", LETTERS, "", None),
    ("정답은 b입니다.", LETTERS, "", "B"),
    ("'B'", LETTERS, "", "B"),
    ("_B", LETTERS, "", None),
    ("(D) None of the above", ["1", "2", "3", "None of the above"], "", "D"),
]

MATH = [
    (r"\boxed{3 \cdot 2 \cdot 1 = 6}", "6", True),  # an equality chain of numbers: its last side
    (r"\boxed{3 \cdot 2 = 7}", "7", False),  # a chain whose sides differ is no value
    (r"The ratio is \boxed{1:1}", "1", True),
    (r"\boxed{1: 2}", "2", False),
    (r"\boxed{1:2}", "0.5", True),
    ("Therefore the length is 158 + LK.", "158", False),  # free symbols: not the number
    (r"\boxed{1+\frac{1}{\mathrm{e}}}", "1", False),
    ("[0,1)", "1", False),
    (r"\boxed{\$16386.17}", "16386.17", True),
    ("x = 5", "$5$", True),
    (r"$2^{10}.$", "2", False),
    ("The answer is $1/3.$", "1", False),
    ("11 5/6", "71/6", True),
    ("11 6/6", "12", False),
    ("4 0/0", "4", False),
    (r"$\frac{1}{2^{98}}$", r"$\frac{1}{2^{99}}$", False),  # tiny numbers are not equal by rounding
    (r"$\frac{1}{3 \cdot 2^{2006}}$", r"$\frac{2^{2005}+1}{3 \cdot 2^{2006}}$", False),
    ("0.333333", r"\frac{1}{3}", True),
    (r"$1, 3, 5, \ldots, 2n-1$", r"$1, 2, \ldots, n$", False),
]


assert len(LATEX_OPTIONS) >= 40 and len(UNITS) >= 20  # the floor on the collection itself


@pytest.mark.parametrize("reply, options, letter", LATEX_OPTIONS + UNITS)
def test_option_values(reply, options, letter):
    for reference in "ABCDE"[: len(options)]:
        decision = verify("choice", reply, [reference], options)
        assert decision.passed == (reference == letter), (reference, decision)


@pytest.mark.parametrize("reply, options, question, letter", SHAPES)
def test_reply_shapes(reply, options, question, letter):
    for reference in "ABCDE"[: len(options)]:
        decision = verify("choice", reply, [reference], options, question=question)
        assert decision.passed == (reference == letter), (reference, decision)


@pytest.mark.parametrize("reply, reference, passed", MATH)
def test_math_shapes(reply, reference, passed):
    assert verify("math", reply, [reference]).passed == passed


@pytest.mark.parametrize("reply, options, reference, kind", [
    ("The answer is (C).", LETTERS, "B", WRONG_PICK),
    ("A or B", LETTERS, "B", SEVERAL_PICKS),
    ("I am not sure what this shows at all.", LETTERS, "B", NO_PICK),
    (r"\boxed{0.3}", FRACTIONS, "B", NO_OPTION_MATCHED),
    (r"\boxed{\frac{1}{2}}", [r"$\frac{1}{2}$", "$0.5$", "$2$"], "C", SEVERAL_PICKS),
    ("\\boxed{D}\n\n<answer>b</answer>", LETTERS, "D", SEVERAL_PICKS),
])
def test_reject_kinds(reply, options, reference, kind):
    decision = verify("choice", reply, [reference], options)
    assert not decision.passed and decision.reject_kind == kind


def test_math_reject_kinds():
    assert verify("math", "The area is 4 x 2 = 8 square units.", ["9"]).reject_kind == NO_PICK
    assert verify("math", r"\boxed{7}", ["9"]).reject_kind == WRONG_PICK
    assert verify("math", r"\boxed{9}", ["9"]).reject_kind == ""


@pytest.mark.parametrize("text, cleaned, key", [
    (r"$\displaystyle 45^\circ$", "45°", "45°"),
    (r"\dfrac{1}{4}", r"\frac{1}{4}", r"\frac14"),
    (r"8\,\mathrm{kg}", "8 kg", "8kg"),
    (r"\left( 1, 2 \right)", "( 1, 2 )", "(1,2)"),
    (r"3 \cdot 2^{5}", r"3 \cdot 2^{5}", r"3\cdot2^5"),
    (r"\$16", "16", "16"),
    ("5 m²", "5 m^2", "5m^2"),
    ("45 degrees", "45°", "45°"),
    (r"\text{All except } E", "All except E", "allexcepte"),
])
def test_the_shared_latex_normalisation(text, cleaned, key):
    assert clean_latex(text) == cleaned
    assert latex_key(text) == key


@pytest.mark.parametrize("unit, rule, references, options", [
    ("the answer is ", "choice", ["A"], LETTERS),
    ("the answer is ", "math", ["5"], None),
    ("\\boxed{", "choice", ["A"], LETTERS),
    ("\\boxed{", "math", ["5"], None),
    ("Final answer: ", "choice", ["A"], LETTERS),
    (", which", "math", ["5"], None),
    ("<answer>", "choice", ["A"], LETTERS),
])
def test_extraction_grows_linearly_with_a_repeating_reply(unit, rule, references, options):
    """A model caught in a loop repeats a phrase thousands of times: deciding its reply takes time
    in proportion to its length (the quadratic scan this replaces took about 60 s for 56 kB).
    Eight times the length must cost well under the 64 times a quadratic scan would."""
    def seconds(n):
        reply = unit * n
        start = time.perf_counter()
        verify(rule, reply, references, options)
        return time.perf_counter() - start

    seconds(50)  # warm caches and imports
    # the fastest of several runs: a busy machine only ever adds time to a run
    small, large = min(seconds(1000) for _ in range(5)), min(seconds(8000) for _ in range(3))
    assert large < 30 * max(small, 1e-3), (small, large)


def test_math_verify_prints_no_model_text(capsys):
    import logging

    class Kept(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    kept = Kept()
    logging.getLogger().addHandler(kept)  # what the application's logging (the root logger) would see
    try:
        reply = "\\boxed{" + "x^{" * 300 + "}" * 300 + "}"
        verify("math", reply, ["5"])
        # What math-verify logs on a timeout carries the whole input: it must stop at its own logger.
        logging.getLogger("math_verify.parser").warning("Timeout during parsing: %s", reply)
    finally:
        logging.getLogger().removeHandler(kept)
    captured = capsys.readouterr()
    assert "x^{" not in captured.out and "x^{" not in captured.err
    assert [m for m in kept.messages if "x^{" in m] == []
