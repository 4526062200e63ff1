"""What every engine promises, checked on each: one generation per request in the order asked,
the exact question captured, errors surfaced with the item named, output the cache can keep.

An engine joins by one line in HARNESSES: a factory ``(tmp_path, requests, stack) -> Harness``
(or, when it cannot run here, a line in CHECKED_ELSEWHERE saying where it is checked).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, replace
from typing import Callable, Optional

import pytest
from PIL import Image, ImageDraw

from orandcar_builder.cache import GenerationCache
from orandcar_builder.engines import ENGINES, Engine, create_engine
from orandcar_builder.engines.base import GenerationSettings
from orandcar_builder.engines.replay import export_generations
from orandcar_builder.executors.generation import generate_through_cache
from orandcar_builder.images import ImageRef
from orandcar_builder.records import Generation, Request
from tests.fake_openai_server import FakeOpenAIServer

# Questions chosen to break anything that trims, re-encodes or normalises text.
QUESTIONS = [
    "What is written in the image?\nReply with only the text shown in the image, exactly as written, and nothing else.",
    "  leading and trailing spaces  ",
    "Ünïcödé — 中文 — emoji \U0001f600?",
    "tabs\tand\r\nwindows newlines\n\n",
]
WORDS = ["STOP", "CAFE", "OPEN", "EXIT"]


@dataclass
class Harness:
    engine: Engine
    # The question texts the backend received; None where the backend receives no text (OCR).
    seen_questions: Optional[Callable[[], set[str]]]
    # A request this engine must refuse with an error naming it.
    failing: Callable[[Request], Request]


def word_image(path, word: str) -> ImageRef:
    img = Image.new("RGB", (120, 40), "white")
    ImageDraw.Draw(img).text((10, 12), word, fill="black")
    img.save(path)
    return ImageRef.from_file(path)


def contract_requests(tmp_path) -> list[Request]:
    """Image requests with awkward questions, plus one text-only (judge-style) request."""
    requests = [
        Request(f"item-{i}", q, "scene_text", word_image(tmp_path / f"w{i}.png", WORDS[i]))
        for i, q in enumerate(QUESTIONS)
    ]
    return requests + [Request("judge-0", "Is 'STOP' the same answer as 'stop'? Reply CORRECT or WRONG.", "scene_text")]


def changed_image(request: Request) -> Request:
    """The same request whose image file no longer matches its recorded sha256."""
    return replace(request, item_id="changed-image", image=ImageRef(request.image.path, "0" * 64))


def replay_harness(tmp_path, requests, stack) -> Harness:
    path = tmp_path / "recorded.jsonl"
    recorded = [Generation(r.item_id, f"<think>t {i}</think>answer {i}", f"t {i}", f"answer {i}", "stop", "m") for i, r in enumerate(requests)]
    export_generations(recorded, path, requests=requests)
    return Harness(
        engine=create_engine("replay", replay=str(path)),
        seen_questions=None,
        failing=lambda r: replace(r, item_id="never-recorded"),
    )


def openai_compat_harness(tmp_path, requests, stack) -> Harness:
    server = stack.enter_context(FakeOpenAIServer())
    engine = create_engine("openai_compat", model="fake-vlm", base_urls=server.url, backoff_s=0.0)

    return Harness(engine=engine, seen_questions=lambda: set(server.questions()), failing=lambda r: replace(r, item_id="too-long", question=r.question + " [[bad]]"))


def registry_harness(name: str, **options) -> Callable:
    """A harness for an engine whose backend sees no question text; it must refuse a changed image."""

    def make(tmp_path, requests, stack) -> Harness:
        return Harness(engine=create_engine(name, **options), seen_questions=None, failing=changed_image)

    return make


HARNESSES = [
    pytest.param(replay_harness, id="replay"),
    pytest.param(openai_compat_harness, id="openai_compat"),
    pytest.param(registry_harness("rapidocr", threads=1), id="rapidocr"),
]
# Registered engines the contract cannot run here, and where they are checked instead.
CHECKED_ELSEWHERE = {
    "vllm": "needs vllm and a GPU: tests/vllm/ (make test-vllm) runs it for real; "
            "tests/test_engine_vllm.py checks its settings and fingerprint without vllm",
}


def test_every_registered_engine_has_a_harness_or_says_where_it_is_checked():
    ids = {param.id for param in HARNESSES}
    assert not ids & set(CHECKED_ELSEWHERE)
    assert ids | set(CHECKED_ELSEWHERE) == set(ENGINES)


@pytest.fixture(params=HARNESSES)
def setup(request, tmp_path):
    requests = contract_requests(tmp_path)
    with contextlib.ExitStack() as stack:
        yield request.param(tmp_path, requests, stack), requests


def image_requests(requests):
    return [r for r in requests if r.image is not None]


def test_one_generation_per_request_in_the_order_asked(setup):
    harness, requests = setup
    asked = image_requests(requests)
    forward = harness.engine.generate(asked)
    backward = harness.engine.generate(list(reversed(asked)))
    assert [g.item_id for g in forward] == [r.item_id for r in asked]
    assert [g.item_id for g in backward] == [r.item_id for r in reversed(asked)]
    assert list(reversed(backward)) == forward  # each answer follows its request, not its position
    assert all(isinstance(g, Generation) and g.finish_reason in ("stop", "length") for g in forward)


def test_the_exact_question_is_what_the_backend_receives(setup, request):
    harness, requests = setup
    asked = image_requests(requests)
    if harness.seen_questions is None and request.node.callspec.id == "rapidocr":
        pytest.skip("rapidocr's backend is an OCR model: it receives the image and no question text")
    gens = harness.engine.generate(asked)
    if harness.seen_questions is not None:
        seen = harness.seen_questions()
        for r in asked:
            assert r.question in seen, f"{r.item_id}: question altered on the way ({sorted(seen)})"
    else:  # replay: the recording is bound to the exact question; one changed by a byte is refused
        with pytest.raises(Exception, match=asked[0].item_id):
            harness.engine.generate([replace(asked[0], question=asked[0].question + " ")])
    for r, g in zip(asked, gens):
        if g.prompt is not None:  # where the engine records the rendered input, the question is in it verbatim
            assert r.question in g.prompt


def test_text_only_requests_are_answered_or_declared_unsupported(setup):
    harness, requests = setup
    (judge,) = [r for r in requests if r.image is None]
    (gen,) = harness.engine.generate([judge])
    assert gen.item_id == judge.item_id
    if harness.engine.can_judge:
        assert gen.unsupported is None
    else:
        assert gen.unsupported


def test_errors_are_surfaced_naming_the_request(setup):
    harness, requests = setup
    bad = harness.failing(requests[0])
    with pytest.raises(Exception) as info:
        harness.engine.generate([requests[1], bad])
    message = str(info.value)
    assert bad.item_id in message or (bad.image is not None and bad.image.path in message), message


def test_empty_batch_gives_nothing(setup):
    harness, _ = setup
    assert harness.engine.generate([]) == []


def test_fingerprint_is_stable_json(setup):
    harness, _ = setup
    fp = harness.engine.fingerprint()
    assert fp["kind"] == harness.engine.kind
    assert json.loads(json.dumps(fp, sort_keys=True)) == harness.engine.fingerprint()


def test_says_its_generation_settings_and_secret_options(setup):
    """What the report and the card show comes from the engine's own word, never its fingerprint."""
    harness, _ = setup
    settings = harness.engine.generation_settings()
    assert isinstance(settings, GenerationSettings) and settings.engine == harness.engine.kind
    assert GenerationSettings.from_json(json.loads(json.dumps(settings.to_json()))) == settings
    declared = type(harness.engine).SECRET_OPTIONS
    assert isinstance(declared, tuple) and all(isinstance(name, str) and name for name in declared)


