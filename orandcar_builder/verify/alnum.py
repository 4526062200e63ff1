"""``alnum``: the scene-text recognition protocol.

Fold case, drop every character outside [a-z0-9] on both sides, then require equality with
any reference. This is the case-insensitive alphanumeric protocol used to score IIIT5K, CUTE80,
SVT, IC13/15 and their successors: "HELLO!", "hello" and "Hel-lo" are the same word.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

NAME = "alnum"
VERSION = "1"
KEPT_CHARACTERS = "[a-z0-9]"  # after case folding; everything else is dropped
CONSTANTS = ("KEPT_CHARACTERS",)

_DROP = re.compile(r"[^a-z0-9]")


def normalise(text: str) -> str:
    # str.lower, not casefold: the protocol is defined on ASCII and casefold maps "ß" to "ss".
    return _DROP.sub("", text.lower())


def score(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> float:
    pred = normalise(prediction)
    return 1.0 if any(pred == normalise(ref) for ref in references) else 0.0


def passes(value: float) -> bool:
    return value == 1.0


def reference_score(prediction, references, options=None):
    def norm(x):
        return "".join(ch for ch in x.lower() if ch in "abcdefghijklmnopqrstuvwxyz0123456789")

    return 1.0 if any(norm(prediction) == norm(r) for r in references) else 0.0
