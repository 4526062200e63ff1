"""Running a build: ``run_build(config, objects)`` runs the stages over a locked work dir and a
staged output folder (the CLI calls it with the config a recipe and its flags made), and
``build(pool, out, **settings)``, the keyword façade library callers and the tests use, makes the
BuildConfig and calls it."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..cache import CacheFullError, storage_problem
from ..dataset.output import OutputLock, StagedOutput, WorkLock, check_paths
from ..executors import executor_for
from ..figures import BuildFigures
from ..heap import objects_before_frozen, release_free_memory
from ..images import ImageError
from ..workdir import WorkDir
from .config import BuildConfig, BuildError, BuildObjects
from .failure import BuildFailed, failed_build
from .report import build_figures, manifest, recipe_ran, without_secrets, write_json
from .reuse import forget as forget_admission
from .stages import Admission, open_cache, open_engines, stages_for
from .work import BuildContext, StageStats

if TYPE_CHECKING:
    from ..review.ahead import PageAhead


@dataclass
class BuildResult:
    out: Path
    work: Path
    figures: BuildFigures  # what work/report.json holds
    problems: list[str] = field(default_factory=list)
    staged: Optional[Path] = None  # where an invalid build was kept; ``out`` then holds the old dataset
    stages: list[StageStats] = field(default_factory=list)  # each stage's seconds and counters, in order

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def report(self) -> dict:
        """work/report.json's content (``figures.to_json()``)."""
        return self.figures.to_json()


# BuildObjects fields a caller may give to ``build`` as keywords; every other keyword is a setting.
_OBJECTS = ("engine", "judge_engine", "engine_factory")


def build(pool: Path, out: Path, *, work: Optional[Path] = None, **settings: Any) -> BuildResult:
    """Build the dataset folder ``out`` from ``pool``: the keyword form of ``run_build``.

    ``settings`` are BuildConfig's fields with the names the CLI always used: ``engine_name``
    (BuildConfig.engine), ``engine_options``, ``judge`` (a name), ``judge_options``, ``calibrate``,
    ``limit``, ``executor`` (a name, or an Executor object), ``recipe`` (a resolved recipe:
    ``recipe.resolve``), ...; ``engine``, ``judge_engine`` and ``engine_factory`` are objects
    (BuildObjects) used instead of the names.
    """
    objects = {key: settings.pop(key) for key in _OBJECTS if settings.get(key) is not None}
    for key in _OBJECTS:
        settings.pop(key, None)
    executor = settings.get("executor")
    if executor is not None and not isinstance(executor, str):
        objects["executor"] = settings.pop("executor")
    if "engine_name" in settings:
        settings["engine"] = settings.pop("engine_name")
    recipe = settings.pop("recipe", None)
    unknown = sorted(set(settings) - set(BuildConfig.__dataclass_fields__) - {"pool", "out", "work"})
    if unknown:
        raise TypeError(f"build() got unknown setting(s): {', '.join(unknown)}")
    for name in ("max_shard_bytes", "generation_batch"):  # None: the default (BuildConfig takes None options as {})
        if name in settings and settings[name] is None:
            del settings[name]
    config = BuildConfig(pool=pool, out=out, work=work if work is not None else Path("work"), **settings)
    config = config.with_recipe(recipe, keep_engine="engine" in objects, keep_judge="judge_engine" in objects)
    return run_build(config, BuildObjects(**objects))


