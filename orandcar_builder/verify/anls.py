"""``anls``: Average Normalized Levenshtein Similarity, the DocVQA / InfographicVQA / ST-VQA metric.

For one reference: collapse white space and lower-case both strings, take their edit distance,
divide it by the length of the longer string, and score ``1 - that``; a score below
``THRESHOLD`` counts as 0 (a wrong answer, not a misread one). The item's score is the best over
its references. The rule passes only full credit (``PASS_SCORE``): equal strings once case and
white space are normalised. Anything in between is partial credit, left to the judge.

Implementations disagree on details; this rule follows the RRC evaluation script as lmms-eval
copies it (``lmms_eval/api/metrics.py::anls``):

- normalisation: ``" ".join(s.strip().lower().split())`` on both sides (pix2struct only
  lower-cases and keeps white space as it is);
- length convention: the distance is taken between the *normalised* strings but divided by the
  longer of the two *raw* strings, measured as ``len(s.upper())`` (pix2struct divides by the
  normalised lengths). Extra white space therefore lowers the distance without lowering the
  length, and a character that upper-cases to two ("ß" -> "SS") counts twice;
- two empty strings score 1.0 (the script's ``length == 0`` branch); no reference scores 0.0;
- the threshold keeps a similarity of exactly 0.5 (pix2struct agrees: ``nl <= theta``).
"""

from __future__ import annotations

from typing import Optional, Sequence

from .levenshtein import distance, reference_distance

NAME = "anls"
VERSION = "1"
THRESHOLD = 0.5  # similarities below this score 0
PASS_SCORE = 1.0  # only an exact match after normalisation passes
CONSTANTS = ("THRESHOLD", "PASS_SCORE")


def normalise(text: str) -> str:
    return " ".join(text.strip().lower().split())


def length(prediction: str, reference: str) -> int:
    """The denominator: the longer raw string, counted in upper case as the RRC script does."""
    return max(len(prediction.upper()), len(reference.upper()))


def similarity(prediction: str, reference: str) -> float:
    """Thresholded normalised Levenshtein similarity of one prediction to one reference."""
    denominator = length(prediction, reference)
    if denominator == 0:
        return 1.0
    value = 1.0 - distance(normalise(reference), normalise(prediction)) / denominator
    return value if value >= THRESHOLD else 0.0


def score(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> float:
    return max((similarity(prediction, ref) for ref in references), default=0.0)


def passes(value: float) -> bool:
    return value >= PASS_SCORE


def detail(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> str:
    """One line for ``check-answer``: the normalised prediction and its distance to the best reference."""
    if not references:
        return "no reference"
    best = max(references, key=lambda ref: similarity(prediction, ref))
    return (f"normalised {normalise(prediction)!r} vs {normalise(best)!r}: distance "
            f"{distance(normalise(best), normalise(prediction))} / length {length(prediction, best)}")


def reference_score(prediction, references, options=None):
    best = 0.0
    for ref in references:
        gt = " ".join(ref.strip().lower().split())
        det = " ".join(prediction.strip().lower().split())
        longest = max(len(ref.upper()), len(prediction.upper()))
        nl = 0.0 if longest == 0 else reference_distance(gt, det) / longest
        value = 1 - nl
        if value < THRESHOLD:
            value = 0.0
        best = max(best, value)
    return best
