"""Edit distance: rapidfuzz for the rules, a plain dynamic programme as the readable reference.

Both count single-character insertions, deletions and substitutions, one unit each, over Python
code points (so "é" written as one code point and as "e" + combining accent differ).
"""

from __future__ import annotations

from rapidfuzz.distance import Levenshtein as _Levenshtein


def distance(a: str, b: str) -> int:
    """Levenshtein distance between ``a`` and ``b`` (rapidfuzz, bit-parallel)."""
    return _Levenshtein.distance(a, b)


def reference_distance(a: str, b: str) -> int:
    """The same distance by the textbook row-by-row dynamic programme."""
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(min(
                previous[j] + 1,  # delete char_a
                current[j - 1] + 1,  # insert char_b
                previous[j - 1] + (char_a != char_b),  # substitute (free when equal)
            ))
        previous = current
    return previous[-1]
