"""generate: work/admitted.parquet (or the admission's rows as they come) -> prompt, generate and
decide on an executor -> work/decisions.parquet (before the judge, pool order), prompts.jsonl,
unsupported.jsonl, failed.jsonl and the optional replay export (``export_generations``).

The engines are made first: when admission overlaps generation, one that cannot be made stops
the build before any image is read. The executor's chunks come in the order generations
finished; they are written as they come, sorted into pool order on disk
(``executors.ordering.sort_by_order``), and the other files are written from the sorted
decisions, so every file is in pool order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from ...cache import CacheStats, GenerationCache
from ...engines import create_engine
from ...engines.replay import ReplayWriter
from ...executors import EngineFactory, GenerationJob
from ...executors.base import CHUNK_SIZE
from ...executors.ordering import sort_by_order
from ...executors.steps import generation_from_row
from ...files import JsonLinesFile
from ...parquetio import open_parquet
from ...records import DECISION_SCHEMA
from ...vocab import FAILED
from ..config import BuildError
from ..progress import set_progress, stage_bar
from ..work import BuildWork, GenerationFacts, StageReport
from ..workfiles import ParquetFile, WorkFiles


def open_engines(work: BuildWork) -> None:
    """``work.engine`` and ``work.judge_engine``: the objects given, else made from the config."""
    config, objects = work.config, work.objects
    engine = objects.engine
    if engine is None:
        engine = create_engine(config.engine, **config.engine_options)
    judge_engine = objects.judge_engine
    if judge_engine is None and config.judge != "none":
        judge_engine = engine if config.judge == "same" else create_engine(config.judge, **config.judge_options)
    if judge_engine is not None and not judge_engine.can_judge:
        from ...engines import judge_engine_names

        raise BuildError(f"engine {judge_engine.kind!r} cannot run the text-only judge pass; use --judge none, or "
                         f"one of {', '.join(judge_engine_names())}")
    work.engine, work.judge_engine = engine, judge_engine


class GenerateStage:
    """``overlapped``: the admission runs inside this stage (its rows feed the executor as they are
    admitted), and its time and counters are reported here as ``admit``."""

    name = "generate"

    def __init__(self, overlapped: bool = False):
        self.overlapped = overlapped

    def run(self, work: BuildWork) -> StageReport:
        config = work.config
        open_engines(work)
        if config.use_cache:
            work.cache = GenerationCache(work.dir / "cache" / "generations.sqlite")
            work.on_close(work.cache.close)
        admitted_rows = None
        if self.overlapped:
            admitted_rows = work.admission.stream()  # None: the last admission is reused
            if admitted_rows is not None:
                # a failed build: stops the admission's workers and removes its partial files
                work.on_close(admitted_rows.close)
        job = GenerationJob(
            admitted=work.dir / "admitted.parquet", work=work.dir, engine=work.engine,
            factory=work.objects.engine_factory or EngineFactory(config.engine, dict(config.engine_options)),
            cache=work.cache, stats=work.generation_stats, batch_size=config.generation_batch,
            timings={"generate": 0.0, "verify": 0.0}, admitted_rows=admitted_rows, families=config.families)
        total = work.admission.expected if self.overlapped else (lambda: work.admitted)
        work.facts = _generate(work.executor, job, total, config.progress, config.export_generations)
        if not work.admission.done:
            raise RuntimeError(f"executor {work.executor.name!r} ended before every pool line was admitted")  # a bug
        timings = dict(job.timings)
        counters = {"failed": work.facts.failed, **vars(work.generation_stats)}
        if self.overlapped:
            timings["admit"] = work.admission.seconds  # within generate: the two overlap
            counters.update(work.admission.counters())
        return StageReport(self.name, timings, counters)


def _generate(executor, job: GenerationJob, total: Callable[[], Optional[int]], progress: bool,
              export_generations: Optional[Path]) -> GenerationFacts:
    """work/decisions.parquet (before the judge) and the side files. ``total()`` is the items to
    generate as far as known now (it shrinks while the items are still being admitted:
    ``job.admitted_rows``)."""
    work = job.work
    with stage_bar("generate", total(), progress, beside_admit=job.admitted_rows is not None) as bar:
        def advance(stats: CacheStats) -> None:
            set_progress(bar, stats.done, total())

        job.progress = advance
        unsorted = work / "decisions.unsorted.parquet"
        with WorkFiles(decisions=ParquetFile(unsorted, DECISION_SCHEMA)) as files:
            for chunk in executor.run(job):
                files.decisions.write_rows(chunk.rows)
        final = total()  # exact now: admission is done
        set_progress(bar, final, final)
    t0 = time.perf_counter()
    sort_by_order(unsorted, work / "decisions.parquet")
    facts = side_files(work, export_generations)
    job.add_time("order", time.perf_counter() - t0)
    return facts


def side_files(work: Path, export_generations: Optional[Path]) -> GenerationFacts:
    """prompts.jsonl, unsupported.jsonl, failed.jsonl and the optional replay export, in pool
    order, from work/decisions.parquet."""
    facts = GenerationFacts()
    with WorkFiles(prompts=JsonLinesFile(work / "prompts.jsonl"),
                   unsupported=JsonLinesFile(work / "unsupported.jsonl"),
                   failed=JsonLinesFile(work / "failed.jsonl"),
                   export=ReplayWriter(export_generations) if export_generations is not None else None) as files:
        for batch in open_parquet(work / "decisions.parquet").iter_batches(batch_size=CHUNK_SIZE):
            for row in batch.to_pylist():
                if row["route"] == FAILED:
                    files.failed.write({"id": row["id"], "reason": row["reason"], "detail": row["error"]})
                    facts.failed += 1
                    continue
                generation = generation_from_row(row)
                files.prompts.write({"id": row["id"], "question": row["question"], "prompt": generation.prompt})
                if generation.unsupported:
                    files.unsupported.write({"id": row["id"], "family": row["family"],
                                             "explanation": generation.unsupported})
                if files.export is not None:
                    files.export.add(generation, row["question"])
                if generation.model:
                    facts.models.add(generation.model)
                if generation.revision:
                    facts.revisions.add(generation.revision)
    return facts
