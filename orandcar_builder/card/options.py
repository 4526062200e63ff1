"""What a maintainer chooses for the card (``CardOptions``: names, license, tags, the access
form) and the card's YAML header, built from those options and the dataset's sizes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

from ..dataset.features import configs_block
from ..dataset.info import dataset_info
from ..dataset.cardfile import BUILD_KEY, dump_header
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
    def from_mapping(cls, data: dict, *, source: str = "card options") -> "CardOptions":
        """Options from a mapping (such as a YAML file); unknown keys are an error naming ``source``."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CardError(f"{source}: unknown card option(s) {', '.join(unknown)} "
                            f"(known: {', '.join(sorted(names))})")
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
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise CardError(f"{path}: cannot read card options ({exc})") from None
        if not isinstance(data, dict):
            raise CardError(f"{path}: card options must be a mapping of option names to values")
        return cls.from_mapping(data, source=str(path))


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


def header_text(sizes: dict[str, dict], options: CardOptions, report: dict) -> str:
    """The YAML header's text: ``card_header`` plus the build settings ``orandcar diff`` reads back."""
    header = card_header(sizes, options)
    header[BUILD_KEY] = build_settings(report)
    return dump_header(header)
