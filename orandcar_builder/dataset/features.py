"""Features of the three configs, read from the loading definition in ``loading_script/``.

``loading_script/orandcar.yaml`` is the single source of the configs and their features; this
module turns it into ``datasets.Features`` and the ``configs:`` block for README.md.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import yaml
from datasets import Features

from ..shipped import shipped_dir
from ..vocab import CONFIGS


def loading_definition_path() -> Path:
    """``loading_script/orandcar.yaml`` as shipped with the package or in this checkout
    (override: ORANDCAR_LOADING_DEFINITION)."""
    override = os.environ.get("ORANDCAR_LOADING_DEFINITION")
    if override:
        return Path(override)
    return shipped_dir("loading_script") / "orandcar.yaml"


@functools.lru_cache(maxsize=None)
def loading_definition() -> dict:
    path = loading_definition_path()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the loading definition is missing (reinstall orandcar-builder, or "
                                "run from a checkout of the project)")
    definition = yaml.safe_load(path.read_text(encoding="utf-8"))
    names = [c["config_name"] for c in definition["configs"]]
    if tuple(names) != CONFIGS or set(definition["features"]) != set(CONFIGS):
        raise ValueError(f"{path}: configs must be exactly {CONFIGS}, found {names}")
    return definition


def configs_block() -> list[dict]:
    """The README ``configs:`` block, a fresh copy each call."""
    return copy.deepcopy(loading_definition()["configs"])


@functools.lru_cache(maxsize=None)
def features(config: str) -> Features:
    if config not in CONFIGS:
        raise KeyError(f"unknown config {config!r} (configs: {', '.join(CONFIGS)})")
    return Features._from_yaml_list(copy.deepcopy(loading_definition()["features"][config]))


def qa_fields(config: str) -> list[str]:
    return list(features(config)["qa"].feature.keys())
