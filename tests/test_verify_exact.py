"""``exact``: strip, case-fold, collapse white space, compare."""

import pytest

from orandcar_builder.verify import exact


@pytest.mark.parametrize(
    "prediction, reference, passed",
    [
        ("  Paris ", "paris", True),
        ("New   York\tCity", "new york city", True),
        ("Straße", "STRASSE", True),  # casefold, not lower
        ("Paris.", "Paris", False),  # punctuation counts
        ("", "", True),
        ("a b", "ab", False),
    ],
)
def test_vectors(prediction, reference, passed):
    assert exact.score(prediction, [reference]) == float(passed)
    assert exact.reference_score(prediction, [reference]) == float(passed)


def test_no_references():
    assert exact.score("x", []) == 0.0
