"""``anls`` follows the RRC script as lmms-eval copies it; vectors worked out from that code."""

import pytest

from orandcar_builder.verify import anls, verify


@pytest.mark.parametrize(
    "prediction, references, expected",
    [
        ("Hello World", ["hello world"], 1.0),  # case is normalised
        ("  hello   world ", ["hello world"], 1.0),  # white space is collapsed
        # Length convention: distance between normalised strings (1, the "!"), divided by the
        # longer *raw* string (14). pix2struct would give 1 - 3/14 (it keeps the spaces).
        ("hello   world!", ["hello world"], 1 - 1 / 14),
        # len("ß".upper()) == 2: distance 1 over length 2 is 0.5, which the threshold keeps.
        ("ß", ["s"], 0.5),
        ("abcd", ["abef"], 0.5),  # exactly at the threshold: kept (pix2struct agrees, nl <= 0.5)
        ("abcde", ["abxyz"], 0.0),  # similarity 0.4 < 0.5
        ("abc", ["xyz"], 0.0),
        ("cat", ["dog", "cats"], 0.75),  # best over references
        ("", [""], 1.0),  # the script's length == 0 branch
        (" ", [""], 1.0),  # raw length 1, normalised distance 0
        ("cat", [], 0.0),  # nothing to match
    ],
)
def test_score_vectors(prediction, references, expected):
    assert anls.score(prediction, references) == pytest.approx(expected, abs=1e-12)
    assert anls.reference_score(prediction, references) == pytest.approx(expected, abs=1e-12)


def test_pix2struct_metrics_test_pairs():
    # pix2struct metrics_test.py reports anls 47.5 on these eight pairs; no white space or
    # case-expanding characters, so the two length conventions agree here.
    predictions = ["abc", "abc", "Abc", "100%", "100%", "100%", "100%", "Don't"]
    targets = [["abc"], ["Abc"], ["abc"], ["96%"], ["94%"], ["0.96"], ["0.94"], ["Won't"]]
    mean = sum(anls.score(p, t) for p, t in zip(predictions, targets)) / len(predictions)
    assert mean == pytest.approx(0.475)


@pytest.mark.parametrize("value, passed", [(1.0, True), (0.999, False), (0.5, False), (0.0, False)])
def test_passes_only_full_credit(value, passed):
    assert anls.passes(value) is passed


def test_partial_credit_is_recorded_not_passed():
    decision = verify("anls", "Invoice 1234", ["invoice 1235"])
    assert not decision.passed
    assert decision.score == pytest.approx(1 - 1 / 12)


def test_detail_names_distance_and_length():
    assert anls.detail("hello   world!", ["hello world"]) == (
        "normalised 'hello world!' vs 'hello world': distance 1 / length 14")
