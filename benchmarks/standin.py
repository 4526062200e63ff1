"""A stand-in for a continuously batching GPU server, to measure how full a client keeps it.

``ContinuousBatcher`` has ``slots`` sequence slots and a step clock: every ``step_s`` seconds it
admits waiting requests into free slots (first come, first served), then every running sequence
gains one token; a sequence whose reply is complete leaves its slot and its requester is told.
A reply's length is a pure function of the question: lognormal with median ``median`` tokens and
shape ``sigma``, capped at ``cap``. The clock ticks whether or not there is work, as a GPU's
time passes whether or not it is used.

Fronts:
- ``StandInServer``: OpenAI-compatible HTTP on 127.0.0.1 (``POST /v1/chat/completions``,
  ``GET /v1/models``), for the ``openai_compat`` engine and ``orandcar build``;
- ``StandInLLM``: the slice of ``vllm.LLM`` that the ``vllm`` engine drives step by step
  (``enqueue_chat``, ``llm_engine.step()``, ``llm_engine.abort_request``), for its feeding loop
  without vLLM.

``report()`` gives the figures: ``utilization`` is the share of slot-steps that held a running
sequence from the first arrival until the last request was admitted (while the client still had
work to hand over, every idle slot is the client's doing); ``overall`` compares the whole span
(first arrival to last completion) with the least any schedule needs (total tokens over the slots,
or the longest reply if that is longer).
"""

from __future__ import annotations

import hashlib
import json
import math
import queue
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

MODEL = "standin-vlm"


def reply_tokens(question: str, *, median: float = 100.0, sigma: float = 1.0, cap: int = 2000) -> int:
    """The reply length for ``question``: lognormal (median ``median``, shape ``sigma``) from a
    hash of the text, at least 1 and at most ``cap``."""
    digest = hashlib.sha256(question.encode("utf-8")).digest()
    u = (int.from_bytes(digest[:8], "big") + 0.5) / 2 ** 64
    z = statistics.NormalDist().inv_cdf(u)
    return max(1, min(cap, round(median * math.exp(sigma * z))))


@dataclass
class _Sequence:
    left: int
    tokens: int
    done: Callable[[int], None]


@dataclass
class ContinuousBatcher:
    slots: int = 256
    step_s: float = 0.01
    median: float = 100.0
    sigma: float = 1.0
    cap: int = 2000
    # figures (read with report())
    steps: int = 0
    arrivals: int = 0
    completions: int = 0
    tokens: int = 0
    longest: int = 0
    first_arrival: Optional[int] = None
    last_admit: Optional[int] = None
    last_done: Optional[int] = None
    running_per_step: list = field(default_factory=list)

    def __post_init__(self):
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="standin-clock", daemon=True)

    def start(self) -> "ContinuousBatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def submit(self, question: str, done: Callable[[int], None]) -> int:
        """Queue a request; ``done(tokens)`` is called from the clock's thread when it finishes."""
        n = reply_tokens(question, median=self.median, sigma=self.sigma, cap=self.cap)
        with self._lock:
            if self.first_arrival is None:
                self.first_arrival = self.steps
            self.arrivals += 1
            self.longest = max(self.longest, n)
            self._waiting.append(_Sequence(n, n, done))
        return n

    def _run(self) -> None:
        start = time.perf_counter()
        while not self._stop.is_set():
            finished = []
            with self._lock:
                while self._waiting and len(self._running) < self.slots:
                    self._running.append(self._waiting.popleft())
                    self.last_admit = self.steps
                running = len(self._running)
                if self.first_arrival is not None:
                    self.running_per_step.append(running)
                still = []
                for seq in self._running:
                    seq.left -= 1
                    (finished if seq.left == 0 else still).append(seq)
                self._running = still
                self.tokens += running
                self.completions += len(finished)
                if finished:
                    self.last_done = self.steps
                self.steps += 1
            for seq in finished:
                seq.done(seq.tokens)
            delay = start + self.steps * self.step_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)

    def report(self) -> dict:
        with self._lock:
            if self.first_arrival is None:
                return {"requests": 0}
            feeding = self.running_per_step[: self.last_admit - self.first_arrival + 1]
            span = self.last_done - self.first_arrival + 1
            ideal = max(math.ceil(self.tokens / self.slots), self.longest)
            return {
                "requests": self.completions,
                "slots": self.slots,
                "step_ms": self.step_s * 1000,
                "tokens": self.tokens,
                "longest_reply": self.longest,
                "feeding_steps": len(feeding),
                "utilization": round(sum(feeding) / (self.slots * len(feeding)), 4),
                "busy_steps": span,
                "ideal_steps": ideal,
                "overall": round(ideal / span, 4),
            }


