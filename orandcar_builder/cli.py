"""The ``orandcar`` command line: each command is a thin call into the library.

Options that several commands share are declared once, as decorators that stack a group of
``click.option``s (the style of sqlite-utils' ``cli.py``): ``admission_options``, ``engine_options``,
``judge_options``, ``executor_options``, ``work_option``, ``repo_option``, ``family_option`` and
``progress_option``. Every name a user picks from a registry (an engine, judge, executor, family or
import format) is a ``RegistryChoice``: it reads the registry when ``--help`` is shown or a value
is parsed, so a name registered there is listed and accepted without an edit here.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional

import click

from .errors import OrandCarError, UnknownNameError
from .files import loads_bounded
from .workdir import WorkDir


def _fail(message: str) -> None:
    from .redact import scrub

    click.echo(f"error: {scrub(message)}", err=True)
    sys.exit(2)


def _interrupted() -> None:
    from .interrupts import INTERRUPTED_EXIT, INTERRUPTED_MESSAGE, ignore_sigint

    ignore_sigint()  # stopping already: a second Ctrl-C must not break the exit with a traceback
    try:
        # on a terminal the progress bar (or the echoed ^C) holds the line: start a new one
        click.echo(("\n" if sys.stderr.isatty() else "") + INTERRUPTED_MESSAGE, err=True)
    finally:
        sys.exit(INTERRUPTED_EXIT)


def describe_error(exc: BaseException) -> str:
    """The one-line text of a failure the user can act on (the file it concerns first)."""
    if isinstance(exc, OSError) and exc.strerror:
        names = " -> ".join(str(n) for n in (exc.filename, exc.filename2) if n)
        return f"{names}: {exc.strerror}" if names else exc.strerror
    if isinstance(exc, sqlite3.DatabaseError):
        return f"a work-dir database is damaged ({exc}); delete the work dir's cache folder and run again"
    return str(exc)


# -- choices read from the registries ---------------------------------------------------------

class RegistryChoice(click.Choice):
    """One of the names ``names()`` returns when the value is parsed or ``--help`` is shown (not
    when this module was imported), in the registry's order. An unknown name fails with the
    registry's own message: the names known and the one probably meant."""

    def __init__(self, kind: str, names: Callable[[], Iterable[str]]):
        self.kind, self._names = kind, names
        super().__init__((), case_sensitive=True)

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(dict.fromkeys(self._names()))

    @choices.setter
    def choices(self, value) -> None:  # click.Choice.__init__ assigns it; the registry is the source
        pass

    def convert(self, value, param, ctx):
        names = self.choices
        if value in names:
            return value
        self.fail(str(UnknownNameError(self.kind, value, names)), param, ctx)


def _engine_names() -> Iterable[str]:
    from .engines import ENGINES

    return ENGINES


def _executor_names() -> Iterable[str]:
    from .executors import EXECUTORS

    return EXECUTORS


def _family_names() -> Iterable[str]:
    from . import families

    return families.DEFAULT_FAMILIES  # read when asked: the code's families (a recipe's are the build's)


def _import_formats() -> Iterable[str]:
    from .pool import IMPORTERS

    return IMPORTERS


def _gating_modes() -> Iterable[str]:
    from .publish import GATED_MODES

    return GATED_MODES


def _judge_engine_names() -> Iterable[str]:
    """The engines that can run the text-only judge pass."""
    from .engines import judge_engine_names

    return judge_engine_names()


def _judge_names() -> Iterable[str]:
    """``none``, ``same`` (the generation engine), then every engine that can judge."""
    from .recipe import JUDGE_NAMES

    return [*JUDGE_NAMES, *_judge_engine_names()]


ENGINE_CHOICE = RegistryChoice("engine", _engine_names)
EXECUTOR_CHOICE = RegistryChoice("executor", _executor_names)
FAMILY_CHOICE = RegistryChoice("family", _family_names)
IMPORT_FORMAT_CHOICE = RegistryChoice("import format", _import_formats)
JUDGE_CHOICE = RegistryChoice("judge", _judge_names)
JUDGE_ENGINE_CHOICE = RegistryChoice("judge engine", _judge_engine_names)
GATING_CHOICE = RegistryChoice("gating mode", _gating_modes)


