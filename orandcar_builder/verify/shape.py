"""Whether a text reads as a sentence rather than as an answer.

``math`` and ``choice`` find a value inside a text (math-verify picks a number out of prose; a
capital letter standing alone names an option), so given a sentence of reasoning they would pass
it on a value it merely mentions: "The area of the rectangle ABEF is 4 x 2 = 8 cm^2." is not the
answer 8. Those two rules search only texts that are not sentences; a text that is exactly the
reference (``math``) or exactly one option's text or letter (``choice``) still passes whatever its
length. ``choice`` does not count the words of its options' texts: "(D) All of the above" names
an option, it does not argue.

``math`` also leaves unsearched a text that shows work (``shows_work``): a calculation ("4 x 2
= 8": a digit before an equals sign), a ratio or a time ("1:2", which math-verify would read as
one of its numbers) or prose naming several values ("5 apples and 3 pears"),
where math-verify would pick one of the numbers; "x = 2", "(1, 2)" and "\\frac{1}{2} m" are
answers.

A text is a sentence when it has ``SENTENCE_WORDS`` or more words: runs of two or more letters
(any script) that are not a LaTeX command (``\\frac``, ``\\text``) and not inside a longer run of
letters and digits. Units and short labels stay under it ("8 cm^2", "45 degrees", "(B) no",
"1 employee per year"); a clause does not ("There are 5 of them", "the tower is a square").
"""

from __future__ import annotations

import re

SENTENCE_WORDS = 4
PROSE_WORD = re.compile(r"(?<![\\\w])[^\W\d_]{2,}(?!\w)")
# A calculation: a digit before an equals sign ("4 x 2 = 8", "$8 + $10 = $18"); "x = 2" is none.
CALCULATION = re.compile(r"\d[^=\n]*[=＝]")
# A ratio or a time: math-verify reads "1:2" or "4:30" as one of its numbers.
RATIO = re.compile(r"\d\s*:\s*\d")
# A number as written in prose, not inside LaTeX braces, a name or a power ("\frac{1}{2}", "x2", "cm^2").
PROSE_NUMBER = re.compile(r"(?<![\w.^_{\\])\d+(?:[.,]\d+)*")


def shows_work(text: str) -> bool:
    """Whether ``text`` is a calculation, a ratio or a time, or names several values in prose, so
    that a value found in it need not be its answer: "4 x 2 = 8", "1:2", "5 apples and 3 pears"."""
    if CALCULATION.search(text) or RATIO.search(text):
        return True
    return bool(PROSE_WORD.search(text)) and len(PROSE_NUMBER.findall(text)) >= 2


def is_sentence(text: str, ignored: frozenset = frozenset()) -> bool:
    """Whether ``text`` has ``SENTENCE_WORDS`` or more words (see the module docstring), not
    counting the words in ``ignored`` (case-folded; ``choice`` passes the words of its options)."""
    return len([w for w in PROSE_WORD.findall(text) if w.casefold() not in ignored]) >= SENTENCE_WORDS
