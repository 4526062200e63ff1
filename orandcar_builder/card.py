"""The dataset card (README.md of the dataset folder), rendered from the build report.

The YAML header's ``configs:`` block comes from ``loading_script/``; every figure in the body
comes from the build report, so the card cannot disagree with the data it describes.
"""

from __future__ import annotations

import os
from pathlib import Path

import jinja2
import yaml

from .dataset.features import configs_block

DEFAULT_REPO_ID = "ORG/OrandCar"


def template_dir() -> Path:
    override = os.environ.get("ORANDCAR_CARD_TEMPLATES")
    return Path(override) if override else Path(__file__).resolve().parents[1] / "dataset_card"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def card_header(report: dict) -> dict:
    return {"configs": configs_block()}


def render_card(report: dict, *, repo_id: str = DEFAULT_REPO_ID) -> str:
    header = yaml.safe_dump(card_header(report), sort_keys=False, allow_unicode=True)
    configs = [
        {"name": name, "rows": s["rows"], "qa": s.get("qa", ""), "bytes": s["bytes"]}
        for name, s in report["configs"].items()
    ]
    return _environment().get_template("README.md.j2").render(
        header=header, report=report, configs=configs, engine=report["engine"], repo_id=repo_id
    )


def write_card(folder: Path, report: dict, *, repo_id: str = DEFAULT_REPO_ID) -> Path:
    path = Path(folder) / "README.md"
    path.write_text(render_card(report, repo_id=repo_id), encoding="utf-8")
    return path
