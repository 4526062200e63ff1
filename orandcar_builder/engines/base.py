"""The Engine protocol every engine implements, and helpers they share.

Streaming is the main shape: ``stream(requests)`` takes requests from an iterator and yields a
``Completion`` for each as soon as it finishes (a generation, or the reason it failed), holding
at most a window of requests in flight; completion order is not request order. ``generate(batch)``
is the list form for callers that want one (the judge): one generation per request in the order
asked, or an error naming the failed requests.

An engine that has no ``stream`` of its own (a plain ``generate`` engine, such as a test double)
is streamed by ``stream_of``, which asks it in small batches and retries a failed batch one
request at a time so that one bad request fails only itself.

An engine says two things about itself, so that nothing else reads its fingerprint's layout:
``generation_settings()``, its model, revision, temperature, max tokens and reasoning as one
``GenerationSettings`` (what the report's ``generation`` and the card show), and
``SECRET_OPTIONS``, the names of its options that hold secrets (hidden first by name from the
fingerprint, the recipe that ran, the card, the manifest and the report; ``redact.py``'s
heuristics by name and shape are the second net).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Protocol, Sequence, Union, runtime_checkable

from ..errors import OrandCarError
from ..interrupts import raise_if_interrupted
from ..records import Generation, Request
from ..redact import redact
from ..vocab import GENERATION_BATCH


class EngineUnavailable(OrandCarError):
    """The engine cannot start (missing optional dependency, unreachable server, ...)."""


class EngineContractError(OrandCarError):
    """An engine answered with the wrong number of generations or out of order."""


class EngineRequestError(OrandCarError):
    """Requests an engine could not answer; ``failures`` maps item id -> reason."""

    def __init__(self, failures: dict[str, str]):
        self.failures = dict(failures)
        lines = [f"{item_id}: {reason}" for item_id, reason in self.failures.items()]
        super().__init__(f"{len(lines)} request(s) failed:\n  " + "\n  ".join(lines[:20])
                         + (f"\n  ... and {len(lines) - 20} more" if len(lines) > 20 else ""))


@dataclass(frozen=True)
class Completion:
    """One finished request: its ``generation``, or ``error`` (why it failed) and no generation.
    ``request`` is the very object the engine was given, so a caller can find its own records."""

    request: Request
    generation: Optional[Generation] = None
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.generation is not None


# Errors that say the engine itself cannot run: they stop a stream instead of failing one request.
FATAL_ERRORS: tuple[type[BaseException], ...] = (EngineUnavailable, EngineContractError)


# ``GenerationSettings.reasoning`` of an engine that cannot reason (OCR): "not applicable".
NO_REASONING = "n/a"
Reasoning = Union[bool, str, None]


@dataclass(frozen=True)
class GenerationSettings:
    """How an engine generates, as the engine itself says: report.json's ``generation`` and the
    card's table of how the answers were produced. A field the engine cannot know is None (a
    replay file's model: the build then names the models its generations carry). ``reasoning``:
    True (the model thinks before answering), False (told not to), ``NO_REASONING`` (the engine
    cannot reason), None (not known, e.g. left to the model's chat template)."""

    engine: str
    model: Optional[str] = None
    revision: Optional[str] = None
    temperature: Optional[float] = None
    max_tokens: Optional[int] = None
    reasoning: Reasoning = None

    def to_json(self) -> dict:
        """The report's ``generation`` object (these keys, in this order)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "GenerationSettings":
        """Read back from a report, defensively: a field missing or of the wrong type is None
        (not recorded); several models or revisions (a list: the build saw more than one) read
        as one comma-separated name."""
        data = data if isinstance(data, dict) else {}

        def name(key: str) -> Optional[str]:
            value = data.get(key)
            if isinstance(value, (list, tuple)):
                value = ", ".join(map(str, value)) or None
            return None if value is None or isinstance(value, (dict, bool)) else str(value)

        def number(key: str) -> Optional[float]:
            value = data.get(key)
            return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        reasoning = data.get("reasoning")
        return cls(engine=name("engine") or "", model=name("model"), revision=name("revision"),
                   temperature=number("temperature"), max_tokens=number("max_tokens"),
                   reasoning=reasoning if isinstance(reasoning, (bool, str)) else None)


@runtime_checkable
class Engine(Protocol):
    kind: str  # "rapidocr", "vllm", ...
    can_judge: bool  # whether it can run the text-only judge pass
    # The names of the options that hold secrets (keys, tokens, signatures): never in the
    # fingerprint, and hidden (``redact.SET``) wherever the build records its options.
    SECRET_OPTIONS: tuple[str, ...]

    def fingerprint(self) -> dict:
        """Everything that shapes its output: model id and revision, sampling and template
        settings, in a layout of the engine's own. JSON-serialisable; part of the generation
        cache key and of the manifest, read through ``public_fingerprint``; nothing outside the
        engine reads its keys. Secret options are left out of it."""

    def generation_settings(self) -> GenerationSettings:
        """Its model, revision, temperature, max tokens and reasoning (``GenerationSettings``)."""

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        """One generation per request, in the order of ``requests``."""


def secret_options(engine: Any) -> tuple[str, ...]:
    """The option names an engine (an instance or its class) declares secret; one name given as
    a plain string (``SECRET_OPTIONS = "api_key"``) is that name, not its letters."""
    declared = getattr(engine, "SECRET_OPTIONS", ()) or ()
    return (declared,) if isinstance(declared, str) else tuple(declared)


def settings_of(engine: Any) -> GenerationSettings:
    """``engine.generation_settings()``; an engine without one (a test double) says nothing but
    its kind. EngineContractError when it answers anything but a ``GenerationSettings``."""
    says = getattr(engine, "generation_settings", None)
    if says is None:
        return GenerationSettings(engine=engine.kind)
    settings = says()
    if not isinstance(settings, GenerationSettings):
        raise EngineContractError(f"engine {engine.kind!r}: generation_settings() returned "
                                  f"{type(settings).__name__}, not GenerationSettings")
    return settings


def public_fingerprint(engine: Engine) -> dict:
    """``engine.fingerprint()`` with every secret in it hidden (``redact.redact``): what the cache
    keys, the manifest, the report and the card hold. A key or password changed between two runs
    therefore changes no cache key."""
    return redact(engine.fingerprint(), secret_options(engine))


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def stream_of(engine: Engine, requests: Iterable[Request], *, batch_size: int = GENERATION_BATCH) -> Iterator[Completion]:
    """``engine.stream(requests)`` where the engine has one, else its ``generate`` asked in batches
    of ``batch_size`` (pulled from ``requests`` only as they are sent). A batch that raises is
    asked again one request at a time; a request that still raises is a failed Completion.
    ``FATAL_ERRORS`` are raised, never turned into failures."""
    stream = getattr(engine, "stream", None)
    if stream is not None:
        yield from stream(requests)
        return
    yield from stream_batches(engine.generate, requests, batch_size=batch_size, kind=engine.kind)


def stream_batches(generate, requests: Iterable[Request], *, batch_size: int, kind: str) -> Iterator[Completion]:
    """The batch form behind ``stream_of``, for synchronous engines: ``generate(batch)`` per batch."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    iterator = iter(requests)
    while True:
        batch: list[Request] = []
        for request in iterator:
            batch.append(request)
            if len(batch) >= batch_size:
                break
        if not batch:
            return
        try:
            yield from _checked(generate, batch, kind)
            continue
        except FATAL_ERRORS:
            raise
        except Exception as exc:
            raise_if_interrupted(exc)
            if len(batch) == 1:
                yield Completion(batch[0], error=error_text(exc))
                continue
        for request in batch:  # one bad request must not fail the others
            try:
                yield from _checked(generate, [request], kind)
            except FATAL_ERRORS:
                raise
            except Exception as exc:
                raise_if_interrupted(exc)
                yield Completion(request, error=error_text(exc))


def _checked(generate, batch: list[Request], kind: str) -> list[Completion]:
    out = list(generate(batch))
    if len(out) != len(batch):
        raise EngineContractError(f"engine {kind!r} returned {len(out)} generations for {len(batch)} requests")
    for request, generation in zip(batch, out):
        if generation.item_id != request.item_id:
            raise EngineContractError(f"engine {kind!r} answered {generation.item_id!r} where "
                                      f"{request.item_id!r} was asked: order not kept")
    return [Completion(request, generation) for request, generation in zip(batch, out)]


def generate_from_stream(stream, requests: Sequence[Request]) -> list[Generation]:
    """``generate(batch)`` on top of a ``stream``: the generations in the order of ``requests``, or
    EngineRequestError naming every request that failed (after all have finished)."""
    requests = list(requests)
    if not requests:
        return []
    positions: dict[int, list[int]] = {}
    for i, request in enumerate(requests):
        positions.setdefault(id(request), []).append(i)
    generations: list[Optional[Generation]] = [None] * len(requests)
    failures: dict[str, str] = {}
    seen = 0
    for completion in stream(requests):
        waiting = positions.get(id(completion.request))
        if not waiting:
            raise EngineContractError(f"a stream answered {completion.request.item_id!r}, which was not asked")
        position = waiting.pop(0)
        seen += 1
        if completion.generation is None:
            failures[completion.request.item_id] = completion.error or "failed"
        else:
            generations[position] = completion.generation
    if seen != len(requests):
        raise EngineContractError(f"a stream answered {seen} of {len(requests)} requests")
    if failures:
        raise EngineRequestError(failures)
    return generations  # type: ignore[return-value]
