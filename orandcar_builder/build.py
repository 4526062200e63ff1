"""``orandcar build``: the whole pipeline over a work dir, streaming.

pool --read--> items --clean--> admitted (work/admitted.parquet)
--prompt, generate, verify (an executor: local or ray)--> decisions (work/decisions.parquet)
--judge (reads and rewrites decisions)--> --route (reads decisions)--> rows --write--> dataset
folder --validate.

Each stage reads what the previous one wrote and handles it in chunks, so memory does not grow
with the pool beyond a chunk and the open shard: what must see every item (repeated ids and QA,
images already written, the grouping of rows by image) is kept on disk in the work dir
(spill.py, route.RoutePlan). Every pool line ends in exactly one place: dropped
(work/dropped.jsonl, with a reason), accepted or rejected; an item with no complete generation
(an engine error on the ray executor, or a finish reason other than stop/length) is counted as
``failed`` with its reason in work/failed.jsonl and asked again by the next run. Timings and paths go to the work dir only; the dataset folder depends on nothing but
the pool, the engine's outputs and the code, so two builds of the same pool give the same bytes.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import platform
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Union

import pyarrow as pa
import pyarrow.parquet as pq

from . import __version__
from . import judge as judging
from .cache import CacheStats, GenerationCache
from .clean.pool_file import clean_lines
from .dataset.features import CONFIGS
from .dataset.output import StagedOutput, WorkLock, check_paths
from .dataset.validate import validate_folder
from .dataset.writer import DEFAULT_MAX_SHARD_BYTES, write_dataset
from .engines import Engine, create_engine
from .engines.replay import FINISH_REASONS, recording_line
from .errors import OrandCarError
from .executors import EngineFactory, Executor, GenerationStage, get_executor
from .executors.base import CHUNK_SIZE
from .executors.local import generate
from .executors.ordering import sort_by_order
from .executors.steps import (ADMITTED_SCHEMA, DECISION_SCHEMA, admitted_row, apply_verdict, decide,
                              decision_from_row, generation_from_row, make_request, with_verdict)
from .families import families_in_use, rule_for
from .images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_READ_TIMEOUT_S, IMAGE_OUTSIDE_POOL, ImageError, ImagePolicy
from .parquetio import open_parquet
from .pool.jsonl import SOURCE_OUTSIDE_POOL
from .pool.prefetch import check_workers, default_workers
from .recipe import DEFAULTS_SOURCE, Recipe, options_of
from .records import Dropped, Generation
from .route import ACCEPTED, FAILED, REJECTED, RoutePlan
from .verify import get_rule

GENERATION_BATCH = 32

__all__ = ["BuildError", "BuildResult", "GENERATION_BATCH", "apply_verdict", "build", "decide",
           "format_summary", "make_request"]


class BuildError(OrandCarError):
    pass


@dataclass
class BuildResult:
    out: Path
    work: Path
    report: dict
    problems: list[str] = field(default_factory=list)
    staged: Optional[Path] = None  # where an invalid build was kept; ``out`` then holds the old dataset

    @property
    def ok(self) -> bool:
        return not self.problems


# --- work-dir files, each written under a temporary name and renamed when complete ---------


class _JsonlFile:
    def __init__(self, path: Path, *, fsync: bool = False):
        self.path, self.fsync = Path(path), fsync
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.fh = open(self.tmp, "w", encoding="utf-8", newline="\n")
        self.lines = 0

    def write(self, record: dict) -> None:
        self.fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.lines += 1

    def commit(self) -> None:
        if self.fsync:
            self.fh.flush()
            os.fsync(self.fh.fileno())
        self.fh.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)


class _ParquetFile:
    """Rows appended in chunks (one row group each) to a parquet file with a fixed schema."""

    def __init__(self, path: Path, schema: pa.Schema, *, chunk: int = CHUNK_SIZE):
        self.path, self.schema, self.chunk = Path(path), schema, chunk
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        # No column statistics: nothing filters these work files, and the writer would hold every
        # row group's min/max strings (its footer) in memory until it closes.
        self.writer = pq.ParquetWriter(self.tmp, schema, write_statistics=False)
        self.buffer: list[dict] = []
        self.rows = 0

    def add(self, row: dict) -> None:
        self.buffer.append(row)
        if len(self.buffer) >= self.chunk:
            self.flush()

    def write_rows(self, rows: list[dict]) -> None:
        self.flush()
        if rows:
            self.writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))
            self.rows += len(rows)

    def flush(self) -> None:
        if self.buffer:
            rows, self.buffer = self.buffer, []
            self.write_rows(rows)

    def commit(self) -> None:
        self.flush()
        self.writer.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.writer.close()
        self.tmp.unlink(missing_ok=True)


class _Files:
    """Work-dir files written together: committed all at once, or removed on an error."""

    def __init__(self, **files):
        self.files = files

    def __getattr__(self, name: str):
        try:
            return self.__dict__["files"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __enter__(self) -> "_Files":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for f in self.files.values():
            if f is not None:
                (f.abort if exc_type is not None else f.commit)()


class _ReplayExport(_JsonlFile):
    """A replay file of the generations, in pool order (the format of engines.replay)."""

    def __init__(self, path: Path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, fsync=True)

    def add(self, generation: Generation, question: str) -> None:
        if generation.finish_reason not in FINISH_REASONS:
            raise ValueError(f"generation {generation.item_id!r} has finish_reason {generation.finish_reason!r}; "
                             f"only {', '.join(FINISH_REASONS)} can be replayed")
        self.fh.write(json.dumps(recording_line(generation, question), ensure_ascii=False, sort_keys=False) + "\n")


# --- stages -----------------------------------------------------------------------------------


class _Admission:
    """The admit stage as a stream: ``rows()`` yields each admitted item's row (ADMITTED_SCHEMA) as
    soon as it is admitted, in pool order, while writing work/admitted.parquet and
    work/dropped.jsonl; both are complete (renamed into place) once the rows are exhausted, and
    removed if the stream is closed early or fails. ``workers`` processes check the image files
    (``pool.prefetch``); the records are those of one process. ``seconds`` is the time spent
    admitting (not the time the consumer spent between rows)."""

    def __init__(self, pool: Path, work: Path, limit: Optional[int], clean_report: dict,
                 images: Optional[ImagePolicy] = None, workers: int = 1):
        self.pool, self.work, self.limit, self.clean_report = pool, work, limit, clean_report
        self.images, self.workers = images, workers
        self.dropped: Counter = Counter()
        self.admitted = 0
        self.done = False
        self.seconds = 0.0

    def rows(self) -> Iterator[dict]:
        t0 = time.perf_counter()
        with _Files(admitted=_ParquetFile(self.work / "admitted.parquet", ADMITTED_SCHEMA),
                    dropped=_JsonlFile(self.work / "dropped.jsonl")) as files:
            for record in clean_lines(self.pool, self.clean_report, limit=self.limit, spill_dir=self.work,
                                      images=self.images, workers=self.workers):
                if isinstance(record, Dropped):
                    files.dropped.write(record.to_dict())
                    self.dropped[record.reason] += 1
                else:
                    row = admitted_row(record)
                    files.admitted.add(row)
                    self.admitted += 1
                    self.seconds += time.perf_counter() - t0
                    yield row
                    t0 = time.perf_counter()
        self.seconds += time.perf_counter() - t0
        self.done = True


def _admit_stage(admission: _Admission) -> tuple[int, Counter]:
    """The whole admission at once (work/admitted.parquet and work/dropped.jsonl complete before
    anything else runs); returns (admitted, drops per reason)."""
    for _ in admission.rows():
        pass
    return admission.admitted, admission.dropped


@dataclass
class _GenerationFacts:
    models: set = field(default_factory=set)
    revisions: set = field(default_factory=set)
    failed: int = 0


def _generation_stage(executor: Executor, stage: GenerationStage, total: Optional[int], progress: bool,
                      export_generations: Optional[Path]) -> _GenerationFacts:
    """work/decisions.parquet (before the judge), prompts.jsonl, unsupported.jsonl, failed.jsonl
    and the optional replay export. The executor's chunks come in the order generations finished;
    they are written as they come, sorted into pool order on disk (``sort_by_order``), and the
    other files are written from the sorted decisions, so every file is in pool order. ``total``
    is None while the items are still being admitted (``stage.admitted_rows``)."""
    from tqdm import tqdm

    work = stage.work
    with tqdm(total=total, desc="generate", unit="qa", disable=not progress, file=sys.stderr) as bar:
        def advance(stats: CacheStats) -> None:
            bar.n = stats.done
            bar.refresh()

        stage.progress = advance
        unsorted = work / "decisions.unsorted.parquet"
        with _Files(decisions=_ParquetFile(unsorted, DECISION_SCHEMA)) as files:
            for chunk in executor.run(stage):
                files.decisions.write_rows(chunk.rows)
        bar.total = bar.n = total if total is not None else stage.stats.total
        bar.refresh()
    t0 = time.perf_counter()
    sort_by_order(unsorted, work / "decisions.parquet")
    facts = _side_files(work, export_generations)
    stage.add_time("order", time.perf_counter() - t0)
    return facts


def _side_files(work: Path, export_generations: Optional[Path]) -> _GenerationFacts:
    """prompts.jsonl, unsupported.jsonl, failed.jsonl and the optional replay export, in pool
    order, from work/decisions.parquet."""
    facts = _GenerationFacts()
    with _Files(prompts=_JsonlFile(work / "prompts.jsonl"),
                unsupported=_JsonlFile(work / "unsupported.jsonl"),
                failed=_JsonlFile(work / "failed.jsonl"),
                export=_ReplayExport(export_generations) if export_generations is not None else None) as files:
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


def _rows(plans) -> Iterator[dict]:
    for plan in plans:
        yield plan.to_row(plan.image.read())


def build(pool: Path, out: Path, *, work: Optional[Path] = None, **options) -> BuildResult:
    """Build the dataset folder ``out`` from ``pool`` (see ``_build`` for the options), safely:

    ``out`` must be new, empty or an earlier build of this tool (``dataset/output.py``), ``work``
    not a file nor inside ``out``; the work dir is locked for the whole build; the dataset is
    written beside ``out`` and swapped in only when complete and valid, so a failed or invalid
    rebuild leaves the previous dataset as it was (an invalid one is kept in ``result.staged``).
    A failure the user can act on (disk full, a read-only folder, a file removed or changed
    while the build ran, a damaged cache) is a BuildError naming it, never a traceback.
    """
    pool, out = Path(pool), Path(out)
    work = Path(work) if work is not None else Path("work")
    limit = options.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BuildError(f"limit must be a whole number of pool lines, 0 or more, not {limit!r}")
    if not pool.is_file():
        raise BuildError(f"{pool}: pool file not found")
    target = Path(os.path.abspath(out))  # "-o ." or "-o name/" still has a parent and a name
    check_paths(target, work)
    try:
        work.mkdir(parents=True, exist_ok=True)
        recipe = options.get("recipe")
        with families_in_use(recipe.family_registry() if recipe is not None else None), \
                WorkLock(work), StagedOutput(target) as staged:
            result = _build(pool, staged.path, work=work, **options)
            if result.ok:
                staged.publish()
            else:
                result.staged = staged.path
            result.out = out
            manifest = work / "manifest.json"
            if result.ok and manifest.is_file():
                data = json.loads(manifest.read_text(encoding="utf-8"))
                data["out"] = str(out.resolve())
                _write_json(manifest, data)
            # work/report.html, of the folder as it now stands (the staged one when it was not swapped in)
            from .review import review_after_build

            review_after_build(out if result.ok else result.staged, work)
    except (OSError, ImageError, sqlite3.DatabaseError) as exc:
        raise BuildError(_failure_message(exc, out, work)) from None
    return result


def _failure_message(exc: BaseException, out: Path, work: Path) -> str:
    kept = (f"the dataset in {out} was left as it was" if out.exists()
            else f"nothing was written to {out}")
    if isinstance(exc, sqlite3.DatabaseError):
        return (f"{work / 'cache'}: the generation cache is damaged ({exc}); delete the cache folder to start it "
                f"afresh (the engine is asked again); {kept}")
    if isinstance(exc, ImageError):
        return f"{exc}; build again to admit the image as it is now; {kept}"
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        what = "the disk is full" if exc.errno != errno.EFBIG else "a file grew past the size limit (ulimit -f)"
        return f"{exc.filename or f'writing the dataset or {work}'}: {what} ({exc.strerror or exc}); {kept}"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"{exc.filename or f'writing the dataset or {work}'}: cannot write there ({exc.strerror or exc}); {kept}"
    names = " -> ".join(str(n) for n in (exc.filename, exc.filename2) if n)
    return f"{names + ': ' if names else ''}{exc.strerror or exc}; {kept}"


def _build(
    pool: Path,
    out: Path,
    *,
    work: Optional[Path] = None,
    engine: Optional[Engine] = None,
    engine_name: str = "rapidocr",
    engine_options: Optional[dict] = None,
    judge_engine: Optional[Engine] = None,
    judge: str = "none",
    judge_options: Optional[dict] = None,
    calibrate: int = 0,
    limit: Optional[int] = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    progress: bool = True,
    use_cache: bool = True,
    export_generations: Optional[Path] = None,
    generation_batch: int = GENERATION_BATCH,
    executor: Union[str, Executor] = "local",
    ray_address: Optional[str] = None,
    engine_replicas: int = 1,
    gpus_per_replica: float = 0.0,
    engine_factory: Optional[EngineFactory] = None,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    image_read_timeout: float = DEFAULT_READ_TIMEOUT_S,
    allow_outside_paths: bool = False,
    admit_workers: Optional[int] = None,
    overlap_admit: bool = True,
    recipe: Optional[Recipe] = None,
) -> BuildResult:
    """Build the dataset folder ``out`` from ``pool``; state and reports go to ``work``.

    ``recipe`` (``recipe.resolve``: a recipe file with the command line applied over it) gives the
    engine, the judge, the calibration size, the card's repo and options, and the families'
    instructions, separators and rules (``build`` makes them the registry while it runs); an
    ``engine`` or ``judge_engine`` object given as well is used instead of the recipe's section.
    Without one, the arguments below and the code's families apply, as they always did. Either
    way the settings the build ran with are recorded as a recipe in the manifest and the card.

    ``judge`` names the second-pass engine: ``"none"`` (no second pass), ``"same"`` (the
    generation engine, text only) or an engine name built with ``judge_options``; or pass
    ``judge_engine``. ``calibrate`` runs the judge over that many rule-accepted items.
    Generations and verdicts are cached in ``work/cache``: a rerun (after a crash too) asks the
    engines only for what is missing and ends with the same dataset bytes.

    ``executor`` says where generation runs: ``"local"`` (here) or ``"ray"`` (Ray Data on the
    cluster at ``ray_address``, or a local one: ``engine_replicas`` actors, each with its own
    engine made from ``engine_name`` and ``engine_options`` and ``gpus_per_replica`` GPUs; the
    pool's images must be on storage every node sees at the same path, while the work dir and
    its generation cache stay with this process). The judge pass, routing and writing run here
    either way; both executors give the same bytes.
    ``engine_factory`` (anything picklable with a ``create()`` method) replaces the name and
    options where replicas make their engines; its engines must have the build engine's
    fingerprint.
    ``max_image_bytes`` and ``image_read_timeout`` bound each image file; its path must lie in
    the pool file's folder unless ``allow_outside_paths`` (``images.ImagePolicy``).
    ``admit_workers`` processes read, decode and hash the pool's images (default
    ``pool.prefetch.default_workers()``: the CPUs, at most 8; 1: all in this process); the
    admitted items and drops are the same for any number. On the local executor admission
    overlaps generation: items go to the engine as they are admitted, so the first requests are
    sent within seconds; ``overlap_admit=False`` (and the ray executor) admits the whole pool
    first.
    """
    pool, out = Path(pool), Path(out)
    work = Path(work) if work is not None else Path("work")
    if not pool.is_file():
        raise BuildError(f"{pool}: pool file not found")
    if recipe is not None:
        if engine is None:
            engine_name, engine_options = recipe.engine["name"], options_of(recipe.engine)
        if judge_engine is None:
            judge, judge_options = recipe.judge["name"], options_of(recipe.judge)
        calibrate = recipe.calibration or 0
    if generation_batch < 1:
        raise BuildError(f"generation_batch must be at least 1, got {generation_batch}")
    if isinstance(executor, str):
        executor = get_executor(executor) if executor == "local" else get_executor(
            executor, address=ray_address, replicas=engine_replicas, gpus_per_replica=gpus_per_replica)
    if (executor.name != "local" and engine is not None and engine_factory is None
            and getattr(engine, "kind", engine_name) != engine_name):
        raise BuildError(f"the {executor.name} executor makes each replica's engine from the engine name and "
                         f"options ({engine_name!r}), but a {engine.kind!r} engine was given: pass "
                         f"engine_name/engine_options, or an engine_factory")
    work.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    clean_report: dict = {}
    try:
        images = ImagePolicy(max_image_bytes, image_read_timeout, allow_outside_paths)
        admit_workers = check_workers(admit_workers if admit_workers is not None else default_workers())
    except ValueError as exc:
        raise BuildError(str(exc)) from None
    admission = _Admission(pool, work, limit, clean_report, images, admit_workers)
    overlap = overlap_admit and executor.name == "local"
    if not overlap:
        _admit_stage(admission)
        timings["admit"] = time.perf_counter() - t0

    # The engines are made before the first item is admitted when admission overlaps generation:
    # one that cannot be made stops the build before any image is read.
    if engine is None:
        engine = create_engine(engine_name, **(engine_options or {}))
    if judge_engine is None and judge != "none":
        judge_engine = engine if judge == "same" else create_engine(judge, **(judge_options or {}))
    if judge_engine is not None and not judge_engine.can_judge:
        raise BuildError(f"engine {judge_engine.kind!r} cannot run the text-only judge pass; use --judge none")

    cache = GenerationCache(work / "cache" / "generations.sqlite") if use_cache else None
    gen_stats = CacheStats()
    judge_report = None
    admitted_rows = admission.rows() if overlap else None
    try:
        stage = GenerationStage(admitted=work / "admitted.parquet", work=work, engine=engine,
                                factory=engine_factory or EngineFactory(engine_name, dict(engine_options or {})),
                                cache=cache, stats=gen_stats, batch_size=generation_batch,
                                timings=timings, admitted_rows=admitted_rows,
                                families=recipe.family_registry() if recipe is not None else None)
        timings.setdefault("generate", 0.0)
        timings.setdefault("verify", 0.0)
        facts = _generation_stage(executor, stage, admission.admitted if not overlap else None, progress,
                                  export_generations)
        if not admission.done:
            raise RuntimeError(f"executor {executor.name!r} ended before every pool line was admitted")  # a bug
        if overlap:
            timings["admit"] = admission.seconds  # within generate: the two overlap
        n_admitted, dropped = admission.admitted, admission.dropped
        if judge_engine is not None:
            t3 = time.perf_counter()
            judge_report = _judge_pass(judge_engine, work / "decisions.parquet", cache, calibrate, progress)
            timings["judge"] = time.perf_counter() - t3
    finally:
        if admitted_rows is not None:
            admitted_rows.close()  # a failed build: stops the admission's workers, removes its partial files
        if cache is not None:
            cache.close()

    t4 = time.perf_counter()
    with RoutePlan(work / "decisions.parquet") as plan:
        summary = write_dataset(out, {config: _rows(plan.rows(config)) for config in CONFIGS},
                                max_shard_bytes=max_shard_bytes)
    report = _report(pool, n_admitted, dropped, _tally(work / "decisions.parquet"), summary, clean_report,
                     engine, limit, judge_report, facts)
    ran = _recipe_ran(recipe, engine, engine_name, engine_options, judge_engine, judge, judge_options, calibrate)
    report["recipe"] = reproducible(ran.to_dict())
    report["reproduce"] = _reproduce(pool, ran, limit, max_shard_bytes, allow_outside_paths)
    timings["write"] = time.perf_counter() - t4
    from .card import CardOptions, write_card

    t45 = time.perf_counter()
    card_options = CardOptions.from_mapping(ran.card_options(), source=ran.source)
    write_card(out, report, **({"repo_id": ran.repo} if ran.repo else {}), options=card_options)
    timings["card"] = time.perf_counter() - t45

    t5 = time.perf_counter()
    problems = validate_folder(out)
    timings["validate"] = time.perf_counter() - t5
    timings["total"] = time.perf_counter() - t0

    _write_json(work / "report.json", {
        **report, "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "cache": {"generate": vars(gen_stats), "judge": (judge_report or {}).get("_cache")},
        "validation_problems": problems})
    if judge_report:
        judge_report.pop("_cache", None)
    _write_json(work / "manifest.json", {**_manifest(pool, out, engine, judge_engine, limit, max_shard_bytes,
                                                     report["rules"], executor),
                                         "recipe": json.loads(json.dumps(ran.to_dict(), default=str)),
                                         "recipe_file": ran.source if recipe is not None else None,
                                         "command": report["reproduce"]["command"]})
    return BuildResult(out=out, work=work, report=report, problems=problems)


class _CalibrationPool:
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


def _judge_item(row: dict, generation: Generation) -> judging.JudgeItem:
    return judging.JudgeItem(row["id"], row["question"], tuple(row["references"]),
                             judging.candidate_answer(generation), row["family"])


def _judge_pass(judge_engine: Engine, decisions: Path, cache: Optional[GenerationCache], calibrate: int,
                progress: bool, chunk: int = CHUNK_SIZE) -> dict:
    """Second pass over rule rejects with a final answer, chunk by chunk: decisions.parquet is
    read and rewritten with the verdicts; optional calibration on rule accepts."""
    from tqdm import tqdm

    stats = CacheStats()
    labels: Counter = Counter()
    unparseable = 0
    overturns: dict[str, dict[str, int]] = {}
    calibration_pool = _CalibrationPool(calibrate) if calibrate else None
    with tqdm(desc="judge", unit="qa", disable=not progress, file=sys.stderr) as bar:
        def run(engine: Engine, requests) -> list[Generation]:
            bar.total = (bar.total or 0) + len(requests)
            done = stats.done

            def advance(s: CacheStats) -> None:
                bar.n = s.done
                bar.refresh()

            out = generate(engine, requests, cache, batch_size=GENERATION_BATCH, stats=stats, on_batch=advance)
            bar.n = done + len(requests)
            bar.refresh()
            return out

        with _Files(judged=_ParquetFile(decisions.with_name(decisions.name + ".judged"), DECISION_SCHEMA)) as files:
            for batch in open_parquet(decisions).iter_batches(batch_size=chunk):
                rows = batch.to_pylist()
                to_judge: list[int] = []
                items: list[judging.JudgeItem] = []
                for i, row in enumerate(rows):
                    decision = decision_from_row(row)
                    if decision is None:
                        continue
                    generation = generation_from_row(row)
                    if judging.needs_judge(generation, decision):
                        to_judge.append(i)
                        items.append(_judge_item(row, generation))
                    elif calibration_pool is not None and decision.passed:
                        calibration_pool.add(_judge_item(row, generation))
                verdicts = judging.judge(judge_engine, items, generate=run)
                for i, verdict in zip(to_judge, verdicts):
                    rows[i] = with_verdict(rows[i], verdict)
                    labels[verdict.label] += 1
                    unparseable += not getattr(verdict, "parseable", True)
                for family, counts in judging.overturns_by_family(
                        (rows[i]["family"], v) for i, v in zip(to_judge, verdicts)).items():
                    total = overturns.setdefault(family, dict.fromkeys(counts, 0))
                    for key, value in counts.items():
                        total[key] += value
                files.judged.write_rows(rows)
        os.replace(files.judged.path, decisions)

        calibration = None
        if calibration_pool is not None:
            calibration = judging.calibrate(judge_engine, calibration_pool.items(), calibrate, generate=run).to_dict()
    return {
        "engine": judge_engine.fingerprint(),
        "prompt_version": judging.JUDGE_PROMPT_VERSION,
        "judged": sum(labels.values()),
        "verdicts": {label: labels.get(label, 0) for label in judging.LABELS},
        "unparseable": unparseable,
        "promoted": labels.get(judging.CORRECT, 0),
        "overturns_by_family": dict(sorted(overturns.items())),
        "calibration": calibration,
        "_cache": vars(stats),
    }


@dataclass
class _Tally:
    """The build's counts, from the decisions' compact columns."""

    routes: Counter = field(default_factory=Counter)
    rejected_by_reason: Counter = field(default_factory=Counter)
    accepted_by_verifier: Counter = field(default_factory=Counter)
    families: dict = field(default_factory=dict)
    rules: set = field(default_factory=set)  # the rules that decide the items (see families.rule_for)
    rules_by_family: dict = field(default_factory=dict)


def _tally(decisions: Path) -> _Tally:
    tally = _Tally()
    columns = ["family", "route", "reason", "verifier", "options"]
    for batch in open_parquet(decisions).iter_batches(batch_size=65536, columns=columns):
        for family, route_to, reason, verifier, options in zip(*(batch.column(c).to_pylist() for c in columns)):
            tally.routes[route_to] += 1
            rule = rule_for(family, options)
            tally.rules.add(rule)
            tally.rules_by_family.setdefault(family, set()).add(rule)
            if route_to == FAILED:
                continue
            counter = tally.families.setdefault(family, Counter())
            counter["qa"] += 1
            counter[route_to] += 1
            if reason:
                counter[f"rejected_{reason}"] += 1
            if route_to == ACCEPTED:
                tally.accepted_by_verifier[verifier] += 1
            elif route_to == REJECTED:
                tally.rejected_by_reason[reason] += 1
    return tally


def _report(pool, admitted, dropped, tally, summary, clean_report, engine, limit, judge_report, facts) -> dict:
    """The build's figures; everything here is deterministic (the card renders from it)."""
    rules = {rule: get_rule(rule).VERSION for rule in sorted(tally.rules)}
    rules_by_family = {family: sorted(r) for family, r in sorted(tally.rules_by_family.items())}
    return {
        "pool": pool.name,
        "limit": limit,
        "items": sum(dropped.values()) + admitted,
        "admitted": admitted,
        "dropped": sum(dropped.values()),
        "dropped_by_reason": dict(sorted(dropped.items())),
        "accepted": tally.routes[ACCEPTED],
        "rejected": tally.routes[REJECTED],
        "failed": tally.routes[FAILED],
        "rejected_by_reason": dict(sorted(tally.rejected_by_reason.items())),
        "accepted_by_verifier": dict(sorted(tally.accepted_by_verifier.items())),
        "families": {f: dict(sorted(c.items())) for f, c in sorted(tally.families.items())},
        "rules": dict(sorted(rules.items())),
        "rules_by_family": rules_by_family,
        "configs": summary,
        "cleaning": clean_report,
        "engine": engine.fingerprint(),
        "generation": _generation_settings(engine, facts),
        "judge": {k: v for k, v in judge_report.items() if not k.startswith("_")} if judge_report else None,
    }


