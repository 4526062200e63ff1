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

import importlib
from types import ModuleType
from typing import Iterable, Optional, Sequence

from ..errors import UnknownNameError
from ..records import Decision
from .candidates import candidates, final_answer_candidates, strip_reasoning
from .extract import EXTRACTION_VERSION

# name -> module path; modules are imported on first use so a heavy dependency (math-verify)
# costs nothing to builds that never use its rule.
RULE_MODULES: dict[str, str] = {
    "alnum": "orandcar_builder.verify.alnum",
    "anls": "orandcar_builder.verify.anls",
    "vqa": "orandcar_builder.verify.vqa",
    "relaxed": "orandcar_builder.verify.relaxed",
    "choice": "orandcar_builder.verify.choice",
    "math": "orandcar_builder.verify.math_answer",
    "exact": "orandcar_builder.verify.exact",
}

_loaded: dict[str, ModuleType] = {}


def register_rule(name: str, module_path: str) -> None:
    if name in RULE_MODULES and RULE_MODULES[name] != module_path:
        raise ValueError(f"rule {name!r} registered twice")
    RULE_MODULES[name] = module_path


def get_rule(name: str) -> ModuleType:
    if name not in RULE_MODULES:
        raise UnknownNameError("rule", name, RULE_MODULES)
    if name not in _loaded:
        module = importlib.import_module(RULE_MODULES[name])
        for attr in ("NAME", "VERSION", "CONSTANTS", "score", "passes", "reference_score"):
            if not hasattr(module, attr):
                raise TypeError(f"rule module {module.__name__} lacks {attr}")
        _loaded[name] = module
    return _loaded[name]


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


def verify(
    rule_name: str,
    answer: str,
    references: Sequence[str],
    options: Optional[Sequence[str]] = None,
) -> Decision:
    """Decide ``answer`` against ``references`` with the named rule.

    An explicit final-answer statement, when the answer has one, is the only candidate; otherwise
    candidates are tried in order (full answer, first line, first paragraph); the first that
    passes decides. When none passes, the best-scoring candidate is recorded (earliest on ties).
    Empty ``options`` count as none.
    """
    rule = get_rule(rule_name)
    refs, opts = check_inputs(answer, references, options)
    best: Optional[Decision] = None
    for label, text, extraction in final_answer_candidates(answer, getattr(rule, "FINDS_VALUES", False)):
        s, passed = decide(rule, text, refs, opts)
        decision = Decision(rule.NAME, rule.VERSION, label, text, s, passed, extraction, EXTRACTION_VERSION)
        if decision.passed:
            return decision
        if best is None or s > best.score:
            best = decision
    if best is None:  # empty answer: nothing to try
        best = Decision(rule.NAME, rule.VERSION, "full", "", 0.0, False, "", EXTRACTION_VERSION)
    return best


__all__ = ["verify", "decide", "reference_decide", "get_rule", "register_rule", "RULE_MODULES", "candidates",
           "final_answer_candidates", "strip_reasoning", "EXTRACTION_VERSION"]
