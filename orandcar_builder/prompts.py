"""The exact question text a model receives.

``question_text`` is the single place where the prompt is composed; the build stores its result
in ``qa.question`` and hands the same string to the engine, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from .families import Family
from .vocab import OPTION_LETTERS

# A question already carrying a lettered block ("A. cat", "(A) cat", "A) cat", "A: cat" on their own lines).
_LETTERED_LINE = re.compile(r"^\s*\(?([A-Z])[.):]\s+\S", re.MULTILINE)
INSTRUCTION_SEPARATOR = "\n"  # between the question and its option block


def option_block(options: Sequence[str]) -> str:
    """The options as lines ``A. first``, ``B. second`` ... (at most 26), joined by newlines."""
    if len(options) > len(OPTION_LETTERS):
        raise ValueError(f"{len(options)} options: at most {len(OPTION_LETTERS)} are supported")
    return "\n".join(f"{OPTION_LETTERS[i]}. {opt}" for i, opt in enumerate(options))


def has_lettered_block(question: str) -> bool:
    """True when the question already lists options on their own lines: a line lettered A
    followed by a line lettered B (``A.``, ``(A)``, ``A)`` or ``A:``), anywhere in the text."""
    if _LETTERED_LINE.search(question) is None:  # most questions have no lettered line at all
        return False
    letters = [m.group(1) for m in _LETTERED_LINE.finditer(question)]
    return any(a == "A" and b == "B" for a, b in zip(letters, letters[1:]))


def question_text(question: str, family: Family, options: Optional[Sequence[str]] = None) -> str:
    """Source question, its options as a lettered block on the next line (when not already
    there), then the instruction of ``family`` (a ``families.Family``: the build's, looked up in
    the registry the build carries) after its separator (a newline unless a recipe says
    otherwise)."""
    text = question.rstrip()
    if options and not has_lettered_block(question):
        text += INSTRUCTION_SEPARATOR + option_block(options)
    if family.instruction:
        text += family.separator + family.instruction
    return text