def _generation_settings(engine: Engine, facts: _GenerationFacts) -> dict:
    """How the answers were produced, for the card: from the engine's fingerprint and outputs."""
    fp = engine.fingerprint()
    sampling = fp.get("sampling") or {}
    models = sorted(facts.models)
    revisions = sorted(facts.revisions)
    template = fp.get("chat_template_kwargs") or {}
    reasoning = template.get("enable_thinking") if "enable_thinking" in template else fp.get("reasoning")
    return {
        "engine": engine.kind,
        "model": fp.get("model") or (models[0] if len(models) == 1 else models) or None,
        "revision": fp.get("revision") or (revisions[0] if len(revisions) == 1 else revisions) or None,
        "temperature": sampling.get("temperature", fp.get("temperature")),
        "max_tokens": sampling.get("max_tokens", fp.get("max_tokens")),
        "reasoning": reasoning if reasoning is not None else "n/a",
    }


def _manifest(pool, out, engine, judge_engine, limit, max_shard_bytes, rules, executor) -> dict:
    import datasets
    import huggingface_hub

    return {
        "orandcar_builder": __version__,
        "pool": str(pool.resolve()),
        "out": str(out.resolve()),
        "limit": limit,
        "max_shard_bytes": max_shard_bytes,
        "engine": engine.fingerprint(),
        "judge_engine": judge_engine.fingerprint() if judge_engine is not None else None,
        "executor": executor.describe(),
        "rules": rules,
        "versions": {"python": platform.python_version(), "datasets": datasets.__version__,
                     "huggingface_hub": huggingface_hub.__version__, "pyarrow": pa.__version__},
    }