class KeyValue(click.ParamType):
    """``KEY=VALUE`` as a ``(key, value)`` pair. With ``settings``, a key's dashes become
    underscores and a VALUE that parses as JSON is taken as such (numbers, true, lists), as engine
    settings want; otherwise both sides are kept as written and must not be empty."""

    name = "key=value"

    def __init__(self, settings: bool = False):
        self.settings = settings

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        key, sep, target = value.partition("=")
        if not sep or not key or (not target and not self.settings):
            self.fail(f"{value!r} is not KEY=VALUE", param, ctx)
        if not self.settings:
            return key, target
        try:
            return key.replace("-", "_"), loads_bounded(target)
        except ValueError:
            return key.replace("-", "_"), target


def _settings(pairs: Iterable[tuple[str, object]], replay: Optional[Path] = None) -> dict:
    """An engine's settings from its ``--*-option`` pairs (a later key wins) and its replay file."""
    options = dict(pairs)
    if replay is not None:
        options["replay"] = replay
    return options


# -- shared options, one decorator per group --------------------------------------------------

def _stacked(*decorators: Callable) -> Callable:
    """One decorator applying ``decorators``; the first listed is the first shown in --help."""

    def apply(fn: Callable) -> Callable:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return apply


admission_options = _stacked(
    click.option("--max-image-bytes", type=click.IntRange(min=1), default=None,
                 help="Largest image file read, in bytes (default 64 MiB); larger ones are dropped unread."),
    click.option("--image-read-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
                 help="Seconds one image file may take to read (default 60)."),
    click.option("--allow-outside-paths", is_flag=True,
                 help="Let pool lines name images (and source.image files) outside the pool file's folder."),
    click.option("--admit-workers", type=click.IntRange(min=1), default=None,
                 help="Processes that admit the pool, reading, decoding and hashing its images (default: the "
                      "CPUs, at most 8; 1: all in this command's own process). The result is the same for any "
                      "number."),
)
"""How the pool's image files are read (the image policy) and by how many processes: the
options of every command that admits a pool (``build``, ``clean``)."""


def _image_policy(max_image_bytes: Optional[int], image_read_timeout: Optional[float], allow_outside_paths: bool):
    """The ``ImagePolicy`` of ``admission_options``' values (a value not given: the default)."""
    from .images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_READ_TIMEOUT_S, ImagePolicy

    return ImagePolicy(max_bytes=max_image_bytes or DEFAULT_MAX_IMAGE_BYTES,
                       read_timeout_s=image_read_timeout or DEFAULT_READ_TIMEOUT_S,
                       allow_outside_paths=allow_outside_paths)


engine_options = _stacked(
    click.option("--engine", "engine_name", type=ENGINE_CHOICE, default="rapidocr", show_default=True,
                 help="Engine that answers."),
    click.option("--replay", type=click.Path(path_type=Path), default=None,
                 help="Recorded generations for --engine replay (JSONL: id, text, finish_reason)."),
    click.option("--engine-option", "engine_option", type=KeyValue(settings=True), multiple=True,
                 metavar="KEY=VALUE",
                 help="Engine setting, repeatable (e.g. model=Qwen/Qwen3-VL-8B-Thinking, max_tokens=16384)."),
)
"""The engine that generates and its settings."""


def judge_options(*, engines_only: bool = False) -> Callable:
    """The judge and its settings; only engines that can judge are offered. ``engines_only``: the
    judge must be named (an engine; used where there is no generation engine to reuse, so neither
    ``none`` nor ``same``)."""
    if engines_only:
        judge = click.option("--judge", "judge_name", type=JUDGE_ENGINE_CHOICE, required=True, help="Judge engine.")
    else:
        judge = click.option("--judge", "judge_name", type=JUDGE_CHOICE, default="none", show_default=True,
                             help="Second-pass judge: none, same (the generation engine), or an engine that can judge.")
    return _stacked(
        judge,
        click.option("--judge-replay", type=click.Path(path_type=Path), default=None,
                     help="Recorded judge replies for --judge replay (JSONL: id, text)."),
        click.option("--judge-option", "judge_option", type=KeyValue(settings=True), multiple=True,
                     metavar="KEY=VALUE", help="Judge engine setting, repeatable."),
    )


