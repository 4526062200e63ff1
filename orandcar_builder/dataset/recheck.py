"""``orandcar recheck``: recompute every string decision of a built dataset from its rows alone.

A dataset folder holds ``<config>/train-*.parquet`` for the configs ``RS_think``, ``RS_nothink``
and ``rejected``. Only the ``qa`` and ``clean_meta`` columns are read (never the images), in
batches. For every QA item the family comes from ``clean_meta.sources[i].family``, the
references from ``clean_meta.sources[i].references`` (``[org_answer]`` for rows written before
that field existed) and the options from ``clean_meta.sources[i].options``. Then:

Each stored answer goes through the whole decision again (``verify``): reasoning removed,
final-answer extraction, candidates, the rule; a disagreement names the candidate and the
extraction pattern that decided.

- accepted configs: the rule of the family must pass ``answer``, and ``verifier`` must name that
  rule; a row whose ``verifier`` is ``judge`` must still be rejected by the rule (the judge only
  sees what the rule rejected), and is counted apart;
- ``rejected``: for reasons ``wrong_answer`` and ``unsure`` the rule must reject ``wrong_vlm``;
  ``truncated`` and ``no_answer`` are counted, not rechecked;
- everywhere: the stored reference (``org_answer``, or ``answer`` in ``rejected``) must be the
  first of the item's references.

Anything else is a disagreement, listed with its shard, row and QA index.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import OrandCarError, UnknownNameError
from ..families import Families
from ..interrupts import ignore_sigint, sigint_blocked
from ..parquetio import ShardTooLargeError, check_row_groups, open_parquet
from ..verify import verify
from ..vocab import (
    ACCEPTED_CONFIGS,
    CONFIG_NOTHINK,
    CONFIG_REJECTED,
    CONFIG_THINK,
    CONFIGS,
    COUNTED_REASONS,
    JUDGE_VERIFIER,
    RECHECKED_REASONS,
    SHARD_GLOB,
)
from .cardfile import recorded_families
from .info import shard_paths

BATCH_ROWS = 4096
QA_FIELDS = {
    CONFIG_THINK: ("question", "answer", "org_answer", "verifier"),
    CONFIG_NOTHINK: ("question", "answer", "org_answer", "verifier"),
    CONFIG_REJECTED: ("question", "answer", "wrong_vlm", "reason"),
}


@dataclass
class Tally:
    """Outcomes for one (config, family)."""

    agree: int = 0
    disagree: int = 0
    judge: int = 0  # accepted by the judge; the rule still rejects them, as it must
    not_rechecked: dict[str, int] = field(default_factory=dict)  # reason -> count

    @property
    def total(self) -> int:
        return self.agree + self.disagree + self.judge + sum(self.not_rechecked.values())


@dataclass(frozen=True)
class Disagreement:
    config: str
    shard: str  # relative to the dataset folder
    row: int  # row index within the shard
    qa_index: Optional[int]  # None when the whole row is malformed
    family: str
    detail: str


@dataclass
class RecheckReport:
    folder: Path
    shards: list[str] = field(default_factory=list)
    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)  # (config, family) -> Tally
    disagreements: list[Disagreement] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.disagreements

    @property
    def qa_items(self) -> int:
        return sum(t.total for t in self.tallies.values())

    def tally(self, config: str, family: str) -> Tally:
        return self.tallies.setdefault((config, family), Tally())


def find_shards(folder: Path) -> list[tuple[str, Path]]:
    """(config, shard path) for every shard of the known configs, in config then name order."""
    if not folder.is_dir():
        raise OrandCarError(f"{folder}: not a directory (give the folder holding the config folders)")
    shards = [(config, path) for config in CONFIGS for path in shard_paths(folder, config)]
    if not shards:
        raise OrandCarError(
            f"{folder}: no parquet shards found (expected {', '.join(c + '/' + SHARD_GLOB for c in CONFIGS)})")
    return shards


@dataclass(frozen=True)
class _Item:
    row: int
    qa_index: int
    fields: dict
    family: Optional[str]
    references: list[str]
    options: list[str]


def _struct_fields(array: pa.Array, names: tuple[str, ...], where: str) -> dict[str, list]:
    present = {array.type.field(i).name for i in range(array.type.num_fields)}
    missing = [n for n in names if n not in present]
    if missing:
        raise OrandCarError(f"{where}: missing field(s) {', '.join(missing)}")
    return {name: pc.struct_field(array, name).to_pylist() for name in names}


def _offsets(lengths: list) -> list[int]:
    out, total = [0], 0
    for n in lengths:
        total += n or 0
        out.append(total)
    return out


def _items(path: Path, config: str, shard: str, report: RecheckReport) -> Iterator[_Item]:
    """The QA items of one shard with their sources; malformed rows go to the report."""
    try:
        parquet = open_parquet(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise OrandCarError(f"{shard}: not a readable parquet file ({exc})") from None
    columns = set(parquet.schema_arrow.names)
    if not {"qa", "clean_meta"} <= columns:
        raise OrandCarError(f"{shard}: needs columns qa and clean_meta, has {', '.join(sorted(columns))}")
    try:
        check_row_groups(path, parquet, columns=("qa", "clean_meta"))
    except ShardTooLargeError as exc:
        raise OrandCarError(f"{shard}: {exc}") from None
    try:
        source_type = parquet.schema_arrow.field("clean_meta").type.field("sources").type.value_type
        source_fields = {source_type.field(i).name for i in range(source_type.num_fields)}
    except (KeyError, AttributeError, TypeError):
        raise OrandCarError(f"{shard}: clean_meta must hold sources, a list of structs") from None
    row_base = 0
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=["qa", "clean_meta"]):
        qa = batch.column("qa")
        sources = pc.struct_field(batch.column("clean_meta"), "sources")
        qa_lengths = pc.list_value_length(qa).to_pylist()
        source_lengths = pc.list_value_length(sources).to_pylist()
        qa_fields = _struct_fields(pc.list_flatten(qa), QA_FIELDS[config], f"{shard}: qa")
        flat_sources = pc.list_flatten(sources)
        families = _struct_fields(flat_sources, ("family",), f"{shard}: clean_meta.sources")["family"]
        references = (pc.struct_field(flat_sources, "references").to_pylist()
                      if "references" in source_fields else [None] * len(families))
        options = (pc.struct_field(flat_sources, "options").to_pylist()
                   if "options" in source_fields else [None] * len(families))
        qa_at, source_at = _offsets(qa_lengths), _offsets(source_lengths)
        for i, (n_qa, n_sources) in enumerate(zip(qa_lengths, source_lengths)):
            row = row_base + i
            if (n_qa or 0) != (n_sources or 0):
                report.disagreements.append(Disagreement(
                    config, shard, row, None, "",
                    f"{n_qa or 0} QA items but {n_sources or 0} clean_meta.sources: they must align"))
                continue
            for k in range(n_qa or 0):
                q, s = qa_at[i] + k, source_at[i] + k
                yield _Item(row, k, {name: values[q] for name, values in qa_fields.items()},
                            families[s], references[s] or [], options[s] or [])
        row_base += batch.num_rows


def _describe(decision) -> str:
    how = f", extraction {decision.extraction} (version {decision.extraction_version})" if decision.extraction else ""
    return f"candidate {decision.candidate} {decision.text!r}{how}, score {decision.score:.4f}"


def _check(config: str, item: _Item, rule: str) -> tuple[str, Optional[str]]:
    """('agree' | 'judge' | 'counted:<reason>' | 'disagree', detail) for one QA item."""
    fields = item.fields
    question = fields.get("question") or ""
    stored_reference = fields["answer"] if config == CONFIG_REJECTED else fields["org_answer"]
    references = item.references or [stored_reference or ""]
    if stored_reference != references[0]:
        label = "answer" if config == CONFIG_REJECTED else "org_answer"
        return "disagree", f"{label} {stored_reference!r} is not the first reference {references[0]!r}"
    if config == CONFIG_REJECTED:
        reason = fields["reason"]
        if reason in COUNTED_REASONS:
            return f"counted:{reason}", None
        if reason not in RECHECKED_REASONS:
            return "disagree", f"unknown reason {reason!r} (known: {', '.join(RECHECKED_REASONS + COUNTED_REASONS)})"
        decision = verify(rule, fields["wrong_vlm"] or "", references, item.options, question=question)
        if decision.passed:
            return "disagree", f"rejected as {reason} but {rule} passes wrong_vlm ({_describe(decision)})"
        return "agree", None
    decision = verify(rule, fields["answer"] or "", references, item.options, question=question)
    if fields["verifier"] == JUDGE_VERIFIER:
        if decision.passed:
            return "disagree", f"promoted by the judge but {rule} already passes it ({_describe(decision)})"
        return "judge", None
    if fields["verifier"] != rule:
        return "disagree", f"verifier {fields['verifier']!r} is not {rule!r}, the rule of this item"
    if not decision.passed:
        return "disagree", f"{rule} rejects the accepted answer against {references!r} ({_describe(decision)})"
    return "agree", None


def _rule_of(families: Families, family: str, has_options: bool) -> tuple[str, str]:
    if not family:
        return "", "no family in clean_meta.sources"
    try:
        return families.rule_for(family, has_options), ""
    except UnknownNameError as exc:
        return "", str(exc)


def _recheck_shard(folder: Path, config: str, path: Path, families: Families) -> RecheckReport:
    """The report of one shard alone (the unit of work of ``recheck``), decided with the rules of
    ``families`` (the build's registry, as the card records it: ``recorded_families``)."""
    report = RecheckReport(folder=folder)
    shard = path.relative_to(folder).as_posix()
    report.shards.append(shard)
    rules: dict[tuple[str, bool], tuple[str, str]] = {}  # (family, has options) -> (rule, why none)
    for item in _items(path, config, shard, report):
        family = item.family or ""
        tally = report.tally(config, family)
        key = (family, bool(item.options))
        if key not in rules:
            rules[key] = _rule_of(families, *key)
        rule, missing = rules[key]
        if rule:
            outcome, detail = _check(config, item, rule)
        else:
            outcome, detail = "disagree", missing
        if outcome == "agree":
            tally.agree += 1
        elif outcome == "judge":
            tally.judge += 1
        elif outcome.startswith("counted:"):
            reason = outcome.split(":", 1)[1]
            tally.not_rechecked[reason] = tally.not_rechecked.get(reason, 0) + 1
        else:
            tally.disagree += 1
            report.disagreements.append(Disagreement(config, shard, item.row, item.qa_index, family, detail or ""))
    return report


def _merge(into: RecheckReport, part: RecheckReport) -> None:
    into.shards.extend(part.shards)
    into.disagreements.extend(part.disagreements)
    for key, t in part.tallies.items():
        total = into.tally(*key)
        total.agree += t.agree
        total.disagree += t.disagree
        total.judge += t.judge
        for reason, n in t.not_rechecked.items():
            total.not_rechecked[reason] = total.not_rechecked.get(reason, 0) + n


def recheck(folder: Path, workers: int = 1) -> RecheckReport:
    """Recompute every decision stored in the dataset ``folder``; see the module docstring.

    ``workers`` > 1 checks shards in that many processes (math-verify is the slow part); the
    report is the same, in the same order, whatever the number of workers.
    """
    folder = Path(folder)
    shards = find_shards(folder)
    families = recorded_families(folder)  # read once; a Families value pickles, so it travels to the workers
    if workers > 1 and len(shards) > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(shards)), initializer=ignore_sigint) as pool:
            with sigint_blocked():  # the workers start here: Ctrl-C is this process's to handle
                results = pool.map(_recheck_shard, [folder] * len(shards), *zip(*shards), [families] * len(shards))
            parts = list(results)
    else:
        parts = [_recheck_shard(folder, config, path, families) for config, path in shards]
    report = RecheckReport(folder=folder)
    for part in parts:
        _merge(report, part)
    return report


