"""The vllm engine's plumbing, with a stand-in ``vllm`` module (the real one: tests/vllm/)."""

from __future__ import annotations

import base64
import io
import sys
import types
from dataclasses import dataclass, field

import pytest
from PIL import Image

from orandcar_builder.engines import EngineUnavailable, create_engine
from orandcar_builder.engines.vllm import BATCH_INVARIANT_ENV, VLLMEngine, local_model_digest
from orandcar_builder.images import ImageRef
from orandcar_builder.records import Request

TEMPLATE_HEAD = "<|im_start|>user\n"
TEMPLATE_TAIL = "<|im_end|>\n<|im_start|>assistant\n<think>\n"
TOKENIZER = object()


@dataclass
class CompletionOutput:
    text: str
    finish_reason: str
    token_ids: list = field(default_factory=list)


@dataclass
class RequestOutput:
    prompt: str
    prompt_token_ids: list
    outputs: list
    request_id: str = ""
    finished: bool = True


class StubLLM:
    """Records LLM construction and the requests queued with ``enqueue_chat``; its
    ``llm_engine.step()`` finishes each request after a number of steps that depends on the
    question (so completions come back out of order), answering like a Qwen3 thinking model."""

    instances: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []
        self.llm_engine = StubLLMEngine()
        StubLLM.instances.append(self)

    def get_tokenizer(self):
        return TOKENIZER

    def enqueue_chat(self, conversations, sampling_params, **kwargs):
        self.calls.append((conversations, sampling_params, kwargs))
        ids = []
        for conv in conversations:
            content = conv[0]["content"]
            if not isinstance(content, str) and content[0].get("type") == "image_url" and "broken" in content[0]["image_url"]["url"]:
                raise ValueError("cannot identify image file")
            question = content if isinstance(content, str) else content[-1]["text"]
            ids.append(self.llm_engine.add(question, not isinstance(content, str)))
        return ids


class StubLLMEngine:
    def __init__(self):
        self.queued: dict = {}
        self.counter = 0
        self.most_queued = 0
        self.aborted: list = []
        self.vllm_config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=3))

    def add(self, question, has_image):
        request_id = str(self.counter)
        self.counter += 1
        prompt = TEMPLATE_HEAD + ("<|vision_start|><|image_pad|><|vision_end|>" if has_image else "") + question + TEMPLATE_TAIL
        if "[[length]]" in question:
            text, finish = "thinking without end", "length"
        else:
            text, finish = f"thought about {question}\n</think>\n\nA:{question}", "stop"
        output = RequestOutput(prompt, list(range(len(prompt.split()))), [CompletionOutput(text, finish, list(range(len(text.split()))))])
        output.request_id, output.finished = request_id, True
        steps = 1 + sum(map(ord, question)) % 4
        self.queued[request_id] = [steps, output]
        self.most_queued = max(self.most_queued, len(self.queued))
        return f"{request_id}-{self.counter:08x}"  # vLLM 0.32 hands back its internal id

    def step(self):
        done = []
        for request_id, entry in list(self.queued.items()):
            entry[0] -= 1
            if entry[0] == 0:
                done.append(self.queued.pop(request_id)[1])
        return done

    def abort_request(self, request_ids, internal=False):
        self.aborted.extend(request_ids)
        for request_id in request_ids:
            self.queued.pop(request_id, None)


class StubSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch):
    StubLLM.instances = []
    module = types.ModuleType("vllm")
    module.LLM = StubLLM
    module.SamplingParams = StubSamplingParams
    module.__version__ = "0.0-stub"
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv(BATCH_INVARIANT_ENV, "")  # recorded, so the engine's own setting is undone
    monkeypatch.delenv(BATCH_INVARIANT_ENV)
    return module


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "tiny-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2_vl"}')
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def png(tmp_path, name="img.png") -> ImageRef:
    buf = io.BytesIO()
    Image.new("RGB", (10, 6), (0, 128, 255)).save(buf, format="PNG")
    (tmp_path / name).write_bytes(buf.getvalue())
    return ImageRef.from_file(tmp_path / name)


def req(item_id, question, image=None):
    return Request(item_id=item_id, question=question, family="scene_text", image=image)


def test_missing_vllm_is_engine_unavailable_with_install_hint(monkeypatch, model_dir):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(EngineUnavailable, match="pip install"):
        create_engine("vllm", model=str(model_dir))