executor_options = _stacked(
    click.option("--executor", type=EXECUTOR_CHOICE, default="local", show_default=True,
                 help="Where generation runs: local is this process, ray a Ray cluster (the 'ray' extra)."),
    click.option("--ray-address", default=None,
                 help="Ray cluster to join (auto, HOST:PORT, ray://HOST:10001); default: start a local one."),
    click.option("--engine-replicas", type=int, default=1, show_default=True,
                 help="Ray: engine actors, each loading one engine (a vLLM model loads once per replica)."),
    click.option("--gpus-per-replica", type=float, default=0.0, show_default=True,
                 help="Ray: GPUs reserved for each engine actor."),
)
"""Where generation runs."""


def work_option(help: str, *, existing: bool = False, remembered: bool = False) -> Callable:
    """``--work``: the work dir (default ``work``); ``existing``: it must be a folder already;
    ``remembered``: not given, it is None and ``_work_of`` finds it from the dataset folder."""
    kind = click.Path(path_type=Path, exists=True, file_okay=False) if existing else click.Path(path_type=Path)
    if remembered:
        return click.option("--work", type=kind, default=None,
                            help=help + " [default: the work dir that built the folder, which its marker "
                                        "remembers; else work]")
    return click.option("--work", type=kind, default=Path("work"), show_default=True, help=help)


def _dataset_folder(folder: Path, verb: str = "give") -> None:
    """One error line when ``folder``, given where a dataset folder is wanted, is a work dir: it
    names the dataset folder that work dir's build wrote."""
    if WorkDir(folder).is_work_dir():
        out = WorkDir(folder).built_output()
        _fail(f"{folder} is a work dir (`orandcar build --work`), not a dataset folder; {verb} the dataset "
              f"folder {out if out is not None else 'its build wrote (-o)'}")


def _work_of(folder: Path, work: Optional[Path]) -> Path:
    """``--work`` when given, else the work dir the marker of the dataset ``folder`` remembers
    (one error line when that dir is gone), else ``work`` (a folder built before markers did)."""
    if work is not None:
        return work
    from .dataset.layout import remembered_work

    remembered = remembered_work(folder)
    if remembered is None:
        return Path("work")
    if not remembered.is_dir():
        _fail(f"{folder}: the work dir that built it, {remembered}, is gone; give the work dir with --work "
              f"(or build again)")
    return remembered


def repo_option(help: str, *, required: bool = False) -> Callable:
    """``--repo ORG/NAME``: a dataset repo on the Hub (the value arrives as ``repo_id``)."""
    return click.option("--repo", "repo_id", metavar="ORG/NAME", required=required, default=None, help=help)


def family_option(help: str, *, required: bool = False) -> Callable:
    """``--family``: one of the registered families."""
    return click.option("--family", type=FAMILY_CHOICE, required=required, default=None, help=help)


progress_option = click.option("--progress/--no-progress", default=True, show_default=True,
                               help="Show a progress bar on the terminal.")


# -- the group --------------------------------------------------------------------------------

