"""Multiple-choice normalisation: options flattened into prose become a lettered block.

Two prose shapes are recognised, both explicit so that an ordinary question is never mistaken
for a multiple-choice one:

- inline letter markers in sequence from A: ``(A) cat (B) dog``, ``A) cat B) dog``,
  ``A. cat B. dog``, ``A: cat B: dog`` (and ``(a)``/``a)`` in lower case);
- an options label followed by a list: ``Options: cat, dog, bird``, ``Choices: cat; dog``,
  ``choose from cat, dog or bird``, ``Answer choices: [cat, dog]``, or one option per line
  after the label (bullets allowed).

The question becomes its stem, the lettered block (``prompts.option_block``) and any trailing
instruction; the reference becomes the bare letter of the one option it names (by text, by
letter, or both consistently). A question that already has a lettered block is not touched.

An option list with a blank option, or with two options whose texts are the same once case,
spacing, quotes and a final full stop are set aside, is refused (``mc_bad_options``): answering
either of two equal options would be judged against one letter only, and a blank option renders
as a bare letter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from ..prompts import has_lettered_block, option_block
from ..vocab import OPTION_LETTERS

REASON = "mc_unresolvable"
BAD_OPTIONS = "mc_bad_options"  # a blank option, or two options with the same text
# The family whose items are multiple choice by definition: an option list it cannot resolve drops
# the item. Elsewhere, text that merely reads like an option list is left alone.
MC_FAMILY = "multiple_choice"
ACTION_NORMALISED = "mc_normalised"  # prose options re-rendered as a lettered block, reference lettered
ACTION_REFERENCE_LETTERED = "mc_reference_lettered"  # structured options kept, reference text -> letter
MIN_OPTIONS = 2

# Inline marker styles: (regex with the letter as group 1, letters allowed).
_MARKER_STYLES = (
    (r"\(([A-Za-z])\)\s*", OPTION_LETTERS + OPTION_LETTERS.lower()),
    (r"(?<![\w(])([A-Za-z])\)\s+", OPTION_LETTERS + OPTION_LETTERS.lower()),
    (r"(?<![\w.])([A-Z])\.\s+", OPTION_LETTERS),
    (r"(?<![\w.])([A-Z]):\s+", OPTION_LETTERS),
)
_LABEL = re.compile(
    r"(?:\b(?:answer\s+)?(?:options|choices|candidates)(?:\s+are)?\s*:"
    r"|\b(?:choose|select|pick)(?:\s+(?:one|an?\s+answer|the\s+(?:correct|right|best)\s+(?:one|answer|option)))?"
    r"\s+(?:from|of|among|between)(?:\s+the\s+following(?:\s+(?:options|choices))?)?\s*:?)",
    re.IGNORECASE,
)
# A sentence after the options that instructs rather than lists ("Answer with the letter.").
_TAIL = re.compile(
    r"(?:(?<=[.?!])\s+|\s*\n\s*)(?=(?:answer|please|choose|select|pick|respond|reply|give|return|"
    r"output|only|note|hint)\b)",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^\s*(?:[-*•–]|\d+[.)])\s+")
_SEPARATOR_END = re.compile(r"[\s,;.]*(?:\b(?:or|and)\b)?[\s,;]*$", re.IGNORECASE)
_CONJUNCTION_START = re.compile(r"^(?:or|and)\s+", re.IGNORECASE)
_QUOTES = "\"'“”‘’`"


@dataclass(frozen=True)
class ProseOptions:
    """A question split around its prose options."""

    stem: str
    options: tuple[str, ...]
    tail: str = ""

    def question(self) -> str:
        """Stem, lettered block, trailing instruction: one part per line."""
        parts = [self.stem.rstrip()] if self.stem.strip() else []
        parts.append(option_block(self.options))
        if self.tail.strip():
            parts.append(self.tail.strip())
        return "\n".join(parts)


def _clean_option(text: str, last: bool) -> str:
    text = _SEPARATOR_END.sub("", text) if not last else text.strip().rstrip(",;")
    text = text.strip()
    if last and len(text) > 1 and text[-1] in ".?!" and text[-2] not in ".?!":
        text = text[:-1].rstrip()  # the sentence's full stop, not part of the option
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    return text


def _split_tail(text: str) -> tuple[str, str]:
    """Split the text after the last option at a trailing instruction or line break."""
    m = _TAIL.search(text)
    if m:
        return text[: m.start()], text[m.end():]
    head, sep, rest = text.partition("\n")
    return head, rest


def _strip_label(stem: str) -> str:
    """The stem without a trailing options label ("Options:"), which the block replaces, and
    without a dangling comma; a label that is the whole stem ("Pick one:") is the question, kept."""
    matches = list(_LABEL.finditer(stem))
    if matches and not stem[matches[-1].end():].strip() and stem[: matches[-1].start()].strip():
        stem = stem[: matches[-1].start()]
    return stem.rstrip().rstrip(",;").rstrip()


def _marker_chain(question: str, pattern: str, letters: str) -> Optional[list[re.Match]]:
    """The longest run of markers A, B, C... (one case) in order, or None if shorter than two."""
    markers = list(re.finditer(pattern, question))
    best: list[re.Match] = []
    for case_letters in (letters[:26], letters[26:]):
        if not case_letters:
            continue
        for start_index, first in enumerate(markers):
            if first.group(1) != case_letters[0]:
                continue
            chain = [first]
            for m in markers[start_index + 1:]:
                if len(chain) < len(case_letters) and m.group(1) == case_letters[len(chain)]:
                    chain.append(m)
            if len(chain) > len(best):
                best = chain
    return best if len(best) >= MIN_OPTIONS else None


def parse_lettered_inline(question: str) -> Optional[ProseOptions]:
    """Options given by inline letter markers, or None. Lower-case markers count only after an
    options label: without one, "(a) ... (b) ..." is a question in parts, not a choice."""
    labelled = _LABEL.search(question) is not None
    for pattern, letters in _MARKER_STYLES:
        if not labelled:
            letters = letters[:26]
        chain = _marker_chain(question, pattern, letters)
        if chain is None:
            continue
        options = [question[a.end(): b.start()] for a, b in zip(chain, chain[1:])]
        last, tail = _split_tail(question[chain[-1].end():])
        options = [_clean_option(o, last=False) for o in options] + [_clean_option(last, last=True)]
        if all(options) and not any("\n" in o for o in options):  # an option is one line of text
            return ProseOptions(_strip_label(question[: chain[0].start()]), tuple(options), tail)
    return None


def _split_list(text: str) -> list[str]:
    text = text.strip()
    if len(text) >= 2 and text[0] in "[{(" and text[-1] in "]})":
        text = text[1:-1]
    for separator in (r"\s*;\s*", r"\s+\|\s+", r"\s+/\s+", r",\s+", r","):
        parts = re.split(separator, text)
        if len(parts) >= MIN_OPTIONS:
            break
    else:
        parts = re.split(r"\s+or\s+", text, flags=re.IGNORECASE)
    if len(parts) >= MIN_OPTIONS:  # "cat, dog or bird": the last one hides an "or" ("and" may be inside an option)
        last = re.split(r"\s+or\s+", parts[-1], maxsplit=1, flags=re.IGNORECASE)
        if len(last) == 2 and "," in text:
            parts = parts[:-1] + last
        parts = [_CONJUNCTION_START.sub("", p.strip()) for p in parts]
    return parts


def parse_labelled_list(question: str) -> Optional[ProseOptions]:
    """Options listed after a label ("Options:", "choose from"), on one line or one per line."""
    label = _LABEL.search(question)
    if label is None:
        return None
    stem, rest = _strip_label(question[: label.end()]), question[label.end():]
    if re.match(r"[ \t]*\n", rest):  # one option per line until a blank line or an instruction
        lines = rest.lstrip(" \t").split("\n")[1:]
        options, used = [], 1
        for line in lines:
            if not line.strip() or _TAIL.match("\n" + line):
                break
            options.append(_clean_option(_BULLET.sub("", line), last=True))
            used += 1
        tail = "\n".join(rest.lstrip(" \t").split("\n")[used:])
    else:
        body, tail = _split_tail(rest)
        parts = _split_list(body)
        options = [_clean_option(p, last=i == len(parts) - 1) for i, p in enumerate(parts)]
    if len(options) < MIN_OPTIONS or len(options) > len(OPTION_LETTERS) or not all(options):
        return None
    return ProseOptions(stem, tuple(options), tail)


# Every prose shape contains a letter marker, a colon label or a choose-verb; most questions none.
_MAYBE_OPTIONS = re.compile(r"[A-Za-z][.):]|\b(?:choose|select|pick)\b", re.IGNORECASE)


def parse_prose_options(question: str) -> Optional[ProseOptions]:
    """The question's prose options, or None when it has none (or already has a lettered block)."""
    if not _MAYBE_OPTIONS.search(question) or has_lettered_block(question):
        return None
    return parse_lettered_inline(question) or parse_labelled_list(question)


