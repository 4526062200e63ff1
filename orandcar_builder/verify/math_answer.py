"""``math``: mathematical answers (MathVista, MathVerse, MATH-V), decided by math-verify.

An answer passes when

1. it is the reference text itself, once white space is collapsed (math-verify alone rejects
   identical answers it cannot parse, such as a word or an option letter), or
2. it is not a sentence (``shape.is_sentence``: ``SENTENCE_WORDS`` words or more, so "The area
   of the rectangle ABEF is 4 x 2 = 8 cm^2." is not searched for a number), it shows no work
   (``shape.shows_work``: not a calculation such as "4 x 2 = 8", not prose naming several values
   such as "5 apples and 3 pears") and
   ``math_verify.verify(parse(reference), parse(answer))`` holds (reference first: the call is
   not symmetric), with ``FLOAT_ROUNDING`` and ``NUMERIC_PRECISION`` as given below.

A text that is one of ``NUMBER_WORDS`` ("two", "Three"), markup aside, is read as its number
(math-verify reads no number words): "There are two bars." concludes "two", which equals 2.

Explicit statements ("The answer is 8.", ``\\boxed{0.6}``) are found before this rule runs, by
final-answer extraction (``verify/extract.py``), which hands the rule the span "8" or "0.6".

Before anything else the shared LaTeX normalisation (``verify/latex.py``, ``clean_latex`` with
the delimiters kept) rewrites the text: ``\\mathrm{e}`` is ``e`` (math-verify stops at
``\\mathrm``: "1+\\frac{1}{\\mathrm{e}}" read as 1), an escaped dollar goes ("\\$16386.17"),
punctuation before a closing delimiter goes ("$2^{10}.$", which math-verify reads as 2). The
value then compared is ``value_text``'s: a ratio of two numbers is their quotient ("1:1" equals
1, "1: 2" is not 2), a mixed number its value ("11 5/6"; "11 6/6" and "4 0/0" are no value), an
equality chain of numbers whose sides all agree its last side ("\\boxed{3 \\cdot 2 \\cdot 1 = 6}"
is 6), numbers on several lines no value. A formula with an operator between terms is a formula
even with a word of letters ("158 + LK" has a free symbol: it is not 158). Two numbers
math-verify equates must agree to the rounding's own reach, and below ``TINY`` to
``RELATIVE_TOLERANCE`` (1/2^98 is not 1/2^99), and values written with an ellipsis are compared
as text (math-verify compares the listed terms).

Before parsing, text without a math delimiter (``MATH_DELIMITERS``) is wrapped in ``$...$`` when
it carries LaTeX markup (``LATEX_MARKUP``), or when it is a formula: only
``FORMULA_CHARACTERS``, no word of two or more letters, and not a plain number. math-verify
extracts nothing from bare LaTeX such as ``\\frac{1}{2}``, reads ``50\\%`` bare as 50 but
``$50\\%$`` as 0.5, and reads a bare ``(1, 2)`` as its last number, 2, where ``$(1, 2)$`` is an
open interval. Prose and plain numbers are parsed as they are (math-verify finds the number in
"The answer is 5"; ``$1e3$`` would read as e times 3).

math-verify's timeouts use ``signal.alarm``, which only works in the main thread; elsewhere this
rule passes ``parsing_timeout=None`` and ``timeout_seconds=None`` (no time limit) instead of
failing. Parse results are cached per text and comparisons per pair; two different integers
written plainly ("12", "-7") are rejected without calling math-verify (it cannot equate them).

Known leniencies (math-verify's behaviour; tests pin each one):

- symbols are lower-cased: ``\\frac{L}{n}`` equals ``\\frac{l}{n}``; ``\\frac{L}{n}`` still
  differs from ``\\frac{L}{n-1}``;
- a number in short prose is extracted: "5 apples" equals 5 (prose with several numbers, such
  as "12 and 13", is not searched);
- an equation's right-hand side is compared with a bare value: "x = 2" equals 2;
- units, degree signs and thousands separators are dropped: "10 cm" equals 10, "45^\\circ"
  equals 45, "1,000" equals 1000;
- a float answer equals a closed form it rounds to at ``FLOAT_ROUNDING`` places: 1.414214
  equals ``\\sqrt{2}``; 1/2 equals 0.5; ``50\\%`` equals 0.5;
- expressions are compared symbolically: ``2x`` equals ``x2``; sets ignore order.

Score 1.0 or 0.0; the rule passes at 1.0.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from typing import Optional, Sequence

from ..vocab import NO_PICK, WRONG_PICK
from .extract import NUMBER_WORDS
from .latex import clean_latex, latex_key
from .shape import SENTENCE_WORDS, is_sentence, shows_work

NAME = "math"
VERSION = "3"
FINDS_VALUES = True  # finds a value inside a text: see verify/shape.py and candidates.py
PARSING_TIMEOUT_SECONDS = 5
COMPARISON_TIMEOUT_SECONDS = 5
FLOAT_ROUNDING = 6
NUMERIC_PRECISION = 15
MATH_DELIMITERS = ("$", "\\(", "\\[", "\\boxed")
LATEX_MARKUP = ("\\", "^", "_", "{", "π", "×", "÷")
FORMULA_CHARACTERS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ +-*/=<>()[],.!|"
CONSTANTS = ("SENTENCE_WORDS", "NUMBER_WORDS", "FLOAT_ROUNDING", "NUMERIC_PRECISION", "MATH_DELIMITERS", "LATEX_MARKUP", "FORMULA_CHARACTERS",
             "PARSING_TIMEOUT_SECONDS", "COMPARISON_TIMEOUT_SECONDS")
PARSE_CACHE_SIZE = 1 << 14
COMPARISON_CACHE_SIZE = 1 << 16


_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:,\d{3})*)?(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z]{2,}")
_PLAIN_INTEGER = re.compile(r"-?[1-9][0-9]*|0")
_FORMULA = frozenset(FORMULA_CHARACTERS)
_OPERATION = re.compile(r"[\w)]\s*[-+*/^]\s*[\w(]")


def is_formula(text: str) -> bool:
    """Formula characters only, not a plain number, and no word ("(1, 2)", "2x", "x = 2") or an
    operator between terms ("158 + LK": an expression with free symbols, not the number 158)."""
    if not set(text) <= _FORMULA or _PLAIN_NUMBER.fullmatch(text) is not None:
        return False
    return not _WORD.search(text) or bool(_OPERATION.search(text))


# A ratio of two numbers, "1:2" or "3 : 4", read as their quotient (math-verify reads its last number).
RATIO_VALUE = re.compile(r"\s*([-+]?\d+(?:\.\d+)?)\s*:\s*([-+]?\d+(?:\.\d+)?)\s*")
_COMMAND = re.compile(r"\\[A-Za-z]+")
MIXED_NUMBER = re.compile(r"\s*([-+]?\d{1,9})[ \t]+(\d{1,9})\s*/\s*(\d{1,9})\s*")
# Numbers on two or more lines ("11\n5/6"): several values, not one.
LINES_OF_NUMBERS = re.compile(r"\d[^\n]*\n(?:\s*\n)*[^\n]*\d")
DIVISION_BY_ZERO = re.compile(r"/\s*[-+]?0+(?![\d.])|\\frac\s*\{[^{}]*\}\s*\{\s*0+\s*\}")
# Values written with an ellipsis ("1, 3, 5, \ldots, 2n-1") are compared as text only:
# math-verify compares the listed terms, not the sequences.
ELLIPSIS = re.compile(r"\\[lc]?dots|…|\.\.\.")
RELATIVE_TOLERANCE = 1e-6  # numbers below TINY that math-verify equates must also agree to this
TINY = 10.0 ** -(FLOAT_ROUNDING - 2)
CHAIN_SIDES = 8  # an equality chain of more sides than this is left as it is


def _numeric(side: str) -> bool:
    """Whether a side of an equality is numbers and operators only (LaTeX commands aside)."""
    bare = _COMMAND.sub(" ", side)
    return any(ch.isdigit() for ch in bare) and not re.search(r"[A-Za-z]", bare)


def value_text(text: str) -> str:
    """The value ``text`` writes, as math-verify should compare it: a ratio of two numbers as
    their quotient ("1:2" -> "\\frac{1}{2}": not 2); a mixed number as its value ("11 6/6" ->
    "\\frac{71}{6}" for "11 5/6", not 11; with an improper fraction, "11 6/6", nothing); an equality chain of numbers whose sides are all equal as its last
    side ("3 \\cdot 2 \\cdot 1 = 6" -> "6"); nothing (``""``, which equals no reference) for a
    division by zero ("4 0/0"); anything else unchanged."""
    if DIVISION_BY_ZERO.search(text) or LINES_OF_NUMBERS.search(text.strip()):
        return ""
    ratio = RATIO_VALUE.fullmatch(text)
    if ratio:
        return f"\\frac{{{ratio.group(1)}}}{{{ratio.group(2)}}}"
    mixed = MIXED_NUMBER.fullmatch(text)
    if mixed:
        whole, numerator, denominator = (int(g) for g in mixed.group(1, 2, 3))
        if numerator >= denominator:  # "11 6/6" is no mixed number
            return ""
        total = abs(whole) * denominator + numerator
        return f"{'-' if mixed.group(1).startswith('-') else ''}\\frac{{{total}}}{{{denominator}}}"
    sides = clean_latex(text).split("=")
    if 2 <= len(sides) <= CHAIN_SIDES and all(_numeric(side) for side in sides):
        if all(equivalent(sides[-1].strip(), side.strip()) for side in sides[:-1]):
            return sides[-1].strip()
    return text


def parsable(text: str) -> str:
    """``text`` as math-verify should see it: the shared LaTeX normalisation (``latex.clean``,
    delimiters kept where there are any), then bare LaTeX and bare formulas wrapped in ``$...$``."""
    stripped = clean_latex(text.strip(), delimiters=False)
    if any(d in stripped for d in MATH_DELIMITERS):
        return stripped
    if any(m in stripped for m in LATEX_MARKUP) or is_formula(stripped):
        return f"${stripped}$"
    return stripped


def timeouts() -> tuple[Optional[int], Optional[int]]:
    """(parsing, comparison) timeouts usable in the calling thread."""
    if threading.current_thread() is threading.main_thread():
        return PARSING_TIMEOUT_SECONDS, COMPARISON_TIMEOUT_SECONDS
    return None, None  # signal.alarm raises outside the main thread


def _quiet_math_verify() -> None:
    """math-verify logs "Timeout during parsing: <the whole input>" (the model's text, however long)
    through its own loggers; nothing of a reply may reach the terminal or a log, so those records
    stop there (a timeout is still a failed parse, decided as such)."""
    logger = logging.getLogger("math_verify")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    logger.propagate = False


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _parse(text: str, parsing_timeout: Optional[int]) -> tuple:
    from math_verify import parse  # imported on first use: it pulls in sympy

    _quiet_math_verify()
    return tuple(parse(parsable(text), parsing_timeout=parsing_timeout))


def same_text(prediction: str, reference: str) -> bool:
    return " ".join(prediction.split()) == " ".join(reference.split())


def equivalent(prediction: str, reference: str) -> bool:
    """Whether math-verify accepts ``prediction`` for ``reference`` (clause 2 alone)."""
    a, b = prediction.strip(), reference.strip()
    if a != b and _PLAIN_INTEGER.fullmatch(a) and _PLAIN_INTEGER.fullmatch(b):
        return False  # distinct integers in canonical form: math-verify compares them exactly
    return _equivalent(prediction, reference, *timeouts())


@functools.lru_cache(maxsize=COMPARISON_CACHE_SIZE)
def _equivalent(prediction: str, reference: str, parsing_timeout: Optional[int],
                comparison_timeout: Optional[int]) -> bool:
    from math_verify import verify

    if ELLIPSIS.search(prediction) or ELLIPSIS.search(reference):
        return latex_key(prediction) == latex_key(reference)
    gold = _parse(reference, parsing_timeout)
    answer = _parse(prediction, parsing_timeout)
    if not gold or not answer:
        return False  # math-verify compares nothing with an empty extraction
    if not verify(list(gold), list(answer), float_rounding=FLOAT_ROUNDING,
                  numeric_precision=NUMERIC_PRECISION, timeout_seconds=comparison_timeout):
        return False
    return _close(gold[0], answer[0])


def _close(gold, answer) -> bool:
    """Whether two values math-verify equated also agree to ``RELATIVE_TOLERANCE`` when both are
    numbers smaller than ``TINY`` (rounding to ``FLOAT_ROUNDING`` places equates any two numbers
    below 1e-6, such as 1/2006! and 1/2004!), and within the rounding's reach of each other
    otherwise (0.333333 is 1/3; math-verify, which evaluates in floats, equates 1/6 with
    1/(3 * 2^2006)); evaluated by sympy at 50 digits. Anything that is not a pair of numbers
    passes."""
    try:
        if not (getattr(gold, "is_number", False) and getattr(answer, "is_number", False)):
            return True
        a, b = gold.evalf(50), answer.evalf(50)
        if not (a.is_real and b.is_real):
            return True
        if max(abs(a), abs(b)) >= TINY:  # the rounding's own reach (math-verify overflows on 2^2006)
            return bool(abs(a - b) <= 1.5 * 10.0 ** -FLOAT_ROUNDING)
        return bool(abs(a - b) <= RELATIVE_TOLERANCE * max(abs(a), abs(b)))
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return True


def clear_caches() -> None:
    """Forget cached parses and comparisons (benchmarks measure cold runs)."""
    _parse.cache_clear()
    _equivalent.cache_clear()


def number_word_value(text: str) -> str:
    """``text`` with a number word ("Two", "**three**") replaced by its digits; else unchanged."""
    word = text.strip(" *_.").casefold()
    return str(NUMBER_WORDS.index(word)) if word in NUMBER_WORDS else text


def score(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> float:
    prediction = number_word_value(prediction)
    if any(same_text(prediction, ref) for ref in references):
        return 1.0
    value = value_text(prediction)
    if is_sentence(value) or shows_work(value):
        return 0.0
    return 1.0 if any(equivalent(value, value_text(ref)) for ref in references) else 0.0


def reject_kind(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> str:
    """Why ``prediction`` is rejected: ``NO_PICK`` when it is not searched for a value (a
    sentence, a calculation) or math-verify reads nothing in it, else ``WRONG_PICK``."""
    value = value_text(number_word_value(prediction))
    if not value.strip() or is_sentence(value) or shows_work(value):
        return NO_PICK
    return WRONG_PICK if _parse(value, timeouts()[0]) else NO_PICK


def passes(value: float) -> bool:
    return value == 1.0


def detail(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> str:
    written = any(same_text(prediction, ref) for ref in references)
    if is_sentence(prediction) and not written:
        return f"a sentence ({SENTENCE_WORDS} words or more): not searched for a value"
    if shows_work(prediction) and not written:
        return "a calculation, or several values in prose: not searched for a value"
    prediction = number_word_value(prediction)
    parsing_timeout, _ = timeouts()
    answer = [str(x) for x in _parse(prediction, parsing_timeout)[:1]]
    gold = [str(x) for ref in references for x in _parse(ref, parsing_timeout)[:1]]
    return f"parsed {parsable(prediction)!r} as {answer or 'nothing'}; references as {gold or 'nothing'}"


def reference_score(prediction, references, options=None):
    from math_verify import parse, verify

    parsing_timeout, comparison_timeout = timeouts()
    if prediction.strip(" *_.").casefold() in NUMBER_WORDS:
        prediction = str(NUMBER_WORDS.index(prediction.strip(" *_.").casefold()))

    def wrap(text):
        text = clean_latex(text.strip(), delimiters=False)
        if any(d in text for d in MATH_DELIMITERS):
            return text
        has_markup = any(m in text for m in LATEX_MARKUP)
        plain_number = re.fullmatch(r"[+-]?(\d+(,\d\d\d)*)?(\.\d+)?([eE][+-]?\d+)?", text)
        has_word = re.search(r"[A-Za-z]{2,}", text)
        operation = re.search(r"[\w)]\s*[-+*/^]\s*[\w(]", text)
        formula = (all(c in FORMULA_CHARACTERS for c in text) and not plain_number and (not has_word or operation))
        return "$" + text + "$" if has_markup or formula else text

    def same_value(a, b):
        if ELLIPSIS.search(a) or ELLIPSIS.search(b):
            return latex_key(a) == latex_key(b)
        a, b = a.strip(), b.strip()
        if a != b and re.fullmatch(r"-?[1-9][0-9]*|0", a) and re.fullmatch(r"-?[1-9][0-9]*|0", b):
            return False
        gold, answer = parse(wrap(b), parsing_timeout=parsing_timeout), parse(wrap(a), parsing_timeout=parsing_timeout)
        if not gold or not answer:
            return False
        return (verify(gold, answer, float_rounding=FLOAT_ROUNDING, numeric_precision=NUMERIC_PRECISION,
                       timeout_seconds=comparison_timeout) and _close(gold[0], answer[0]))

    for ref in references:
        if prediction.split() == ref.split():
            return 1.0
    value = value_text(prediction)
    if is_sentence(value) or shows_work(value):
        return 0.0
    for ref in references:
        if same_value(value, value_text(ref)):
            return 1.0
    return 0.0
