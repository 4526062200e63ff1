"""The openai_compat engine against a local server answering like vLLM's."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from orandcar_builder.engines import create_engine
from orandcar_builder.engines.base import EngineUnavailable
from orandcar_builder.engines.openai_compat import (
    EngineRequestError,
    OpenAICompatEngine,
    backoff_delay,
    image_mime,
    reply_from_response,
)
from orandcar_builder.images import ImageRef
from orandcar_builder.records import Request
from tests.fake_openai_server import FakeOpenAIServer, image_urls_of


def image_file(tmp_path, name: str, fmt: str) -> ImageRef:
    buf = io.BytesIO()
    Image.new("RGB", (12, 8), (200, 30, 30)).save(buf, format=fmt)
    path = tmp_path / name
    path.write_bytes(buf.getvalue())
    return ImageRef.from_file(path)


def req(item_id, question, image=None) -> Request:
    return Request(item_id=item_id, question=question, family="scene_text", image=image)


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def engine_for(server, **options) -> OpenAICompatEngine:
    options.setdefault("backoff_s", 0.0)
    return OpenAICompatEngine("fake-vlm", server.url, **options)


def test_answers_in_request_order_with_reasoning_split(server):
    questions = [f"question {i}" for i in range(12)]
    gens = engine_for(server, concurrency=4).generate([req(f"q{i}", q) for i, q in enumerate(questions)])
    assert [g.item_id for g in gens] == [f"q{i}" for i in range(12)]
    assert [g.final_answer for g in gens] == [f"answer to: {q}" for q in questions]
    assert [g.think for g in gens] == [f"thinking about: {q}" for q in questions]
    assert all(g.finish_reason == "stop" and g.model == "fake-vlm" for g in gens)
    assert gens[0].prompt_tokens == 12 and gens[0].completion_tokens is not None
    assert sorted(server.questions()) == sorted(questions)


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content", None])
def test_reasoning_from_either_field_or_inline_tags(field):
    with FakeOpenAIServer(reasoning_field=field) as server:
        gen, cut, empty = engine_for(server).generate(
            [req("a", "Q"), req("b", "Q [[length]]"), req("c", "Q [[empty]]")]
        )
    assert (gen.think, gen.final_answer) == ("thinking about: Q", "answer to: Q")
    assert (cut.think, cut.final_answer, cut.finish_reason) == ("thinking about: Q [[length]]", "", "length")
    assert (empty.final_answer, empty.finish_reason) == ("", "stop")


def test_exact_question_template_kwargs_and_sampling_are_sent(server):
    question = "  Read the word.\nReply with only the text shown, exactly as written.  \u00e9\u4e2d "
    engine_for(server, max_tokens=321, seed=7, chat_template_kwargs={"enable_thinking": False}).generate([req("a", question)])
    (body,) = server.received
    assert body["messages"] == [{"role": "user", "content": question}]  # text-only: no image part
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (body["temperature"], body["max_tokens"], body["seed"], body["model"]) == (0.0, 321, 7, "fake-vlm")


def test_thinking_is_enabled_by_default(server):
    engine_for(server).generate([req("a", "Q")])
    assert server.received[0]["chat_template_kwargs"] == {"enable_thinking": True}


@pytest.mark.parametrize("fmt, mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("GIF", "image/gif"), ("BMP", "image/bmp")])
def test_images_travel_as_data_urls_of_the_original_bytes(server, tmp_path, fmt, mime):
    image = image_file(tmp_path, f"img.{fmt.lower()}", fmt)
    engine_for(server).generate([req("a", "What is it?", image)])
    body = server.received[0]
    content = body["messages"][0]["content"]
    assert [part["type"] for part in content] == ["image_url", "text"]
    assert content[1]["text"] == "What is it?"
    (url,) = image_urls_of(body)
    prefix = f"data:{mime};base64,"
    assert url.startswith(prefix)
    assert base64.b64decode(url[len(prefix):]) == image.read()


def test_unknown_image_format_is_named(tmp_path):
    with pytest.raises(ValueError, match="odd.bin"):
        image_mime(b"not an image", "odd.bin")


def test_transient_errors_are_retried_then_succeed(server):
    server.fail_next("Q1", [429, 500, 503])
    server.fail_next("Q2", [0])  # connection dropped
    gens = engine_for(server).generate([req("a", "Q1"), req("b", "Q2"), req("c", "Q3")])
    assert [g.final_answer for g in gens] == ["answer to: Q1", "answer to: Q2", "answer to: Q3"]
    assert [s for q, s in server.statuses if q == "Q1"] == [429, 500, 503, 200]
    assert [s for q, s in server.statuses if q == "Q2"] == [0, 200]


def test_bad_request_is_not_retried_and_names_the_item(server):
    with pytest.raises(EngineRequestError) as info:
        engine_for(server).generate([req("ok", "fine"), req("long", "too long [[bad]]")])
    assert list(info.value.failures) == ["long"]
    assert "HTTP 400" in str(info.value) and "maximum context length" in str(info.value) and "not retried" in str(info.value)
    assert [s for q, s in server.statuses if "[[bad]]" in q] == [400]


def test_gives_up_after_the_retry_budget(server):
    server.fail_next("Q", [500] * 10)
    with pytest.raises(EngineRequestError, match="gave up after 3 attempts"):
        engine_for(server, max_retries=2).generate([req("a", "Q")])
    assert len(server.received) == 3


def test_unreachable_server_stops_before_any_request_naming_the_url():
    engine = OpenAICompatEngine("m", "http://127.0.0.1:9/v1", max_retries=1, backoff_s=0.0)
    with pytest.raises(EngineUnavailable, match="127.0.0.1:9"):
        engine.generate([req("a", "Q")])


def test_requests_are_spread_over_several_servers():
    with FakeOpenAIServer() as one, FakeOpenAIServer() as two:
        gens = OpenAICompatEngine("fake-vlm", [one.url, two.url]).generate([req(f"q{i}", f"Q{i}") for i in range(6)])
    assert [g.final_answer for g in gens] == [f"answer to: Q{i}" for i in range(6)]
    assert len(one.received) == 3 and len(two.received) == 3


def test_a_failing_server_is_skipped_on_retry(server):
    dead = "http://127.0.0.1:9/v1"
    gens = OpenAICompatEngine("fake-vlm", [dead, server.url], backoff_s=0.0).generate([req("a", "Q0"), req("b", "Q1")])
    assert [g.final_answer for g in gens] == ["answer to: Q0", "answer to: Q1"]


def test_concurrency_is_bounded():
    """At most `concurrency` requests are in flight at once (counted by the server)."""
    import threading
    import time

    with FakeOpenAIServer() as server:
        active, peak, lock = [0], [0], threading.Lock()
        original = server._answer

        def counting(body):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.05)  # hold the slot so overlaps happen
            with lock:
                active[0] -= 1
            return original(body)

        server._answer = counting
        engine_for(server, concurrency=3).generate([req(f"q{i}", f"Q{i}") for i in range(15)])
    assert 2 <= peak[0] <= 3  # requests do overlap, and never more than the bound


def test_fingerprint_ignores_where_the_model_is_served():
    a = OpenAICompatEngine("m", "http://127.0.0.1:1/v1", concurrency=2).fingerprint()
    b = OpenAICompatEngine("m", ["http://127.0.0.1:2/v1", "http://127.0.0.1:3/v1"], concurrency=64).fingerprint()
    c = OpenAICompatEngine("m", "http://127.0.0.1:1/v1", max_tokens=10).fingerprint()
    d = OpenAICompatEngine("m", "http://127.0.0.1:1/v1", chat_template_kwargs={"enable_thinking": False}).fingerprint()
    assert a == b and a != c and a != d and a["kind"] == "openai_compat"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"model": ""}, "model"),
        ({"model": "m", "base_urls": []}, "base URL"),
        ({"model": "m", "base_urls": "localhost:8000"}, "http://"),
        ({"model": "m", "concurrency": 0}, "concurrency"),
        ({"model": "m", "max_tokens": 0}, "max_tokens"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        create_engine("openai_compat", **options)


def test_response_without_choices_is_reported():
    with pytest.raises(ValueError, match="choices"):
        reply_from_response({"error": "x"})


def test_backoff_doubles_and_is_capped():
    assert [backoff_delay(i, 0.5, cap=3.0) for i in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_works_when_called_inside_a_running_event_loop(server):
    import asyncio

    async def inside():
        return engine_for(server).generate([req("a", "Q")])

    assert asyncio.run(inside())[0].final_answer == "answer to: Q"


def test_rendered_prompt_is_recorded_when_the_server_returns_it(server, tmp_path):
    image = image_file(tmp_path, "p.png", "PNG")
    (gen,) = engine_for(server).generate([req("a", "Read it.", image)])
    assert server.received[0]["return_prompt_text"] is True
    assert gen.prompt == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Read it.<|im_end|>\n<|im_start|>assistant\n<think>\n"


def test_prompt_recording_can_be_switched_off_for_other_servers(server):
    (gen,) = engine_for(server, record_prompt=False).generate([req("a", "Q")])
    assert "return_prompt_text" not in server.received[0] and gen.prompt is None


# --- streaming ----------------------------------------------------------------------------------


def test_stream_keeps_a_sliding_window_and_hands_back_each_answer_when_it_finishes(server):
    """One slow request does not hold the others: with a window of 3, the requests behind it go
    out as the fast ones finish, never more than 3 at once, and the slow one comes back last."""
    server.delay = lambda question: 0.6 if question == "slow" else 0.02
    pulled = []

    def requests():
        for i, question in enumerate(["slow"] + [f"Q{i}" for i in range(11)]):
            pulled.append(question)
            yield req(f"r{i}", question)

    completions = list(engine_for(server, concurrency=3).stream(requests()))
    assert [c.request.question for c in completions][-1] == "slow"
    assert sorted(c.request.item_id for c in completions) == sorted(f"r{i}" for i in range(12))
    assert all(c.ok and c.generation.final_answer == f"answer to: {c.request.question}" for c in completions)
    assert server.max_in_flight == 3


def test_stream_records_a_failed_request_and_goes_on(server):
    completions = list(engine_for(server).stream([req("a", "Q1"), req("bad", "x [[bad]]"), req("c", "Q3")]))
    by_id = {c.request.item_id: c for c in completions}
    assert by_id["a"].ok and by_id["c"].ok
    assert not by_id["bad"].ok and "HTTP 400" in by_id["bad"].error and by_id["bad"].generation is None


def test_stream_pulls_requests_only_as_the_window_frees(server):
    """The iterator is not drained up front: a consumer that stops early leaves the rest unread."""
    pulled = []

    def requests():
        for i in range(100):
            pulled.append(i)
            yield req(f"r{i}", f"Q{i}")

    stream = engine_for(server, concurrency=4).stream(requests())
    first = next(stream)
    stream.close()
    assert first.ok and len(pulled) <= 6


def test_a_model_the_server_does_not_serve_stops_before_any_request(server):
    with pytest.raises(EngineUnavailable, match="does not serve model 'other'"):
        OpenAICompatEngine("other", server.url).generate([req("a", "Q")])
    assert server.received == []


@pytest.mark.parametrize("value, expected", [
    ("3", 3.0), ("0.5", 0.5), ("-4", 0.0), ("inf", 60.0), ("1e12", 60.0), ("nan", None), ("soon", None),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date in the past: no wait
])
def test_retry_after_is_read_as_seconds_or_an_http_date_and_capped(value, expected):
    from orandcar_builder.engines.openai_compat import MAX_BACKOFF_S, _retry_after

    assert MAX_BACKOFF_S == 60.0
    assert _retry_after({"retry-after": value}) == expected
    assert _retry_after({}) is None


def test_retry_after_as_a_future_http_date():
    from datetime import datetime, timedelta, timezone
    from email.utils import format_datetime

    from orandcar_builder.engines.openai_compat import _retry_after

    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    assert 25 <= _retry_after({"retry-after": when}) <= 30


def test_the_servers_retry_after_wins_over_the_backoff(server):
    """The fake server answers 429 with ``Retry-After: 0``: with a 30 s backoff the retry still
    goes at once."""
    import time

    server.fail_next("Q", [429, 429])
    start = time.monotonic()
    (gen,) = engine_for(server, backoff_s=30.0).generate([req("a", "Q")])
    assert gen.final_answer == "answer to: Q" and time.monotonic() - start < 10
    assert [s for q, s in server.statuses if q == "Q"] == [429, 429, 200]