def answer_text(question: str, tokens: int) -> str:
    """The reply's text (short: the token count is what the clock spends, not what is sent)."""
    return f"<think>{tokens} tokens</think>word{hashlib.sha256(question.encode()).hexdigest()[:6]}"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: a client opens hundreds of connections at once


class StandInServer:
    """The batcher behind an OpenAI-compatible HTTP server on 127.0.0.1 (``url`` is its base)."""

    def __init__(self, batcher: ContinuousBatcher, *, port: int = 0, model: str = MODEL):
        self.batcher, self.model = batcher, model
        self._httpd = _Server(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "StandInServer":
        self.batcher.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self.batcher.stop()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: dict) -> None:
                blob = json.dumps(body).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                self.wfile.write(blob)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                content = body["messages"][-1]["content"]
                question = content if isinstance(content, str) else "".join(
                    p.get("text", "") for p in content if p.get("type") == "text")
                finished = threading.Event()
                result: dict[str, int] = {}

                def done(tokens: int) -> None:
                    result["tokens"] = tokens
                    finished.set()

                server.batcher.submit(question, done)
                finished.wait()
                tokens = result["tokens"]
                self._send(200, {
                    "object": "chat.completion", "model": server.model,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": answer_text(question, tokens)}}],
                    "usage": {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": tokens + 20},
                })

        return Handler


# --- the slice of vLLM's offline engine that the vllm engine drives -------------------------------


@dataclass
class StandInCompletion:
    text: str
    token_ids: list
    finish_reason: str = "stop"


@dataclass
class StandInOutput:
    request_id: str
    prompt: str
    prompt_token_ids: list
    outputs: list
    finished: bool = True


def render(conversation: list) -> str:
    """A Qwen-style rendering of a one-turn conversation (what the stand-in records as prompt)."""
    content = conversation[-1]["content"]
    if isinstance(content, str):
        return f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n<think>\n"
    vision = "<|vision_start|><|image_pad|><|vision_end|>" * sum(p["type"] != "text" for p in content)
    text = "".join(p.get("text", "") for p in content if p["type"] == "text")
    return f"<|im_start|>user\n{vision}{text}<|im_end|>\n<|im_start|>assistant\n<think>\n"


class StandInLLM:
    """``vllm.LLM`` as the vllm engine uses it: ``enqueue_chat`` renders and queues requests,
    ``llm_engine.step()`` waits for the next step of the clock and returns the requests that
    finished (as the engine core's output queue does), ``llm_engine.abort_request``."""

    def __init__(self, batcher: ContinuousBatcher):
        self.batcher = batcher
        self.llm_engine = _StandInLLMEngine(batcher)

    def get_tokenizer(self):
        return None

    def enqueue_chat(self, conversations, sampling_params, **kwargs):
        return [self.llm_engine.add(render(conversation)) for conversation in conversations]

    def chat(self, conversations, sampling_params, **kwargs):
        """``LLM.chat``: queue every conversation, return when all have finished, in order."""
        ids = [i.split("-", 1)[0] for i in self.enqueue_chat(conversations, sampling_params)]
        done: dict[str, StandInOutput] = {}
        while len(done) < len(ids):
            for output in self.llm_engine.step():
                done[output.request_id] = output
        return [done[i] for i in ids]


class _StandInLLMEngine:
    def __init__(self, batcher: ContinuousBatcher):
        self.batcher = batcher
        self.vllm_config = type("Config", (), {"scheduler_config": type("Scheduler", (), {"max_num_seqs": batcher.slots})})
        self._finished: "queue.Queue[StandInOutput]" = queue.Queue()
        self._counter = 0
        self.aborted: list[str] = []

    def add(self, prompt: str) -> str:
        request_id = str(self._counter)
        self._counter += 1

        def done(tokens: int) -> None:
            self._finished.put(StandInOutput(request_id, prompt, [0] * 20,
                                             [StandInCompletion(answer_text(prompt, tokens), [0] * tokens)]))

        self.batcher.submit(prompt, done)
        return f"{request_id}-{self._counter:08x}"  # vLLM's internal id; outputs carry the external one

    def step(self) -> list:
        try:
            outputs = [self._finished.get(timeout=self.batcher.step_s)]
        except queue.Empty:
            return []
        while True:
            try:
                outputs.append(self._finished.get_nowait())
            except queue.Empty:
                return outputs

    def abort_request(self, request_ids, internal: bool = False) -> None:
        self.aborted.extend(request_ids)