def run_build(config: BuildConfig, objects: Optional[BuildObjects] = None) -> BuildResult:
    """Build ``config.out`` from ``config.pool``, safely:

    ``out`` must be new, empty or an earlier build of this tool (``dataset/output.py``), ``work``
    not a file nor inside ``out``; the work dir and ``out`` are locked for the whole build; the dataset is
    written beside ``out`` and swapped in only when complete and valid, so a failed or invalid
    rebuild leaves the previous dataset as it was (an invalid one is kept in ``result.staged``).
    A build that admitted nothing, wrote no row or got no answer for more than
    ``config.max_failed_share`` of its items is a failed build (``failure.py``): BuildFailed,
    and the previous dataset stays.
    A failure the user can act on (disk full, a read-only folder, a file removed or changed
    while the build ran, a damaged cache) is a BuildError naming it, never a traceback.
    Generations and verdicts are cached in ``work/cache``: a rerun (after a crash too) asks the
    engines only for what is missing and ends with the same dataset bytes.
    """
    objects = objects if objects is not None else BuildObjects()
    pool, out, work = config.pool, config.out, config.work
    if not pool.is_file():
        raise BuildError(f"{pool}: pool file not found")
    target = Path(os.path.abspath(out))  # "-o ." or "-o name/" still has a parent and a name
    check_paths(target, work)
    try:
        work.mkdir(parents=True, exist_ok=True)
        from ..review import review_after_build
        from ..review.ahead import PageAhead

        with WorkLock(work), OutputLock(target, work), StagedOutput(target, work) as staged, PageAhead() as ahead:
            result, manifest_data = _run_stages(config, objects, staged.path, ahead)
            failure = result.figures.build_failed
            if failure:  # its review page shows why; leaving the block with an error removes the staged folder
                review_after_build(staged.path, work, ahead)
                raise BuildFailed(f"the build failed: {failure}; {_kept(out)}", result.figures)
            if result.ok:
                staged.publish()
                # work/manifest.json was written before the swap, naming the staged folder (so a
                # swap that fails leaves one); now it names the folder the dataset went to
                write_json(WorkDir(work).manifest, {**manifest_data, "out": str(out.resolve())})
            else:
                result.staged = staged.path
            result.out = out
            # work/report.html, of the folder as it now stands (the staged one when it was not swapped in)
            review_after_build(out if result.ok else result.staged, work, ahead)
    except (OSError, ImageError, sqlite3.DatabaseError) as exc:
        if isinstance(exc, ImageError):
            forget_admission(work)  # an image changed since it was admitted: the next build admits again
        raise BuildError(_failure_message(exc, out, work)) from None
    except CacheFullError as exc:
        raise BuildError(f"{exc}; {_kept(out)}") from None
    return result


def _executor(config: BuildConfig, objects: BuildObjects):
    executor = objects.executor
    if executor is None:
        executor = executor_for(config.executor, config)
    engine = objects.engine
    if (executor.name != "local" and engine is not None and objects.engine_factory is None
            and getattr(engine, "kind", config.engine) != config.engine):
        raise BuildError(f"the {executor.name} executor makes each replica's engine from the engine name and "
                         f"options ({config.engine!r}), but a {engine.kind!r} engine was given: pass "
                         f"engine_name/engine_options, or an engine_factory")
    return executor


