"""rapidfuzz's Levenshtein distance is the textbook one, Unicode included."""

from hypothesis import given, settings
from hypothesis import strategies as st

from orandcar_builder.verify.levenshtein import distance, reference_distance

# Mixed alphabets so random strings share characters often enough to make alignments matter.
_SMALL = st.text(alphabet="abcAB é😀ß\u0301", max_size=12)
_ANY = st.text(max_size=30)  # every code point hypothesis draws, astral planes included


def test_known_distances():
    assert distance("kitten", "sitting") == reference_distance("kitten", "sitting") == 3
    assert distance("", "abc") == reference_distance("", "abc") == 3
    assert distance("abc", "") == reference_distance("abc", "") == 3
    assert distance("", "") == reference_distance("", "") == 0
    assert distance("flaw", "lawn") == reference_distance("flaw", "lawn") == 2


def test_code_points_not_graphemes():
    # "é" precomposed vs "e" + combining acute: one substitution plus one insertion.
    assert distance("\u00e9", "e\u0301") == reference_distance("\u00e9", "e\u0301") == 2
    assert distance("😀", "😁") == reference_distance("😀", "😁") == 1


@settings(max_examples=400, deadline=None)
@given(_SMALL, _SMALL)
def test_rapidfuzz_equals_dp_on_small_alphabet(a, b):
    assert distance(a, b) == reference_distance(a, b)


@settings(max_examples=300, deadline=None)
@given(_ANY, _ANY)
def test_rapidfuzz_equals_dp_on_any_unicode(a, b):
    assert distance(a, b) == reference_distance(a, b)


@settings(max_examples=100, deadline=None)
@given(_SMALL, _SMALL, _SMALL)
def test_metric_properties(a, b, c):
    assert distance(a, b) == distance(b, a)
    assert distance(a, c) <= distance(a, b) + distance(b, c)
    assert (distance(a, b) == 0) == (a == b)
