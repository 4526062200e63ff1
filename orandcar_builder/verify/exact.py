"""``exact``: the fallback for families without a benchmark protocol.

Strip, case-fold (``str.casefold``, so "Straße" equals "STRASSE") and collapse every run of white
space to one space on both sides, then require equality with any reference.
"""

from __future__ import annotations

from typing import Optional, Sequence

NAME = "exact"
VERSION = "1"
CASE_FOLD = "str.casefold"  # the folding applied before comparison
CONSTANTS = ("CASE_FOLD",)


def normalise(text: str) -> str:
    return " ".join(text.casefold().split())


def score(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> float:
    answer = normalise(prediction)
    return 1.0 if any(answer == normalise(ref) for ref in references) else 0.0


def passes(value: float) -> bool:
    return value == 1.0


def detail(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> str:
    return f"normalised {normalise(prediction)!r} vs " + ", ".join(repr(normalise(r)) for r in references)


def reference_score(prediction, references, options=None):
    def norm(text):
        words, word = [], ""
        for char in text.casefold():
            if char.isspace():
                if word:
                    words.append(word)
                word = ""
            else:
                word += char
        if word:
            words.append(word)
        return " ".join(words)

    return 1.0 if norm(prediction) in [norm(r) for r in references] else 0.0