def test_stream_window_order_prompt_record_and_sampling(fake_vllm, model_dir, tmp_path):
    image = png(tmp_path)
    engine = create_engine("vllm", model=str(model_dir), concurrency=2, max_tokens=999, seed=5)
    requests = [req(f"q{i}", f"Question {i}?", image if i % 2 == 0 else None) for i in range(5)]
    gens = engine.generate(requests)
    (llm,) = StubLLM.instances
    assert [len(call[0]) for call in llm.calls] == [1] * 5  # queued one by one as room frees
    assert llm.llm_engine.most_queued == 2
    assert [g.item_id for g in gens] == [r.item_id for r in requests]
    assert [g.final_answer for g in gens] == [f"A:Question {i}?" for i in range(5)]
    assert [g.think for g in gens] == [f"thought about Question {i}?" for i in range(5)]
    assert gens[0].prompt.endswith("Question 0?" + TEMPLATE_TAIL) and "<|image_pad|>" in gens[0].prompt
    assert "<|image_pad|>" not in gens[1].prompt
    assert gens[0].prompt_tokens == len(gens[0].prompt.split()) and gens[0].completion_tokens > 0
    assert (gens[0].model, gens[0].finish_reason) == (str(model_dir), "stop")
    _, params, kwargs = llm.calls[0]
    assert params.kwargs == {"temperature": 0.0, "max_tokens": 999, "seed": 5}
    assert kwargs["chat_template_kwargs"] == {"enable_thinking": True}
    assert llm.kwargs["limit_mm_per_prompt"] == {"image": 1} and llm.kwargs["seed"] == 5


def test_images_are_decoded_from_the_original_bytes_or_sent_as_data_urls(fake_vllm, model_dir, tmp_path):
    image = png(tmp_path)
    pil_engine = VLLMEngine(str(model_dir))
    pil_engine.generate([req("a", "Q", image)])
    part = StubLLM.instances[-1].calls[0][0][0][0]["content"][0]
    assert part["type"] == "image_pil" and part["image_pil"].tobytes() == Image.open(tmp_path / "img.png").convert("RGB").tobytes()
    url_engine = VLLMEngine(str(model_dir), image_transport="data_url")
    url_engine.generate([req("a", "Q", image)])
    part = StubLLM.instances[-1].calls[0][0][0][0]["content"][0]
    assert part["type"] == "image_url"
    assert base64.b64decode(part["image_url"]["url"].split(",", 1)[1]) == image.read()


def test_exact_question_is_the_text_part(fake_vllm, model_dir, tmp_path):
    question = " Read it.\nReply with only the text shown, exactly as written. "
    VLLMEngine(str(model_dir)).generate([req("a", question, png(tmp_path))])
    content = StubLLM.instances[-1].calls[0][0][0][0]["content"]
    assert content[-1] == {"type": "text", "text": question}


def test_truncated_thinking_is_recorded_as_such(fake_vllm, model_dir):
    (gen,) = VLLMEngine(str(model_dir)).generate([req("a", "Q [[length]]")])
    assert (gen.think, gen.final_answer, gen.finish_reason) == ("thinking without end", "", "length")


def test_named_reasoning_parser_is_built_from_the_model_tokenizer(fake_vllm, model_dir, monkeypatch):
    built = []

    class Parser:
        def __init__(self, tokenizer):
            built.append(tokenizer)

        def extract_reasoning(self, text, request):
            return "R", "C"

    reasoning = types.ModuleType("vllm.reasoning")
    reasoning.ReasoningParserManager = types.SimpleNamespace(get_reasoning_parser=lambda name: Parser)
    monkeypatch.setitem(sys.modules, "vllm.reasoning", reasoning)
    engine = VLLMEngine(str(model_dir), reasoning_parser="qwen3")
    gens = engine.generate([req("a", "Q"), req("b", "Q2")])
    assert [(g.think, g.final_answer) for g in gens] == [("R", "C"), ("R", "C")]
    assert built == [TOKENIZER]  # one parser, bound to the engine's tokenizer


def test_engine_starts_lazily_and_once(fake_vllm, model_dir):
    engine = VLLMEngine(str(model_dir), concurrency=1)
    engine.fingerprint()
    assert StubLLM.instances == []
    engine.generate([req("a", "Q"), req("b", "Q")])
    engine.generate([req("c", "Q")])
    assert len(StubLLM.instances) == 1


def test_fingerprint_records_model_sampling_and_reproducibility(fake_vllm, model_dir):
    fp = VLLMEngine(str(model_dir), tensor_parallel_size=1, batch_invariant=True).fingerprint()
    assert fp["kind"] == "vllm" and fp["model_digest"] == local_model_digest(model_dir)
    assert fp["sampling"] == {"temperature": 0.0, "max_tokens": 16384, "seed": 0}
    assert fp["chat_template_kwargs"] == {"enable_thinking": True}
    assert fp["reproducibility"][BATCH_INVARIANT_ENV] == "1"
    assert fp["reproducibility"]["tensor_parallel_size"] == 1 and fp["reproducibility"]["hardware"]
    assert fp["reproducibility"]["vllm"] == "0.0-stub"