def _norm(text: str) -> str:
    text = " ".join(text.split()).casefold()
    text = text.strip(_QUOTES + " ")
    return text.rstrip(".!?。").strip()


_LETTER_REFERENCE = re.compile(r"^\(?\s*([A-Za-z])\s*(?:[).:]|\))?(?:\s+(.+))?$", re.DOTALL)


def resolve_reference(reference: str, options: Sequence[str]) -> Union[int, str]:
    """The index of the one option ``reference`` names, or a message saying why there is none.

    A reference names option i by its text ("dog", "Dog."), by its letter ("B", "(B)", "b."),
    or by both ("B. dog", which must agree). Matching no option, or several, is unresolvable.
    """
    wanted = _norm(reference)
    hits = {i for i, option in enumerate(options) if _norm(option) == wanted}
    m = _LETTER_REFERENCE.match(reference.strip())
    if m:
        index = OPTION_LETTERS.find(m.group(1).upper())
        if 0 <= index < len(options):
            text = m.group(2)
            if text is None or _norm(text) == _norm(options[index]):
                hits.add(index)
            elif not hits:
                return f"reference {reference!r} gives letter {m.group(1).upper()} but text other than option {options[index]!r}"
    if len(hits) == 1:
        return hits.pop()
    if not hits:
        return f"reference {reference!r} matches none of the options {list(options)}"
    letters = ", ".join(OPTION_LETTERS[i] for i in sorted(hits))
    return f"reference {reference!r} matches several options ({letters})"


