"""String verifiers: one module per rule, registered by name.

A rule module defines:

- ``NAME`` and ``VERSION`` (a change of behaviour bumps the version);
- ``CONSTANTS``: the names of its module-level constants, which the card renders;
- ``score(prediction, references, options) -> float`` in [0, 1], the fast implementation;
- ``passes(score) -> bool``: the rule's pass criterion (full credit only);
- ``reference_score(prediction, references, options) -> float``: a short, readable reference
  implementation, rendered into the card and tested against ``score``.

A rule whose pass criterion is not a function of the score alone (``vqa``: the score is the
leave-one-out accuracy, the pass needs min(3, n) matching references) also defines
``decide(prediction, references, options) -> (score, passed)`` and ``reference_decide``; the
decision then comes from ``decide``. Rules may define ``detail(...) -> str``, one line that
``explain`` shows (the normalised text, the extracted letter). A rule that finds a value inside a
text (``math``, ``choice``) sets ``FINDS_VALUES = True``: it is then also tried on what a reply's
last sentence concludes (``candidates.py``).

``verify`` removes a leaked reasoning block, runs final-answer extraction (``extract.py``) and
applies the rule to the explicit statement's span when the answer has one, else to the answer as
a whole, its first line and its first paragraph (``candidates.py``); the decision records which
candidate decided and which extraction pattern, with ``EXTRACTION_VERSION``.
"""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType
from typing import Iterable, Optional, Sequence

from ..records import Decision
from ..registry import Registry, missing_attributes, named_as_registered
from ..vocab import NO_PICK, SEVERAL_PICKS, WRONG_PICK
from .candidates import candidates, final_answer_candidates, strip_reasoning
from .extract import AFTER_CONTAINER, BEFORE_LETTER, EXTRACTION_VERSION, OTHER_CONTAINER


def _rule_contract(name: str, module: ModuleType) -> list[str]:
    """A rule module has the attributes the module docstring lists, its ``NAME`` is the name it is
    registered under (the decisions and the card record ``NAME``), and every name in
    ``CONSTANTS`` is one of its attributes (the card renders them)."""
    problems = missing_attributes(module, ("NAME", "VERSION", "CONSTANTS", "score", "passes", "reference_score"),
                                  callables=("score", "passes", "reference_score"))
    problems += named_as_registered(name, module)
    problems += [f"CONSTANTS names {constant!r}, which it lacks" for constant in getattr(module, "CONSTANTS", ())
                 if not hasattr(module, constant)]
    return problems


# name -> module path; modules are imported on first use so a heavy dependency (math-verify)
# costs nothing to builds that never use its rule.
RULE_MODULES = Registry("rule", {
    "alnum": "orandcar_builder.verify.alnum",
    "anls": "orandcar_builder.verify.anls",
    "vqa": "orandcar_builder.verify.vqa",
    "relaxed": "orandcar_builder.verify.relaxed",
    "choice": "orandcar_builder.verify.choice",
    "math": "orandcar_builder.verify.math_answer",
    "exact": "orandcar_builder.verify.exact",
}, attribute=False, check=_rule_contract)


def register_rule(name: str, module_path: str) -> None:
    """Add rule ``name`` (its module, ``NAME`` equal to ``name``), checked when first loaded."""
    RULE_MODULES.register(name, module_path)


def get_rule(name: str) -> ModuleType:
    """The rule module ``name``, imported and checked on first use (UnknownNameError, RegistryError)."""
    return RULE_MODULES.load(name)


def decide(rule: ModuleType, text: str, references: Sequence[str], options: Optional[Sequence[str]]) -> tuple[float, bool]:
    """(score, passed) of one candidate text under a loaded rule module."""
    if hasattr(rule, "decide"):
        value, passed = rule.decide(text, references, options)
        return float(value), bool(passed)
    value = float(rule.score(text, references, options))
    return value, bool(rule.passes(value))


def reference_decide(rule: ModuleType, text: str, references: Sequence[str], options: Optional[Sequence[str]]) -> tuple[float, bool]:
    """The same decision by the rule's reference implementation."""
    if hasattr(rule, "reference_decide"):
        value, passed = rule.reference_decide(text, references, options)
        return float(value), bool(passed)
    value = float(rule.reference_score(text, references, options))
    return value, bool(rule.passes(value))


