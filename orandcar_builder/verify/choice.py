"""``choice``: multiple choice (MMBench, MMMU, ScienceQA, AI2D, SEED).

The options are the option texts in order (letter A is ``options[0]``); the reference is a
letter. The rule extracts exactly one option letter from the answer and passes when it is the
reference letter. Extraction, first rule that applies wins:

1. the whole answer is the text of exactly one option (case-folded, white space collapsed,
   ``MARKUP`` and trailing periods ignored): that option's letter; or its first clause is
   (``LEADING_CLAUSE``: up to the first comma, period, colon, semicolon or exclamation mark
   followed by white space, as in "Yes, the function is even.") and nothing after it names
   another option's text or stands alone as a capital letter;
2. the whole answer is one letter once ``DECORATION`` (brackets, periods, bold markup, white
   space) is stripped from its ends ("B", "(B)", "B.", "**B**", "b"): that letter;
3. an answer that is a sentence (``shape.is_sentence``: ``SENTENCE_WORDS`` words or more, the
   words of the options' texts not counted) names nothing: a letter or an option's text
   mentioned in reasoning is not a pick;
4. the answer's words, after every ``MARKUP`` character becomes a space, include capital option
   letters standing alone ("(C) 60°", "C. 60°", "Answer: **B**"): exactly one distinct letter is
   the answer, unless the answer also holds the text of another option (below); two or more
   letters ("A or B", "B, not C") extract nothing;
5. no letter stands alone, and exactly one option's text occurs in the answer as whole words
   ("It says STOP"): that option's letter. An option text found inside another option text that
   also occurs counts as that longer option ("quarter past" is not also "quarter").

When rules 1 and 2 name different letters (the answer "(E)" where option C's text is "(e)"),
the answer is ambiguous and names nothing. Before texts are compared, ``LATEX_SYMBOLS`` are
replaced by the characters they stand for ("13^\\circ" is "13°").

Options whose text is a single character or one of ``PROSE_WORDS`` (words ordinary prose
contains, such as "a", "yes", "no") are never found inside an answer (rules 4 and 5): "a square"
is not option A when the options are the letters A to E. Rule 4 finds no pick when the answer
holds, as whole words, the text of an option other than the letter's (and not inside the
letter's own text): "(D) quarter past" names two options when D is "quarter to"; nor when the
letter's option text holds numbers and the rest of the answer holds another number ("(D) 140°"
when D is "20°": the value contradicts the letter; "C) 5√3 m" for "5√{3}m" agrees). Letters
inside a named option's text are not letters named: "(B) sample A" names B.

Valid letters are the first ``len(options)`` of ``OPTION_LETTERS``; without options, all of
them. Rule 4 is the token counting of VLMEvalKit's ``can_infer_option`` (same markup set) and
rule 5 its ``can_infer_text``, restricted to whole words. Without options, a capital "I" or a
sentence-initial "A" counts as a letter, so "I think C" extracts nothing: give the options.
Explicit statements ("The answer is (C).", ``\\boxed{C}``) are found before this rule runs, by
final-answer extraction (``verify/extract.py``), which hands the rule the span "(C)" or "C".

A reference written as "(B)", "b" or "B." is read as B, and a reference equal to one option's
text as that option's letter; any other reference matches nothing. Score 1.0 or 0.0.
"""

from __future__ import annotations

import functools
import re
from typing import Optional, Sequence

from ..vocab import OPTION_LETTERS
from .shape import SENTENCE_WORDS, is_sentence

NAME = "choice"
VERSION = "2"
FINDS_VALUES = True  # finds a value inside a text: see verify/shape.py and candidates.py
MARKUP = ".()[],:;!*#{}°（）【】，：；"  # turned into spaces before letters are looked for
DECORATION = " \t\r\n*_()[]."  # stripped from both ends of a bare-letter answer
LATEX_SYMBOLS = (("^{\\circ}", "°"), ("^\\circ", "°"), ("\\circ", "°"), ("\\%", "%"), ("\\sqrt", "√"))
NUMBER_IN_TEXT = re.compile(r"\d+")
LEADING_CLAUSE = re.compile(r"\s*([^,.;:!?\n]+?)\s*[,.;:!]\s+(?=\S)")
PROSE_WORDS = ("a", "an", "the", "i", "it", "is", "yes", "no", "not", "none", "all", "both", "and", "or")
CONSTANTS = ("OPTION_LETTERS", "MARKUP", "DECORATION", "LATEX_SYMBOLS", "PROSE_WORDS", "SENTENCE_WORDS",
             "NUMBER_IN_TEXT", "LEADING_CLAUSE")

