"""generate: work/admitted.parquet (or the admission's rows as they come) -> prompt, generate and
decide on an executor -> work/decisions.parquet (before the judge, pool order), prompts.jsonl,
unsupported.jsonl, failed.jsonl and the optional replay export (``export_generations``).

The runner opens the cache (``open_cache``) and then the engines (``open_engines``, which asks the
cache whether a replay file needs reading now) before the first stage, and hands this stage the
engine and the cache. The executor's chunks come in the order
generations finished; they are written as they come, sorted into pool order on disk
(``executors.ordering.sort_by_order``), and the other files are written from the sorted
decisions, so every file is in pool order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from ...cache import CacheStats, GenerationCache
from ...engines import create_engine, engine_class
from ...engines.base import public_fingerprint
from ...engines.replay import ReplayWriter
from ...executors import EngineFactory, GenerationJob, decider
from ...executors.base import CHUNK_SIZE
from ...executors.ordering import sort_by_order
from ...files import JsonLinesFile
from ...parquetio import open_parquet
from ...records import DECISION_SCHEMA, generation_from_row
from ...vocab import FAILED
from ...workdir import WorkDir
from ..config import BuildConfig, BuildError, BuildObjects
from ..progress import set_progress, stage_bar
from ..work import AdmitResult, BuildContext, Engines, GenerateResult, GenerationFacts, StageStats
from ..workfiles import ParquetFile, WorkFiles
from .admit import Admission


def open_engines(config: BuildConfig, objects: BuildObjects, cache: Optional[GenerationCache] = None) -> Engines:
    """The build's engine and judge: the objects given, else made from the config. The runner
    opens them (after the cache) before the first stage: one that cannot be made stops the build
    before any image is read."""
    engine = objects.engine
    if engine is None:
        engine = _made(config.engine, config.engine_options, cache)
    judge_engine = objects.judge_engine
    if judge_engine is None and config.judge != "none":
        judge_engine = engine if config.judge == "same" else _made(config.judge, config.judge_options, cache)
    if judge_engine is not None and not judge_engine.can_judge:
        from ...engines import judge_engine_names

        raise BuildError(f"engine {judge_engine.kind!r} cannot run the text-only judge pass; use --judge none, or "
                         f"one of {', '.join(judge_engine_names())}")
    return Engines(engine, judge_engine)


def _made(name: str, options: dict, cache: Optional[GenerationCache]):
    """Engine ``name`` made from ``options``. One that can put off reading its input
    (``reads_lazily``: the replay file) reads it now unless the cache holds generations of its
    fingerprint: then the same bytes (its fingerprint holds their sha256) were read without a
    problem by an earlier run, and a rerun answered wholly from the cache never reads them."""
    if not getattr(engine_class(name), "reads_lazily", False):
        return create_engine(name, **options)
    engine = create_engine(name, **{**options, "lazy": True})
    if cache is None or not cache.holds_engine(public_fingerprint(engine)):
        engine.load()
    return engine


def open_cache(context: BuildContext) -> Optional[GenerationCache]:
    """The work dir's generation cache (None with the cache turned off), closed when the build ends."""
    if not context.config.use_cache:
        return None
    cache = GenerationCache(context.work.cache)
    context.on_close(cache.close)
    return cache


class GenerateStage:
    """``overlapped``: the admission runs inside this stage (its rows feed the executor as they are
    admitted), and its time and counters are reported here as ``admit``."""

    name = "generate"

    def __init__(self, overlapped: bool = False):
        self.overlapped = overlapped

    def run(self, context: BuildContext, engine, cache: Optional[GenerationCache],
            admission: Admission, before_order: Callable[[int], None] = lambda decisions: None) -> GenerateResult:
        """``before_order(decisions)``: called once every item is generated and decided, before the
        decisions are sorted and the side files written (the write stage starts its second process)."""
        config, work = context.config, context.work
        admitted_rows = None
        if self.overlapped:
            admitted_rows = admission.stream()  # None: the last admission is reused
            if admitted_rows is not None:
                # a failed build: stops the admission's workers and removes its partial files
                context.on_close(admitted_rows.close)
        cache_stats = CacheStats()
        job = GenerationJob(
            admitted=work.admitted, work=work.path, engine=engine,
            factory=context.objects.engine_factory or EngineFactory(config.engine, dict(config.engine_options)),
            cache=cache, stats=cache_stats, batch_size=config.generation_batch,
            timings={"generate": 0.0, "verify": 0.0}, admitted_rows=admitted_rows, families=config.families,
            decide_process=(config.decide_process if config.decide_process is not None
                            else decider.on_process(config.pool, config.limit)))
        total = admission.expected if self.overlapped else (lambda: admission.admitted)
        facts = _generate(context.executor, job, work, total, config.progress, config.export_generations,
                          lambda: before_order(admission.admitted))
        if not admission.done:
            raise RuntimeError(f"executor {context.executor.name!r} ended before every pool line was admitted")  # a bug
        timings = dict(job.timings)
        counters = {"failed": facts.failed, **vars(cache_stats)}
        if self.overlapped:
            timings["admit"] = admission.seconds  # within generate: the two overlap
            counters.update(admission.counters())
        return GenerateResult(AdmitResult.of(admission), facts, cache_stats, StageStats(self.name, timings, counters))


