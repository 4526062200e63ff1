"""``choice``: multiple choice (MMBench, MMMU, ScienceQA, AI2D, SEED, MathVista).

The options are the option texts in order (letter A is ``options[0]``); the reference is a
letter. The rule extracts exactly one option letter from the answer and passes when it is the
reference letter. Extraction, first rule that applies wins (``pick`` returns the letter, or why
there is none: ``vocab.NO_PICK``, ``SEVERAL_PICKS``, ``NO_OPTION_MATCHED``):

1. the whole answer is the text of exactly one option (case-folded, white space collapsed,
   ``MARKUP`` and trailing periods ignored; where either side holds LaTeX, the shared
   normalisation's ``latex_key``, so "\\frac{1}{4}" is "$\\frac{1}{4}$" and "8\\,\\mathrm{kg}" is
   "8 kg"): that option's letter, unless, the answer being a value, another option equals it in
   value too;
2. the whole answer is one letter once ``DECORATION`` (brackets, periods, bold markup, quotes,
   white space; marks in pairs, ``PAIRED_MARKS``: "_B" is not a letter) is stripped from its ends
   ("B", "(B)", "B.", "**B**", "'b'"): that letter;
3. the answer is a value (``is_value``: LaTeX, or digits and operators, and no option letter
   standing alone): the options whose value math-verify finds equal (``math_answer.equivalent`` on
   both sides' ``clean_latex``, among options with the same units and symbols: "8 kg" is not
   "8 g"); exactly one picks it ("96" is "$3 \\cdot 2^{5}$"), two or more pick none, none is
   ``NO_OPTION_MATCHED``. A value is compared whole, never searched: "\\frac{a+b}{2}" is not
   option "a+b", "43.75" not option "75", "1: 2" not option "2";
4. lines that list options ("A. Two birds" / "B. Three birds", two or more with different
   letters) are set aside: listing the options names none of them;
5. the first clause is the text of one option (``LEADING_CLAUSE``: "Yes, the function is even.")
   and nothing after it names another option's text or stands alone as a capital letter;
6. an answer that excludes (``EXCLUSION``: "All except E", "neither B nor C"; option texts aside,
   so "(D) None of the above" quotes D) names nothing;
7. the answer opens with a label and says why (``LEADING_PICK``: "(D) Four wheels are visible.",
   "**B.** The object is a bus.", "b. the nucleus", "A because ..."), unless what follows starts
   as a verb or a connective would (``NOT_A_PICK_AFTER``: "(A) is wrong") or names another
   letter, another option's text or a number the letter's option does not hold;
8. an answer that is a sentence (``shape.is_sentence``: ``SENTENCE_WORDS`` words or more, the
   words of the options' texts not counted) names nothing: a letter or an option's text
   mentioned in reasoning is not a pick;
9. the answer's words, after every ``MARKUP`` character becomes a space (a period, comma or
   colon between digits kept), include capital option letters standing alone ("(C) 60°", "C.
   60°", "Answer: **B**"): exactly one distinct letter is the answer, unless the answer also
   holds the text of another option (below); two or more letters ("A or B", "B, not C") extract
   nothing. A letter right after a word that is not one of ``PICK_WORDS`` is part of a name
   ("Vitamin B", "the value of C", "probably B": a hedge is no pick), and so is one after a LaTeX
   symbol ("\\Delta E"); an opening "A" or "I" before a word is the article or the pronoun ("A
   cat", "I think C"); a lower-case label opening the answer is its capital ("(b) the nucleus");
10. no letter stands alone, and exactly one option's text occurs in the answer as whole words
   ("It says STOP"): that option's letter. An option text found inside another option text that
   also occurs counts as that longer option ("quarter past" is not also "quarter").

When rules 1 and 2 name different letters (the answer "(E)" where option C's text is "(e)"; "B"
where option A is "\\text{B}"), the answer is ambiguous and names nothing. Before texts are
compared, ``LATEX_SYMBOLS`` are replaced by the characters they stand for ("13^\\circ" is "13°").

Options whose text is a single character or one of ``PROSE_WORDS`` (words ordinary prose
contains, such as "a", "yes", "no") are never found inside an answer (rules 9 and 10): "a square"
is not option A when the options are the letters A to E. Rule 9 finds no pick when the answer
holds, as whole words, the text of an option other than the letter's (and not inside the
letter's own text): "(D) quarter past" names two options when D is "quarter to"; nor when the
letter's option text holds numbers and the rest of the answer holds another number ("(D) 140°"
when D is "20°": the value contradicts the letter; "C) 5√3 m" for "5√{3}m" agrees). Letters
inside a named option's text are not letters named: "(B) sample A" names B.

Valid letters are the first ``len(options)`` of ``OPTION_LETTERS``; without options, all of
them. Rule 9 is the token counting of VLMEvalKit's ``can_infer_option`` (same markup set) and
rule 10 its ``can_infer_text``, restricted to whole words. Explicit statements ("The answer is
(C).", ``\\boxed{C}``) are found before this rule runs, by final-answer extraction
(``verify/extract.py``), which hands the rule the span "(C)" or "C"; ``picks`` lets ``verify``
read a second statement beside the deciding one (``extract.statements``: a box followed by "the
final answer is (E)", two containers, a last-line letter after a statement), and
``reject_kind`` names the kind of a rejection.

A reference written as "(B)", "b" or "B." is read as B, and a reference equal to one option's
text as that option's letter; any other reference matches nothing. Score 1.0 or 0.0.
"""

