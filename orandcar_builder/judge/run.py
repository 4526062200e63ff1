"""Running the judge: the requests for a list of items, their generations (made by the caller's
``generate``, normally the build's cached generate; this package never imports an engine) and
the verdicts read back in order."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence

from ..errors import OrandCarError
from ..records import Decision, Generation, Request
from .prompt import JudgeItemLike, as_judge_item, candidate_answer, judge_request
from .verdict import JudgeVerdict, verdict_from_generation

# ``generate(engine, requests)``: one generation per request, in order. The engine is any object
# with ``kind``, ``can_judge`` and ``generate(requests)`` (engines.base.Engine).
GenerateFn = Callable[[Any, Sequence[Request]], Sequence[Generation]]


def needs_judge(generation: Generation, decision: Decision) -> bool:
    """Whether an answer goes to the judge: the rule rejected it, the engine could answer the
    request at all, and there is a non-empty final answer to grade."""
    return not decision.passed and generation.unsupported is None and bool(candidate_answer(generation))


def _engine_generate(engine: Any, requests: Sequence[Request]) -> Sequence[Generation]:
    return engine.generate(requests)


def judge(
    engine: Any, items: Iterable[JudgeItemLike], generate: Optional[GenerateFn] = None
) -> list[JudgeVerdict]:
    """One verdict per item, in order. ``generate(engine, requests)`` runs the requests (default:
    ``engine.generate``; the build passes its cached generate). Raises OrandCarError when the
    engine cannot judge or returns generations that do not match the requests."""
    judged = [as_judge_item(item) for item in items]
    if not judged:
        return []
    if not getattr(engine, "can_judge", False):
        raise OrandCarError(
            f"engine {getattr(engine, 'kind', engine)!r} cannot run the text-only judge: judge with an "
            "engine that can (`orandcar calibrate --help` lists them)"
        )
    requests = [judge_request(item) for item in judged]
    generations = list((generate or _engine_generate)(engine, requests))
    if len(generations) != len(requests):
        raise OrandCarError(
            f"judge engine {engine.kind!r} returned {len(generations)} replies for "
            f"{len(requests)} requests"
        )
    for request, generation in zip(requests, generations):
        if generation.item_id != request.item_id:
            raise OrandCarError(
                f"judge engine {engine.kind!r} answered {generation.item_id!r} where "
                f"{request.item_id!r} was asked: replies must come in request order"
            )
    return [verdict_from_generation(g) for g in generations]
