"""The card file of a dataset folder (README.md): its YAML header and body, read and written.

The header carries two keys of this project: ``orandcar_build`` (``BUILD_KEY``: the settings that
shaped the data, ``release.build_settings``) and ``orandcar_versions`` (``VERSIONS_KEY``: one entry per
published tag). ``validate``, ``recheck``, ``diff``, the card and ``push`` all read a card through
here, so there is one parser and one spelling of the header.

A card may come from anyone's repository, so its header is read within bounds (``load_yaml``): at
most ``MAX_HEADER_CHARS`` characters, nested at most ``MAX_YAML_DEPTH`` levels, no key given twice
and no alias (``*name``). An alias is what makes a "billion laughs" header: a few hundred bytes of
anchors nested nine deep, ten aliases each, load in milliseconds as shared references and then
expand to 10^9 nodes in whatever walks or prints them (a diff of settings, ``json.dumps``). No card
this project writes uses one (``dump_header`` never emits them), and the Hub's own card metadata
needs none. A header that breaks a bound is a ``CardFormatError`` naming the file and the bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from ..errors import OrandCarError
from ..families import DEFAULT_FAMILIES, DEFAULT_SEPARATOR, Families, Family

BUILD_KEY = "orandcar_build"
VERSIONS_KEY = "orandcar_versions"
YAML_WIDTH = 100
# A header of ours is about 5 kB, plus about 0.3 kB per published version; 1 MiB leaves room for
# thousands of versions and any hand edit, and bounds the time the (pure-Python) parser takes.
MAX_HEADER_CHARS = 1 << 20
# Nesting levels of a header: ours reach seven (dataset_info features of a list of structs).
MAX_YAML_DEPTH = 64


class CardFormatError(OrandCarError):
    """A card whose YAML header cannot be read."""


class YamlRefused(yaml.YAMLError):
    """YAML that breaks a bound of ``load_yaml`` (an alias, a repeated key, too deep, too long)."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases, keys given twice and nesting past
    ``MAX_YAML_DEPTH`` while it composes, before any value is built."""

    def __init__(self, stream, first_line: int = 1):
        super().__init__(stream)
        self._depth, self._line0 = 0, first_line - 1

    def _line(self, mark) -> int:
        return self._line0 + mark.line + 1

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlRefused(f"uses an alias (*{event.anchor}, line {self._line(event.start_mark)}); aliases are "
                              "refused, since a few of them can expand to billions of values")
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark
            raise YamlRefused(f"is nested deeper than {MAX_YAML_DEPTH} levels (line {self._line(mark)})")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = self.construct_object(key_node)
                if key in seen:
                    raise YamlRefused(f"gives the key {key!r} twice (line {self._line(key_node.start_mark)}); "
                                      "which value was meant cannot be known")
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, *, max_chars: int = MAX_HEADER_CHARS, first_line: int = 1):
    """``yaml.safe_load(text)`` within the bounds of the module docstring; ``YamlRefused`` (a
    ``yaml.YAMLError``) past one of them, ``yaml.YAMLError`` for text that is not YAML. Lines are
    counted from ``first_line`` (the line of the file ``text`` starts on)."""
    if len(text) > max_chars:
        raise YamlRefused(f"is {len(text):,} characters long, more than the {max_chars:,} read")
    loader = _BoundedLoader(text, first_line)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True


def dump_header(data: dict) -> str:
    """The card's YAML header text (without the ``---`` lines): one spelling for build and push.
    A value that appears twice is written out twice, never as an alias (which ``load_yaml`` refuses)."""
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True, width=YAML_WIDTH)


def split_card(text: str, *, source: str = "README.md") -> tuple[dict, str]:
    """(YAML header as a mapping, body after the closing ``---`` line) of a card's text."""
    if not text.startswith("---\n"):
        raise CardFormatError(f"{source}: no YAML header (a card starts with a '---' line)")
    end = text.find("\n---\n", 3)
    if end < 0:
        raise CardFormatError(f"{source}: the YAML header is not closed by a '---' line")
    try:
        header = load_yaml(text[4:end + 1], first_line=2) or {}
    except YamlRefused as exc:
        raise CardFormatError(f"{source}: the YAML header {exc}") from None
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


def recorded_families(folder) -> Families:
    """The family registry (``families.Families``) the build of dataset ``folder`` ran with, as
    its card records them (``header_families``); the code's own when there is no card or it
    records none. A card whose header cannot be read is a ``CardFormatError``: its families cannot
    be known."""
    readme = Path(folder) / "README.md"
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return DEFAULT_FAMILIES
    header, _ = split_card(text, source=str(readme))
    return header_families(header)


def header_families(header: Optional[dict]) -> Families:
    """The family registry a card header records (``orandcar_build.recipe.families``) laid over the
    code's (``DEFAULT_FAMILIES``), so ``validate`` and ``recheck`` know a family a recipe added and
    decide with the rule the recipe gave; the code's own when the header (or None) records none.
    An entry without a rule is skipped."""
    recipe = card_settings(header).get("recipe") if isinstance(header, dict) else None
    families = recipe.get("families") if isinstance(recipe, dict) else None
    if not isinstance(families, dict):
        return DEFAULT_FAMILIES
    out: dict[str, Family] = {}  # by name as text: a YAML key 1 and a key "1" name one family
    for name, settings in families.items():
        if not isinstance(settings, dict) or not isinstance(settings.get("rule"), str):
            continue
        code = DEFAULT_FAMILIES.get(str(name))
        out[str(name)] = Family(name=str(name), rule=settings["rule"], instruction=str(settings.get("instruction", "")),
                                separator=str(settings.get("separator", DEFAULT_SEPARATOR)),
                                description=code.description if code else str(settings.get("description", "")))
    return DEFAULT_FAMILIES.overlay(out.values())