from __future__ import annotations

import functools
import re
from typing import Optional, Sequence

from ..vocab import NO_OPTION_MATCHED, NO_PICK, OPTION_LETTERS, SEVERAL_PICKS, WRONG_PICK
from .latex import NORMALISATION_VERSION, clean_latex, has_latex, latex_key
from .math_answer import equivalent, is_formula, value_text
from .shape import SENTENCE_WORDS, is_sentence

NAME = "choice"
VERSION = "3"
FINDS_VALUES = True  # finds a value inside a text: see verify/shape.py and candidates.py
MARKUP = ".()[],:;!*#{}°（）【】，：；"  # turned into spaces before letters are looked for
DECORATION = " \t\r\n*_()[].'\"`“”‘’"  # stripped from both ends of a bare-letter answer
LATEX_SYMBOLS = (("^{\\circ}", "°"), ("^\\circ", "°"), ("\\circ", "°"), ("\\%", "%"), ("\\sqrt", "√"))
NUMBER_IN_TEXT = re.compile(r"\d+")
LEADING_CLAUSE = re.compile(r"\s*([^,.;:!?\n]+?)\s*[,.;:!]\s+(?=\S)")
PROSE_WORDS = ("a", "an", "the", "i", "it", "is", "yes", "no", "not", "none", "all", "both", "and", "or")
CONSTANTS = ("OPTION_LETTERS", "MARKUP", "DECORATION", "LATEX_SYMBOLS", "PROSE_WORDS", "SENTENCE_WORDS",
             "NUMBER_IN_TEXT", "LEADING_CLAUSE", "PICK_WORDS", "LEADING_PICK", "EXCLUSION", "VARIABLE_PREFIX")

PICKED = "picked"
ARTICLE_OPENING = re.compile(r"\s*[AI][ \t]+([^\W\d_]{2,})")
# Commands that wrap text: a letter after them is still a letter ("\boxed{C}" spaced is "\boxed C").
TEXT_COMMANDS = ("\\boxed", "\\fbox", "\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\textit", "\\mathit")
PAIRED_MARKS = (("*", "*"), ("_", "_"), ("'", "'"), ('"', '"'), ("`", "`"), ("“", "”"), ("‘", "’"))
# A capital letter right after one of these words (words that pick, and connectives) is a letter
# named ("I think C", "option B", "A or B", "B, not C"); after any other word it is part of a
# name ("Vitamin B", "the value of C", "point A").
PICK_WORDS = ("is", "are", "be", "was", "answer", "option", "options", "choice", "letter", "pick", "choose",
              "select", "think", "say", "so", "thus", "hence", "therefore", "then", "clearly", "definitely",
              "correct", "final", "answers", "go", "with", "to", "as", "or", "and", "not", "nor", "but",
              "than", "vs", "versus", "either", "neither", "both", "also", "only", "just", "instead",
              "rather", "choices", "letters")
# After a hedge ("probably B", "maybe C") a letter is not a pick: the reply did not commit to it.
# A capital "A" or "I" that opens the text and is followed by one of these is the article or the
# pronoun ("A cat", "I think"), not a letter; followed by anything else ("A is correct") it is.
LETTER_VERBS = ("is", "was", "would", "should", "seems", "because", "since", "and", "or", "as", "looks", "appears",
                "fits", "matches", "best", "corresponds", "describes", "shows", "represents", "can", "could", "will",
                "must", "has", "have", "it", "the", "being", "here", "only")
