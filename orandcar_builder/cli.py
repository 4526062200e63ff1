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


@main.command()
@click.argument("pool", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Dataset folder to write.")
@click.option("--work", type=click.Path(path_type=Path), default=Path("work"), show_default=True,
              help="Work dir: caches, decisions, dropped items, report.")
@click.option("--engine", "engine_name", default="rapidocr", show_default=True, help="Engine that answers.")
@click.option("--threads", type=int, default=None, help="CPU threads for the rapidocr engine.")
@click.option("--limit", type=int, default=None, help="Read only the first N pool lines.")
@click.option("--max-shard-bytes", type=int, default=None, help="Upper bound of one parquet shard.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def build(pool, out, work, engine_name, threads, limit, max_shard_bytes, progress):
    """Build the dataset folder OUT from the pool file POOL.

    \b
    Example:
        orandcar build samples/pool.jsonl -o OrandCar --work work
    """
    from .build import build as run_build, format_summary
    from .dataset.writer import DEFAULT_MAX_SHARD_BYTES

    options = {"threads": threads} if threads and engine_name == "rapidocr" else {}
    try:
        result = run_build(pool, out, work=work, engine_name=engine_name, engine_options=options,
                           limit=limit, max_shard_bytes=max_shard_bytes or DEFAULT_MAX_SHARD_BYTES,
                           progress=progress)
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
