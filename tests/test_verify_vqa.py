"""``vqa``: the official VQA normalisation and leave-one-out accuracy (GT-Vision-Lab/VQA vqaEval.py).

Expected values are worked out by hand from the official processPunctuation, processDigitArticle
and evaluate code.
"""

import pytest

from orandcar_builder.verify import verify, vqa


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Yes!", "yes"),  # "!" not next to a space: becomes a space, then split away
        ("hello, world", "hello world"),  # ", " present: the comma is deleted
        ("red,blue", "red blue"),  # no space, no digit group: the comma becomes a space
        ("1,000", "1000"),  # a digit-comma-digit group: every mark is deleted
        ("1,000 (approx)", "1000 approx"),
        ("(approx) 5", "approx 5"),  # ") " deletes ")"; "(" has no space beside it: a space
        ("e-mail", "e mail"),
        ("x - y", "x y"),
        ("cat/dog", "cat dog"),
        ("3.5", "3.5"),  # a period before a digit stays
        (".5", ".5"),
        ("U.S.A.", "usa"),
        ("The end.", "end"),
        ("The two dogs", "2 dogs"),  # number word to digit, article dropped
        ("None", "0"),
        ("a an the", ""),
        ("two\tdogs\n", "2 dogs"),  # tabs and newlines are spaces
        ("dont", "don't"),
        ("Dont", "don't"),  # lower-cased before the table is consulted
        ("couldn'tve", "couldn't've"),
        ("couldntve", "couldntve"),  # the table lacks forms missing both apostrophes
        ("Im", "im"),  # the table's capitalised keys can never match lower-cased words
        ("shes", "shes"),  # the table maps "she's" to itself and has no "shes"
        ("lets", "lets"),
        ("somebody'd", "somebodyd"),  # the one entry that removes an apostrophe
        ("it's", "it's"),  # the current script no longer treats ' as punctuation
    ],
)
def test_normalise_vectors(text, expected):
    assert vqa.normalise(text) == expected


def test_at_most_32_periods_are_stripped():
    # The script passes re.UNICODE (32) as re.sub's count argument.
    assert vqa.normalise("x." * 40) == "x" * 32 + "x." * 8
    assert vqa.MAX_PERIODS_STRIPPED == 32


def test_contraction_table_has_the_official_size():
    # 120 official entries, less the two that map a word to itself ("let's", "she's").
    assert len(vqa.CONTRACTIONS) == 118
    assert vqa.CONTRACTIONS["hed've"] == vqa.CONTRACTIONS["he'dve"] == "he'd've"
    assert vqa.CONTRACTIONS["'ows'at"] == "'ow's'at"


def _refs(matching, total, answer="2", other="3"):
    return [answer] * matching + [other] * (total - matching)


@pytest.mark.parametrize(
    "matching, total, score, passed",
    [
        (4, 10, 1.0, True),
        (3, 10, 0.9, True),  # official: 3 x 2/3 + 7 x 1, over 10
        (2, 10, 0.6, False),  # 2 x 1/3 + 8 x 2/3, over 10
        (1, 10, 0.3, False),
        (0, 10, 0.0, False),
        (3, 5, 0.8, True),  # OK-VQA's five answers
        # Fewer than four references: the divisor is the number of other references.
        (3, 3, 1.0, True),
        (2, 3, 2 / 3, False),
        (2, 2, 1.0, True),
        (1, 2, 0.5, False),
        (1, 1, 1.0, True),  # the official script would score 0: no other reference
        (0, 1, 0.0, False),
    ],
)
def test_leave_one_out_accuracy(matching, total, score, passed):
    refs = _refs(matching, total)
    assert vqa.decide("two", refs) == (pytest.approx(score), passed)
    assert vqa.reference_decide("two", refs) == (pytest.approx(score), passed)


def test_verify_uses_decide_not_passes():
    decision = verify("vqa", "Two.", _refs(3, 10))
    assert decision.passed and decision.score == pytest.approx(0.9)
    assert not vqa.passes(decision.score)  # the score alone would not pass it


def test_references_are_normalised_like_the_answer():
    # The official script leaves human answers' number words alone (its annotations are already
    # normalised); pool references are not, so both sides are normalised here.
    assert verify("vqa", "2", ["Two"]).passed
    assert verify("vqa", "the Bridgestone", ["bridgestone"]).passed


def test_no_references_scores_zero():
    assert vqa.decide("two", []) == (0.0, False)


def test_detail_counts_matches():
    assert vqa.detail("Two.", _refs(3, 10)) == "normalised '2': 3 of 10 references match (3 needed)"