def _run_stages(config: BuildConfig, objects: BuildObjects, out: Path,
                ahead: Optional[PageAhead] = None) -> tuple[BuildResult, dict]:
    """The stages over ``out`` (the staged folder), each handed the results it reads; then
    work/report.json (the figures with this run's timings and cache counts) and work/manifest.json.
    Also returns what it wrote to work/manifest.json (naming ``out``). Once the figures are
    known, ``ahead`` starts preparing the review page's part of the decisions (final by then)
    beside the card and validate."""
    executor = _executor(config, objects)
    context = BuildContext(config=config, objects=objects, out=out, work=WorkDir(config.work), executor=executor)
    admission = Admission(config.pool, context.work.path, config.limit, {}, config.image_policy(), config.workers(),
                          progress=config.progress, families=config.families, process=config.admit_process)
    plan = stages_for(config, objects, executor)
    t0 = time.perf_counter()
    try:
        if plan.admit is None:  # admission streams into the generate stage
            context.on_close(admission.close)
            admission.prepare()  # its process starts beside the engine's making
        cache = open_cache(context)
        engines = open_engines(config, objects, cache)
        with objects_before_frozen():  # the engine's objects (the replay recordings) and the modules'
            admitted = plan.admit.run(context, admission) if plan.admit is not None else None
            generated = plan.generate.run(context, engines.engine, cache, admission,
                                          before_order=lambda decisions: plan.write.prepare(context, decisions))
            judged = plan.judge.run(context, engines.judge, cache) if plan.judge is not None else None
            release_free_memory()  # what generating held, before the write stage's row groups
            written = plan.write.run(context)
            release_free_memory()
            ran = recipe_ran(config, engines.engine, engines.judge, engine_given=objects.engine is not None,
                             judge_given=objects.judge_engine is not None)
            figures = build_figures(config, engines, generated, judged, written, ran)
            if ahead is not None:
                ahead.start(context.work.path, figures)
            carded = plan.card.run(context, figures, ran)
            validated = plan.validate.run(context)
    finally:
        context.close()
    stats = [r.stats for r in (admitted, generated, judged, written, carded, validated) if r is not None]
    timings: dict[str, float] = {}
    for stage in stats:
        for name, seconds in stage.timings.items():
            timings[name] = timings.get(name, 0.0) + seconds
    timings["total"] = time.perf_counter() - t0

    figures = figures.replace(
        build_failed=failed_build(figures, context.work, config.max_failed_share),
        timings_s={k: round(v, 3) for k, v in timings.items()},
        cache={"generate": vars(generated.cache_stats), "judge": vars(judged.cache_stats) if judged else None},
        validation_problems=validated.problems,
        # each stage's own seconds and counters, in the order they ran (datatrove's per-step stats)
        stages=[{"name": s.name, "timings_s": {k: round(v, 3) for k, v in s.timings.items()},
                 "counters": s.counters} for s in stats])
    write_json(context.work.report, figures.to_json())
    manifest_data = {
        **manifest(config, out, figures.engine, engines.judge, figures.rules, executor),
        "recipe": without_secrets(ran.to_dict()),
        "recipe_file": ran.source if config.recipe is not None else None,
        "command": figures.reproduce["command"]}
    write_json(context.work.manifest, manifest_data)
    return (BuildResult(out=out, work=context.work.path, figures=figures, problems=validated.problems, stages=stats),
            manifest_data)


def _free_space(*paths: Path) -> str:
    """The free bytes on the disk of each of ``paths`` (or the nearest folder above that exists)."""
    shown = []
    for path in paths:
        folder = Path(os.path.abspath(path))
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        try:
            shown.append(f"{shutil.disk_usage(folder).free:,} bytes free in {folder}")
        except OSError:
            continue
    return "; ".join(shown) or "free space unknown"


def _kept(out: Path) -> str:
    return f"the dataset in {out} was left as it was" if out.exists() else f"nothing was written to {out}"


def _failure_message(exc: BaseException, out: Path, work: Path) -> str:
    kept = _kept(out)
    if isinstance(exc, sqlite3.DatabaseError):
        full = storage_problem(exc, WorkDir(work).cache)
        if full:
            return f"{full}; {kept}"
        return (f"{WorkDir(work).cache_dir}: the generation cache is damaged ({exc}); delete the cache folder to start it "
                f"afresh (the engine is asked again); {kept}")
    if isinstance(exc, ImageError):
        return f"{exc}; build again to admit the image as it is now; {kept}"
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        what = "the disk is full" if exc.errno != errno.EFBIG else "a file grew past the size limit (ulimit -f)"
        where = exc.filename or f"writing the dataset or {work} ({_free_space(work, out)})"
        return f"{where}: {what} ({exc.strerror or exc}); {kept}"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"{exc.filename or f'writing the dataset or {work}'}: cannot write there ({exc.strerror or exc}); {kept}"
    names = " -> ".join(str(n) for n in (exc.filename, exc.filename2) if n)
    return f"{names + ': ' if names else ''}{exc.strerror or exc}; {kept}"
