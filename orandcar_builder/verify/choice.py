"""``choice``: multiple choice (MMBench, MMMU, ScienceQA, AI2D, SEED).

The options are the option texts in order (letter A is ``options[0]``); the reference is a
letter. The rule extracts exactly one option letter from the answer and passes when it is the
reference letter. Extraction, first rule that applies wins:

1. the whole answer is the text of exactly one option (case-folded, white space collapsed,
   ``MARKUP`` and trailing periods ignored): that option's letter;
2. the whole answer is one letter once ``DECORATION`` (brackets, periods, bold markup, white
   space) is stripped from its ends ("B", "(B)", "B.", "**B**", "b"): that letter;
3. the answer's words, after every ``MARKUP`` character becomes a space, include capital option
   letters standing alone ("The answer is B", "B) cat", "Answer: **B**"): exactly one distinct
   letter is the answer; two or more ("A or B", "B, not C") extract nothing;
4. no letter stands alone, and exactly one option's text occurs in the answer as whole words
   ("It says STOP."): that option's letter.

Valid letters are the first ``len(options)`` of ``OPTION_LETTERS``; without options, all of
them. Rule 3 is the token counting of VLMEvalKit's ``can_infer_option`` (same markup set) and
rule 4 its ``can_infer_text``, restricted to whole words. Without options, a capital "I" or a
sentence-initial "A" counts as a letter, so "I think C" extracts nothing: give the options.

A reference written as "(B)", "b" or "B." is read as B, and a reference equal to one option's
text as that option's letter; any other reference matches nothing. Score 1.0 or 0.0.
"""

from __future__ import annotations

from typing import Optional, Sequence

NAME = "choice"
VERSION = "1"
OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MARKUP = ".()[],:;!*#{}"  # turned into spaces before letters are looked for
DECORATION = " \t\r\n*_()[]."  # stripped from both ends of a bare-letter answer
CONSTANTS = ("OPTION_LETTERS", "MARKUP", "DECORATION")

_MARKUP_TABLE = str.maketrans({char: " " for char in MARKUP})


def valid_letters(options: Optional[Sequence[str]]) -> str:
    return OPTION_LETTERS[: len(options)] if options else OPTION_LETTERS


def bare_letter(text: str, options: Optional[Sequence[str]] = None) -> Optional[str]:
    """The letter ``text`` is once ``DECORATION`` is stripped from its ends ("(b)." -> "B")."""
    core = text.strip(DECORATION)
    if len(core) == 1 and core.isascii() and core.upper() in valid_letters(options):
        return core.upper()
    return None


def _text_key(text: str) -> str:
    return " ".join(text.translate(_MARKUP_TABLE).casefold().split())


def _option_with_text(text: str, options: Optional[Sequence[str]]) -> Optional[int]:
    if not options:
        return None
    key = _text_key(text)
    hits = [i for i, option in enumerate(options) if key and _text_key(option) == key]
    return hits[0] if len(hits) == 1 else None


def _option_inside(text: str, options: Sequence[str]) -> Optional[int]:
    padded = f" {_text_key(text)} "
    hits = [i for i, option in enumerate(options) if _text_key(option) and f" {_text_key(option)} " in padded]
    return hits[0] if len(hits) == 1 else None


def extract_letter(answer: str, options: Optional[Sequence[str]] = None) -> Optional[str]:
    """The one option letter ``answer`` names, or None when it names none or several."""
    letters = valid_letters(options)
    index = _option_with_text(answer, options)
    if index is not None:
        return letters[index]
    bare = bare_letter(answer, options)
    if bare is not None:
        return bare
    named = {word for word in answer.translate(_MARKUP_TABLE).split() if len(word) == 1 and word in letters}
    if named:
        return named.pop() if len(named) == 1 else None
    index = _option_inside(answer, options) if options else None
    return letters[index] if index is not None else None


def reference_letter(reference: str, options: Optional[Sequence[str]] = None) -> Optional[str]:
    """The letter a reference names: a letter in any of the bare forms, or one option's text."""
    bare = bare_letter(reference, options)
    if bare is not None:
        return bare
    index = _option_with_text(reference, options)
    return valid_letters(options)[index] if index is not None else None


def score(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> float:
    letter = extract_letter(prediction, options)
    if letter is None:
        return 0.0
    return 1.0 if any(reference_letter(ref, options) == letter for ref in references) else 0.0


def passes(value: float) -> bool:
    return value == 1.0


def detail(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> str:
    letter = extract_letter(prediction, options)
    wanted = ", ".join(str(reference_letter(ref, options)) for ref in references)
    return f"extracted {letter or 'no single letter'}; reference {wanted}"


def reference_score(prediction, references, options=None):
    letters = list(OPTION_LETTERS[: len(options)] if options else OPTION_LETTERS)

    def spaced(text):
        for char in MARKUP:
            text = text.replace(char, " ")
        return text

    def key(text):
        return " ".join(spaced(text).casefold().split())

    def option_equal_to(text):
        found = [i for i, opt in enumerate(options or []) if key(text) != "" and key(opt) == key(text)]
        return letters[found[0]] if len(found) == 1 else None

    def bare(text):
        while text and text[0] in DECORATION:
            text = text[1:]
        while text and text[-1] in DECORATION:
            text = text[:-1]
        if text in letters or text in [letter.lower() for letter in letters]:
            return text.upper()
        return None

    def extract(text):
        if option_equal_to(text) is not None:
            return option_equal_to(text)
        if bare(text) is not None:
            return bare(text)
        named = set(word for word in spaced(text).split() if word in letters)
        if named:
            return named.pop() if len(named) == 1 else None
        inside = [i for i, opt in enumerate(options or []) if key(opt) != "" and f" {key(opt)} " in f" {key(text)} "]
        return letters[inside[0]] if len(inside) == 1 else None

    letter = extract(prediction)
    if letter is None:
        return 0.0
    for ref in references:
        ref_letter = bare(ref) if bare(ref) is not None else option_equal_to(ref)
        if ref_letter == letter:
            return 1.0
    return 0.0
