"""Rendering the card: the Jinja templates of ``dataset_card/`` filled from the build report and
the folder, ``render_card`` (the text), ``write_card`` (README.md and its example images) and
``rewrite_card`` (``orandcar card``: render a built folder's card again from its report)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Union

import jinja2

from ..dataset.cardfile import CardFormatError, card_versions, split_card
from ..dataset.contents import CONTENTS_END, CONTENTS_START, with_contents
from ..dataset.layout import EXAMPLES_DIR, README
from ..figures import BuildFigures
from ..files import write_bytes_atomic, write_text_atomic
from ..recipe import dataset_card_options, dataset_repo
from ..release import install_commands, reproduce_context, versions_section, with_versions
from ..shipped import shipped_dir
from ..vocab import CONFIGS
from .errors import CardError
from .examples import Example, examples
from .markdown import NOT_RECORDED, cell, code_span, fence, line_text, number, percent, quoted, size
from .options import DEFAULT_REPO_ID, CardOptions, header_text
from .rules import candidates_source, extraction_section
from .schema import schema_tables
from .sections import (
    ACCEPTANCE_CHART,
    acceptance_chart_png,
    cleaning_section,
    engine_fingerprint,
    family_rows,
    generation_facts,
    has_acceptance_chart,
    judge_section,
    lookup,
    reject_kind_rows,
    rule_sections,
)
from .sizes import card_sizes
from .sources import source_rows


def template_dir() -> Path:
    override = os.environ.get("ORANDCAR_CARD_TEMPLATES")
    return Path(override) if override else shipped_dir("dataset_card")


def code_lines(fenced: str) -> int:
    """The lines of code in a fenced block (``markdown.fence``), its fences not counted."""
    return max(0, fenced.count("\n") - 1)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(number=number, size=size, cell=cell, code=code_span, code_lines=code_lines, line=line_text,
                       quoted=quoted)
    env.globals.update(percent=percent, NOT_RECORDED=NOT_RECORDED)
    return env


def _context(folder: Path, figures: BuildFigures, repo_id: str,
             options: CardOptions) -> tuple[dict, dict[str, list[Example]]]:
    sizes = card_sizes(folder, figures)
    header = header_text(sizes, options, figures)
    family_columns, family_table = family_rows(figures)
    kind_columns, kind_table = reject_kind_rows(figures)
    shown = examples(folder, sizes)
    context = {
        "header": header,
        "options": options,
        "repo_id": repo_id,
        "figures": figures,
        "configs": CONFIGS,
        "sizes": sizes,
        "total_file_bytes": sum(s["file_bytes"] for s in sizes.values()),
        "total_arrow_bytes": sum(s["arrow_bytes"] for s in sizes.values()),
        "generation": generation_facts(figures),
        "fingerprint": engine_fingerprint(figures),
        "families": {"columns": family_columns, "rows": family_table},
        "reject_kinds": {"columns": kind_columns, "rows": kind_table},
        "sources": source_rows(folder),
        "contents": CONTENTS_START + "\n" + CONTENTS_END + "\n",  # filled from the headings (dataset/contents.py)
        "candidates_source": fence(candidates_source(), "python"),
        "extraction": extraction_section(),
        "rules": rule_sections(figures),
        "judge": judge_section(figures),
        "cleaning": cleaning_section(figures),
        "schema": schema_tables(),
        "examples": shown,
        "fence": fence,
        "install_commands": install_commands,
        "versions_section": versions_section([]),  # filled by `orandcar push --tag`
        "reproduce": reproduce_context(figures),
        "acceptance_chart": ACCEPTANCE_CHART if has_acceptance_chart(figures) else None,
    }
    return context, shown


def render_card(folder: Path, figures: Union[BuildFigures, dict], *, repo_id: str = DEFAULT_REPO_ID,
                options: Optional[CardOptions] = None) -> str:
    """The README.md text for the built dataset ``folder`` and its build's ``figures`` (or
    report.json's content); writes nothing."""
    context, _ = _context(Path(folder), BuildFigures.of(figures), repo_id, options or CardOptions())
    return with_contents(_environment().get_template("README.md.j2").render(**context))


def write_card(folder: Path, figures: Union[BuildFigures, dict], *, repo_id: str = DEFAULT_REPO_ID,
               options: Optional[CardOptions] = None) -> Path:
    """Write README.md and its example images into ``folder`` from the build's ``figures`` (or
    report.json's content); stale example files are removed."""
    folder, figures = Path(folder), BuildFigures.of(figures)
    context, shown = _context(folder, figures, repo_id, options or CardOptions())
    text = with_contents(_environment().get_template("README.md.j2").render(**context))
    wanted = {ex.image_file: ex.image_bytes for exs in shown.values() for ex in exs if ex.image_file}
    if context["acceptance_chart"]:
        wanted[ACCEPTANCE_CHART] = acceptance_chart_png(figures)
    directory = folder / EXAMPLES_DIR
    if wanted:
        directory.mkdir(exist_ok=True)
    if directory.is_dir():
        for stale in sorted(directory.iterdir()):
            if stale.is_file() and f"{EXAMPLES_DIR}/{stale.name}" not in wanted:
                stale.unlink()
    for relative, data in wanted.items():
        target = folder / relative
        if not target.is_file() or target.read_bytes() != data:
            write_bytes_atomic(target, data)
    path = folder / README
    write_text_atomic(path, text)
    return path


def rewrite_card(folder: Path, report_path: Path, *, repo_id: Optional[str] = None,
                 options_path: Optional[Path] = None) -> Path:
    """``orandcar card``: render the card of a built ``folder`` again from its build report
    (``work/report.json``), with card options from a YAML file when given."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CardError(f"{folder}: not a dataset folder (build it with `orandcar build` first)")
    figures = load_figures(report_path)
    # without --repo / --options, the repo and card options of the build's recipe
    recipe_dataset = lookup(figures.recipe, "dataset") or {}
    if options_path is not None:
        options = CardOptions.from_yaml(options_path)
    else:
        options = CardOptions.from_mapping(dataset_card_options(recipe_dataset), source=f"{report_path}: recipe")
    repo_id = repo_id or dataset_repo(recipe_dataset) or DEFAULT_REPO_ID
    kept = _published_versions(folder / README)
    path = write_card(folder, figures, repo_id=repo_id, options=options)
    if kept:  # the Versions section a tagged push wrote stays (the build report does not know it)
        write_text_atomic(path, with_versions(path.read_text(encoding="utf-8"), kept))
    return path


def _published_versions(readme: Path) -> list[dict]:
    try:
        return card_versions(split_card(readme.read_text(encoding="utf-8"), source=str(readme))[0])
    except (OSError, UnicodeDecodeError, CardFormatError):
        return []


def load_figures(path: Path) -> BuildFigures:
    """A build's figures (``work/report.json``) for re-rendering a card with ``orandcar card``."""
    try:
        return BuildFigures.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise CardError(f"{path}: cannot read the build report ({exc}); run `orandcar build` first") from None