_MARKUP_TABLE = str.maketrans({char: " " for char in MARKUP})


def valid_letters(options: Optional[Sequence[str]]) -> str:
    return OPTION_LETTERS[: len(options)] if options else OPTION_LETTERS


def bare_letter(text: str, options: Optional[Sequence[str]] = None) -> Optional[str]:
    """The letter ``text`` is once ``DECORATION`` is stripped from its ends ("(b)." -> "B")."""
    core = text.strip(DECORATION)
    if len(core) == 1 and core.isascii() and core.upper() in valid_letters(options):
        return core.upper()
    return None


def _spaced(text: str) -> str:
    """``LATEX_SYMBOLS`` replaced, every ``MARKUP`` character a space, white space collapsed."""
    for latex, symbol in LATEX_SYMBOLS:
        text = text.replace(latex, symbol)
    return " ".join(text.translate(_MARKUP_TABLE).split())


@functools.lru_cache(maxsize=4096)  # the same option texts are keyed many times for each candidate
def _text_key(text: str) -> str:
    return _spaced(text).casefold()


def _option_words(options: Optional[Sequence[str]]) -> frozenset:
    return frozenset(word for option in options or () for word in _text_key(option).split())


def _option_with_text(text: str, options: Optional[Sequence[str]]) -> Optional[int]:
    if not options:
        return None
    key = _text_key(text)
    hits = [i for i, option in enumerate(options) if key and _text_key(option) == key]
    return hits[0] if len(hits) == 1 else None


def _findable(option: str) -> bool:
    """Whether an option's text may be found inside an answer (rules 4 and 5)."""
    key = _text_key(option)
    return len(key) > 1 and key not in PROSE_WORDS


def _options_inside(text: str, options: Sequence[str]) -> list[int]:
    """The findable options whose text occurs in ``text`` as whole words, less those whose text
    only occurs inside another such option's text."""
    padded = f" {_text_key(text)} "
    hits = [i for i, option in enumerate(options) if _findable(option) and f" {_text_key(option)} " in padded]
    return [i for i in hits if not any(j != i and f" {_text_key(options[i])} " in f" {_text_key(options[j])} "
                                       and _text_key(options[i]) != _text_key(options[j]) for j in hits)]


def _blank(text: str, words: str) -> str:
    """``text`` (spaced) with every whole-word occurrence of ``words`` removed, ignoring case."""
    tokens, wanted = text.split(), words.lower().split()
    kept, i, n = [], 0, len(wanted)
    while i < len(tokens):
        if n and [t.lower() for t in tokens[i:i + n]] == wanted:
            i += n
        else:
            kept.append(tokens[i])
            i += 1
    return " ".join(kept)


def _leading_option(text: str, options: Optional[Sequence[str]]) -> Optional[int]:
    """The option whose text is the answer's first clause ("Yes, the function is even."), when
    nothing after it names an option: no other option's text, no capital letter standing alone."""
    if not options:
        return None
    clause = LEADING_CLAUSE.match(text)
    index = _option_with_text(clause.group(1), options) if clause else None
    if index is None or len(_text_key(options[index])) < 2:
        return None
    rest = f" {_text_key(text[clause.end():])} "
    letters = valid_letters(options)
    if any(len(word) == 1 and word in letters for word in _spaced(text[clause.end():]).split()):
        return None
    if any(i != index and f" {_text_key(option)} " in rest for i, option in enumerate(options)):
        return None
    return index


