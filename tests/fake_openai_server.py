"""A local HTTP server on 127.0.0.1 that answers chat completions like vLLM's OpenAI server.

Response and error bodies have the shapes vLLM 0.32's server returned in tests/vllm (the key
sets are compared there): ``choices[0].message`` with ``content`` and ``reasoning``, ``usage``
with ``completion_tokens_details``, ``finish_reason`` / ``stop_reason``, ``prompt_text`` when the
request asks ``return_prompt_text``; errors as ``{"error": {"message", "type", "param", "code"}}``. Answers are a pure function of the
question, so tests can check order and content:

- reasoning ``"thinking about: <question>"``, answer ``"answer to: <question>"``;
- a question containing ``[[length]]``: the thinking never ends, ``finish_reason`` ``length``
  (content null, as vLLM's qwen3 parser reports it);
- a question containing ``[[empty]]``: thinking ended, empty answer;
- a question containing ``[[bad]]``: HTTP 400, as vLLM answers a prompt that is too long;
- with ``api_key``, a request without ``Authorization: Bearer <api_key>`` gets HTTP 401, whose
  message repeats the key it was given (as OpenAI's does: a client must not log it).

``reasoning_field`` picks where reasoning goes: ``"reasoning"`` (vLLM >= 0.10),
``"reasoning_content"`` (older) or ``None`` (no reasoning parser: inline ``<think>`` tags in
the content). ``fail_next(question, [429, 500, 0])`` makes the next requests for that question
fail with those statuses first (0: the connection is closed without an answer). ``delay`` (a
function of the question) holds an answer back; ``max_in_flight`` counts the most requests held
at once.

Run alone: ``python tests/fake_openai_server.py [--port N]`` prints its base URL.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

CREATED = 1_764_000_000  # fixed, so recorded responses are stable


def question_of(body: dict) -> str:
    """The text part of the last user message."""
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def image_urls_of(body: dict) -> list[str]:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return []
    return [part["image_url"]["url"] for part in content if part.get("type") == "image_url"]


def error_body(status: int, message: str, kind: str) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def rendered_prompt(body: dict) -> str:
    """The prompt a Qwen-style chat template renders for the request."""
    vision = "<|vision_start|><|image_pad|><|vision_end|>" * len(image_urls_of(body))
    thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", True)
    opening = "<think>\n" if thinking else "<think>\n\n</think>\n\n"
    return f"<|im_start|>user\n{vision}{question_of(body)}<|im_end|>\n<|im_start|>assistant\n{opening}"


def completion_body(model: str, body: dict, reasoning_field: Optional[str], serial: int) -> dict:
    question = question_of(body)
    reasoning: Optional[str] = f"thinking about: {question}"
    content: Optional[str] = f"answer to: {question}"
    finish = "stop"
    if "[[length]]" in question:
        content, finish = None, "length"
    elif "[[empty]]" in question:
        content = ""
    if reasoning_field is None:  # no reasoning parser on the server: tags stay in the content
        content = f"<think>{reasoning}" + (f"</think>\n\n{content}" if content is not None else "")
        reasoning = None
    message = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }
    if reasoning_field is not None:
        message.pop("reasoning")
        message[reasoning_field] = reasoning
    prompt_tokens = len(question.split()) + 10
    completion_tokens = len((reasoning or "").split()) + len((content or "").split())
    return {
        "id": f"chatcmpl-{hashlib.sha256(f'{serial}'.encode()).hexdigest()[:32]}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": "vllm-0.32.0-fake",
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
            "completion_tokens_details": {"reasoning_tokens": len((reasoning or "").split())},
        },
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": rendered_prompt(body) if body.get("return_prompt_text") else None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the listen backlog: a client may open many connections at once


class FakeOpenAIServer:
    """Start with ``with FakeOpenAIServer() as server:``; ``server.url`` is the base URL."""

    def __init__(self, *, model: str = "fake-vlm", reasoning_field: Optional[str] = "reasoning", port: int = 0,
                 api_key: Optional[str] = None):
        self.model = model
        self.api_key = api_key
        self.authorizations: list[Optional[str]] = []  # the Authorization header of each chat request
        self.reasoning_field = reasoning_field
        self.received: list[dict] = []  # request bodies in arrival order
        self.statuses: list[tuple[str, int]] = []  # (question, status answered)
        self._failures: dict[str, deque[int]] = defaultdict(deque)
        # delay(question) -> seconds to wait before answering (in the handler's thread)
        self.delay: Optional[Callable[[str], float]] = None
        self.in_flight = 0
        self.max_in_flight = 0  # the most chat requests the server held at once
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", port), self._handler_class())
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def fail_next(self, question: str, statuses: list[int]) -> None:
        with self._lock:
            self._failures[question].extend(statuses)

    def questions(self) -> list[str]:
        with self._lock:
            return [question_of(b) for b in self.received]

    def start(self) -> "FakeOpenAIServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def refused(self, authorization: Optional[str]) -> Optional[dict]:
        """The 401 body for a request whose ``Authorization`` header is not the server's key."""
        if self.api_key is None or authorization == f"Bearer {self.api_key}":
            return None
        given = (authorization or "").removeprefix("Bearer ")
        return error_body(401, f"Incorrect API key provided: {given}", "AuthenticationError")

    def _answer(self, body: dict) -> tuple[int, Optional[dict]]:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay is not None:
                time.sleep(self.delay(question_of(body)))
            return self._reply(body)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _reply(self, body: dict) -> tuple[int, Optional[dict]]:
        question = question_of(body)
        with self._lock:
            self.received.append(body)
            serial = len(self.received)
            queue = self._failures.get(question)
            status = queue.popleft() if queue else 200
        if status == 200 and "[[bad]]" in question:
            status = 400
        with self._lock:
            self.statuses.append((question, status))
        if status == 0:
            return 0, None
        if status == 400:
            return 400, error_body(400, "This model's maximum context length is 32 tokens.", "BadRequestError")
        if status == 429:
            return 429, error_body(429, "Too many requests", "RateLimitError")
        if status >= 500:
            return status, error_body(status, "Internal server error", "InternalServerError")
        return 200, completion_body(self.model, body, self.reasoning_field, serial)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: dict) -> None:
                blob = json.dumps(body).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(blob)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(blob)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model", "created": CREATED, "owned_by": "vllm"}]})
                else:
                    self._send(404, error_body(404, f"no route {self.path}", "NotFoundError"))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, error_body(404, f"no route {self.path}", "NotFoundError"))
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError as exc:
                    self._send(400, error_body(400, f"invalid JSON: {exc}", "BadRequestError"))
                    return
                authorization = self.headers.get("Authorization")
                with server._lock:
                    server.authorizations.append(authorization)
                refusal = server.refused(authorization)
                if refusal is not None:
                    self._send(401, refusal)
                    return
                status, answer = server._answer(body)
                if status == 0:
                    self.close_connection = True
                    self.connection.shutdown(2)  # drop it: the client sees a connection error
                    return
                self._send(status, answer)

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="fake-vlm")
    parser.add_argument("--reasoning-field", default="reasoning", help="reasoning, reasoning_content or none")
    args = parser.parse_args()
    field = None if args.reasoning_field == "none" else args.reasoning_field
    server = FakeOpenAIServer(model=args.model, reasoning_field=field, port=args.port)
    print(server.url, flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
