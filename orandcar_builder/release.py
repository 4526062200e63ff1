"""What a dataset card says about its release, in a form scripts read back.

The card's YAML header carries two keys of this project:

- ``orandcar_build``: the settings that shaped the data (the engine's fingerprint, the judge, the
  rule versions, the final-answer extraction version, the cleaning policy and the build recipe
  when one was given). ``orandcar diff`` reads it from both sides to say what changed.
- ``orandcar_versions``: one entry per published tag, oldest first, each with the summary of its
  diff against the tag before it. ``orandcar push --tag`` adds the entry.

The body shows the versions between two HTML comments (``VERSIONS_START`` / ``VERSIONS_END``,
invisible on the Hub), so a push can replace that part of a finished card without rendering the
rest again. Everything here is deterministic: the same settings and versions give the same bytes.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from .dataset.cardfile import VERSIONS_KEY, join_card, split_card
from .dataset.contents import with_contents
from .figures import BuildFigures
from .vocab import RECORD_ONLY_KEYS

_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")  # a git commit as provenance.source_info records it
VERSIONS_START = "<!-- orandcar:versions -->"
VERSIONS_END = "<!-- /orandcar:versions -->"


def _without_left_out(engine: Any) -> Any:
    if not isinstance(engine, dict):
        return engine
    return {k: v for k, v in engine.items() if k not in RECORD_ONLY_KEYS}


def build_settings(figures: BuildFigures) -> dict:
    """The ``orandcar_build`` block for a build's ``figures``: what shaped the data, nothing that
    depends on the machine or the clock."""
    from .verify.extract import EXTRACTION_VERSION

    judge = figures.judge
    cleaning = figures.cleaning if isinstance(figures.cleaning, dict) else {}
    settings = {
        "engine": _without_left_out(figures.engine),
        "judge": None if judge is None else {
            "engine": _without_left_out(judge.engine),
            "prompt_version": judge.prompt_version,
        },
        "rules": dict(figures.rules or {}),
        "extraction_version": EXTRACTION_VERSION,
        "cleaning_policy": cleaning.get("policy"),
    }
    if figures.recipe is not None:
        settings["recipe"] = figures.recipe
    return settings


# --- the Versions section ------------------------------------------------------------------------

def _share(value: Any) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "–"


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def versions_section(versions: list[dict]) -> str:
    """The body part between the markers: nothing without versions, else a ``## Versions`` table,
    newest tag first."""
    lines = [VERSIONS_START]
    if versions:
        lines += [
            "## Versions",
            "",
            "Each published tag, newest first, compared with the tag before it (`orandcar diff` gives the",
            "full list of what moved). A tag is never moved: load an exact version with",
            "`load_dataset(..., revision=TAG)`.",
            "",
            "| tag | compared with | QA items | added | removed | changed | rejected → accepted "
            "| accepted → rejected | accepted share | settings changed |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for entry in reversed(versions):
            qa = entry.get("qa") if isinstance(entry.get("qa"), dict) else {}
            flips = entry.get("flipped") if isinstance(entry.get("flipped"), dict) else {}
            share = entry.get("accepted_share") if isinstance(entry.get("accepted_share"), dict) else {}
            previous = entry.get("previous")
            if previous:
                shares = f"{_share(share.get('old'))} → {_share(share.get('new'))}"
                settings = entry.get("settings_changed")
                changed = ", ".join(f"`{_cell(key)}`" for key in settings) if settings else "none"
                if settings is None:
                    changed = "not recorded"
            else:
                shares, changed = _share(share.get("new")), "first version"
            lines.append(
                f"| `{_cell(entry['tag'])}` | {f'`{_cell(previous)}`' if previous else '–'} | {_count(qa.get('new'))} "
                f"| {_count(qa.get('added'))} | {_count(qa.get('removed'))} | {_count(qa.get('changed'))} "
                f"| {_count(flips.get('rejected_to_accepted'))} | {_count(flips.get('accepted_to_rejected'))} "
                f"| {shares} | {changed} |")
        lines.append("")
    lines.append(VERSIONS_END)
    return "\n".join(lines) + "\n"


def with_versions(text: str, versions: list[dict], *, source: str = "README.md") -> str:
    """The card ``text`` with its header's ``orandcar_versions`` and its Versions section set to
    ``versions``, and its table of contents made again (``dataset.contents``); every other byte of the
    card is kept. A card without the markers gets the section appended at the end."""
    header, body = split_card(text, source=source)
    header.pop(VERSIONS_KEY, None)
    if versions:
        header[VERSIONS_KEY] = [dict(entry) for entry in versions]
    section = versions_section(versions)
    start = body.find(VERSIONS_START + "\n")
    end = body.find(VERSIONS_END + "\n", start) if start >= 0 else -1
    if start >= 0 and end >= 0:
        body = body[:start] + section + body[end + len(VERSIONS_END) + 1:]
    else:
        body = body.rstrip("\n") + "\n\n" + section
    return join_card(header, with_contents(body))


def version_entry(tag: str, previous: Optional[str], summary: dict) -> dict:
    """One ``orandcar_versions`` entry from a diff summary (``diff.DatasetDiff.summary()``)."""
    entry = {"tag": tag, "previous": previous}
    entry.update(summary)
    return entry


# --- How to reproduce ----------------------------------------------------------------------------

def reproduce_context(figures: BuildFigures) -> Optional[dict]:
    """What the card's "How to reproduce" section shows, from the build's figures: the recipe the
    build ran (as TOML), the command, and the versions; None for figures without a recipe."""
    recipe = figures.recipe
    if not isinstance(recipe, dict):
        return None
    from .recipe import to_toml

    reproduce = figures.reproduce if isinstance(figures.reproduce, dict) else {}
    versions = reproduce.get("versions") if isinstance(reproduce.get("versions"), dict) else {}
    source = reproduce.get("source") if isinstance(reproduce.get("source"), dict) else {}
    commit = source.get("commit") if isinstance(source.get("commit"), str) and _COMMIT.match(source["commit"]) else None
    return {
        "toml": to_toml(recipe),
        "command": reproduce.get("command"),
        "recipe_file": reproduce.get("recipe_file"),
        "versions": list(versions.items()),
        "builder": versions.get("orandcar-builder"),
        "commit": commit,
        "modified": bool(commit and source.get("modified")),
        "extras": recipe_extras(recipe),
    }


def recipe_extras(recipe: dict) -> list[str]:
    """The package extras the engine and the judge of a recorded ``recipe`` need, in that order."""
    from .engines import ENGINE_EXTRAS

    names = [(recipe.get(section) or {}).get("name") if isinstance(recipe.get(section), dict) else None
             for section in ("engine", "judge")]
    return list(dict.fromkeys(ENGINE_EXTRAS[name] for name in names if name in ENGINE_EXTRAS))


def install_commands(builder: Optional[str], commit: Optional[str], extras: list[str]) -> str:
    """The shell lines that install the package the card's build ran with: from a checkout of the
    repository (at ``commit`` when known), as the package is on no index, with the extras its
    engines need and the library versions the checkout pins (``constraints.txt``); a wheel built
    there is named in a comment."""
    spec = f"[{','.join(extras)}]" if extras else ""
    lines = []
    if commit:
        lines.append(f"git checkout {commit}  # in a clone of the orandcar-builder repository")
    lines.append(f'pip install -c constraints.txt ".{spec}"  # from the root of that checkout')
    if builder:
        lines.append(f'# or a wheel built there: pip wheel --no-deps . -w dist && '
                     f'pip install -c constraints.txt "dist/orandcar_builder-{builder}-py3-none-any.whl{spec}"')
    return "\n".join(lines) + "\n"


