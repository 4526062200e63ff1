"""Whether a text reads as a sentence rather than as an answer.

``math`` and ``choice`` find a value inside a text (math-verify picks a number out of prose; a
capital letter standing alone names an option), so given a sentence of reasoning they would pass
it on a value it merely mentions: "The area of the rectangle ABEF is 4 x 2 = 8 cm^2." is not the
answer 8. Those two rules search only texts that are not sentences; a text that is exactly the
reference (``math``) or exactly one option's text or letter (``choice``) still passes whatever its
length. ``choice`` does not count the words of its options' texts: "(D) All of the above" names
an option, it does not argue.

A text is a sentence when it has ``SENTENCE_WORDS`` or more words: runs of two or more letters
(any script) that are not a LaTeX command (``\\frac``, ``\\text``) and not inside a longer run of
letters and digits. Units and short labels stay under it ("8 cm^2", "45 degrees", "(B) no",
"1 employee per year"); a clause does not ("There are 5 of them", "the tower is a square").
"""

from __future__ import annotations

import re

SENTENCE_WORDS = 4
PROSE_WORD = re.compile(r"(?<![\\\w])[^\W\d_]{2,}(?!\w)")


def is_sentence(text: str, ignored: frozenset = frozenset()) -> bool:
    """Whether ``text`` has ``SENTENCE_WORDS`` or more words (see the module docstring), not
    counting the words in ``ignored`` (case-folded; ``choice`` passes the words of its options)."""
    return len([w for w in PROSE_WORD.findall(text) if w.casefold() not in ignored]) >= SENTENCE_WORDS