def _recipe_ran(recipe, engine, engine_name, engine_options, judge_engine, judge, judge_options, calibrate) -> Recipe:
    """The recipe this build ran: the given one, or the code's defaults with the arguments; an
    engine object given instead of a name is recorded by its kind."""
    from .recipe import resolve

    ran = recipe if recipe is not None else resolve(None, engine=engine_name, engine_options=engine_options,
                                                    judge=judge, judge_options=judge_options, calibration=calibrate)
    sections = {}
    if engine.kind != ran.engine["name"]:
        sections["engine"] = {"name": engine.kind}
    if judge_engine is not None and judge_engine is not engine and judge_engine.kind != ran.judge["name"]:
        sections["judge"] = {"name": judge_engine.kind}
    return dataclasses.replace(ran, **sections) if sections else ran


# Engine options that name a file of this machine: the card shows the file's name (its content is
# in the engine's fingerprint), never the path.
FILE_OPTIONS = ("replay",)
# Engine options that set how fast this machine runs, not what the engine answers: left out of the card.
MACHINE_OPTIONS = ("threads",)


def reproducible(recipe: dict) -> dict:
    """A resolved recipe as the card shows it: file options reduced to the file's name, options
    of the machine left out (work/manifest.json keeps them as given)."""
    out = json.loads(json.dumps(recipe, default=str))
    for section in ("engine", "judge"):
        table = out.get(section) or {}
        for key in FILE_OPTIONS:
            if isinstance(table.get(key), str):
                table[key] = Path(table[key]).name
        for key in MACHINE_OPTIONS:
            table.pop(key, None)
    return out


