"""judge: work/decisions.parquet -> the same file rewritten with the judge's verdicts on the rule's
rejects that have a final answer (a CORRECT verdict promotes the item), chunk by chunk; with
``calibrate``, the judge also runs over a sample of rule accepts and the agreement goes to the
report. Every judge request goes through the build's cache (``executors.generate_through_cache``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

from ... import judge as judging
from ...cache import CacheStats, GenerationCache
from ...engines.base import public_fingerprint
from ...executors import generate_through_cache
from ...executors.base import CHUNK_SIZE
from ...figures import JudgeFigures
from ...judge.prompt import candidate_text
from ...parquetio import open_parquet
from ...records import (
    DECISION_SCHEMA,
    Generation,
    decision_from_row,
    generation_from_row,
    outcome_from_record,
    with_verdict,
)
from ...vocab import GENERATION_BATCH, VERDICT_CORRECT, VERDICT_LABELS
from ...workdir import JUDGED_SUFFIX
from ..progress import set_progress, stage_bar
from ..work import BuildContext, JudgeResult, StageStats, Timer
from ..workfiles import ParquetFile, WorkFiles


class JudgeStage:
    name = "judge"

    def run(self, context: BuildContext, judge_engine, cache: Optional[GenerationCache]) -> JudgeResult:
        """The judge pass with ``judge_engine`` over the work dir's decisions, through ``cache``."""
        config = context.config
        with Timer() as timer:
            cache_stats = CacheStats()
            figures = judge_pass(judge_engine, context.work.decisions, cache, config.calibrate, config.progress,
                                 batch_size=config.generation_batch, stats=cache_stats)
        counters = {"judged": figures.judged, "promoted": figures.promoted, "unparseable": figures.unparseable}
        return JudgeResult(figures, cache_stats, StageStats(self.name, {"judge": timer.seconds}, counters))


class CalibrationPool:
    """Per family, the rule-accepted items with the ``n`` smallest calibration sample keys: all
    that ``judge.calibration_sample(items, n)`` can draw, whatever the pool size."""

    def __init__(self, n: int):
        self.n = n
        self.by_family: dict[str, list[tuple[str, judging.JudgeItem]]] = {}

    def add(self, item: judging.JudgeItem) -> None:
        kept = self.by_family.setdefault(item.family, [])
        kept.append((judging.sample_key(item.item_id), item))
        if len(kept) >= 2 * self.n + 64:
            kept.sort(key=lambda pair: pair[0])
            del kept[self.n:]

    def items(self) -> list[judging.JudgeItem]:
        return [item for kept in self.by_family.values()
                for _, item in sorted(kept, key=lambda pair: pair[0])[:self.n]]


def judge_item(row: dict, generation: Generation) -> judging.JudgeItem:
    """The item the judge sees for one decision record."""
    return judging.JudgeItem(row["id"], row["question"], tuple(row["references"]),
                             judging.candidate_answer(generation), row["family"])


# The decision columns ``count_to_judge`` reads.
_TO_JUDGE_COLUMNS = ["rule", "rule_passed", "unsupported", "final_answer"]


def count_to_judge(decisions: Path, chunk: int = CHUNK_SIZE) -> int:
    """How many items the judge pass grades: ``judging.needs_judge`` (a rule reject that the
    engine could answer, with a final answer) on the few columns it looks at (the judge bar's
    total; the reasoning and the prompts are never read for it)."""
    n = 0
    for batch in open_parquet(decisions).iter_batches(batch_size=chunk, columns=_TO_JUDGE_COLUMNS):
        for rule, passed, unsupported, final_answer in zip(*(batch.column(c).to_pylist() for c in _TO_JUDGE_COLUMNS)):
            n += (rule is not None and not passed and unsupported is None
                  and bool(candidate_text(final_answer or "")))
    return n


def judge_pass(judge_engine, decisions: Path, cache: Optional[GenerationCache], calibrate: int,
               progress: bool, chunk: int = CHUNK_SIZE, batch_size: int = GENERATION_BATCH,
               stats: Optional[CacheStats] = None) -> JudgeFigures:
    """Second pass over rule rejects with a final answer, chunk by chunk: decisions.parquet is
    read and rewritten with the verdicts; optional calibration on rule accepts. Returns the
    judge's figures (report.json's ``judge`` entry); the cache's counts are added to ``stats``
    (report.json's ``cache.judge``)."""
    stats = stats if stats is not None else CacheStats()
    labels: Counter = Counter()
    unparseable = 0
    overturns: dict[str, dict[str, int]] = {}
    calibration_pool = CalibrationPool(calibrate) if calibrate else None
    with stage_bar("judge", count_to_judge(decisions, chunk) if progress else None, progress) as bar:
        def run(engine, requests) -> list[Generation]:
            done = stats.done
            # the rejects were counted up front; the calibration sample's requests come on top
            set_progress(bar, done, max(bar.total or 0, done + len(requests)))

            def advance(s: CacheStats) -> None:
                set_progress(bar, s.done)

            out = generate_through_cache(engine, requests, cache, batch_size=batch_size, stats=stats,
                                         on_batch=advance)
            set_progress(bar, done + len(requests))
            return out

        # staged as decisions.parquet.judged and renamed over decisions.parquet when complete (after
        # the last batch is read)
        with WorkFiles(judged=ParquetFile(decisions, DECISION_SCHEMA, suffix=JUDGED_SUFFIX)) as files:
            for batch in open_parquet(decisions).iter_batches(batch_size=chunk):
                rows = batch.to_pylist()
                to_judge: list[tuple[int, Generation]] = []  # (row, its generation, decoded once)
                items: list[judging.JudgeItem] = []
                for i, row in enumerate(rows):
                    decision = decision_from_row(row)
                    if decision is None:
                        continue
                    generation = generation_from_row(row)
                    if judging.needs_judge(generation, decision):
                        to_judge.append((i, generation))
                        items.append(judge_item(row, generation))
                    elif calibration_pool is not None and decision.passed:
                        calibration_pool.add(judge_item(row, generation))
                verdicts = judging.judge(judge_engine, items, generate=run)
                for (i, generation), verdict in zip(to_judge, verdicts):
                    outcome = judging.apply_verdict(outcome_from_record(rows[i]), generation, verdict)
                    rows[i] = with_verdict(rows[i], outcome, verdict)
                    labels[verdict.label] += 1
                    unparseable += not getattr(verdict, "parseable", True)
                for family, counts in judging.overturns_by_family(
                        (rows[i]["family"], v) for (i, _), v in zip(to_judge, verdicts)).items():
                    total = overturns.setdefault(family, dict.fromkeys(counts, 0))
                    for key, value in counts.items():
                        total[key] += value
                files.judged.write_rows(rows)

        calibration = None
        if calibration_pool is not None:
            calibration = judging.calibrate(judge_engine, calibration_pool.items(), calibrate, generate=run).to_dict()
        set_progress(bar, stats.done, stats.done)
    return JudgeFigures(
        engine=public_fingerprint(judge_engine),
        prompt_version=judging.JUDGE_PROMPT_VERSION,
        judged=sum(labels.values()),
        verdicts={label: labels.get(label, 0) for label in VERDICT_LABELS},
        unparseable=unparseable,
        promoted=labels.get(VERDICT_CORRECT, 0),
        overturns_by_family=dict(sorted(overturns.items())),
        calibration=calibration,
    )
