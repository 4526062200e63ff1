"""``relaxed``: relaxed accuracy for chart and plot questions (ChartQA, PlotQA).

Follows pix2struct ``metrics.py::relaxed_correctness``, the implementation the ChartQA numbers
are reported with:

- a string is a number when Python's ``float()`` reads it; a trailing ``%`` (all trailing ``%``
  signs) is removed and the number divided by 100, so "96%" equals "0.96" but not "96". Other
  ChartQA scripts strip the sign without dividing (then "96%" equals "96"); this rule does not.
  Thousands separators, units and currency signs make a string non-numeric ("1,000", "$5");
- when both the answer and the reference are numbers, the answer is correct when
  ``|answer - reference| / |reference| <= MAX_RELATIVE_CHANGE``;
- otherwise both are compared as strings, case-insensitively and exactly;
- the item's score is the best over its references: 1.0 or 0.0. The rule passes at 1.0.

One deliberate deviation: pix2struct tests the reference with ``if target_float:``, so a
reference of 0 (falsy) falls back to string comparison, and "0.0" or "0%" are rejected against
"0". Here a reference equal to 0 needs an exact numeric match instead: any answer whose number
is 0 passes, any other number fails (a relative change from 0 is undefined). NaN and infinite
references never match a number, as in pix2struct.
"""

from __future__ import annotations

from typing import Optional, Sequence

NAME = "relaxed"
VERSION = "1"
MAX_RELATIVE_CHANGE = 0.05
PERCENT_SIGN = "%"
CONSTANTS = ("MAX_RELATIVE_CHANGE", "PERCENT_SIGN")


def to_number(text: str) -> Optional[float]:
    """The number ``text`` states, a percentage as a fraction; None when it is not a number."""
    try:
        if text.endswith(PERCENT_SIGN):
            return float(text.rstrip(PERCENT_SIGN)) / 100.0
        return float(text)
    except ValueError:
        return None


def correct(prediction: str, reference: str) -> bool:
    """Relaxed correctness of one prediction against one reference."""
    answer, target = to_number(prediction), to_number(reference)
    if answer is not None and target is not None:
        if target == 0:
            return answer == 0
        return abs(answer - target) / abs(target) <= MAX_RELATIVE_CHANGE
    return prediction.lower() == reference.lower()


def score(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> float:
    return 1.0 if any(correct(prediction, ref) for ref in references) else 0.0


def passes(value: float) -> bool:
    return value == 1.0


def detail(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> str:
    answer = to_number(prediction)
    if answer is None:
        return "not a number: compared as text, case-insensitively"
    parts = []
    for ref in references:
        target = to_number(ref)
        if target is None:
            parts.append(f"{ref!r} is text")
        elif target == 0:
            parts.append(f"{ref!r} is 0: needs exactly 0")
        else:
            parts.append(f"{ref!r}: relative change {abs(answer - target) / abs(target):.4g}")
    return f"number {answer!r}; " + "; ".join(parts)


def reference_score(prediction, references, options=None):
    def number(text):
        try:
            if text.endswith("%"):
                return float(text.rstrip("%")) / 100
            return float(text)
        except ValueError:
            return None

    for ref in references:
        p, t = number(prediction), number(ref)
        if p is not None and t is not None and t == 0:
            ok = p == 0
        elif p is not None and t is not None:
            ok = abs(p - t) / abs(t) <= MAX_RELATIVE_CHANGE
        else:
            ok = prediction.lower() == ref.lower()
        if ok:
            return 1.0
    return 0.0
