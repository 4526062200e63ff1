"""``relaxed``: pix2struct's relaxed_correctness, with a reference of 0 needing exactly 0."""

import pytest

from orandcar_builder.verify import relaxed, verify


def test_pix2struct_metrics_test_pairs():
    # pix2struct metrics_test.py reports relaxed_accuracy 62.5 on these eight pairs.
    predictions = ["abc", "abc", "Abc", "100%", "100%", "100%", "100%", "Don't"]
    targets = [["abc"], ["Abc"], ["abc"], ["96%"], ["94%"], ["0.96"], ["0.94"], ["Won't"]]
    hits = [relaxed.score(p, t) for p, t in zip(predictions, targets)]
    assert hits == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    assert sum(hits) / len(hits) == 0.625


@pytest.mark.parametrize(
    "prediction, reference, correct",
    [
        ("105", "100", True),  # exactly 5%: kept (<=)
        ("105.01", "100", False),
        ("95", "100", True),
        ("-95", "-100", True),  # relative to |reference|
        ("96%", "0.96", True),  # a percent sign divides by 100
        ("96%", "96", False),  # ... so the percentage does not equal its bare number
        ("96", "96%", False),
        ("5%%", "0.05", True),  # every trailing % goes (rstrip), divided once
        ("1e2", "100", True),  # float() syntax
        (" 100 ", "100", True),  # float() ignores surrounding white space
        ("1_000", "1000", True),  # float() accepts digit-group underscores
        ("1,000", "1000", False),  # ... but not commas: compared as text
        ("$5", "5", False),
        ("Yes", "yes", True),  # text: case-insensitive exact
        ("yes ", "yes", False),  # text: no stripping
        ("nan", "nan", False),  # a NaN reference matches no number (pix2struct too)
        ("inf", "inf", False),
        # The deliberate deviation: pix2struct falls back to text for a zero reference.
        ("0.0", "0", True),
        ("0%", "0", True),
        ("-0", "0", True),
        ("0.001", "0", False),  # no relative tolerance around 0
        ("0", "0", True),
        ("zero", "0", False),
    ],
)
def test_correct_vectors(prediction, reference, correct):
    assert relaxed.correct(prediction, reference) is correct
    assert relaxed.reference_score(prediction, [reference]) == float(correct)


def test_best_over_references():
    assert relaxed.score("12", ["7", "12.5"]) == 1.0
    assert relaxed.score("12", []) == 0.0


def test_verify_tries_the_first_line():
    decision = verify("relaxed", "42\nThe bar for 2019 reads 42.", ["41"])
    assert decision.passed and decision.candidate == "first_line"


def test_to_number():
    assert relaxed.to_number("12.5%") == pytest.approx(0.125)
    assert relaxed.to_number("twelve") is None
    assert relaxed.to_number("%") is None