def extract_letter(answer: str, options: Optional[Sequence[str]] = None) -> Optional[str]:
    """The one option letter ``answer`` names, or None when it names none or several."""
    letters = valid_letters(options)
    index = _option_with_text(answer, options)
    bare = bare_letter(answer, options)
    if index is not None and bare is not None and letters[index] != bare:
        return None
    if index is not None:
        return letters[index]
    if bare is not None:
        return bare
    lead = _leading_option(answer, options)
    if lead is not None:
        return letters[lead]
    if is_sentence(answer, _option_words(options)):
        return None
    inside = _options_inside(answer, options) if options else []
    rest = _spaced(answer)
    for i in inside:  # a letter inside a named option's text ("sample A") is not a letter named
        rest = _blank(rest, _spaced(options[i]))
    named = {word for word in rest.split() if len(word) == 1 and word in letters}
    if not named:
        return letters[inside[0]] if len(inside) == 1 else None
    if len(named) > 1:
        return None
    letter = named.pop()
    if not options:
        return letter
    own = options[letters.index(letter)]
    if any(letters[i] != letter and f" {_text_key(options[i])} " not in f" {_text_key(own)} " for i in inside):
        return None  # another option's text is named too
    residue = _blank(_blank(rest, letter), _spaced(own))
    own_numbers = set(NUMBER_IN_TEXT.findall(_spaced(own)))
    if own_numbers and not set(NUMBER_IN_TEXT.findall(residue)) <= own_numbers:
        return None  # "(D) 140°" where D is "20°": the value contradicts the letter
    return letter


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
    if letter is None and is_sentence(prediction, _option_words(options)):
        return f"a sentence ({SENTENCE_WORDS} words or more besides the options' words): names no option"
    wanted = ", ".join(str(reference_letter(ref, options)) for ref in references)
    return f"extracted {letter or 'no single letter'}; reference {wanted}"


def reference_score(prediction, references, options=None):
    letters = list(OPTION_LETTERS[: len(options)] if options else OPTION_LETTERS)

    def spaced(text):
        for latex, symbol in LATEX_SYMBOLS:
            text = text.replace(latex, symbol)
        for char in MARKUP:
            text = text.replace(char, " ")
        return " ".join(text.split())

    def key(text):
        return spaced(text).casefold()

    def contains(text, words):
        return f" {words} " in f" {text} "

    def without(text, words):
        kept, n, i = [], len(words.split()), 0
        tokens = text.split()
        while i < len(tokens):
            if n and [t.lower() for t in tokens[i:i + n]] == words.lower().split():
                i += n
            else:
                kept.append(tokens[i])
                i += 1
        return " ".join(kept)

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

    def options_inside(text):
        found = [i for i, opt in enumerate(options or [])
                 if len(key(opt)) > 1 and key(opt) not in PROSE_WORDS and contains(key(text), key(opt))]
        return [i for i in found
                if not any(key(options[j]) != key(options[i]) and contains(key(options[j]), key(options[i]))
                           for j in found)]

    def extract(text):
        by_text, by_letter = option_equal_to(text), bare(text)
        if by_text is not None and by_letter is not None and by_text != by_letter:
            return None
        if by_text is not None:
            return by_text
        if by_letter is not None:
            return by_letter
        clause = LEADING_CLAUSE.match(text)
        if clause and option_equal_to(clause.group(1)) is not None and len(key(clause.group(1))) > 1:
            lead = option_equal_to(clause.group(1))
            after = text[clause.end():]
            if (not any(word in letters for word in spaced(after).split())
                    and not any(letters[i] != lead and contains(key(after), key(opt)) for i, opt in enumerate(options))):
                return lead
        option_words = set()
        for opt in options or []:
            option_words.update(key(opt).split())
        if is_sentence(text, frozenset(option_words)):
            return None
        inside = options_inside(text)
        rest = spaced(text)
        for i in inside:
            rest = without(rest, spaced(options[i]))
        named = set(word for word in rest.split() if word in letters)
        if not named:
            return letters[inside[0]] if len(inside) == 1 else None
        if len(named) > 1:
            return None
        letter = named.pop()
        if not options:
            return letter
        own = options[letters.index(letter)]
        if any(letters[i] != letter and not contains(key(own), key(options[i])) for i in inside):
            return None
        residue = without(without(rest, letter), spaced(own))
        own_numbers = set(NUMBER_IN_TEXT.findall(spaced(own)))
        if own_numbers and any(n not in own_numbers for n in NUMBER_IN_TEXT.findall(residue)):
            return None
        return letter

    letter = extract(prediction)
    if letter is None:
        return 0.0
    for ref in references:
        ref_letter = bare(ref) if bare(ref) is not None else option_equal_to(ref)
        if ref_letter == letter:
            return 1.0
    return 0.0
