"""Engines: turn requests into generations. An engine never decides; rules and the judge do."""

from __future__ import annotations

from typing import Any

from ..errors import OrandCarError
from ..redact import scrub, secret_values
from ..registry import Registry, missing_attributes
from .base import Engine, EngineUnavailable, secret_options


def _engine_contract(name: str, cls: Any) -> list[str]:
    """An engine is a class with the Engine protocol's attributes (``engines.base.Engine``)."""
    if not isinstance(cls, type):
        return [f"is {type(cls).__name__}, not an engine class"]
    return missing_attributes(cls, ("kind", "can_judge", "fingerprint", "generate"),
                              callables=("fingerprint", "generate"))


# name -> "module:class"; imported lazily so heavy optional dependencies load only when used.
ENGINES = Registry("engine", {
    "rapidocr": "orandcar_builder.engines.rapidocr:RapidOCREngine",
    "replay": "orandcar_builder.engines.replay:ReplayEngine",
    "openai_compat": "orandcar_builder.engines.openai_compat:OpenAICompatEngine",
    "vllm": "orandcar_builder.engines.vllm:VLLMEngine",
}, check=_engine_contract)


# The package extra (pyproject.toml) each engine needs beyond the package's own dependencies.
ENGINE_EXTRAS: dict[str, str] = {"rapidocr": "ocr", "vllm": "vllm"}


class EngineSettingError(OrandCarError, ValueError):
    """An unknown or out-of-range engine setting; the message names the engine."""


def engine_class(name: str) -> Any:
    """The factory (an Engine class) registered as ``name``; its module is imported now, which
    does not import the engine's optional dependencies (they load when an engine is made)."""
    return ENGINES.load(name)


def judge_engine_names() -> list[str]:
    """The engines that can run the text-only judge pass (``can_judge``), in registry order."""
    return [name for name in ENGINES if getattr(engine_class(name), "can_judge", False)]


def secret_options_of(name: object) -> tuple[str, ...]:
    """The options engine ``name`` declares secret (``SECRET_OPTIONS``); none for a name that is
    not an engine (``none``, ``same``, or not a string)."""
    return secret_options(engine_class(name)) if name in ENGINES else ()


def create_engine(name: str, **options: Any) -> Engine:
    cls = engine_class(name)
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:  # an unknown or out-of-range setting (its value may be a secret)
        hidden = secret_values(options, secret_options(cls))
        raise EngineSettingError(f"engine {name!r}: bad setting ({scrub(str(exc), hidden)})") from None


__all__ = ["Engine", "EngineSettingError", "EngineUnavailable", "ENGINE_EXTRAS", "ENGINES", "create_engine",
           "engine_class", "judge_engine_names", "secret_options_of"]
