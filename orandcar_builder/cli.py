"""The ``orandcar`` command line: each command is a thin call into the library."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .errors import OrandCarError


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="orandcar-builder")
def main() -> None:
    """Build, check and publish the OrandCar rejection-sampled VLM dataset."""


def _engine_options(pairs: tuple[str, ...]) -> dict:
    """``KEY=VALUE`` pairs; a VALUE that parses as JSON is taken as such (numbers, true, lists)."""
    import json

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--engine-option")
        try:
            options[key.replace("-", "_")] = json.loads(value)
        except ValueError:
            options[key.replace("-", "_")] = value
    return options


@main.command()
@click.argument("pool", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Dataset folder to write.")
@click.option("--work", type=click.Path(path_type=Path), default=Path("work"), show_default=True,
              help="Work dir: caches, decisions, dropped items, report.")
@click.option("--engine", "engine_name", default="rapidocr", show_default=True,
              help="Engine that answers: rapidocr, replay, vllm, openai_compat.")
@click.option("--replay", type=click.Path(path_type=Path), default=None,
              help="Recorded generations for --engine replay (JSONL: id, text, finish_reason).")
@click.option("--engine-option", "engine_option", multiple=True, metavar="KEY=VALUE",
              help="Engine setting, repeatable (e.g. model=Qwen/Qwen3-VL-8B-Thinking, max_tokens=16384).")
@click.option("--threads", type=int, default=None, help="CPU threads for the rapidocr engine.")
@click.option("--judge", "judge_name", default="none", show_default=True,
              help="Second-pass judge: none, same (the generation engine), or an engine name.")
@click.option("--judge-replay", type=click.Path(path_type=Path), default=None,
              help="Recorded judge replies for --judge replay (JSONL: id, text).")
@click.option("--judge-option", "judge_option", multiple=True, metavar="KEY=VALUE", help="Judge engine setting.")
@click.option("--calibrate", type=int, default=0, show_default=True,
              help="Judge this many rule-accepted items and report agreement.")
@click.option("--export-generations", type=click.Path(path_type=Path), default=None,
              help="Also write what the engine produced as a replay file.")
@click.option("--limit", type=int, default=None, help="Read only the first N pool lines.")
@click.option("--max-shard-bytes", type=int, default=None, help="Upper bound of one parquet shard.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the generation cache.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def build(pool, out, work, engine_name, replay, engine_option, threads, judge_name, judge_replay, judge_option,
          calibrate, export_generations, limit, max_shard_bytes, no_cache, progress):
    """Build the dataset folder OUT from the pool file POOL.

    A rerun with the same work dir resumes: cached generations are not asked again.

    \b
    Examples:
        orandcar build samples/pool.jsonl -o OrandCar --work work
        orandcar build pool.jsonl -o OrandCar --engine replay --replay gens.jsonl \\
            --judge replay --judge-replay verdicts.jsonl --calibrate 60
    """
    from .build import build as run_build, format_summary
    from .dataset.writer import DEFAULT_MAX_SHARD_BYTES

    options = _engine_options(engine_option)
    if threads and engine_name == "rapidocr":
        options["threads"] = threads
    if replay is not None:
        options["replay"] = replay
    elif engine_name == "replay":
        _fail("--engine replay needs --replay FILE")
    judge_options = _engine_options(judge_option)
    if judge_replay is not None:
        judge_options["replay"] = judge_replay
    elif judge_name == "replay":
        _fail("--judge replay needs --judge-replay FILE")
    if calibrate and judge_name == "none":
        _fail("--calibrate needs a judge (--judge same, or a judge engine)")
    try:
        result = run_build(pool, out, work=work, engine_name=engine_name, engine_options=options,
                           judge=judge_name, judge_options=judge_options, calibrate=calibrate, limit=limit,
                           max_shard_bytes=max_shard_bytes or DEFAULT_MAX_SHARD_BYTES, progress=progress,
                           use_cache=not no_cache, export_generations=export_generations)
    except OrandCarError as exc:
        _fail(str(exc))
    click.echo(format_summary(result))
    sys.exit(0 if result.ok else 1)


@main.command()
@click.argument("folder", type=click.Path(path_type=Path))
def validate(folder):
    """Check every shard, row and the README of a built dataset FOLDER.

    Exits 0 when clean, 1 with one line per problem otherwise.
    """
    from .dataset.validate import validate_folder

    problems = validate_folder(folder)
    for problem in problems:
        click.echo(problem)
    if problems:
        click.echo(f"{len(problems)} problem(s) in {folder}", err=True)
        sys.exit(1)
    click.echo(f"{folder}: ok")


if __name__ == "__main__":  # pragma: no cover
    main()