def _reproduce(pool: Path, ran: Recipe, limit, max_shard_bytes, allow_outside_paths) -> dict:
    """What the card's "How to reproduce" section shows besides the recipe: the command and the
    versions that shape the bytes (the engine's own are in its fingerprint). The output folder is
    named after the repo (not after this build's -o), so the card does not depend on where it was
    written."""
    import datasets
    import huggingface_hub

    from .card import DEFAULT_REPO_ID

    command = f"orandcar build {pool.name} -o {(ran.repo or DEFAULT_REPO_ID).split('/')[-1]} --recipe recipe.toml"
    if limit is not None:
        command += f" --limit {limit}"
    if max_shard_bytes != DEFAULT_MAX_SHARD_BYTES:
        command += f" --max-shard-bytes {max_shard_bytes}"
    if allow_outside_paths:
        command += " --allow-outside-paths"
    return {
        "command": command,
        "recipe_file": ran.source != DEFAULTS_SOURCE,  # whether one was given (its name stays in the manifest)
        "versions": {"orandcar-builder": __version__, "datasets": datasets.__version__,
                     "huggingface_hub": huggingface_hub.__version__, "pyarrow": pa.__version__},
    }


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


OUTSIDE_POOL_REASONS = (IMAGE_OUTSIDE_POOL, SOURCE_OUTSIDE_POOL)


