"""What ``orandcar check-answer`` shows: how a family's rule decides one answer, candidate by candidate."""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional, Sequence

from ..families import DEFAULT_FAMILIES, Families
from ..vocab import OPTION_LETTERS
from . import check_inputs, decide, get_rule, verify
from .candidates import STATEMENT_CANDIDATE, final_answer_candidates
from .extract import EXTRACTION_VERSION

PASS_MARK, REJECT_MARK = "PASS", "REJECT"


def explain(family: str, answer: str, references: Sequence[str], options: Optional[Sequence[str]] = None,
            *, families: Families = DEFAULT_FAMILIES) -> dict:
    """Every candidate of ``answer`` scored by the rule ``families`` (the code's unless given)
    gives ``family``, and the final decision.

    Returns ``{"family", "rule", "rule_version", "answer", "references", "options",
    "extraction": {"version", "pattern", "span"}, "candidates": [{"candidate", "text",
    "extraction", "score", "passed", "detail"}], "decision": {Decision fields}}``.
    ``extraction`` names the explicit final-answer statement found (pattern ``""`` and span
    ``None`` when there is none). Unlike ``verify``, which stops at the first passing candidate,
    every candidate is listed; ``decision`` is exactly what ``verify`` returns. Raises
    UnknownNameError for an unknown family or rule.
    """
    rule_name = families.rule_for(family, options)
    rule = get_rule(rule_name)
    refs, opts = check_inputs(answer, references, options)
    tried = []
    for label, text, extraction in final_answer_candidates(answer, getattr(rule, "FINDS_VALUES", False)):
        value, passed = decide(rule, text, refs, opts)
        detail = rule.detail(text, refs, opts) if hasattr(rule, "detail") else ""
        tried.append({"candidate": label, "text": text, "extraction": extraction, "score": value,
                      "passed": passed, "detail": detail})
    statement = tried[0] if tried and tried[0]["candidate"] == STATEMENT_CANDIDATE else None
    return {
        "family": family,
        "rule": rule.NAME,
        "rule_version": rule.VERSION,
        "answer": answer,
        "references": refs,
        "options": opts,
        "extraction": {"version": EXTRACTION_VERSION, "pattern": statement["extraction"] if statement else "",
                       "span": statement["text"] if statement else None},
        "candidates": tried,
        "decision": asdict(verify(rule_name, answer, refs, opts)),
    }


def format_explanation(result: dict) -> str:
    """``explain``'s result as the text ``check-answer`` prints."""
    lines = [
        f"family:     {result['family']}",
        f"rule:       {result['rule']} (version {result['rule_version']})",
        "references: " + " | ".join(repr(r) for r in result["references"]),
    ]
    if result["options"]:
        lines.append("options:    " + "  ".join(f"{OPTION_LETTERS[i]}. {o}" for i, o in enumerate(result["options"])))
    found = result["extraction"]
    if found["pattern"]:
        lines.append(f"extraction: {found['pattern']} -> {found['span']!r} (version {found['version']}); "
                     "the statement alone is checked")
    else:
        lines.append(f"extraction: no explicit final-answer statement (version {found['version']})")
    if not result["candidates"]:
        lines.append("candidates: none (the answer is empty once reasoning is removed)")
    for c in result["candidates"]:
        mark = PASS_MARK if c["passed"] else REJECT_MARK
        lines.append(f"  {c['candidate']:<17} {mark:<6} score {c['score']:.4f}  {c['text']!r}")
        if c["detail"]:
            lines.append(f"  {'':<17} {c['detail']}")
    d = result["decision"]
    mark = PASS_MARK if d["passed"] else REJECT_MARK
    how = f"candidate {d['candidate']}" + (f", pattern {d['extraction']}" if d["extraction"] else "")
    kind = f", {d['reject_kind']}" if d.get("reject_kind") else ""  # what kind of rejection (vocab.REJECT_KINDS)
    lines.append(f"decision:   {mark} ({how}, score {d['score']:.4f}{kind})")
    return "\n".join(lines)