def _generate(executor, job: GenerationJob, work: WorkDir, total: Callable[[], Optional[int]], progress: bool,
              export_generations: Optional[Path], before_order: Callable[[], None] = lambda: None) -> GenerationFacts:
    """work/decisions.parquet (before the judge) and the side files. ``total()`` is the items to
    generate as far as known now (it shrinks while the items are still being admitted:
    ``job.admitted_rows``); ``before_order()`` is called between generating and sorting."""
    with stage_bar("generate", total(), progress, beside_admit=job.admitted_rows is not None) as bar:
        def advance(stats: CacheStats) -> None:
            set_progress(bar, stats.done, total())

        job.progress = advance
        with WorkFiles(decisions=ParquetFile(work.decisions_unsorted, DECISION_SCHEMA)) as files:
            for chunk in executor.run(job):
                if chunk.table is not None:
                    files.decisions.write_table(chunk.table)
                else:
                    files.decisions.write_rows(chunk.rows)
        final = total()  # exact now: admission is done
        set_progress(bar, final, final)
    before_order()
    t0 = time.perf_counter()
    sort_by_order(work.decisions_unsorted, work.decisions)
    facts = side_files(work, export_generations)
    job.add_time("order", time.perf_counter() - t0)
    return facts


# The decision columns the side files read (all of them with the replay export, which records
# whole generations).
SIDE_COLUMNS = ("id", "route", "reason", "error", "family", "question", "prompt", "unsupported", "model",
                "revision")


def side_files(work: WorkDir, export_generations: Optional[Path]) -> GenerationFacts:
    """prompts.jsonl, unsupported.jsonl, failed.jsonl and the optional replay export, in pool
    order, from work/decisions.parquet: the columns they need, a batch at a time, column-wise
    (each file's lines from its columns, a dict per record only for the export, which takes
    whole generations)."""
    import pyarrow.compute as pc

    facts = GenerationFacts()
    columns = list(SIDE_COLUMNS) if export_generations is None else None
    with WorkFiles(prompts=JsonLinesFile(work.prompts),
                   unsupported=JsonLinesFile(work.unsupported),
                   failed=JsonLinesFile(work.failed),
                   export=ReplayWriter(export_generations) if export_generations is not None else None) as files:
        for batch in open_parquet(work.decisions).iter_batches(batch_size=CHUNK_SIZE, columns=columns):
            failed = pc.fill_null(pc.equal(batch.column("route"), FAILED), False)
            answered = batch
            if pc.any(failed).as_py():
                gone = batch.filter(failed)
                files.failed.write_columns(_fields(gone, id="id", reason="reason", detail="error"))
                facts.failed += gone.num_rows
                answered = batch.filter(pc.invert(failed))
            files.prompts.write_columns(_fields(answered, id="id", question="question", prompt="prompt"))
            said = pc.fill_null(pc.not_equal(answered.column("unsupported"), ""), False)  # neither null nor ""
            if pc.any(said).as_py():
                files.unsupported.write_columns(_fields(answered.filter(said), id="id", family="family",
                                                        explanation="unsupported"))
            for name, seen in (("model", facts.models), ("revision", facts.revisions)):
                seen.update(value for value in pc.unique(answered.column(name)).to_pylist() if value)
            if files.export is not None:
                cols = answered.to_pydict()
                for i, question in enumerate(cols["question"]):
                    files.export.add(generation_from_row({name: values[i] for name, values in cols.items()}), question)
    return facts


def _fields(batch, **columns: str) -> dict[str, list]:
    """A side file's fields (in the order given), each the values of its decision column."""
    return {field: batch.column(column).to_pylist() for field, column in columns.items()}
