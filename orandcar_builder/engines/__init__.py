"""Engines: turn requests into generations. An engine never decides; rules and the judge do."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import OrandCarError, UnknownNameError
from .base import Engine, EngineUnavailable

# name -> "module:factory"; imported lazily so heavy optional dependencies load only when used.
ENGINES: dict[str, str] = {
    "rapidocr": "orandcar_builder.engines.rapidocr:RapidOCREngine",
    "replay": "orandcar_builder.engines.replay:ReplayEngine",
    "openai_compat": "orandcar_builder.engines.openai_compat:OpenAICompatEngine",
    "vllm": "orandcar_builder.engines.vllm:VLLMEngine",
}


def create_engine(name: str, **options: Any) -> Engine:
    if name not in ENGINES:
        raise UnknownNameError("engine", name, ENGINES)
    module_name, factory = ENGINES[name].split(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, factory)(**options)
    except (TypeError, ValueError) as exc:  # an unknown or out-of-range setting
        raise OrandCarError(f"engine {name!r}: bad setting ({exc})") from None


__all__ = ["Engine", "EngineUnavailable", "ENGINES", "create_engine"]