def resolve_references(references: Sequence[str], options: Sequence[str]) -> Union[str, tuple[str]]:
    """The bare letter all ``references`` agree on, as a 1-tuple; or a message saying why not."""
    letters = set()
    for reference in references:
        result = resolve_reference(reference, options)
        if isinstance(result, str):
            return result
        letters.add(OPTION_LETTERS[result])
    if len(letters) != 1:
        return f"references {list(references)} name different options ({', '.join(sorted(letters))})"
    return (letters.pop(),)


@dataclass(frozen=True)
class ChoiceResult:
    """What normalisation decided: unchanged (``action`` None), changed, or unresolvable."""

    question: str
    reference: Union[str, tuple[str, ...]]
    options: Optional[tuple[str, ...]]
    action: Optional[str] = None
    problem: Optional[str] = None
    reason: str = REASON  # the drop reason when there is a problem


def options_problem(options: Sequence[str]) -> Optional[str]:
    """Why an option list cannot be offered (a blank option, a repeated text), or None."""
    seen: dict[str, int] = {}
    for i, option in enumerate(options):
        if not option.strip():
            return f"option {OPTION_LETTERS[i]} is blank"
        key = _norm(option)
        if key in seen:
            first = seen[key]
            return (f"options {OPTION_LETTERS[first]} and {OPTION_LETTERS[i]} have the same text {options[first]!r}; "
                    "an answer naming it could not be told apart")
        seen[key] = i
    return None


