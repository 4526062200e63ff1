"""String verifiers: one module per rule, registered by name.

A rule module defines:

- ``NAME`` and ``VERSION`` (a change of behaviour bumps the version);
- ``CONSTANTS``: the names of its module-level constants, which the card renders;
- ``score(prediction, references, options) -> float`` in [0, 1], the fast implementation;
- ``passes(score) -> bool``: the rule's pass criterion (full credit only);
- ``reference_score(prediction, references, options) -> float``: a short, readable reference
  implementation, rendered into the card and tested against ``score``.

``verify`` applies the rule to the answer as a whole, its first line and its first paragraph
(after removing a leaked reasoning block) and records which candidate decided.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Optional, Sequence

from ..errors import UnknownNameError
from ..records import Decision
from .candidates import candidates, strip_reasoning

# name -> module path; modules are imported on first use so a heavy dependency (math-verify)
# costs nothing to builds that never use its rule.
RULE_MODULES: dict[str, str] = {
    "alnum": "orandcar_builder.verify.alnum",
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


def verify(
    rule_name: str,
    answer: str,
    references: Sequence[str],
    options: Optional[Sequence[str]] = None,
) -> Decision:
    """Decide ``answer`` against ``references`` with the named rule.

    Candidates are tried in order (full answer, first line, first paragraph); the first that
    passes decides. When none passes, the best-scoring candidate is recorded (earliest on ties).
    """
    rule = get_rule(rule_name)
    refs = list(references)
    best: Optional[Decision] = None
    for label, text in candidates(answer):
        s = float(rule.score(text, refs, options))
        decision = Decision(rule.NAME, rule.VERSION, label, text, s, bool(rule.passes(s)))
        if decision.passed:
            return decision
        if best is None or s > best.score:
            best = decision
    if best is None:  # empty answer: nothing to try
        best = Decision(rule.NAME, rule.VERSION, "full", "", 0.0, False)
    return best


__all__ = ["verify", "get_rule", "register_rule", "RULE_MODULES", "candidates", "strip_reasoning"]
