"""The card's sections built from the build's figures (``figures.BuildFigures``): how the data was
produced, the counts per family, the rules that decided it, the judge's pass, the cleaning and the
acceptance chart. The figures are read defensively: one an older report lacks is shown as not
recorded."""

from __future__ import annotations

import inspect
import json
from typing import Any, Optional

from ..dataset import layout
from ..engines.base import NO_REASONING, GenerationSettings
from ..figures import BuildFigures, FamilyYield
from ..vocab import ACCEPTED, RECORD_ONLY_KEYS, REJECTED, VERDICT_LABELS
from .errors import CardError
from .markdown import NAME_MAX_CHARS, NOT_RECORDED, code_span, fence, figure_tables, number, percent
from .rules import inline_literal, rule_source, third_party_packages

SHORT_CONSTANT_CHARS = 80  # longer constant values are shown only in the code block
# The acceptance-per-family chart the card shows (review/charts.py draws it; PNG, which the Hub renders).
ACCEPTANCE_CHART = f"{layout.EXAMPLES_DIR}/{layout.ACCEPTANCE_CHART_NAME}"


def lookup(mapping: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(mapping, dict) or key not in mapping:
            return None
        mapping = mapping[key]
    return mapping


def generation_facts(figures: BuildFigures) -> list[tuple[str, str]]:
    """Model, revision, engine, temperature, reasoning and max tokens as (label, markdown): what
    the engine said of itself (``figures.generation``, an ``engines.base.GenerationSettings``),
    "not recorded" where it said nothing. The engine's fingerprint is never read for them: its
    layout is the engine's own."""
    gen = GenerationSettings.from_json(figures.generation)
    reasoning = gen.reasoning
    if reasoning is True:
        reasoning_text = "enabled (the model thinks before answering; its reasoning is kept in `think`)"
    elif reasoning is False:
        reasoning_text = "disabled"
    elif reasoning is None:
        reasoning_text = NOT_RECORDED
    elif reasoning == NO_REASONING:
        reasoning_text = "not applicable (the engine does not reason)"
    else:
        reasoning_text = str(reasoning)
    def name(value: Any) -> str:
        return NOT_RECORDED if not value else code_span(str(value), NAME_MAX_CHARS)

    def figure(value: Any) -> str:
        return NOT_RECORDED if value is None else number(value)

    return [
        ("model", name(gen.model)),
        ("model revision", name(gen.revision)),
        ("engine", name(gen.engine)),
        ("temperature", figure(gen.temperature)),
        ("reasoning", reasoning_text),
        ("max new tokens", figure(gen.max_tokens)),
    ]


def engine_fingerprint(figures: BuildFigures) -> Optional[str]:
    engine = figures.engine
    if not isinstance(engine, dict):
        return None
    kept = {k: v for k, v in engine.items() if k not in RECORD_ONLY_KEYS}
    return json.dumps(kept, indent=2, ensure_ascii=False)


def family_rows(figures: BuildFigures) -> tuple[list[str], list[list[str]]]:
    families = figures.families or {}
    prefix = f"{REJECTED}_"
    reasons = sorted({k[len(prefix):] for counts in families.values() for k in counts if k.startswith(prefix)})
    columns = ["family", "rule", "QA", ACCEPTED, REJECTED, *reasons, f"{ACCEPTED} share"]
    rows = []
    for name, counts in families.items():
        rules = family_rules(figures, name)
        rows.append([f"`{name}`", ", ".join(f"`{r}`" for r in rules) if rules else NOT_RECORDED,
                     number(counts.get("qa", 0)),
                     number(counts.get(ACCEPTED, 0)), number(counts.get(REJECTED, 0)),
                     *(number(counts.get(prefix + r, 0)) for r in reasons),
                     percent(counts.get(ACCEPTED, 0), counts.get("qa", 0))])
    return columns, rows


def reject_kind_rows(figures: BuildFigures) -> tuple[list[str], list[list[str]]]:
    """The kinds of the rule's rejections per family (``vocab.REJECT_KINDS``), and the yield:
    how much of ``rejected`` is the model's wrong pick and how much the rule could not read."""
    from ..vocab import REJECT_KINDS

    kinds = figures.reject_kinds or {}
    yields = figures.yield_ or {}
    if not kinds and not yields:
        return [], []  # a report written before the kinds were recorded
    columns = ["family", "accepted by rule", "promoted by judge", *REJECT_KINDS]
    rows = []
    for family in sorted(set(kinds) | set(yields)):
        y, k = yields.get(family) or FamilyYield(), kinds.get(family, {})
        rows.append([f"`{family}`", number(y.accepted_by_rule or 0), number(y.promoted_by_judge or 0),
                     *(number(k.get(kind, 0)) for kind in REJECT_KINDS)])
    return columns, rows


def family_rules(figures: BuildFigures, family: str) -> list[str]:
    """The rules that decided a family's items: as the build recorded them (items with options are
    decided by ``choice``, see ``Families.rule_for``), else, for a report written before the
    build recorded them, the code's rule of the family."""
    from ..families import DEFAULT_FAMILIES

    recorded = (figures.rules_by_family or {}).get(family)
    if recorded:
        return list(recorded)
    return [DEFAULT_FAMILIES[family].rule] if family in DEFAULT_FAMILIES else []


def rule_sections(figures: BuildFigures) -> list[dict]:
    from ..verify import get_rule

    used_families = set(figures.families or {})
    sections = []
    for name, version in (figures.rules or {}).items():
        rule = get_rule(name)
        if str(version) != str(rule.VERSION):
            raise CardError(f"the build used rule {name} version {version}, this code has version {rule.VERSION}: "
                            "rebuild, or render the card with the code that built the data")
        source = rule_source(name, rule)
        constants = []
        for constant in rule.CONSTANTS:
            value = getattr(rule, constant)
            text = inline_literal(value)
            entries = f"{len(value)} entries, " if isinstance(value, (dict, list, tuple, set, frozenset)) else ""
            constants.append({"name": constant, "value": code_span(text) if len(text) <= SHORT_CONSTANT_CHARS
                              else f"{entries}in full in the code below"})
        sections.append({
            "name": name,
            "version": rule.VERSION,
            "families": [f for f in sorted(used_families) if name in family_rules(figures, f)],
            "doc": inspect.cleandoc(rule.__doc__ or ""),
            "constants": constants,
            "source": fence(source, "python"),
            "needs": third_party_packages(source),
            "decides_with": "reference_decide" if hasattr(rule, "reference_decide") else "reference_score",
        })
    return sections


def judge_section(figures: BuildFigures) -> Optional[dict]:
    judge = figures.judge
    if judge is None:
        return None
    from .. import judge as judging

    recorded_version = judge.prompt_version
    if recorded_version is not None and str(recorded_version) != judging.JUDGE_PROMPT_VERSION:
        raise CardError(f"the build judged with prompt version {recorded_version}, this code has version "
                        f"{judging.JUDGE_PROMPT_VERSION}: rebuild, or render the card with the code that built "
                        "the data")
    verdicts = judge.verdicts if isinstance(judge.verdicts, dict) else {}
    calibration = judge.calibration
    disagreements = []
    if isinstance(calibration, dict) and calibration.get("n"):
        agreed, n = calibration.get("agreed"), calibration.get("n")
        calibration_text = (f"agreed with the string rule on {number(agreed)} of {number(n)} items the rule had "
                            f"accepted ({percent(agreed, n)})")
        calibration_tables = figure_tables({"by family": calibration.get("by_family") or {}})
        for row in calibration.get("disagreements") or []:
            if isinstance(row, dict):
                disagreements.append([code_span(str(row.get("id", "")), NAME_MAX_CHARS),
                                      code_span(str(row.get("family", "")), NAME_MAX_CHARS),
                                      code_span(json.dumps(row.get("references", []), ensure_ascii=False),
                                                NAME_MAX_CHARS),
                                      code_span(" ".join(str(row.get("candidate", "")).split()), NAME_MAX_CHARS),
                                      code_span(str(row.get("verdict", "")), NAME_MAX_CHARS)])
    else:
        calibration_text, calibration_tables = NOT_RECORDED, []
    judge_engine = judge.engine if isinstance(judge.engine, dict) else {}
    judge_models = ", ".join(lookup(calibration, "judge_models") or [])
    total = judge.judged
    if not isinstance(total, int):
        total = sum(v for v in verdicts.values() if isinstance(v, (int, float)))
    return {
        "model": judge_engine.get("model") or judge_models or NOT_RECORDED,
        "engine": judge_engine.get("kind") or NOT_RECORDED,
        "verdicts": [(label, number(verdicts.get(label, 0)), percent(verdicts.get(label, 0), total))
                     for label in VERDICT_LABELS],
        "judged": number(total),
        "unparseable": number(judge.unparseable),
        "promoted": number(judge.promoted),
        "calibration": calibration_text,
        "calibration_tables": calibration_tables,
        "disagreements": disagreements,
        "overturns": figure_tables({"overturns by family": judge.overturns_by_family or {}}),
        "prompt": fence(judging.JUDGE_PROMPT_TEMPLATE),
        "reference_block": fence(judging.REFERENCE_BLOCK),
        "prompt_version": judging.JUDGE_PROMPT_VERSION,
    }


def cleaning_section(figures: BuildFigures) -> dict:
    cleaning = figures.cleaning if isinstance(figures.cleaning, dict) else {}
    return {
        "policy": cleaning.get("policy") or NOT_RECORDED,
        # The drops per reason are shown from the build report already.
        "tables": figure_tables(cleaning, skip=("policy",) + (
            ("dropped_by_reason",) if cleaning.get("dropped_by_reason") == figures.dropped_by_reason else ())),
        "dropped": figures.dropped,
        "dropped_by_reason": figures.dropped_by_reason or {},
    }


def _chart_families(figures: BuildFigures) -> Optional[list]:
    """The per-family counts the acceptance chart draws, or None when no family has a QA item."""
    from ..review.charts import family_counts_of

    families = family_counts_of(figures)
    return families if any(f.total for f in families) else None


def has_acceptance_chart(figures: BuildFigures) -> bool:
    """Whether the card of ``figures`` shows the acceptance chart: exactly when
    ``acceptance_chart_png`` draws one (some family has a QA item)."""
    return _chart_families(BuildFigures.of(figures)) is not None


def acceptance_chart_png(figures: BuildFigures) -> Optional[bytes]:
    """The acceptance-per-family chart of the build's ``figures`` (or report.json's content) as
    PNG bytes (the same figures give the same bytes), or None when no family has a QA item."""
    from ..review.charts import acceptance_chart

    families = _chart_families(BuildFigures.of(figures))
    if families is None:
        return None
    return acceptance_chart(families, fmt="png")