def format_summary(result: BuildResult) -> str:
    r = result.report
    lines = [
        f"pool {r['pool']}: {r['items']} items, {r['admitted']} admitted, {r['dropped']} dropped",
        f"accepted {r['accepted']}  rejected {r['rejected']}",
    ]
    for reason, n in r["dropped_by_reason"].items():
        lines.append(f"  dropped   {reason:<22} {n}")
    outside = sum(n for reason, n in r["dropped_by_reason"].items() if reason in OUTSIDE_POOL_REASONS)
    if outside:
        lines.append(f"  {outside} item(s) name an image outside the pool file's folder: if you trust this pool "
                     f"(one `orandcar import` wrote, say), build again with --allow-outside-paths")
    if r.get("failed"):
        lines.append(f"  failed    {r['failed']} item(s) got no answer (reasons in work/failed.jsonl; a rerun asks again)")
    for reason, n in r["rejected_by_reason"].items():
        lines.append(f"  rejected  {reason:<22} {n}")
    for verifier, n in r["accepted_by_verifier"].items():
        lines.append(f"  accepted  by {verifier:<19} {n}")
    judge = r.get("judge")
    if judge:
        v = judge["verdicts"]
        lines.append(f"  judge: {judge['judged']} judged, {judge['promoted']} promoted "
                     f"(CORRECT {v['CORRECT']}, WRONG {v['WRONG']}, UNSURE {v['UNSURE']}, "
                     f"unparseable {judge['unparseable']})")
        cal = judge.get("calibration")
        if cal:
            lines.append(f"  judge calibration: agreed on {cal['agreed']}/{cal['n']} rule-accepted items")
    else:
        lines.append("  judge: no second pass ran")
    for config, s in r["configs"].items():
        lines.append(f"  {config:<11} {s['rows']} rows in {len(s['shards'])} shard(s), {s['bytes']} bytes")
    lines.append(f"dataset: {result.out}   work dir: {result.work}")
    if (result.work / "report.html").is_file():
        lines.append(f"review page: {result.work / 'report.html'}")
    if result.problems:
        lines.append(f"validation FAILED: {len(result.problems)} problem(s)")
        lines.extend(f"  {p}" for p in result.problems[:20])
        if result.staged is not None:
            lines.append(f"the new dataset was not swapped in ({result.out} is unchanged); it is kept in "
                         f"{result.staged} for inspection")
    else:
        lines.append("validation: ok")
    return "\n".join(lines)
