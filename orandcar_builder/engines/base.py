"""The Engine protocol every engine implements, and helpers they share."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from ..errors import OrandCarError
from ..records import Generation, Request


class EngineUnavailable(OrandCarError):
    """The engine cannot start (missing optional dependency, unreachable server, ...)."""


@runtime_checkable
class Engine(Protocol):
    kind: str  # "rapidocr", "vllm", ...
    can_judge: bool  # whether it can run the text-only judge pass

    def fingerprint(self) -> dict:
        """Everything that shapes its output: model id and revision, sampling and template
        settings. JSON-serialisable; part of the generation cache key and of the manifest."""

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        """One generation per request, in the order of ``requests``."""
