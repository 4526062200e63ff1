"""What a maintainer chooses for the card (``CardOptions``: names, license, tags, the access
form) and the card's YAML header, built from those options and the dataset's sizes.

Card options come from a recipe's ``[dataset]`` section or from a YAML file (``orandcar card
--options``); both are checked as strictly, by the same JSON Schema (``OPTIONS_SCHEMA``: the
recipe's ``dataset`` schema without ``repo``): a wrong type, an empty name or an unknown key is an
error naming the file, the key and its line, all problems at once. The YAML file is read like a
card header (``cardfile.load_yaml``): a key given twice or an alias is refused. ``null`` is
allowed for the options that may be absent (``NULLABLE``: an empty list, or no value).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

from ..dataset.cardfile import BUILD_KEY, YamlRefused, dump_header, load_yaml
from ..dataset.features import configs_block
from ..dataset.info import dataset_info
from ..figures import BuildFigures
from ..recipe import RECIPE_SCHEMA
from ..release import build_settings
from .errors import CardError

DEFAULT_REPO_ID = "ORG/OrandCar"

DEFAULT_GATED_PROMPT = (
    "OrandCar pairs benchmark images and reference answers with text written by a vision-language "
    "model. The images and references keep the licenses of the datasets they come from (each row "
    "names its sources in clean_meta.sources). By requesting access you agree to respect those "
    "licenses, to use the data for research and model development, and not to present the model's "
    "answers as human annotations."
)
DEFAULT_GATED_FIELDS = (
    ("Name", "text"),
    ("Affiliation", "text"),
    ("Country", "country"),
    ("I agree to respect the licenses of the source datasets and the terms above", "checkbox"),
)


_DATASET_SCHEMA = RECIPE_SCHEMA["properties"]["dataset"]
OPTIONS_SCHEMA: dict = {
    "$schema": RECIPE_SCHEMA["$schema"],
    "title": "OrandCar card options",
    "type": "object",
    "properties": {k: v for k, v in _DATASET_SCHEMA["properties"].items() if k != "repo"},
    "additionalProperties": False,
}
# Options whose null means "none": a list left empty, an optional text left out of the header.
NULLABLE = ("license_name", "license_link", "language", "task_categories", "tags", "gated_heading", "gated_fields")
_TYPE_WORDS = {"string": "a string", "array": "a list", "object": "a mapping", "boolean": "true or false",
               "integer": "an integer", "number": "a number", "null": "null"}
_VALUE_WORDS = {str: "a string", bool: "true or false", int: "an integer", float: "a number", list: "a list",
                dict: "a mapping", type(None): "null"}
_TOP_KEY = re.compile(r"""^(?:"([^"]*)"|'([^']*)'|([^\s#'"\-?:][^:#]*?))\s*:(?:\s|$)""")


def top_key_lines(text: str) -> dict[str, int]:
    """The 1-based line of each top-level key of a YAML mapping written in block style."""
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _TOP_KEY.match(line)
        if match:
            lines.setdefault(next(g for g in match.groups() if g is not None), number)
    return lines


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def option_problems(data: dict, lines: Optional[dict[str, int]] = None) -> list[str]:
    """Every problem of the card options ``data`` against ``OPTIONS_SCHEMA``, one line each,
    starting with the key's line where ``lines`` knows it, in line order."""
    from jsonschema import Draft202012Validator

    def at(key: Any) -> str:
        line = (lines or {}).get(key) if isinstance(key, str) else None
        return f"line {line}: " if line else ""

    known = list(OPTIONS_SCHEMA["properties"])
    checked = {k: v for k, v in data.items() if not (v is None and k in NULLABLE)}
    problems: list[tuple[int, str]] = []
    for error in Draft202012Validator(OPTIONS_SCHEMA).iter_errors(checked):
        path = list(error.absolute_path)
        key = path[0] if path else None
        if error.validator == "additionalProperties" and not path:
            for name in error.instance:
                if name not in known:
                    close = difflib.get_close_matches(str(name), known, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    problems.append((str(name), f"{at(name)}unknown card option {name!r}{hint} "
                                                f"(known: {', '.join(known)})"))
            continue
        name = ".".join(str(p) for p in path)
        if error.validator == "type":
            wanted = error.validator_value
            wanted = " or ".join(_TYPE_WORDS.get(w, w) for w in (wanted if isinstance(wanted, list) else [wanted]))
            got = _VALUE_WORDS.get(type(error.instance), type(error.instance).__name__)
            problems.append((key, f"{at(key)}{name} must be {wanted}, not {got} ({_shown(error.instance)})"))
        elif error.validator == "minLength":
            problems.append((key, f"{at(key)}{name} must not be empty"))
        elif path[:1] == ["gated_fields"]:
            problems.append((key, f"{at(key)}{name} must be one of text, checkbox, date_picker, country, or "
                                  f"{{type: select, options: [...]}}, not {_shown(error.instance)}"))
        else:
            problems.append((key, f"{at(key)}{name}: {error.message}"))
    order = lambda p: (lines or {}).get(p[0], 10**9) if isinstance(p[0], str) else 10**9  # noqa: E731
    return [message for _, message in sorted(problems, key=order)]


@dataclass(frozen=True)
class CardOptions:
    """What a maintainer chooses rather than measures: names, license, tags and the access form.

    ``gated_fields`` is a sequence of (label, type) pairs; a type is ``text``, ``checkbox``,
    ``date_picker``, ``country`` or a mapping ``{"type": "select", "options": [...]}``. With
    ``gated=False`` the access-form keys are left out of the header.
    """

    pretty_name: str = "OrandCar"
    license: str = "other"
    license_name: Optional[str] = "orandcar-source-licenses"
    license_link: Optional[str] = None
    language: tuple[str, ...] = ("en",)
    task_categories: tuple[str, ...] = ("visual-question-answering", "image-text-to-text")
    tags: tuple[str, ...] = ("rejection-sampling", "vision-language", "reasoning", "synthetic")
    gated: bool = True
    gated_heading: Optional[str] = None
    gated_prompt: str = DEFAULT_GATED_PROMPT
    gated_fields: tuple[tuple[str, Any], ...] = DEFAULT_GATED_FIELDS
    gated_button: str = "Agree and request access"

    @classmethod
    def from_mapping(cls, data: dict, *, source: str = "card options",
                     lines: Optional[dict[str, int]] = None) -> "CardOptions":
        """Options from a mapping (such as a YAML file), checked by ``option_problems``; a problem
        is a ``CardError`` naming ``source`` (and the line, from ``lines``) that lists them all."""
        problems = option_problems(data, lines)
        if problems:
            raise CardError(f"{source}: {len(problems)} problem(s) in the card options: {'; '.join(problems)}")
        values = dict(data)
        for key in ("language", "task_categories", "tags"):
            if key in values:
                values[key] = tuple(values[key] or ())
        if "gated_fields" in values:
            fields_ = values["gated_fields"] or {}
            pairs = fields_.items() if isinstance(fields_, dict) else fields_
            values["gated_fields"] = tuple((str(label), kind) for label, kind in pairs)
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: Path) -> "CardOptions":
        try:
            text = Path(path).read_text(encoding="utf-8")
            data = load_yaml(text)
        except YamlRefused as exc:
            raise CardError(f"{path}: the card options {exc}") from None
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise CardError(f"{path}: cannot read card options ({exc})") from None
        data = {} if data is None else data
        if not isinstance(data, dict):
            raise CardError(f"{path}: card options must be a mapping of option names to values")
        return cls.from_mapping(data, source=str(path), lines=top_key_lines(text))


def size_category(n: int) -> str:
    """The Hub's ``size_categories`` bucket for ``n`` examples."""
    if n < 1000:
        return "n<1K"
    bounds = [(10**4, "1K<n<10K"), (10**5, "10K<n<100K"), (10**6, "100K<n<1M"), (10**7, "1M<n<10M"),
              (10**8, "10M<n<100M"), (10**9, "100M<n<1B"), (10**10, "1B<n<10B")]
    return next((label for bound, label in bounds if n < bound), "n>1T")


def card_header(sizes: dict[str, dict], options: CardOptions) -> dict:
    header: dict[str, Any] = {"pretty_name": options.pretty_name, "license": options.license}
    if options.license_name:
        header["license_name"] = options.license_name
    if options.license_link:
        header["license_link"] = options.license_link
    header["language"] = list(options.language)
    header["task_categories"] = list(options.task_categories)
    header["tags"] = list(options.tags)
    header["size_categories"] = [size_category(sum(s["rows"] for s in sizes.values()))]
    if options.gated:
        if options.gated_heading:
            header["extra_gated_heading"] = options.gated_heading
        header["extra_gated_prompt"] = options.gated_prompt
        header["extra_gated_fields"] = {label: kind for label, kind in options.gated_fields}
        header["extra_gated_button_content"] = options.gated_button
    header["configs"] = configs_block()
    header["dataset_info"] = dataset_info(sizes)
    return header


def header_text(sizes: dict[str, dict], options: CardOptions, figures: BuildFigures) -> str:
    """The YAML header's text: ``card_header`` plus the build settings ``orandcar diff`` reads back."""
    header = card_header(sizes, options)
    header[BUILD_KEY] = build_settings(figures)
    return dump_header(header)