DECORATED_LETTER = re.compile(r"\(([A-Z])\)|\*\*([A-Z])\*\*|(?<![A-Za-z])([A-Z])\)")
# A reply that opens with its pick and gives the reason: "(A) because ...", "B) since ...".
LEADING_PICK = re.compile(
    r"\s*(?:\*\*)?(?:(?:\(|\[)([A-Za-z])[)\]]|([A-Za-z])[.):])(?:\*\*)?[ \t]+(?=\S)"
    r"|\s*(?:\*\*)?[(\[]?([A-Za-z])[)\].]?(?:\*\*)?\s*(?:[-–—:,]\s*)?(?=(?:because|since)(?![A-Za-z]))")
# Words that, right after an opening label, make it the subject of a sentence, not a pick.
NOT_A_PICK_AFTER = ("is", "are", "was", "were", "seems", "seem", "can", "cannot", "could", "would", "should", "has",
                    "have", "does", "doesn", "isn", "not", "and", "or", "nor", "but", "vs", "versus", "than", "also",
                    "too", "might", "may", "must", "will", "won", "appears", "looks", ",")
# A lower-case label opening a reply, "(b) the nucleus": read as the capital letter.
LOWER_LABEL = re.compile(r"^(\s*(?:\*\*)?[(\[])([a-z])(?=[)\]])")
# An answer that excludes what it names picks nothing: "All except E", "anything but B".
EXCLUSION = re.compile(r"(?<![A-Za-z])(?:except|excluding|other\s+than|besides|apart\s+from|but\s+not|none\s+of|"
                       r"neither|nor)(?![A-Za-z])", re.IGNORECASE)
# "x = 18", "y=3": a variable named before the value.
VARIABLE_PREFIX = re.compile(r"^\s*[A-Za-z]\s*=\s*(?=\S)")
OPTION_LINE = re.compile(r"\s*\(?([A-Z])[.):]\s*(.+?)\s*")
PLAIN_VALUE = re.compile(r"[-+−]?\d+(?:[.,]\d+)*\s*%?")
_MARKUP = re.compile(r"(?<=\d)[.,:](?=\d)|([" + re.escape(MARKUP) + "])")


def valid_letters(options: Optional[Sequence[str]]) -> str:
    return OPTION_LETTERS[: len(options)] if options else OPTION_LETTERS


def bare_letter(text: str, options: Optional[Sequence[str]] = None) -> Optional[str]:
    """The letter ``text`` is once ``DECORATION`` is stripped from its ends ("(b)." -> "B")."""
    core = text.strip(DECORATION)
    if len(core) != 1 or not core.isascii() or core.upper() not in valid_letters(options):
        return None
    at = text.index(core)
    before, after = text[:at].strip(), text[at + 1:].strip()
    for opening, closing in PAIRED_MARKS:  # marks must pair up: "_B_", "**B**", "'B'"; "_B" is no letter answer
        if before.count(opening) != after.count(closing):
            return None
    return core.upper()


def _spaced(text: str) -> str:
    """``LATEX_SYMBOLS`` replaced, every ``MARKUP`` character a space (a period, comma or colon
    between digits kept: "43.75" is one number, not "43" and "75"), white space collapsed."""
    for latex, symbol in LATEX_SYMBOLS:
        text = text.replace(latex, symbol)
    return " ".join(_MARKUP.sub(lambda m: m.group() if m.group(1) is None else " ", text).split())


@functools.lru_cache(maxsize=4096)  # the same option texts are keyed many times for each candidate
def _text_key(text: str) -> str:
    return _spaced(text).casefold()


def _option_words(options: Optional[Sequence[str]]) -> frozenset:
    return frozenset(word for option in options or () for word in _text_key(option).split())


def _same_value_text(text: str, option: str) -> bool:
    """Whether ``text`` and ``option`` are the same text: ``_text_key``, or, where either holds
    LaTeX, the shared normalisation's ``latex_key`` ("\\frac{1}{4}" is "$\\frac{1}{4}$")."""
    if _text_key(text) == _text_key(option):
        return True
    return (has_latex(text) or has_latex(option)) and latex_key(text) == latex_key(option)