def format_recheck(report: RecheckReport, limit: Optional[int] = None) -> str:
    """The report as ``orandcar recheck`` prints it: a table per config and family, then the
    disagreements (all of them, or the first ``limit`` and how many more there are)."""
    lines = [f"recheck of {report.folder}: {len(report.shards)} shard(s), {report.qa_items} QA items"]
    header = f"{'config':<11} {'family':<16} {'agree':>7} {'judge':>6} {'disagree':>8}  not rechecked"
    lines.append(header)
    for (config, family), t in sorted(report.tallies.items(), key=lambda kv: (CONFIGS.index(kv[0][0]), kv[0][1])):
        judge = str(t.judge) if config in ACCEPTED_CONFIGS else "-"
        skipped = ", ".join(f"{reason} {n}" for reason, n in sorted(t.not_rechecked.items())) or "-"
        lines.append(f"{config:<11} {family or '?':<16} {t.agree:>7} {judge:>6} {t.disagree:>8}  {skipped}")
    if report.disagreements:
        lines.append(f"disagreements ({len(report.disagreements)}):")
        listed = report.disagreements if limit is None else report.disagreements[:limit]
        for d in listed:
            where = f"{d.shard} row {d.row}" + ("" if d.qa_index is None else f" qa {d.qa_index}")
            lines.append(f"  {where} [{d.family or '?'}]: {d.detail}")
        if len(listed) < len(report.disagreements):
            lines.append(f"  ... and {len(report.disagreements) - len(listed)} more")
        lines.append(f"FAILED: {len(report.disagreements)} disagreement(s)")
    else:
        lines.append("OK: every decision agrees")
    return "\n".join(lines)