def _bad_options(question: str, reference, options: Sequence[str], *,
                 keep_options: bool = True) -> Optional["ChoiceResult"]:
    """The BAD_OPTIONS result when ``options`` cannot be offered (carrying them, unless
    ``keep_options`` is false: options found in the prose are not the item's), else None."""
    problem = options_problem(options)
    if problem is None:
        return None
    return ChoiceResult(question, reference, tuple(options) if keep_options else None, problem=problem,
                        reason=BAD_OPTIONS)


_BLOCK_LINE = re.compile(r"^\s*\(?([A-Z])[.):]\s+(\S.*?)\s*$", re.MULTILINE)


def parse_lettered_block(question: str) -> Optional[tuple[str, ...]]:
    """The option texts of a lettered block already in the question (lines ``A. x``, ``B. y``...
    lettered A, B, C... in order from the first A), or None when there is no such block."""
    lines = _BLOCK_LINE.findall(question)
    start = next((i for i, (letter, _) in enumerate(lines) if letter == "A"), None)
    if start is None:
        return None
    found = []
    for letter, text in lines[start:]:
        if letter != OPTION_LETTERS[len(found)]:
            break
        found.append(text)
    return tuple(found) if len(found) >= 2 else None


def untouched(question: str, options: Optional[Sequence[str]]) -> bool:
    """True when ``normalise_choices`` leaves the item as it is without looking further: no options
    and no prose shape (``_MAYBE_OPTIONS``; a lettered block's lines "A." have one too). Most
    questions, decided by one regex search."""
    return not options and not _MAYBE_OPTIONS.search(question)


def normalise_choices(question: str, reference: Union[str, tuple[str, ...]], options: Optional[Sequence[str]]) -> ChoiceResult:
    """Normalise one QA item's multiple-choice form; see the module docstring for the rules."""
    references = [reference] if isinstance(reference, str) else list(reference)
    unchanged = ChoiceResult(question, reference, tuple(options) if options else None)
    if untouched(question, options):
        return unchanged
    if has_lettered_block(question):
        # The question is left byte for byte; only a reference given as an option's text (or a
        # missing options list) is completed from the block, so the choice rule can decide it.
        block = tuple(options) if options else parse_lettered_block(question)
        if block is None:
            return unchanged
        bad = _bad_options(question, reference, block)
        if bad is not None:
            return bad
        resolved = resolve_references(references, block)
        if isinstance(resolved, str):
            return ChoiceResult(question, reference, block, problem=resolved)
        if references == [resolved[0]] and options:
            return unchanged
        return ChoiceResult(question, resolved[0], block, ACTION_REFERENCE_LETTERED)
    if options:
        bad = _bad_options(question, reference, options)
        if bad is not None:
            return bad
        resolved = resolve_references(references, options)
        if isinstance(resolved, str):
            return ChoiceResult(question, reference, tuple(options), problem=resolved)
        if references == [resolved[0]]:
            return unchanged
        return ChoiceResult(question, resolved[0], tuple(options), ACTION_REFERENCE_LETTERED)
    prose = parse_prose_options(question)
    if prose is None:
        return unchanged
    bad = _bad_options(question, reference, prose.options, keep_options=False)
    if bad is not None:
        return bad
    resolved = resolve_references(references, prose.options)
    if isinstance(resolved, str):
        return ChoiceResult(question, reference, None, problem=resolved)
    return ChoiceResult(prose.question(), resolved[0], prose.options, ACTION_NORMALISED)