def test_output_is_cached_and_not_asked_again(setup, tmp_path):
    harness, requests = setup
    asked = []

    class Counting:
        kind, can_judge = harness.engine.kind, harness.engine.can_judge
        fingerprint = staticmethod(harness.engine.fingerprint)

        def generate(self, batch):
            asked.extend(r.item_id for r in batch)
            return harness.engine.generate(batch)

    with GenerationCache(tmp_path / "c.sqlite") as cache:
        first = generate_through_cache(Counting(), image_requests(requests), cache, batch_size=2)
        second = generate_through_cache(Counting(), image_requests(requests), cache, batch_size=2)
    assert first == second
    assert sorted(asked) == sorted(r.item_id for r in image_requests(requests))


def test_stream_answers_each_request_once_and_fails_only_the_bad_one(setup):
    from orandcar_builder.engines.base import stream_of

    harness, requests = setup
    asked = image_requests(requests)
    bad = harness.failing(requests[0])
    completions = list(stream_of(harness.engine, iter([asked[1], bad, asked[2]])))
    assert sorted(c.request.item_id for c in completions) == sorted([asked[1].item_id, bad.item_id, asked[2].item_id])
    by_id = {c.request.item_id: c for c in completions}
    assert not by_id[bad.item_id].ok and by_id[bad.item_id].error
    assert by_id[asked[1].item_id].generation == harness.engine.generate([asked[1]])[0]
    assert by_id[asked[2].item_id].ok