def test_fingerprint_changes_with_what_shapes_output(fake_vllm, model_dir):
    base = VLLMEngine(str(model_dir)).fingerprint()
    assert VLLMEngine(str(model_dir), max_tokens=10).fingerprint() != base
    assert VLLMEngine(str(model_dir), chat_template_kwargs={"enable_thinking": False}).fingerprint() != base
    (model_dir / "config.json").write_text('{"model_type": "qwen2_vl", "changed": 1}')
    assert VLLMEngine(str(model_dir)).fingerprint()["model_digest"] != base["model_digest"]


def test_hub_model_with_a_commit_needs_no_lookup(fake_vllm):
    commit = "0123456789abcdef0123456789abcdef01234567"
    engine = VLLMEngine("Qwen/Qwen3-VL-8B-Thinking", revision=commit)
    assert engine.fingerprint()["revision"] == commit and engine.model_digest is None
    engine.generate([req("a", "Q")])
    assert StubLLM.instances[-1].kwargs["revision"] == commit


@pytest.mark.parametrize(
    "options, message",
    [({"max_tokens": 0}, "max_tokens"), ({"concurrency": 0}, "concurrency"), ({"image_transport": "jpeg"}, "image_transport")],
)
def test_bad_options_are_refused(fake_vllm, model_dir, options, message):
    with pytest.raises(ValueError, match=message):
        VLLMEngine(str(model_dir), **options)


def test_stream_hands_back_each_request_when_it_finishes(fake_vllm, model_dir):
    """Completions follow vLLM's finishing order, not the order asked; the default window is
    twice max_num_seqs (3 in the stub), refilled as requests finish."""
    engine = VLLMEngine(str(model_dir))
    requests = [req(f"q{i}", f"Question {i}{'!' * (i % 4)}?") for i in range(12)]
    pulled = []

    def feed():
        for r in requests:
            pulled.append(r.item_id)
            yield r

    completions = list(engine.stream(feed()))
    (llm,) = StubLLM.instances
    assert sorted(c.request.item_id for c in completions) == sorted(r.item_id for r in requests)
    assert [c.request.item_id for c in completions] != [r.item_id for r in requests]
    assert all(c.ok and c.generation.final_answer == f"A:{c.request.question}" for c in completions)
    assert engine.window() == 6 and llm.llm_engine.most_queued == 6


def test_a_request_vllm_refuses_fails_alone(fake_vllm, model_dir, tmp_path):
    bad = ImageRef(path="broken.png", sha256="0" * 64)
    engine = VLLMEngine(str(model_dir), image_transport="data_url")
    good = png(tmp_path)
    completions = {c.request.item_id: c for c in engine.stream([req("a", "Q", good), req("b", "Q2")])}
    assert completions["a"].ok and completions["b"].ok
    completions = {c.request.item_id: c for c in engine.stream([req("x", "Q", bad), req("y", "Q2")])}
    assert not completions["x"].ok and "broken.png" in completions["x"].error and completions["y"].ok


def test_requests_left_queued_are_aborted_when_the_consumer_stops(fake_vllm, model_dir):
    engine = VLLMEngine(str(model_dir), concurrency=4)
    stream = engine.stream(req(f"q{i}", f"Question {i}?") for i in range(20))
    next(stream)
    stream.close()
    (llm,) = StubLLM.instances
    assert llm.llm_engine.aborted and not llm.llm_engine.queued


def test_an_engine_that_fails_to_start_stops_before_any_request(fake_vllm, model_dir):
    class Broken(StubLLM):
        def __init__(self, **kwargs):
            raise RuntimeError("CUDA out of memory while loading weights")

    fake_vllm.LLM = Broken
    pulled = []

    def feed():
        for i in range(3):
            pulled.append(i)
            yield req(f"q{i}", "Q")

    with pytest.raises(EngineUnavailable, match="could not start model .*out of memory"):
        list(VLLMEngine(str(model_dir)).stream(feed()))
    assert pulled == [0]


def test_streams_on_several_threads_share_one_engine(fake_vllm, model_dir):
    """A Ray actor runs several batches at once on one engine: each stream gets exactly its own
    requests back, whichever thread stepped the engine."""
    import threading

    engine = VLLMEngine(str(model_dir), concurrency=3)
    results = {}

    def run(name):
        requests = [req(f"{name}-{i}", f"Question {name} {i}{'!' * (i % 3)}?") for i in range(15)]
        results[name] = [(c.request.item_id, c.ok and c.generation.final_answer == f"A:{c.request.question}")
                         for c in engine.stream(iter(requests))]

    threads = [threading.Thread(target=run, args=(name,)) for name in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for name in "abcd":
        assert sorted(item for item, _ in results[name]) == sorted(f"{name}-{i}" for i in range(15))
        assert all(ok for _, ok in results[name])
    assert len(StubLLM.instances) == 1