class _Command(click.Command):
    """A command whose --help also lists the names each registry-backed argument accepts (an
    option shows them in its own line already)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(param.make_metavar(ctx), "one of: " + ", ".join(param.type.choices))
                for param in self.get_params(ctx)
                if isinstance(param, click.Argument) and isinstance(param.type, RegistryChoice)]
        if rows:
            with formatter.section("Arguments"):
                formatter.write_dl(rows)
        super().format_options(ctx, formatter)


class _Commands(click.Group):
    """Every failure a user can cause (bad input, a file that cannot be read or written, a damaged
    work dir) ends as one ``error:`` line and exit status 2; exit 1 stays "the result failed".
    Ctrl-C ends any command with the one line ``interrupted`` and exit 130, no traceback (each
    ``with`` block has stopped what it started on the way out; see ``interrupts``)."""

    command_class = _Command

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (OrandCarError, OSError, sqlite3.DatabaseError) as exc:
            _fail(describe_error(exc))
        except KeyboardInterrupt:
            _interrupted()
        except Exception as exc:
            from .interrupts import interrupted_by

            if interrupted_by(exc):  # a library turned the KeyboardInterrupt into an error of its own
                _interrupted()
            raise


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="orandcar-builder")
def main() -> None:
    """Build, check and publish the OrandCar rejection-sampled VLM dataset."""


@main.command()
@click.argument("pool", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Dataset folder to write.")
@work_option("Work dir: caches, decisions, dropped items, report.")
@engine_options
@click.option("--threads", type=int, default=None, help="CPU threads for the rapidocr engine.")
@judge_options()
@click.option("--calibrate", type=int, default=0, show_default=True,
              help="Judge this many rule-accepted items and report agreement.")
@click.option("--export-generations", type=click.Path(path_type=Path), default=None,
              help="Also write what the engine produced as a replay file.")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="Read only the first N pool lines.")
@click.option("--max-shard-bytes", type=click.IntRange(min=1), default=None, help="Upper bound of one parquet shard.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the generation cache.")
@click.option("--max-failed-share", type=click.FloatRange(0, 1), default=None,
              help="Beyond this share of admitted items without an answer the build fails and the old dataset "
                   "stays (default 0.5, or the recipe's [build] max_failed_share; 1: never on this ground).")
@admission_options
@progress_option
@executor_options
@click.option("--recipe", "recipe_path", type=click.Path(path_type=Path), default=None,
              help="Build recipe (TOML): dataset and card, engine, judge, calibration, families. Flags given "
                   "here override it; --engine replaces its whole engine section.")
@repo_option("Hub id the card names; overrides the recipe's.")
def build(pool, out, work, engine_name, replay, engine_option, threads, judge_name, judge_replay, judge_option,
          calibrate, export_generations, limit, max_shard_bytes, no_cache, max_failed_share, max_image_bytes,
          image_read_timeout,
          allow_outside_paths, admit_workers, progress, executor, ray_address, engine_replicas, gpus_per_replica,
          recipe_path, repo_id):
    """Build the dataset folder OUT from the pool file POOL.

    A rerun with the same work dir resumes: cached generations are not asked again.

    \b
    Examples:
        orandcar build samples/pool.jsonl -o OrandCar --work work
        orandcar build pool.jsonl -o OrandCar --recipe recipes/orandcar.toml --repo my-org/OrandCar
        orandcar build pool.jsonl -o OrandCar --engine replay --replay gens.jsonl \\
            --judge replay --judge-replay verdicts.jsonl --calibrate 60
        orandcar build pool.jsonl -o OrandCar --executor ray --ray-address auto --engine vllm \\
            --engine-option model=Qwen/Qwen3-VL-8B-Thinking --engine-replicas 8 --gpus-per-replica 1
    """
    from click.core import ParameterSource

    from .dataset.writer import DEFAULT_MAX_SHARD_BYTES
    from .pipeline import BuildConfig, format_summary, run_build
    from .publish import check_repo_id
    from .recipe import read_recipe, resolve

    ctx = click.get_current_context()

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)

    if repo_id is not None:
        check_repo_id(repo_id)
    recipe = read_recipe(recipe_path) if recipe_path is not None else None
    options = _settings(engine_option, replay)
    judge_settings = _settings(judge_option, judge_replay)
    resolved = resolve(recipe, engine=engine_name if given("engine_name") else None, engine_options=options,
                       judge=judge_name if given("judge_name") else None, judge_options=judge_settings,
                       calibration=calibrate if given("calibrate") else None, repo=repo_id)
    engine_name, judge_name, calibrate = resolved.engine["name"], resolved.judge["name"], resolved.calibration
    if threads and engine_name == "rapidocr":
        resolved.engine["threads"] = threads
    if engine_name == "replay" and "replay" not in resolved.engine:
        _fail("--engine replay needs --replay FILE")
    if judge_name == "replay" and "replay" not in resolved.judge:
        _fail("--judge replay needs --judge-replay FILE")
    if calibrate and judge_name == "none":
        _fail("--calibrate needs a judge (--judge same, or a judge engine)")
    if executor == "local" and (ray_address or engine_replicas != 1 or gpus_per_replica):
        _fail("--ray-address, --engine-replicas and --gpus-per-replica need --executor ray")
    images = _image_policy(max_image_bytes, image_read_timeout, allow_outside_paths)
    # The recipe (with the flags above applied over it) fills the config; the flags that only
    # the command line knows set the rest.
    config = BuildConfig(pool=pool, out=out, work=work, limit=limit,
                         max_shard_bytes=max_shard_bytes or DEFAULT_MAX_SHARD_BYTES, progress=progress,
                         use_cache=not no_cache, export_generations=export_generations, executor=executor,
                         ray_address=ray_address, engine_replicas=engine_replicas,
                         gpus_per_replica=gpus_per_replica,
                         max_image_bytes=images.max_bytes, image_read_timeout=images.read_timeout_s,
                         allow_outside_paths=images.allow_outside_paths,
                         admit_workers=admit_workers).with_recipe(resolved)
    if max_failed_share is not None:  # the flag wins over the recipe
        config = config.replace(max_failed_share=max_failed_share)
    result = run_build(config)
    click.echo(format_summary(result))
    sys.exit(0 if result.ok else 1)


@main.command()
@click.argument("folder", metavar="FOLDER|ORG/NAME[@REV]", type=click.Path(path_type=Path))
@click.option("--exhaustive", is_flag=True,
              help="Run jsonschema on every row, not only on the rows the column-wise check of the "
                   "same schema finds failing (same problems, about 30x slower). On the Hub: also "
                   "stream every row (otherwise only the shards' footers are read).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="On the Hub: seconds each request may wait to connect or read.")
@click.option("--tracked", is_flag=True,
              help="FOLDER is in a git checkout (a clone of the Hub repo): check the files git tracks "
                   "there, staged ones included, as the commit holds them (the pre-commit hook).")
def validate(folder, exhaustive, timeout, tracked):
    """Check every shard, row and the README of a built dataset FOLDER, or of a revision of a
    dataset repo on the Hub: ORG/NAME@REV (a tag, a branch, refs/pr/N or a commit; main when
    no REV is given), read with range requests, the token from HF_TOKEN or the login.

    Exits 0 when clean, 1 with one line per problem otherwise.

    \b
    Examples:
        orandcar validate OrandCar
        orandcar validate my-org/OrandCar@refs/pr/3
    """
    from .dataset.validate import validate_folder

    if not (folder.exists() or folder.is_symlink()) and _is_hub_spec(str(folder)):
        if tracked:
            _fail(f"{folder}: --tracked checks a folder in a git checkout, not a revision on the Hub")
        sys.exit(_validate_hub(str(folder), exhaustive, timeout))
    if tracked:
        sys.exit(_validate_tracked(folder, exhaustive))
    if not folder.is_dir():
        _fail(f"{folder}: not a folder (give the dataset folder that `orandcar build -o` wrote)")
    _dataset_folder(folder, "validate")
    problems = validate_folder(folder, exhaustive=exhaustive)
    for problem in problems:
        click.echo(problem)
    if problems:
        click.echo(f"{len(problems)} problem(s) in {folder}", err=True)
        sys.exit(1)
    click.echo(f"{folder}: ok")


def _is_hub_spec(spec: str) -> bool:
    from .diff import hub_spec

    return hub_spec(spec) is not None


def _validate_hub(spec: str, exhaustive: bool, timeout: float) -> int:
    """``validate`` of a Hub revision: the problems on stdout, as for a folder; the exit status."""
    from .remote import validate_hub

    result = validate_hub(spec, exhaustive=exhaustive, timeout=timeout)
    for problem in result.problems:
        click.echo(problem)
    if not result.exhaustive:
        click.echo(f"{result.describe()}: read the footers of {result.shards} shard(s), not their rows "
                   "(--exhaustive streams every row through the checks)", err=True)
    if result.problems:
        click.echo(f"{len(result.problems)} problem(s) in {result.describe()}", err=True)
        return 1
    click.echo(f"{result.describe()}: ok")
    return 0


def _validate_tracked(folder: Path, exhaustive: bool) -> int:
    """``validate --tracked``: the report of a folder, on the files git tracks in it; the exit status."""
    from .remote import validate_checkout

    if not folder.is_dir():
        _fail(f"{folder}: not a folder (give the dataset folder of a git checkout)")
    problems = validate_checkout(folder, exhaustive=exhaustive)
    for problem in problems:
        click.echo(problem)
    if problems:
        click.echo(f"{len(problems)} problem(s) in the files git tracks in {folder}", err=True)
        return 1
    click.echo(f"{folder}: ok")
    return 0


def _config_names() -> Iterable[str]:
    from .vocab import CONFIGS

    return CONFIGS


@main.command()
@click.argument("config", type=RegistryChoice("config", _config_names))
def schema(config):
    """Print the JSON Schema that every row of CONFIG follows (what `validate` checks rows
    against), for other tools: `orandcar schema rejected > rejected.schema.json`."""
    from .dataset.validate import SCHEMA_DIR

    click.echo((SCHEMA_DIR / f"{config}.json").read_text(encoding="utf-8"), nl=False)


@main.command("check-answer")
@family_option("Family of the item (selects the rule).", required=True)
@click.option("--answer", required=True, help="The model's answer.")
@click.option("--reference", "references", multiple=True, required=True, help="A reference answer (repeatable).")
@click.option("--option", "options", multiple=True, help="A multiple-choice option text, in letter order (repeatable).")
def check_answer(family, answer, references, options):
    """Show how the family's rule decides ANSWER against the references.

    Prints the rule, the final-answer extraction (the pattern and the span of an explicit
    statement such as "the answer is (C)" or \\boxed{..}, which alone is then checked), each
    candidate tried (the statement, or the whole answer, first line, first paragraph and what the
    last sentence concludes), its score and decision. Exits 0 when the answer passes and 1 when
    it is rejected.

    \b
    Example:
        orandcar check-answer --family scene_text --answer "Hello!" --reference HELLO
    """
    from . import families
    from .verify.explain import explain, format_explanation

    result = explain(family, answer, list(references), list(options) or None, families=families.DEFAULT_FAMILIES)
    click.echo(format_explanation(result))
    sys.exit(0 if result["decision"]["passed"] else 1)


@main.command()
@click.argument("folder", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--workers", type=int, default=1, show_default=True, help="Processes to spread the shards over.")
@click.option("--limit", type=int, default=50, show_default=True, help="Disagreements to list (0: all).")
def recheck(folder, workers, limit):
    """Recompute every decision of a built dataset FOLDER from its stored rows alone.

    Reports, per config and family, how many decisions agree; exits 1 on any disagreement.
    """
    from .dataset.recheck import format_recheck
    from .dataset.recheck import recheck as run_recheck

    _dataset_folder(folder, "recheck")
    report = run_recheck(folder, workers=workers)
    click.echo(format_recheck(report, limit=limit or None))
    sys.exit(0 if report.ok else 1)


@main.command("import")
@click.argument("fmt", metavar="FORMAT", type=IMPORT_FORMAT_CHOICE)
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Pool file to write (JSONL).")
@family_option("Family of every imported item.")
@click.option("--dataset", default=None, help="source.dataset of every item.")
@click.option("--split", default=None, help="source.split of every item.")
@click.option("--question", default=None, help="The question (folder format) or a fallback question.")
@click.option("--origin", default=None, help="source.origin: 'benchmark' or the name of a mixed pool.")
@click.option("--column", "columns", type=KeyValue(), multiple=True, metavar="FIELD=COLUMN",
              help="hf format: map a pool field to a dataset column (repeatable).")
@click.option("--family-map", "family_map", type=KeyValue(), multiple=True, metavar="SOURCE=FAMILY",
              help="llava format: map a record's source/origin to a family (repeatable).")
def import_cmd(fmt, source, out, family, dataset, split, question, origin, columns, family_map):
    """Convert SOURCE in FORMAT (one of the import formats listed below) to the native pool file OUT.

    \b
    Example:
        orandcar import folder ../shared/data/scene-text/cute80_test -o cute80.jsonl \\
            --family scene_text --dataset CUTE80 --split test
    """
    from .pool import format_import_report, import_source

    options = dict(family=family, dataset=dataset, split=split, question=question, origin=origin)
    if columns:
        options["columns"] = dict(columns)
    if family_map:
        options["family_map"] = dict(family_map)
    report = import_source(fmt, source, out, **options)
    click.echo(format_import_report(report))
    if not report.written:
        reasons = ", ".join(f"{reason} {n}" for reason, n in report.problem_counts.most_common(3))
        _fail(f"{source}: no record could be imported ({report.read} read, {report.problems_total} problem(s)"
              f"{': ' + reasons if reasons else ''}); "
              f"{f'{out} was left as it was' if out.exists() else f'nothing was written to {out}'}")


@main.command("clean")
@click.argument("pool", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Cleaned pool file to write.")
@admission_options
def clean_cmd(pool, out, max_image_bytes, image_read_timeout, allow_outside_paths, admit_workers):
    """Apply the cleaning policy to POOL on its own: write the admitted items to OUT and every
    dropped item, with its reason, beside it; print the measured figures."""
    from .clean import clean_pool
    from .pool.prefetch import check_workers, default_workers

    images = _image_policy(max_image_bytes, image_read_timeout, allow_outside_paths)
    workers = check_workers(admit_workers if admit_workers is not None else default_workers())
    report = clean_pool(pool, out, images=images, workers=workers)
    click.echo(json.dumps(report, indent=2, ensure_ascii=False))


@main.command()
@work_option("Work dir of a finished build (reads decisions.parquet).", existing=True)
@click.option("-n", "--n", "n", type=int, default=60, show_default=True, help="Items to sample.")
@judge_options(engines_only=True)
def calibrate(work, n, judge_name, judge_replay, judge_option):
    """Run the judge over N items the string rule accepted and report agreement (k/N), the
    disagreements, and the judge's agreement per family. Verdicts are cached in the work dir."""
    from . import judge as judging
    from .cache import GenerationCache
    from .engines import create_engine
    from .executors.generation import generate_through_cache
    from .files import write_text_atomic

    options = _settings(judge_option, judge_replay)
    decisions = WorkDir(work).decisions
    if not decisions.is_file():
        _fail(f"{decisions}: not found; run orandcar build with this work dir first")
    engine = create_engine(judge_name, **options)
    items = judging.accepted_items_from_decisions(decisions)
    with GenerationCache(WorkDir(work).cache) as cache:
        report = judging.calibrate(engine, items, n, generate=lambda e, r: generate_through_cache(e, r, cache))
    write_text_atomic(WorkDir(work).calibration, json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    click.echo(judging.format_calibration(report))


@main.command()
@click.argument("folder", type=click.Path(path_type=Path))
@work_option("Work dir of the build that wrote FOLDER (its report.json holds the figures).", remembered=True)
@repo_option("Hub id for the card's load_dataset example.")
@click.option("--options", "options_path", type=click.Path(path_type=Path), default=None,
              help="YAML of card options: pretty_name, license, license_name, license_link, language, "
                   "task_categories, tags, gated, gated_heading, gated_prompt, gated_fields, gated_button.")
def card(folder, work, repo_id, options_path):
    """Render FOLDER/README.md and its example images again from the build report in WORK.

    \b
    Example:
        orandcar card OrandCar --work work --repo my-org/OrandCar --options card.yaml
    """
    from .card import rewrite_card
    from .dataset.validate import validate_folder
    from .publish import check_repo_id

    _dataset_folder(folder)
    work = _work_of(folder, work)
    if repo_id is not None:
        check_repo_id(repo_id)  # it is written into the card's load_dataset example
    path = rewrite_card(folder, WorkDir(work).report, repo_id=repo_id, options_path=options_path)
    problems = validate_folder(folder)
    for problem in problems:
        click.echo(problem)
    click.echo(f"{path}: {path.stat().st_size:,} bytes")
    sys.exit(1 if problems else 0)


@main.command()
@click.argument("out", type=click.Path(path_type=Path))
@work_option("Work dir of the build that wrote OUT (report.json, decisions.parquet, dropped.jsonl).", remembered=True)
@click.option("-o", "--output", "target", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="HTML file to write [default: WORK/report.html].")
@click.option("--samples", "per_kind", type=click.IntRange(min=0), default=3, show_default=True,
              help="Items shown, with their image, per family and outcome (accepted, promoted, each rejection reason).")
def report(out, work, target, per_kind):
    """Write the review page of the build of dataset folder OUT: one self-contained HTML file.

    It shows the figures at a glance, acceptance and rejection reasons per family, the judge's
    verdicts, promotions and calibration, a fixed sample of items per family with their image,
    and the lengths of the replies. Every build writes it as WORK/report.html.

    \b
    Example:
        orandcar report OrandCar --work work -o review.html
    """
    from .review import write_review

    _dataset_folder(out)
    result = write_review(out, _work_of(out, work), target, per_kind=per_kind)
    click.echo(f"{result.path}: {result.bytes:,} bytes; {result.items:,} QA items, "
               f"{result.sampled:,} shown with their image")


@main.command()
@click.argument("folder", type=click.Path(path_type=Path, exists=True, file_okay=False))
@repo_option("Dataset repo on the Hub.", required=True)
@click.option("--revision", default=None, help="Branch to push to (created from main when missing).")
@click.option("--tag", default=None, help="Tag the pushed commit, e.g. v1.0.")
@click.option("--gated", type=GATING_CHOICE, default="auto", show_default=True,
              help="Access requests approved automatically or by hand.")
@click.option("--private", is_flag=True, help="Create the repo private.")
@click.option("--dry-run", is_flag=True, help="List what would be uploaded and changed; touch nothing. Without a "
                                               "token: offline, every file listed as an upload.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="Seconds each Hub request may wait to connect, read or write before the push stops.")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="After the commit, validate what the Hub serves at it (footers, card, file hashes); "
                   "exit 1 when it reads back differently.")
@progress_option
def push(folder, repo_id, revision, tag, gated, private, dry_run, timeout, verify, progress):
    """Validate FOLDER and publish it to the gated dataset repo REPO.

    The token comes from HF_TOKEN or the huggingface_hub login; it is never printed.

    \b
    Example:
        orandcar push OrandCar --repo my-org/OrandCar --tag v1.0
    """
    from .publish import format_push_result
    from .publish import push as run_push

    _dataset_folder(folder, "push")
    result = run_push(folder, repo_id, revision=revision, tag=tag, gated=gated, private=private,
                      dry_run=dry_run, progress=progress, timeout=timeout, verify=verify)
    click.echo(format_push_result(result))
    for problem in result.problems or ():
        click.echo(problem)
    if result.problems:
        sys.exit(1)


@main.command("diff")
@click.argument("old")
@click.argument("new")
@click.option("--json", "as_json", is_flag=True, help="Print the whole comparison as JSON, for scripts.")
def diff_cmd(old, new, as_json):
    """Compare two versions of the dataset: OLD and NEW are each a dataset folder or ORG/NAME@REV
    on the Hub (a tag, branch or commit; the token comes from HF_TOKEN or the login).

    Per config: rows and QA items added, removed and changed (a QA item is its source dataset,
    split and id and its question); the items whose decision flipped, with both answers; the
    acceptance per family on each side; and the settings the cards record that changed. Exits 0
    when the versions are the same, 1 when they differ.

    \b
    Examples:
        orandcar diff OrandCar-old OrandCar
        orandcar diff my-org/OrandCar@v1.0 my-org/OrandCar@v1.1 --json
    """
    from .diff import FLIPS_SHOWN, format_diff
    from .diff import diff as run_diff

    result = run_diff(old, new, keep=None if as_json else FLIPS_SHOWN)  # the printout lists a few
    click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False) if as_json else format_diff(result))
    sys.exit(0 if result.identical else 1)


if __name__ == "__main__":  # pragma: no cover
    try:
        main()
    except SystemExit as stop:
        from .interrupts import INTERRUPTED_EXIT

        if stop.code != INTERRUPTED_EXIT:
            raise
        # Run as ``python -m``, the interpreter's shutdown after a Ctrl-C sometimes ended the
        # process by SIGINT instead of with 130; everything was stopped on the way here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(INTERRUPTED_EXIT)
