"""Calibration: the judge over a deterministic, family-stratified sample of items the string rule
accepted, and how often the two agree; the plain-text summary ``orandcar calibrate`` prints."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ..vocab import VERDICT_CORRECT
from .prompt import JUDGE_PROMPT_VERSION, JudgeItem, JudgeItemLike, as_judge_item, candidate_text
from .run import GenerateFn, judge
from .verdict import VERDICT_PARSER_VERSION, JudgeVerdict

CALIBRATION_SAMPLE_SALT = "orandcar-judge-calibration"


def sample_key(item_id: str) -> str:
    """The hash that orders items within a family for the calibration sample."""
    return hashlib.sha256(f"{CALIBRATION_SAMPLE_SALT}\0{item_id}".encode("utf-8")).hexdigest()


def calibration_sample(items: Iterable[JudgeItemLike], n: int) -> list[JudgeItem]:
    """At most ``n`` items, spread across families: families (by name) take turns giving their
    next item in ``sample_key`` order until ``n`` are drawn or all are used. Depends only on the
    set of items, not their order; a larger ``n`` extends the sample of a smaller one."""
    if n < 0:
        raise ValueError(f"calibration sample size must be >= 0, got {n}")
    by_family: dict[str, list[JudgeItem]] = {}
    seen: set[str] = set()
    for raw in items:
        item = as_judge_item(raw)
        if item.item_id not in seen:
            seen.add(item.item_id)
            by_family.setdefault(item.family, []).append(item)
    queues = [sorted(group, key=lambda it: sample_key(it.item_id)) for _, group in sorted(by_family.items())]
    sample: list[JudgeItem] = []
    depth = 0
    while len(sample) < n and any(depth < len(q) for q in queues):
        for queue in queues:
            if depth < len(queue) and len(sample) < n:
                sample.append(queue[depth])
        depth += 1
    return sample


@dataclass(frozen=True)
class CalibrationRow:
    """One rule-accepted item and the judge's verdict on it."""

    item: JudgeItem
    verdict: JudgeVerdict

    @property
    def agrees(self) -> bool:
        return self.verdict.label == VERDICT_CORRECT

    def to_dict(self) -> dict:
        return {
            "id": self.item.item_id,
            "family": self.item.family,
            "question": self.item.question,
            "references": list(self.item.references),
            "candidate": self.item.candidate,
            "verdict": self.verdict.label,
            "parseable": self.verdict.parseable,
            "judge_reply": self.verdict.raw,
        }


@dataclass(frozen=True)
class CalibrationReport:
    """Agreement of the judge with the string rule on items the rule accepted."""

    requested: int
    rows: tuple[CalibrationRow, ...]

    @property
    def n(self) -> int:
        return len(self.rows)

    @property
    def agreed(self) -> int:
        return sum(row.agrees for row in self.rows)

    @property
    def agreement(self) -> Optional[float]:
        return round(self.agreed / self.n, 4) if self.n else None

    @property
    def disagreements(self) -> list[CalibrationRow]:
        return [row for row in self.rows if not row.agrees]

    @property
    def unparseable(self) -> int:
        return sum(not row.verdict.parseable for row in self.rows)

    @property
    def judge_models(self) -> list[str]:
        return sorted({row.verdict.model for row in self.rows})

    def by_family(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for row in self.rows:
            counts = out.setdefault(row.item.family, {"n": 0, "agreed": 0})
            counts["n"] += 1
            counts["agreed"] += row.agrees
        return dict(sorted(out.items()))

    def to_dict(self) -> dict:
        """JSON-serialisable, for the build report and the card."""
        return {
            "requested": self.requested,
            "n": self.n,
            "agreed": self.agreed,
            "agreement": self.agreement,
            "unparseable": self.unparseable,
            "judge_models": self.judge_models,
            "prompt_version": JUDGE_PROMPT_VERSION,
            "parser_version": VERDICT_PARSER_VERSION,
            "by_family": self.by_family(),
            "disagreements": [row.to_dict() for row in self.disagreements],
        }


def calibrate(
    engine: Any, accepted_items: Iterable[JudgeItemLike], n: int, generate: Optional[GenerateFn] = None
) -> CalibrationReport:
    """Judge a deterministic sample (``calibration_sample``) of ``n`` items the rule accepted and
    report agreement: the judge agrees when it says CORRECT."""
    sample = calibration_sample(accepted_items, n)
    verdicts = judge(engine, sample, generate=generate)
    return CalibrationReport(requested=n, rows=tuple(CalibrationRow(i, v) for i, v in zip(sample, verdicts)))


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def format_calibration(
    report: CalibrationReport, overturns: Optional[dict[str, dict[str, int]]] = None
) -> str:
    """A plain-text summary: agreement k/N, per family, each disagreement, and (when given) the
    judge's overturns of rule rejects per family."""
    if report.n == 0:
        lines = [f"Judge calibration: no rule-accepted items to sample (asked for {report.requested})."]
    else:
        percent = 100 * report.agreed / report.n
        lines = [
            f"Judge calibration: agreed with the string rule on {report.agreed}/{report.n} "
            f"rule-accepted items ({percent:.1f}%).",
            f"Judge model: {', '.join(report.judge_models)}; prompt v{JUDGE_PROMPT_VERSION}; "
            f"unparseable replies: {report.unparseable}.",
            "Per family:",
        ]
        for family, counts in report.by_family().items():
            lines.append(f"  {family or '(none)'}: {counts['agreed']}/{counts['n']}")
        disagreements = report.disagreements
        lines.append(f"Disagreements ({len(disagreements)}):" if disagreements else "Disagreements: none.")
        for row in disagreements:
            shown = row.verdict.label if row.verdict.parseable else "UNSURE (unparseable)"
            lines.append(
                f"  {row.item.item_id} [{row.item.family or '(none)'}] {shown}: reference "
                f"{_short(' | '.join(row.item.references))}, candidate {_short(row.item.candidate)}"
            )
    if overturns is not None:
        lines.append("Overturns (rule rejects the judge promoted), per family:")
        if not overturns:
            lines.append("  none judged")
        for family, counts in overturns.items():
            lines.append(
                f"  {family or '(none)'}: {counts['promoted']} promoted of {counts['judged']} judged "
                f"(wrong {counts['wrong']}, unsure {counts['unsure']})"
            )
    return "\n".join(lines)


def accepted_items_from_decisions(path) -> list[JudgeItem]:
    """The items a build's string rule accepted, read from its ``work/decisions.parquet``: what
    ``orandcar calibrate`` samples from after the fact."""
    import pyarrow.parquet as pq

    columns = ["id", "question", "references", "final_answer", "family", "rule_passed"]
    table = pq.read_table(path, columns=columns)
    items = []
    for row in table.to_pylist():
        if row["rule_passed"]:
            candidate = candidate_text(row["final_answer"] or "")
            items.append(JudgeItem(row["id"], row["question"], tuple(row["references"]), candidate, row["family"]))
    return items
