"""The vllm and openai_compat engines against real vLLM (CPU build), with a tiny Qwen2-VL.

Run by ``make test-vllm`` (tests/vllm/run.sh); skipped where vllm is not importable. The model's
weights are random but its readout is scripted (see tiny_qwen2vl.py): it writes
``T</think>A`` and stops, so the split, the finish reasons and the recorded prompt have known
values.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="real-vLLM tests need vllm (make test-vllm installs it in .venv-vllm)")

from PIL import Image  # noqa: E402

from orandcar_builder.cache import CacheStats, GenerationCache  # noqa: E402
from orandcar_builder.engines.openai_compat import EngineRequestError, OpenAICompatEngine  # noqa: E402
from orandcar_builder.engines.reasoning import generation_status, split_reasoning  # noqa: E402
from orandcar_builder.engines.replay import ReplayEngine, export_generations  # noqa: E402
from orandcar_builder.engines.vllm import VLLMEngine  # noqa: E402
from orandcar_builder.executors.generation import generate_through_cache  # noqa: E402
from orandcar_builder.images import ImageRef  # noqa: E402
from orandcar_builder.records import Request  # noqa: E402
from tests.fake_openai_server import completion_body  # noqa: E402
from tests.vllm.tiny_qwen2vl import SCRIPT_TEXT, build  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_MODEL_LEN = 512
SERVER_START_S = 600
VISION = "<|vision_start|><|image_pad|><|vision_end|>"


def expected_prompt(request: Request, thinking: bool = True) -> str:
    vision = VISION if request.image is not None else ""
    opening = "<think>\n" if thinking else "<think>\n\n</think>\n\n"
    return f"<|im_start|>user\n{vision}{request.question}<|im_end|>\n<|im_start|>assistant\n{opening}"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("tiny-qwen2vl"))


@pytest.fixture(scope="module")
def requests_(tmp_path_factory) -> list[Request]:
    folder = tmp_path_factory.mktemp("images")
    Image.new("RGB", (60, 30), (255, 0, 0)).save(folder / "red.png")
    Image.new("RGB", (40, 40), (0, 0, 255)).save(folder / "blue.jpg", quality=90)
    png, jpg = ImageRef.from_file(folder / "red.png"), ImageRef.from_file(folder / "blue.jpg")
    return [
        Request("img-0", "What is written in the image?\nReply with only the text shown.", "scene_text", png),
        Request("txt-0", "Is 'STOP' the same as 'stop'? Reply CORRECT or WRONG.", "scene_text"),
        Request("img-1", "  spaces kept  ", "scene_text", jpg),
        Request("img-2", "Ünïcode — 中文?", "scene_text", png),
        Request("txt-1", "second text-only request", "scene_text"),
    ]


@pytest.fixture(scope="module")
def engine(tiny_model) -> VLLMEngine:
    # concurrency 2: five requests stream through vLLM's engine, at most two queued at once.
    return VLLMEngine(str(tiny_model), max_tokens=16, max_model_len=MAX_MODEL_LEN, concurrency=2,
                      llm_kwargs={"enforce_eager": True})


def sibling(engine: VLLMEngine, **options) -> VLLMEngine:
    """Another engine over the same started LLM, differing in the given settings."""
    settings = dict(max_tokens=engine.max_tokens, max_model_len=MAX_MODEL_LEN, concurrency=engine.concurrency)
    settings.update(options)
    return VLLMEngine(engine.model, llm=engine.llm, **settings)


def test_offline_chat_records_prompt_order_split_and_tokens(engine, requests_):
    gens = engine.generate(requests_)
    assert [g.item_id for g in gens] == [r.item_id for r in requests_]
    for request, gen in zip(requests_, gens):
        assert gen.prompt == expected_prompt(request)  # the exact question, byte for byte, in the model input
        assert (gen.text, gen.think, gen.final_answer, gen.finish_reason) == (SCRIPT_TEXT, "T", "A", "stop")
        assert generation_status(gen) == "ok"
        assert gen.completion_tokens == 4 and gen.prompt_tokens > 0
        assert gen.model == engine.model and gen.revision == ""
    # image tokens are expanded in the token count, not in the prompt text
    assert gens[0].prompt_tokens > len(gens[0].prompt.split())


def test_stream_renders_and_answers_as_llm_chat_does(engine, requests_):
    """The streaming path (LLM.enqueue_chat + LLMEngine.step) gives what LLM.chat gives."""
    kwargs = {"chat_template_kwargs": engine.chat_template_kwargs, "use_tqdm": False}
    outputs = engine.llm.chat([engine.conversation(r) for r in requests_], engine.sampling_params(), **kwargs)
    gens = engine.generate(requests_)
    assert [g.prompt for g in gens] == [o.prompt for o in outputs]
    assert [(g.text, g.finish_reason) for g in gens] == [(o.outputs[0].text, o.outputs[0].finish_reason) for o in outputs]
    completions = list(sibling(engine, concurrency=None).stream(iter(requests_)))
    assert sorted(c.request.item_id for c in completions) == sorted(r.item_id for r in requests_)
    assert all(c.ok for c in completions)


def test_length_limit_inside_thinking_is_truncated(engine, requests_):
    (cut,) = sibling(engine, max_tokens=1).generate(requests_[:1])
    assert (cut.text, cut.think, cut.final_answer, cut.finish_reason) == ("T", "T", "", "length")
    assert generation_status(cut) == "truncated"
    (ended,) = sibling(engine, max_tokens=2).generate(requests_[1:2])
    assert (ended.text, ended.final_answer, ended.finish_reason) == ("T</think>", "", "length")
    assert generation_status(ended) == "truncated"


def test_thinking_can_be_switched_off_in_the_template(engine, requests_):
    gens = sibling(engine, chat_template_kwargs={"enable_thinking": False}).generate(requests_[:2])
    assert [g.prompt for g in gens] == [expected_prompt(r, thinking=False) for r in requests_[:2]]
    assert [(g.think, g.final_answer) for g in gens] == [("T", "A"), ("T", "A")]


def test_named_vllm_reasoning_parser_agrees_with_the_tag_split(engine, requests_):
    parsed = sibling(engine, reasoning_parser="qwen3")
    gens = parsed.generate(requests_[:2])
    assert [(g.think, g.final_answer, g.finish_reason) for g in gens] == [("T", "A", "stop")] * 2
    (cut,) = sibling(engine, max_tokens=1, reasoning_parser="qwen3").generate(requests_[:1])
    assert (cut.think, cut.final_answer, generation_status(cut)) == ("T", "", "truncated")
    assert split_reasoning(cut.text, cut.finish_reason, prompt=cut.prompt)[:2] == ("T", "")


def test_data_url_images_give_the_same_output(engine, requests_):
    via_url = sibling(engine, image_transport="data_url").generate(requests_)
    assert [(g.text, g.prompt, g.prompt_tokens) for g in via_url] == [
        (g.text, g.prompt, g.prompt_tokens) for g in engine.generate(requests_)
    ]


def test_cache_asks_once_and_replay_rebuilds_without_vllm(engine, requests_, tmp_path):
    asked = []

    class Counting:
        kind, can_judge = engine.kind, engine.can_judge
        fingerprint = staticmethod(engine.fingerprint)

        def generate(self, batch):
            asked.extend(r.item_id for r in batch)
            return engine.generate(batch)

    stats = CacheStats()
    with GenerationCache(tmp_path / "g.sqlite") as cache:
        first = generate_through_cache(Counting(), requests_, cache, batch_size=2)
        second = generate_through_cache(Counting(), list(reversed(requests_)), cache, stats=stats)
    assert sorted(asked) == sorted(r.item_id for r in requests_)
    assert (stats.hits, stats.asked) == (len(requests_), 0)
    assert list(reversed(second)) == first
    export_generations(first, tmp_path / "recorded.jsonl", requests=requests_)
    assert ReplayEngine(tmp_path / "recorded.jsonl").generate(requests_) == first
    assert engine.fingerprint()["reproducibility"]["vllm"]


# --- the OpenAI-compatible server ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(tiny_model, tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(tiny_model), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager", "--seed", "0",
        "--reasoning-parser", "qwen3", "--limit-mm-per-prompt", json.dumps({"image": 1}),
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        import httpx2
        from tenacity import (
            RetryError,
            Retrying,
            retry_if_exception_type,
            retry_if_result,
            stop_after_delay,
            wait_fixed,
        )

        def up() -> bool:
            if proc.poll() is not None:  # pytest.fail is a BaseException: tenacity does not retry it
                pytest.fail(f"vLLM server exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
            return httpx2.get(f"{url}/models", timeout=2).status_code == 200

        waiting = Retrying(stop=stop_after_delay(SERVER_START_S), wait=wait_fixed(1),
                           retry=retry_if_exception_type(httpx2.TransportError) | retry_if_result(lambda ok: not ok))
        try:
            waiting(up)
        except RetryError:
            pytest.fail(f"vLLM server not up after {SERVER_START_S} s:\n{log_path.read_text()[-4000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_server_answers_in_order_with_reasoning_prompt_and_finish_reasons(server_url, requests_):
    engine = OpenAICompatEngine("tiny", server_url, max_tokens=16, concurrency=3, backoff_s=0.1)
    gens = engine.generate(requests_)
    assert [g.item_id for g in gens] == [r.item_id for r in requests_]
    for request, gen in zip(requests_, gens):
        assert (gen.think, gen.final_answer, gen.finish_reason) == ("T", "A", "stop")
        assert gen.text == "<think>T</think>A"  # reasoning from message.reasoning, kept in the raw text
        assert gen.prompt == expected_prompt(request)
        assert gen.completion_tokens == 4 and gen.prompt_tokens > 0
    (cut,) = OpenAICompatEngine("tiny", server_url, max_tokens=1).generate(requests_[:1])
    assert (cut.think, cut.final_answer, cut.finish_reason, generation_status(cut)) == ("T", "", "length", "truncated")


def test_server_refusal_is_not_retried(server_url):
    engine = OpenAICompatEngine("tiny", server_url, max_tokens=4, backoff_s=0.1)
    too_long = Request("long", "x " * (MAX_MODEL_LEN + 10), "scene_text")
    with pytest.raises(EngineRequestError) as info:
        engine.generate([too_long])
    assert "HTTP 400" in str(info.value) and "not retried" in str(info.value)


def test_fake_server_has_the_real_response_shape(server_url):
    """The fake server used in CI answers with the key sets the real server returns."""
    import httpx2

    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
            "temperature": 0.0, "return_prompt_text": True, "chat_template_kwargs": {"enable_thinking": True}}
    real = httpx2.post(f"{server_url}/chat/completions", json=body, timeout=120).json()
    fake = completion_body("tiny", body, "reasoning", 1)

    def shape(response: dict) -> dict:
        choice = response["choices"][0]
        return {
            "top": sorted(response),
            "choice": sorted(choice),
            "message": sorted(choice["message"]),
            "usage": sorted(response["usage"]),
        }

    assert shape(fake) == shape(real)
    assert real["prompt_text"] == fake["prompt_text"]  # the fake renders the same template


# --- kill and resume a streaming build ----------------------------------------------------------

KILL_ITEMS = 120


def _cached(work: Path) -> set[str]:
    import sqlite3

    db = work / "cache" / "generations.sqlite"
    if not db.exists():
        return set()
    try:
        with sqlite3.connect(db, timeout=30) as con:
            return {row[0] for row in con.execute("SELECT item_id FROM generations")}
    except sqlite3.OperationalError:
        return set()


def _vllm_build(pool: Path, out: Path, work: Path, model: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "orandcar_builder.cli", "build", str(pool), "-o", str(out), "--work", str(work),
               "--engine", "vllm", "--engine-option", f"model={model}", "--engine-option", "max_tokens=16",
               "--engine-option", f"max_model_len={MAX_MODEL_LEN}", "--engine-option", "concurrency=4",
               "--engine-option", 'llm_kwargs={"enforce_eager": true}', "--no-progress"]
    # A session of its own: the kill takes vLLM's engine-core processes too, as a lost machine would.
    return subprocess.Popen(command, cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def test_killed_streaming_build_resumes_to_identical_bytes(tiny_model, tmp_path):
    """``orandcar build --engine vllm`` SIGKILLed while generations stream into the cache, then
    rerun: the same dataset bytes as an uninterrupted build, and what was cached is kept."""
    import os
    import signal

    images = tmp_path / "img"
    images.mkdir()
    lines = []
    for i in range(KILL_ITEMS):
        Image.new("RGB", (32 + i % 7, 24), (i % 256, (5 * i) % 256, 90)).save(images / f"{i}.png")
        lines.append({"id": f"q{i}", "image": f"img/{i}.png", "question": f"What is written on sign {i}?",
                      "answer": "A", "family": "scene_text"})
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(line) + "\n" for line in lines))
    reference = _vllm_build(pool, tmp_path / "ref", tmp_path / "ref_work", tiny_model)
    assert reference.wait(timeout=900) == 0, reference.stderr.read().decode()[-3000:]

    work = tmp_path / "work"
    kills = 0
    for target in (10, 50):
        before = _cached(work)
        proc = _vllm_build(pool, tmp_path / "out", work, tiny_model)
        while proc.poll() is None and len(_cached(work)) < target:
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        kills += proc.wait(timeout=120) == -signal.SIGKILL
        assert before <= _cached(work)  # nothing committed is lost
    assert kills == 2, "both runs should have been killed while generating"
    assert 0 < len(_cached(work)) < KILL_ITEMS
    final = _vllm_build(pool, tmp_path / "out", work, tiny_model)
    assert final.wait(timeout=900) == 0, final.stderr.read().decode()[-3000:]
    report = json.loads((work / "report.json").read_text())
    assert report["cache"]["generate"]["hits"] >= 50 and report["failed"] == 0
    ref, out = tmp_path / "ref", tmp_path / "out"
    files = sorted(p.relative_to(ref) for p in ref.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    for rel in files:
        assert (ref / rel).read_bytes() == (out / rel).read_bytes(), rel
