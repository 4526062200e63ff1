"""The dataset card as huggingface_hub and datasets read it, beside the project's own reading.

``cardfile.split_card`` reads the card's YAML header for every command here; the Hub, its dataset
viewer and ``load_dataset`` read it through huggingface_hub's ``DatasetCard`` (its own header
pattern and ``DatasetCardData``) and datasets' ``MetadataConfigs`` / ``DatasetInfosDict``. A card
whose header those read differently, or cannot read, loads differently from what ``validate``
checked, so each such difference is a problem line:

- huggingface_hub cannot parse the header, or its card data differ from the header read here
  (keys whose value is null are left out: ``CardData.to_dict`` drops them);
- datasets cannot read the ``configs`` or the ``dataset_info`` of that card data;
- on the Hub (``hub_validation_problems``, which needs the Hub): the Hub's own card check
  (``/api/validate-yaml``, what ``DatasetCard.validate`` calls) refuses the card.
"""

from __future__ import annotations

from typing import Any

from .layout import README

REPO_TYPE = "dataset"
SHOWN = 300  # characters of a library's message kept in a problem line


def _message(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def _without_nulls(header: dict) -> dict:
    return {key: value for key, value in header.items() if value is not None}


def _differing_keys(found: dict, header: dict) -> list[str]:
    return sorted(str(key) for key in set(found) | set(header) if found.get(key) != header.get(key))


def read_card(text: str) -> Any:
    """huggingface_hub's ``DatasetCard`` of ``text`` (raises what it raises)."""
    from huggingface_hub import DatasetCard

    return DatasetCard(text, ignore_metadata_errors=False)


def hub_card_problems(text: str, header: dict) -> list[str]:
    """Problems of the card ``text`` (whose header ``split_card`` read as ``header``) as
    huggingface_hub and datasets read it; empty when they read the same card."""
    try:
        card = read_card(text)
    except Exception as exc:  # the library raises ValueError and YAML errors alike
        return [f"{README}: huggingface_hub cannot read the card header ({_message(exc)})"]
    problems = []
    found = card.data.to_dict()
    if found != _without_nulls(header):
        keys = _differing_keys(found, _without_nulls(header))
        problems.append(f"{README}: huggingface_hub reads other card data than the YAML header "
                        f"(key(s) {', '.join(keys[:10])} differ)")
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs

    for name, read in (("configs", MetadataConfigs.from_dataset_card_data),
                       ("dataset_info", DatasetInfosDict.from_dataset_card_data)):
        try:
            read(card.data)
        except Exception as exc:
            problems.append(f"{README}: datasets cannot read the card's {name} ({type(exc).__name__}: {_message(exc)})")
    return problems


def hub_validation_problems(text: str) -> list[str]:
    """The Hub's own check of the card (``DatasetCard.validate``, a request to the Hub): one
    problem when it refuses the card. An endpoint without that check (HTTP 404: a mirror) asks
    nothing more; other failures to reach the Hub are raised, not reported."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        card = read_card(text)
    except Exception:
        return []  # reported by hub_card_problems
    try:
        card.validate(repo_type=REPO_TYPE)
    except ValueError as exc:
        return [f"{README}: the Hub refuses the card ({_message(exc)})"]
    except HfHubHTTPError as exc:
        if getattr(exc.response, "status_code", None) != 404:
            raise
    return []