def _options_with_text(text: str, options: Optional[Sequence[str]]) -> list[int]:
    if not options or not _text_key(text):
        return []
    return [i for i, option in enumerate(options) if _same_value_text(text, option)]


def _option_with_text(text: str, options: Optional[Sequence[str]]) -> Optional[int]:
    hits = _options_with_text(text, options)
    return hits[0] if len(hits) == 1 else None


def _residue_letters(text: str) -> frozenset:
    """The words of letters a value holds besides LaTeX commands and a leading "x =": its units
    and symbols ("8 kg" -> {"kg"}; "x = 18" and "3 \\cdot 2^{5}" -> none)."""
    text = VARIABLE_PREFIX.sub("", clean_latex(text))
    return frozenset(word.casefold() for word in re.findall(r"[A-Za-z]+", re.sub(r"\\[A-Za-z]+", " ", text)))


def is_value(text: str, options: Optional[Sequence[str]] = None) -> bool:
    """Whether ``text`` is a mathematical value (LaTeX markup, or a formula of digits and
    operators) rather than words, and names no option letter standing alone."""
    stripped = text.strip()
    if not stripped or not any(ch.isdigit() for ch in stripped) and not has_latex(stripped):
        return False
    if not has_latex(stripped) and not is_formula(stripped) and not PLAIN_VALUE.fullmatch(stripped):
        return False
    words = re.sub(r"\\[A-Za-z]+", " ", stripped)
    letters = valid_letters(options)
    return not any(len(w) == 1 and w in letters for w in _spaced(words).split())


def _options_equal_in_value(text: str, options: Sequence[str]) -> list[int]:
    """The options that math-verify finds equal to the value ``text`` (``math_answer.equivalent``
    on both sides' ``clean_latex``), among those with the same units and symbols
    (``_residue_letters``): "96" equals "$3 \\cdot 2^{5}$"; "8 kg" is not "8 g"."""
    units = _residue_letters(text)
    value = value_text(clean_latex(VARIABLE_PREFIX.sub("", text)))
    hits = []
    for i, option in enumerate(options):
        if not is_value(option, options) or _residue_letters(option) != units:
            continue
        if equivalent(value, value_text(clean_latex(option))):
            hits.append(i)
    return hits


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


def _leading_pick(text: str, options: Optional[Sequence[str]]) -> Optional[str]:
    """The letter of a reply that opens with a label ("(D) Four wheels are visible.", "**B.** The
    object is a bus.", "b. the nucleus", "A because it reads text better"; ``LEADING_PICK``) and
    goes on to say why, when what follows does not start as a verb or a connective would
    (``NOT_A_PICK_AFTER``: "(A) is wrong") and names no other letter, no other option's text and
    no number the letter's own option does not hold."""
    match = LEADING_PICK.match(text)
    if match is None:
        return None
    letter = next(g for g in match.groups() if g).upper()
    letters = valid_letters(options)
    if letter not in letters:
        return None
    rest = text[match.end():]
    first_word = re.match(r"\s*([^\W\d_]+|,)", rest)
    if first_word and first_word.group(1).casefold() in NOT_A_PICK_AFTER:
        return None
    own = options[letters.index(letter)] if options else ""
    rest_words = _blank(_spaced(rest), _spaced(own)) if own else _spaced(rest)
    if _named_letters(rest_words, letters, _opens_with_article(rest)) - {letter}:
        return None
    if options and any(letters[i] != letter for i in _options_inside(rest, options)):
        return None
    own_numbers = set(NUMBER_IN_TEXT.findall(_spaced(own)))
    if own_numbers and not set(NUMBER_IN_TEXT.findall(rest_words)) <= own_numbers:
        return None
    return letter


def _without_option_texts(text: str, options: Optional[Sequence[str]]) -> str:
    """``text`` (spaced) less every option text it holds as whole words: "(D) None of the above"
    quotes an option, it excludes nothing."""
    rest = _spaced(text)
    for option in options or ():
        if _findable(option):
            rest = _blank(rest, _spaced(option))
    return rest


def _without_restated_options(text: str, options: Optional[Sequence[str]]) -> str:
    """``text`` less its lines that open with an option label ("A. Two birds", "B) ..."), when
    two or more do, with different letters: a reply that lists options names none of them by
    listing them."""
    letters = valid_letters(options)
    lines = text.split("\n")
    labelled = {i: m.group(1) for i, line in enumerate(lines)
                if (m := OPTION_LINE.fullmatch(line)) and m.group(1) in letters}
    if len(set(labelled.values())) < 2:
        return text
    return "\n".join(line for i, line in enumerate(lines) if i not in labelled)