def _strings(what: str, value: object) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a list of strings, got {value!r}")
    items = list(value)
    bad = [item for item in items if not isinstance(item, str)]
    if bad:
        raise TypeError(f"{what} must be a list of strings; {bad[0]!r} is a {type(bad[0]).__name__}")
    return items


def check_inputs(answer: object, references: object, options: object) -> tuple[list[str], Optional[list[str]]]:
    """References and options as lists of strings (no options: None); TypeError naming the bad input."""
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a string, got {type(answer).__name__}")
    refs = _strings("references", references)
    opts = None if options is None else _strings("options", options)
    return refs, (opts or None)


def reject_kind(rule: ModuleType, text: str, references: Sequence[str], options: Optional[Sequence[str]]) -> str:
    """The ``vocab.REJECT_KINDS`` name of a rejected candidate: the rule's own ``reject_kind``
    where it has one, else ``NO_PICK`` for an empty text and ``WRONG_PICK`` for any other."""
    if hasattr(rule, "reject_kind"):
        return rule.reject_kind(text, references, options)
    return WRONG_PICK if text.strip() else NO_PICK


def _read_together(rule: ModuleType, tries: list, opts: Optional[Sequence[str]]) -> list:
    """The candidates to decide when the deciding statement has a companion (rules with
    ``picks``; see ``extract.statements``): none when the two name different answers
    (``SEVERAL_PICKS``: the reply contradicts itself); the companion alone when it follows a
    container that names nothing; else the deciding statement alone."""
    if len(tries) < 2 or tries[1][0] not in (AFTER_CONTAINER, BEFORE_LETTER, OTHER_CONTAINER):
        return tries
    first, other = rule.picks(tries[0][1], opts), rule.picks(tries[1][1], opts)
    if first is None:
        return tries[1:] if tries[1][0] == AFTER_CONTAINER else tries[:1]
    if other is not None and other != first:
        return []
    return tries[:1]


def verify(
    rule_name: str,
    answer: str,
    references: Sequence[str],
    options: Optional[Sequence[str]] = None,
    question: str = "",
) -> Decision:
    """Decide ``answer`` against ``references`` with the named rule.

    An explicit final-answer statement, when the answer has one, is the only candidate (for a
    rule with ``picks``, a statement after the last box is read with it: ``_read_together``);
    otherwise candidates are tried in order (full answer, first line, first paragraph, and for the
    rules that find values, the conclusions); the first that passes decides. When none passes,
    the best-scoring candidate is recorded (earliest on ties), with the kind of its rejection.
    Empty ``options`` count as none. ``question``, the text the model was asked, lets a
    conclusion keep a negation the question asked for.
    """
    rule = get_rule(rule_name)
    refs, opts = check_inputs(answer, references, options)
    best: Optional[Decision] = None
    tries = final_answer_candidates(answer, getattr(rule, "FINDS_VALUES", False), question,
                                    companions=hasattr(rule, "picks"))
    read = _read_together(rule, tries, opts) if hasattr(rule, "picks") else tries
    if tries and not read:  # two statements that name different answers
        label, text, extraction = tries[0]
        return Decision(rule.NAME, rule.VERSION, label, text, 0.0, False, extraction, EXTRACTION_VERSION,
                        SEVERAL_PICKS)
    for label, text, extraction in read:
        s, passed = decide(rule, text, refs, opts)
        decision = Decision(rule.NAME, rule.VERSION, label, text, s, passed, extraction, EXTRACTION_VERSION)
        if decision.passed:
            return decision
        if best is None or decision.score > best.score:
            best = decision
    if best is None:  # empty answer: nothing to try
        return Decision(rule.NAME, rule.VERSION, "full", "", 0.0, False, "", EXTRACTION_VERSION, NO_PICK)
    # the kind of the recorded rejection only: the other candidates' kinds are never kept
    return replace(best, reject_kind=reject_kind(rule, best.text, refs, opts))


__all__ = ["verify", "decide", "reference_decide", "get_rule", "register_rule", "RULE_MODULES", "candidates",
           "final_answer_candidates", "strip_reasoning", "EXTRACTION_VERSION"]
