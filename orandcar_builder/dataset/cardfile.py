"""The card file of a dataset folder (README.md): its YAML header and body, read and written.

The header carries two keys of this project: ``orandcar_build`` (``BUILD_KEY``: the settings that
shaped the data, ``release.build_settings``) and ``orandcar_versions`` (``VERSIONS_KEY``: one entry per
published tag). ``validate``, ``recheck``, ``diff``, the card and ``push`` all read a card through
here, so there is one parser and one spelling of the header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from ..errors import OrandCarError
from ..families import DEFAULT_SEPARATOR, FAMILIES, Family

BUILD_KEY = "orandcar_build"
VERSIONS_KEY = "orandcar_versions"
YAML_WIDTH = 100


class CardFormatError(OrandCarError):
    """A card whose YAML header cannot be read."""


def dump_header(data: dict) -> str:
    """The card's YAML header text (without the ``---`` lines): one spelling for build and push."""
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=YAML_WIDTH)


def split_card(text: str, *, source: str = "README.md") -> tuple[dict, str]:
    """(YAML header as a mapping, body after the closing ``---`` line) of a card's text."""
    if not text.startswith("---\n"):
        raise CardFormatError(f"{source}: no YAML header (a card starts with a '---' line)")
    end = text.find("\n---\n", 3)
    if end < 0:
        raise CardFormatError(f"{source}: the YAML header is not closed by a '---' line")
    try:
        header = yaml.safe_load(text[4:end + 1]) or {}
    except yaml.YAMLError as exc:
        raise CardFormatError(f"{source}: the YAML header is not valid YAML ({exc})") from None
    if not isinstance(header, dict):
        raise CardFormatError(f"{source}: the YAML header is not a mapping")
    return header, text[end + 5:]


def join_card(header: dict, body: str) -> str:
    return f"---\n{dump_header(header)}---\n{body}"


def card_settings(header: dict) -> dict:
    """The ``orandcar_build`` block of a card header ({} for a card written before it existed)."""
    value = header.get(BUILD_KEY)
    return value if isinstance(value, dict) else {}


def card_versions(header: dict) -> list[dict]:
    """The ``orandcar_versions`` entries of a card header, oldest first."""
    value = header.get(VERSIONS_KEY)
    return [entry for entry in value if isinstance(entry, dict) and entry.get("tag")] if isinstance(value, list) else []


def recorded_families(folder) -> Optional[tuple]:
    """The families (``families.Family``) the build of dataset ``folder`` ran with, as its card
    records them (``header_families``); None when the card cannot be read or records none."""
    try:
        header, _ = split_card((Path(folder) / "README.md").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, CardFormatError):
        return None
    return header_families(header)


def header_families(header: dict) -> Optional[tuple]:
    """The families (``families.Family``) a card header records (``orandcar_build.recipe.families``),
    so ``validate`` and ``recheck`` know a family a recipe added and decide with the rule the recipe
    gave; None when the header records none."""
    recipe = card_settings(header).get("recipe")
    families = recipe.get("families") if isinstance(recipe, dict) else None
    if not isinstance(families, dict):
        return None
    out = []
    for name, settings in families.items():
        if not isinstance(settings, dict) or not isinstance(settings.get("rule"), str):
            continue
        code = FAMILIES.get(name)
        out.append(Family(name=str(name), rule=settings["rule"], instruction=str(settings.get("instruction", "")),
                          separator=str(settings.get("separator", DEFAULT_SEPARATOR)),
                          description=code.description if code else str(settings.get("description", ""))))
    return tuple(out) or None
