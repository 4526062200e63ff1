"""Reading the judge's reply: the verdict it states (``parse_verdict``), the verdict of a judge
generation, where a verdict sends an item (``promotion``) and the outcome it leaves
(``apply_verdict``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Optional, Union

from ..records import Generation, Outcome, Verdict
from ..verify.candidates import strip_reasoning
from ..vocab import (
    ACCEPTED,
    FINISH_LENGTH,
    JUDGE_VERIFIER,
    REJECTED,
    UNSURE,
    VERDICT_CORRECT,
    VERDICT_LABELS,
    VERDICT_UNSURE,
    VERDICT_WRONG,
    WRONG_ANSWER,
)
from .prompt import candidate_answer

VERDICT_PARSER_VERSION = "1"  # a change in how replies are read changes verdicts: bump it

_AMBIGUOUS = "AMBIGUOUS"  # a qualified or doubly negated verdict word: never a verdict
_MARKUP = re.compile(r"[*_`~]")
_LATEX_WRAPPER = re.compile(r"\\(?:boxed|text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
_LINE_LEAD = re.compile(r"^[\s#>|\-•–—]*(?:\d+[.)]\s+)?")  # headings, quotes, bullets, numbering
_VERDICT_WORD = re.compile(
    r"(?P<neg>\bnot\s+|n['’]t\s+)?"
    r"(?P<qual>\b(?:quite|entirely|fully|completely|totally|exactly|partially|partly|mostly"
    r"|almost|largely|nearly|somewhat|half)\s+)?"
    r"\b(?P<word>incorrect|correct|wrong|unsure)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|cannot)\b|n['’]t\b", re.IGNORECASE)
_VERDICT_KEY = re.compile(
    r"^(?:(?:so|thus|hence|therefore|overall|my|the)\b[\s,]*)*"
    r"(?:(?:final|overall)\s+)?"
    r"(?:verdict|judge?ment|decision|grade|label|evaluation|assessment|conclusion|answer)\b"
    r"\s*(?P<sep>[:=\-–—]|\bis\b)?\s*(?P<rest>.*)$",
    re.IGNORECASE,
)
_STANDALONE = re.compile(r"^(?:not\s+)?(?:correct|incorrect|wrong|unsure)$", re.IGNORECASE)


def reply_after_reasoning(reply: str) -> str:
    """The part of a judge reply after its reasoning: closed ``<think>`` blocks and everything up
    to a stray ``</think>`` are removed; a ``<think>`` that never closes hides the rest."""
    text = strip_reasoning(reply)
    return text.split("<think>", 1)[0]


def _clean_line(line: str) -> str:
    line = _LATEX_WRAPPER.sub(r"\1", line)
    line = _MARKUP.sub("", line)
    return _LINE_LEAD.sub("", line).strip()


def _word_label(match: re.Match) -> str:
    word = match.group("word").lower()
    negated, qualified = bool(match.group("neg")), bool(match.group("qual"))
    if word == "correct":
        if qualified:  # "partially correct", "not entirely correct"
            return _AMBIGUOUS
        return VERDICT_WRONG if negated else VERDICT_CORRECT
    if negated or qualified:  # "not wrong", "not incorrect", "partly wrong", "not unsure"
        return _AMBIGUOUS
    return VERDICT_UNSURE if word == "unsure" else VERDICT_WRONG


def _fragment_label(fragment: str) -> Optional[str]:
    """The verdict a fragment states: a label, ``_AMBIGUOUS`` when it states two different ones,
    a qualified one or a negation that is not part of the verdict, or None when it states none."""
    fragment = re.sub(r"^[^A-Za-z]+", "", fragment)
    matches = list(_VERDICT_WORD.finditer(fragment))
    if not matches:
        return None
    labels = {_word_label(m) for m in matches}
    if len(labels) != 1 or _AMBIGUOUS in labels:
        return _AMBIGUOUS
    leading = matches[0].start() == 0
    negations = len(_NEGATION.findall(fragment))
    if not leading and negations > sum(1 for m in matches if m.group("neg")):
        return _AMBIGUOUS  # "not the correct one": the negation is elsewhere in the sentence
    return labels.pop()


def _standalone_label(line: str) -> Optional[str]:
    bare = re.sub(r"^[^A-Za-z]+|[^A-Za-z]+$", "", line)
    bare = re.sub(r"\s+", " ", bare)
    return _fragment_label(bare) if _STANDALONE.match(bare) else None


def _line_verdict(lines: list[str], i: int) -> Optional[str]:
    """The verdict line ``i`` states as a verdict line ("Verdict: X", a heading "Verdict" whose
    next line states it, or a line holding only a verdict word), or None when it is no such line."""
    line = lines[i]
    standalone = _standalone_label(line)
    if standalone is not None:
        return standalone
    key = _VERDICT_KEY.match(line)
    if key is None:
        return None
    rest = key.group("rest")
    if rest and not key.group("sep"):
        return None  # "answer the question ..." is prose, not a verdict line
    if rest:
        return _fragment_label(rest)
    if i + 1 < len(lines):  # a heading; the verdict follows on the next line
        return _fragment_label(lines[i + 1])
    return None


def _trailing_label(line: str) -> Optional[str]:
    """A verdict word that ends a sentence ("..., so the candidate is correct.")."""
    bare = re.sub(r"[^A-Za-z]+$", "", line)
    matches = list(_VERDICT_WORD.finditer(bare))
    if not matches or matches[-1].end() != len(bare):
        return None
    return _fragment_label(bare)


def parse_verdict(reply: str) -> tuple[str, bool]:
    """Read the judge's verdict from its raw reply: ``(label, parseable)``.

    The verdict is read after any reasoning block, from the last verdict line ("Verdict: X",
    "**Final answer: X**", a line holding only the verdict word); failing that, from a verdict word
    ending the last line. "not correct" and "incorrect" are WRONG; case, markdown emphasis and
    trailing punctuation do not matter. A reply with two different verdicts on its final verdict
    line (or on two verdict lines in a row), a qualified verdict ("partially correct") or none at
    all is ``(UNSURE, False)``; this function never raises.
    """
    lines = [c for c in (_clean_line(raw) for raw in reply_after_reasoning(reply).splitlines()) if c]
    if not lines:
        return VERDICT_UNSURE, False
    label: Optional[str] = None
    for i in range(len(lines) - 1, -1, -1):
        label = _line_verdict(lines, i)
        if label is not None:
            previous = _line_verdict(lines, i - 1) if i > 0 else None
            if previous is not None and previous != label:
                label = _AMBIGUOUS  # "Verdict: CORRECT / Verdict: WRONG": an echo of the options
            break
    if label is None:
        label = _trailing_label(lines[-1])
    if label in VERDICT_LABELS:
        return label, True
    return VERDICT_UNSURE, False


@dataclass(frozen=True)
class JudgeVerdict(Verdict):
    """A Verdict that also says whether the reply could be read; unparseable replies are UNSURE."""

    parseable: bool = True


def verdict_from_generation(generation: Generation) -> JudgeVerdict:
    """The verdict a judge generation states. A reply the engine could not give or that ran out
    of tokens is UNSURE and unparseable, whatever words its unfinished text contains."""
    raw = generation.text
    if generation.unsupported is not None or generation.finish_reason == FINISH_LENGTH:
        return JudgeVerdict(VERDICT_UNSURE, raw, generation.model, parseable=False)
    label, parseable = parse_verdict(raw)
    return JudgeVerdict(label, raw, generation.model, parseable=parseable)


def promotion(verdict: Union[Verdict, str]) -> tuple[str, Optional[str]]:
    """Where a judged item goes, as ``(route, reason)``: only CORRECT is accepted; WRONG is
    rejected as ``wrong_answer`` and anything else (UNSURE, unparseable, an unknown label) as
    ``unsure``. A verdict may be given as its label."""
    label = verdict if isinstance(verdict, str) else verdict.label
    if label == VERDICT_CORRECT:
        return ACCEPTED, None
    if label == VERDICT_WRONG:
        return REJECTED, WRONG_ANSWER
    return REJECTED, UNSURE


def apply_verdict(outcome: Outcome, generation: Generation, verdict: Verdict) -> Outcome:
    """The outcome after the judge: only CORRECT promotes, with the model's whole final answer."""
    route_to, reason = promotion(verdict)
    if route_to == ACCEPTED:
        return replace(outcome, route=ACCEPTED, think=generation.think,
                       accepted_text=candidate_answer(generation), verifier=JUDGE_VERIFIER,
                       wrong_vlm="", reason=None)
    return replace(outcome, reason=reason)


def overturns_by_family(rows: Iterable[tuple[str, Union[Verdict, str, None]]]) -> dict[str, dict[str, int]]:
    """Per family, over ``(family, verdict)`` for rule-rejected items: how many were judged, how
    many the judge promoted, and how many it kept as wrong or unsure. ``None`` (not judged) is
    skipped; a verdict may be given as its label."""
    out: dict[str, dict[str, int]] = {}
    for family, verdict in rows:
        if verdict is None:
            continue
        route, reason = promotion(verdict)
        counts = out.setdefault(family, {"judged": 0, "promoted": 0, "wrong": 0, "unsure": 0})
        counts["judged"] += 1
        if route == ACCEPTED:
            counts["promoted"] += 1
        else:
            counts["wrong" if reason == WRONG_ANSWER else "unsure"] += 1
    return dict(sorted(out.items()))