def _opens_with_article(text: str) -> bool:
    """Whether ``text`` opens with the article "A" or the pronoun "I" before a word ("A cat", "I
    think C"; not "A (yes)", "A is correct")."""
    match = ARTICLE_OPENING.match(text)
    return bool(match) and match.group(1).islower() and match.group(1) not in LETTER_VERBS


def _named_letters(text: str, letters: str, article: bool = False) -> set:
    """The capital letters ``text`` (already spaced) names: letters standing alone, less those that
    are part of a name ("Vitamin B", "the value of C": a letter right after a word that is not one
    of ``PICK_WORDS``, or after a LaTeX command: "\\Delta E") and an opening "A" or "I" that is
    the article or the pronoun ("A cat", "I think C"), unless the original shows them as picks,
    bracketed or in bold."""
    tokens = text.split()
    named = set()
    for i, token in enumerate(tokens):
        if len(token) != 1 or token not in letters:
            continue
        before = tokens[i - 1] if i else ""
        if len(before) > 1 and before.isalpha() and before.casefold() not in PICK_WORDS:
            continue
        if before.startswith("\\") and before not in TEXT_COMMANDS:  # "\Delta E": a symbol of a formula
            continue
        if i == 0 and article:
            continue  # "A cat": the article
        named.add(token)
    return named


def _decorated_letters(text: str, letters: str) -> set:
    """Letters ``text`` writes as picks whatever precedes them: "(B)", "**B**", "B)"."""
    found = {next(g for g in m.groups() if g) for m in DECORATED_LETTER.finditer(text)}
    return {letter for letter in found if letter in letters}


def pick(answer: str, options: Optional[Sequence[str]] = None) -> tuple[Optional[str], str]:
    """(the one option letter ``answer`` names or None, the kind of result): ``"picked"``, or why
    there is no pick (``vocab.NO_PICK``, ``SEVERAL_PICKS``, ``NO_OPTION_MATCHED``)."""
    letters = valid_letters(options)
    same = _options_with_text(answer, options)
    bare = bare_letter(answer, options)
    if len(same) > 1 and bare is None:
        return None, SEVERAL_PICKS
    index = same[0] if len(same) == 1 else None
    if index is not None and bare is not None and letters[index] != bare:
        return None, SEVERAL_PICKS
    if index is not None:
        if options and is_value(answer, options) and set(_options_equal_in_value(answer, options)) - {index}:
            return None, SEVERAL_PICKS  # "\\frac{1}{2}" when the options hold both 1/2 and 0.5
        return letters[index], PICKED
    if bare is not None:
        return bare, PICKED
    if options and is_value(answer, options):
        values = _options_equal_in_value(answer, options)
        if len(values) == 1:
            return letters[values[0]], PICKED
        return None, SEVERAL_PICKS if values else NO_OPTION_MATCHED
    answer = _without_restated_options(answer, options)
    if not answer.strip():
        return None, NO_PICK
    lead = _leading_option(answer, options)
    if lead is not None:
        return letters[lead], PICKED
    if EXCLUSION.search(_without_option_texts(answer, options)):
        return None, NO_PICK  # "All except E", "neither B nor C": a letter it excludes is no pick
    lead_letter = _leading_pick(answer, options)
    if lead_letter is not None:
        return lead_letter, PICKED
    if is_sentence(answer, _option_words(options)):
        return None, NO_PICK
    answer = LOWER_LABEL.sub(lambda m: m.group(1) + m.group(2).upper(), answer)
    inside = _options_inside(answer, options) if options else []
    rest = _spaced(answer)
    for i in inside:  # a letter inside a named option's text ("sample A") is not a letter named
        rest = _blank(rest, _spaced(options[i]))
    named = (_named_letters(rest, letters, _opens_with_article(answer))
             | (_decorated_letters(answer, letters) & set(rest.split())))
    if not named:
        if len(inside) == 1:
            return letters[inside[0]], PICKED
        return None, SEVERAL_PICKS if inside else NO_PICK
    if len(named) > 1:
        return None, SEVERAL_PICKS
    letter = named.pop()
    if not options:
        return letter, PICKED
    own = options[letters.index(letter)]
    if any(letters[i] != letter and f" {_text_key(options[i])} " not in f" {_text_key(own)} " for i in inside):
        return None, SEVERAL_PICKS  # another option's text is named too
    residue = _blank(_blank(rest, letter), _spaced(own))
    own_numbers = set(NUMBER_IN_TEXT.findall(_spaced(own)))
    if own_numbers and not set(NUMBER_IN_TEXT.findall(residue)) <= own_numbers:
        return None, SEVERAL_PICKS  # "(D) 140°" where D is "20°": the value contradicts the letter
    return letter, PICKED


