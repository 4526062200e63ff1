"""``math``: math-verify with bare LaTeX wrapped, thread-safe timeouts, and its leniencies pinned."""

import threading

import pytest

from orandcar_builder.verify import math_answer, verify


@pytest.mark.parametrize(
    "text, parsable",
    [
        ("\\frac{1}{2}", "$\\frac{1}{2}$"),
        ("x^2", "$x^2$"),
        ("3×4", "$3\\times 4$"),  # the shared LaTeX normalisation writes × as \\times
        ("$\\frac{1}{2}$", "$\\frac{1}{2}$"),  # already delimited
        ("\\boxed{5}", "\\boxed{5}"),
        ("(1, 2)", "$(1, 2)$"),  # a bare formula: otherwise read as its last number
        ("2x", "$2x$"),
        ("x = 2", "$x = 2$"),
        ("The answer is 5", "The answer is 5"),  # prose is parsed as it is
        ("10 cm", "10 cm"),
        ("  0.5 ", "0.5"),  # plain numbers too
        ("1e3", "1e3"),
        ("1,000", "1,000"),
        ("50%", "50%"),
    ],
)
def test_parsable(text, parsable):
    assert math_answer.parsable(text) == parsable


@pytest.mark.parametrize("prediction", ["\\frac{L}{n}", "$\\frac{L}{n}$", "L/n"])
def test_frac_l_n_stays_rejected_against_n_minus_1(prediction):
    assert not verify("math", prediction, ["\\frac{L}{n-1}"]).passed
    assert not verify("math", prediction, ["$\\frac{L}{n-1}$"]).passed


@pytest.mark.parametrize(
    "prediction, reference",
    [
        ("\\frac{1}{2}", "0.5"),  # bare LaTeX parses once wrapped
        ("0.5", "\\frac{1}{2}"),
        ("\\dfrac{3}{4}", "0.75"),
        ("A", "A"),  # the same text passes although math-verify parses nothing from it
        ("  x +  1", "x + 1"),
    ],
)
def test_passes(prediction, reference):
    assert verify("math", prediction, [reference]).passed


@pytest.mark.parametrize(
    "prediction, reference",
    [
        ("\\frac{l}{n}", "\\frac{L}{n}"),  # symbols are lower-cased
        ("The answer is 5", "5"),  # numbers in prose are extracted
        ("x = 2", "2"),  # an equation's right-hand side against a bare value
        ("10 cm", "10"),  # units dropped
        ("45^\\circ", "45"),  # degree sign dropped
        ("1,000", "1000"),  # thousands separator dropped
        ("1.414214", "\\sqrt{2}"),  # float rounded to FLOAT_ROUNDING places
        ("50\\%", "0.5"),  # a percentage, once wrapped
        ("2x", "x2"),  # symbolic comparison
        ("\\{2, 1\\}", "\\{1, 2\\}"),  # sets ignore order
    ],
)
def test_documented_leniencies(prediction, reference):
    assert verify("math", prediction, [reference]).passed


@pytest.mark.parametrize(
    "prediction, reference",
    [
        ("(1, 2)", "[1, 2]"),  # open and closed intervals differ
        ("12 and 13", "13"),  # several values in prose: not searched (math-verify would take 13)
        ("3.14159", "\\pi"),  # not equal at 6 places
        ("3", "4"),
        ("a", "b"),
        ("yes", "no"),
    ],
)
def test_rejects(prediction, reference):
    assert not verify("math", prediction, [reference]).passed


def test_timeouts_off_the_main_thread():
    assert math_answer.timeouts() == (math_answer.PARSING_TIMEOUT_SECONDS, math_answer.COMPARISON_TIMEOUT_SECONDS)
    seen = {}

    def work():
        seen["timeouts"] = math_answer.timeouts()
        seen["passed"] = verify("math", "\\frac{2}{4}", ["0.5"]).passed
        seen["reference"] = math_answer.reference_score("\\frac{2}{4}", ["0.5"])

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == {"timeouts": (None, None), "passed": True, "reference": 1.0}


def test_distinct_plain_integers_skip_math_verify(monkeypatch):
    def refuse(*args):
        raise AssertionError("math-verify was called")

    monkeypatch.setattr(math_answer, "_equivalent", refuse)
    assert math_answer.score("12", ["13"]) == 0.0
    assert math_answer.score("-7", ["100000000000000000001"]) == 0.0
    assert math_answer.score("12", ["12"]) == 1.0  # the same text


@pytest.mark.parametrize("prediction, reference", [("100000000000000000001", "100000000000000000000"),
                                                   ("12", "13"), ("-3", "3")])
def test_math_verify_agrees_that_distinct_integers_differ(prediction, reference):
    assert math_answer.reference_score(prediction, [reference]) == 0.0


@pytest.mark.parametrize("text", ["4 x 2 = 8", "$8 + $10 = $18", "5 apples and 3 pears", "The area of ABEF is 8 cm^2 here"])
def test_the_rule_does_not_search_work_or_sentences(text):
    """A calculation, several values in prose or a sentence is not searched for the value (the
    reply's conclusion is another candidate: see test_verify_extract)."""
    assert math_answer.score(text, ["8"]) == 0.0 and math_answer.score(text, ["3"]) == 0.0
    assert math_answer.score(text, [text]) == 1.0  # the reference's own text still passes