def extract_letter(answer: str, options: Optional[Sequence[str]] = None) -> Optional[str]:
    """The one option letter ``answer`` names, or None when it names none or several."""
    return pick(answer, options)[0]


def picks(text: str, options: Optional[Sequence[str]] = None) -> Optional[str]:
    """What ``verify`` asks of a rule whose explicit statements may be read together: the answer
    ``text`` names, or None (here: the option letter)."""
    return extract_letter(text, options)


def reject_kind(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> str:
    """Why ``prediction`` is rejected: the ``vocab.REJECT_KINDS`` name (``WRONG_PICK`` when it
    names one letter that is not the reference's)."""
    letter, kind = pick(prediction, options)
    return WRONG_PICK if letter is not None else kind


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
    letter, kind = pick(prediction, options)
    if letter is None and kind == NO_PICK and is_sentence(prediction, _option_words(options)):
        return f"a sentence ({SENTENCE_WORDS} words or more besides the options' words): names no option"
    wanted = ", ".join(str(reference_letter(ref, options)) for ref in references)
    # The shared LaTeX normalisation (verify/latex.py, its version) where it shaped the comparison.
    normalised = (f"; as a value {latex_key(prediction)!r} (LaTeX normalisation {NORMALISATION_VERSION})"
                  if options and is_value(prediction, options) else "")
    if letter is None:
        return f"no single letter ({kind}){normalised}; reference {wanted}"
    return f"extracted {letter}{normalised}; reference {wanted}"


def reference_score(prediction, references, options=None):
    letters = list(OPTION_LETTERS[: len(options)] if options else OPTION_LETTERS)

    def spaced(text):
        for latex_form, symbol in LATEX_SYMBOLS:
            text = text.replace(latex_form, symbol)
        out = []
        for i, char in enumerate(text):
            between_digits = (char in ".,:" and 0 < i < len(text) - 1 and text[i - 1].isdigit()
                              and text[i + 1].isdigit())
            out.append(" " if char in MARKUP and not between_digits else char)
        return " ".join("".join(out).split())

    def key(text):
        return spaced(text).casefold()

    def same(text, opt):
        return key(text) == key(opt) or ((has_latex(text) or has_latex(opt)) and latex_key(text) == latex_key(opt))

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

    def options_equal_to(text):
        return [i for i, opt in enumerate(options or []) if key(text) != "" and same(text, opt)]

    def bare(text):
        before, after = "", ""
        while text and text[0] in DECORATION:
            before, text = before + text[0], text[1:]
        while text and text[-1] in DECORATION:
            after, text = text[-1] + after, text[:-1]
        if any(before.count(opening) != after.count(closing) for opening, closing in PAIRED_MARKS):
            return None
        if text in letters or text in [letter.lower() for letter in letters]:
            return text.upper()
        return None

    def unit_words(text):
        text = re.sub(r"^\s*[A-Za-z]\s*=\s*(?=\S)", "", clean_latex(text))
        return {w.casefold() for w in re.findall(r"[A-Za-z]+", re.sub(r"\\[A-Za-z]+", " ", text))}

    def a_value(text):
        text = text.strip()
        if not text or (not any(c.isdigit() for c in text) and not has_latex(text)):
            return False
        if not has_latex(text) and not is_formula(text) and not re.fullmatch(r"[-+−]?\d+(?:[.,]\d+)*\s*%?", text):
            return False
        return not any(len(w) == 1 and w in letters for w in spaced(re.sub(r"\\[A-Za-z]+", " ", text)).split())

    def equal_in_value(text):
        value = value_text(clean_latex(re.sub(r"^\s*[A-Za-z]\s*=\s*(?=\S)", "", text)))
        return [i for i, opt in enumerate(options) if a_value(opt) and unit_words(opt) == unit_words(text)
                and equivalent(value, value_text(clean_latex(opt)))]

    def options_inside(text):
        found = [i for i, opt in enumerate(options or [])
                 if len(key(opt)) > 1 and key(opt) not in PROSE_WORDS and contains(key(text), key(opt))]
        return [i for i in found
                if not any(key(options[j]) != key(options[i]) and contains(key(options[j]), key(options[i]))
                           for j in found)]

    def opens_with_article(text):
        found = re.match(r"\s*[AI][ \t]+([^\W\d_]{2,})", text)
        return bool(found) and found.group(1).islower() and found.group(1) not in LETTER_VERBS

    def letters_named(rest, original, article=False):
        tokens = rest.split()
        named = set()
        for i, token in enumerate(tokens):
            previous = tokens[i - 1] if i > 0 else ""
            after_word = len(previous) > 1 and previous.isalpha() and previous.casefold() not in PICK_WORDS
            symbol = previous.startswith("\\") and previous not in TEXT_COMMANDS
            if token in letters and not (i == 0 and article) and not after_word and not symbol:
                named.add(token)
        for m in DECORATED_LETTER.finditer(original):
            letter = m.group(1) or m.group(2) or m.group(3)
            if letter in letters and letter in tokens:
                named.add(letter)
        return named

    def extract(text):
        equal = options_equal_to(text)
        by_letter = bare(text)
        if len(equal) > 1 and by_letter is None:
            return None
        by_text = letters[equal[0]] if len(equal) == 1 else None
        if by_text is not None and by_letter is not None and by_text != by_letter:
            return None
        if by_text is not None:
            if options and a_value(text) and any(letters[i] != by_text for i in equal_in_value(text)):
                return None
            return by_text
        if by_letter is not None:
            return by_letter
        if options and a_value(text):
            values = equal_in_value(text)
            return letters[values[0]] if len(values) == 1 else None
        lines = text.split("\n")
        labels = [(i, m.group(1)) for i, line in enumerate(lines)
                  if (m := OPTION_LINE.fullmatch(line)) and m.group(1) in letters]
        if len({letter for _, letter in labels}) >= 2:
            text = "\n".join(line for i, line in enumerate(lines) if i not in {i for i, _ in labels})
        if not text.strip():
            return None
        clause = LEADING_CLAUSE.match(text)
        if options and clause and len(options_equal_to(clause.group(1))) == 1 and len(key(clause.group(1))) > 1:
            lead = letters[options_equal_to(clause.group(1))[0]]
            after = text[clause.end():]
            if (not any(word in letters for word in spaced(after).split())
                    and not any(letters[i] != lead and contains(key(after), key(opt)) for i, opt in enumerate(options))):
                return lead
        quoted_removed = spaced(text)
        for opt in options or []:
            if len(key(opt)) > 1 and key(opt) not in PROSE_WORDS:
                quoted_removed = without(quoted_removed, spaced(opt))
        if EXCLUSION.search(quoted_removed):
            return None
        opening = LEADING_PICK.match(text)
        if opening:
            pick = [g for g in opening.groups() if g][0].upper()
            after = text[opening.end():]
            first = re.match(r"\s*([^\W\d_]+|,)", after)
            own = options[letters.index(pick)] if options and pick in letters else ""
            after_words = without(spaced(after), spaced(own)) if own else spaced(after)
            own_numbers = set(NUMBER_IN_TEXT.findall(spaced(own)))
            if (pick in letters and not (first and first.group(1).casefold() in NOT_A_PICK_AFTER)
                    and not (letters_named(after_words, "", opens_with_article(after)) - {pick})
                    and not (options and any(letters[i] != pick for i in options_inside(after)))
                    and not (own_numbers and any(n not in own_numbers for n in NUMBER_IN_TEXT.findall(after_words)))):
                return pick
        option_words = set()
        for opt in options or []:
            option_words.update(key(opt).split())
        if is_sentence(text, frozenset(option_words)):
            return None
        text = LOWER_LABEL.sub(lambda m: m.group(1) + m.group(2).upper(), text)
        inside = options_inside(text)
        rest = spaced(text)
        for i in inside:
            rest = without(rest, spaced(options[i]))
        named = letters_named(rest, text, opens_with_article(text))
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
        ref_letter = bare(ref)
        if ref_letter is None:
            equal = options_equal_to(ref)
            ref_letter = letters[equal[0]] if len(equal) == 1 else None
        if ref_letter == letter:
            return 1.0
    return 0.0
