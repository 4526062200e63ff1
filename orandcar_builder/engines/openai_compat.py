"""The openai_compat engine: any OpenAI-compatible chat endpoint, such as ``vllm serve``.

Requests stream through one sliding window (asyncio on a thread of its own, at most
``concurrency`` in flight), spread over one or more base URLs; each answer is handed back as soon
as it arrives and the next request is sent in its place. Transient failures (connection errors,
timeouts, HTTP 408, 429 and 5xx) are retried with exponential backoff, honouring ``Retry-After``
(seconds or an HTTP date, at most ``MAX_BACKOFF_S``); any other error (a 400 for a prompt too
long, say) fails at once. The retry loops (each request's, and the probe of the servers before
the first) are tenacity's: stop after so many attempts, retry on these errors only, wait the
server's ``Retry-After`` or ``backoff_delay``. Reasoning is read from ``message.reasoning``
(``reasoning_content`` on older servers) when the server runs a reasoning parser, otherwise split from the text by
``<think>...</think>``. ``chat_template_kwargs`` travel in the request body, as the OpenAI
client's ``extra_body`` would put them. With ``record_prompt`` (the default) the request asks
vLLM for the rendered prompt (``return_prompt_text``) and records it; servers that do not know
the field ignore it (vLLM) or need ``record_prompt=False``.

The chat-message helpers here are shared with the vllm engine: an image is sent as a data URL of
its original bytes with the MIME type of its format, never re-encoded.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import queue
import threading
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Iterable, Iterator, Optional, Sequence

from tenacity import AsyncRetrying, Retrying, retry_if_exception_type, stop_after_attempt

from ..errors import OrandCarError
from ..files import image_format, loads_bounded
from ..images import ImageRef
from ..records import Generation, Request
from ..redact import redact_url, scrub, secret_values
from .base import (  # noqa: F401 (EngineRequestError re-exported)
    Completion,
    EngineRequestError,
    EngineUnavailable,
    GenerationSettings,
    error_text,
    generate_from_stream,
)
from .reasoning import THINK_CLOSE, THINK_OPEN, make_generation

# Large enough for a reasoning model's thinking; the server's own default may be tiny.
DEFAULT_MAX_TOKENS = 16384
DEFAULT_SEED = 0
TEMPERATURE = 0.0  # every request; the build samples greedily
# The chat-template switch of reasoning models (Qwen3, ...): whether the model thinks first.
THINKING_SWITCH = "enable_thinking"
DEFAULT_CHAT_TEMPLATE_KWARGS = {THINKING_SWITCH: True}
DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
DEFAULT_CONCURRENCY = 16
DEFAULT_MAX_RETRIES = 6
DEFAULT_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
DEFAULT_TIMEOUT_S = 1800.0
PROBE_TIMEOUT_S = 10.0
PROBE_ATTEMPTS = 3
TRANSIENT_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))

def image_mime(data: bytes, name: str = "<bytes>") -> str:
    """The MIME type of encoded image bytes, from their leading bytes (``files.image_format``:
    the formats a VLM server accepts)."""
    found = image_format(data)
    if found is not None:
        return found[0]
    raise ValueError(f"{name}: unknown image format (not PNG, JPEG, GIF, WebP, BMP or TIFF)")


def image_data_url(image: ImageRef) -> str:
    """``data:<mime>;base64,...`` of the image's original bytes (hash re-checked on read)."""
    data = image.read()
    return f"data:{image_mime(data, image.path)};base64,{base64.b64encode(data).decode('ascii')}"


def image_part(image: ImageRef) -> dict:
    return {"type": "image_url", "image_url": {"url": image_data_url(image)}}


def chat_messages(request: Request, image: Optional[dict] = None) -> list[dict]:
    """The one-turn conversation for ``request``: the image part (``image``, or a data URL of the
    original bytes) then the exact question; a text-only request sends the question alone."""
    if request.image is None:
        return [{"role": "user", "content": request.question}]
    part = image if image is not None else image_part(request.image)
    return [{"role": "user", "content": [part, {"type": "text", "text": request.question}]}]


def template_reasoning(chat_template_kwargs: dict) -> Optional[bool]:
    """Whether the chat template is told to let the model think (``THINKING_SWITCH``); None when
    it is not told (the template's own default), or told something other than true or false."""
    value = chat_template_kwargs.get(THINKING_SWITCH)
    return value if isinstance(value, bool) else None


def _import_httpx() -> Any:
    try:
        import httpx2 as httpx  # what huggingface_hub >= 2 ships
    except ImportError:
        try:
            import httpx  # type: ignore[no-redef]
        except ImportError:
            raise EngineUnavailable(
                "the openai_compat engine needs an HTTP client: `pip install httpx2` (or httpx)"
            ) from None
    return httpx


@dataclass(frozen=True)
class ServerReply:
    text: str
    finish_reason: str
    prompt_tokens: Optional[int]
    completion_tokens: Optional[int]
    prompt: Optional[str] = None


def reply_from_response(body: dict) -> ServerReply:
    """The parts of a chat-completion response we keep. Reasoning the server parsed out is put
    back in front of the answer as ``<think>R</think>`` so the raw text keeps it and replays."""
    try:
        choice = body["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"response has no choices[0].message: {str(body)[:300]}") from None
    content = message.get("content")
    reasoning = message.get("reasoning")
    if reasoning is None:
        reasoning = message.get("reasoning_content")
    text = content or ""
    if reasoning is not None:
        # content None: the thinking never ended; leave the block open so the split says so.
        text = f"{THINK_OPEN}{reasoning}" + (f"{THINK_CLOSE}{content}" if content is not None else "")
    usage = body.get("usage") or {}
    return ServerReply(
        text=text,
        finish_reason=choice.get("finish_reason") or "",
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        prompt=body.get("prompt_text"),
    )


def _retry_after(headers: Any, cap: float = MAX_BACKOFF_S) -> Optional[float]:
    """Seconds the server asks to wait (``Retry-After``: delta-seconds or an HTTP date), at most
    ``cap`` (a server asking for hours, or ``inf``, does not stall the build); None when absent or
    unreadable (our own backoff applies)."""
    value = headers.get("retry-after") if headers is not None else None
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        from datetime import datetime, timezone

        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    if seconds != seconds:  # nan
        return None
    return min(cap, max(0.0, seconds))


def backoff_delay(attempt: int, base: float, cap: float = MAX_BACKOFF_S) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based): ``base * 2**attempt``, capped."""
    return min(cap, base * (2 ** attempt))


class _Transient(Exception):
    """A failure worth another attempt; ``retry_after``: the seconds the server asked for."""

    def __init__(self, message: str, retry_after: Optional[float] = None):
        super().__init__(message)
        self.retry_after = retry_after


def _retry_wait(base: float):
    """tenacity's wait: the server's ``Retry-After`` when it sent one, else ``backoff_delay``."""

    def wait(state) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        asked = getattr(error, "retry_after", None)
        return asked if asked is not None else backoff_delay(state.attempt_number - 1, base)

    return wait


class OpenAICompatEngine:
    """Chat completions from one or more OpenAI-compatible servers serving the same model."""

    kind = "openai_compat"
    can_judge = True
    # Options that authenticate: kept out of the fingerprint, every file and every message
    # (credentials in a base URL are hidden as well, see redact.py).
    SECRET_OPTIONS = ("api_key",)

    def __init__(
        self,
        model: str,
        base_urls: str | Sequence[str] = DEFAULT_BASE_URL,
        *,
        revision: str = "",
        api_key: Optional[str] = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        seed: Optional[int] = DEFAULT_SEED,
        chat_template_kwargs: Optional[dict] = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        extra_body: Optional[dict] = None,
        record_prompt: bool = True,
    ):
        if not model:
            raise ValueError("openai_compat needs the served model name (--model)")
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("openai_compat needs at least one base URL")
        for url in urls:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                shown = redact_url(url) if isinstance(url, str) else url
                raise ValueError(f"base URL {shown!r} must start with http:// or https://")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        self.model = model
        self.revision = revision
        self.base_urls = [u.rstrip("/") for u in urls]
        self.api_key = api_key
        # what messages name and hide: the URLs without their user-info, the secrets' values
        self._shown_urls = [redact_url(u) for u in self.base_urls]
        self._secrets = secret_values({"api_key": api_key, "base_urls": self.base_urls,
                                       "extra_body": extra_body or {}}, self.SECRET_OPTIONS)
        self.max_tokens = max_tokens
        self.seed = seed
        self.chat_template_kwargs = dict(DEFAULT_CHAT_TEMPLATE_KWARGS if chat_template_kwargs is None else chat_template_kwargs)
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body or {})
        self.record_prompt = record_prompt
        self._httpx = _import_httpx()

    def fingerprint(self) -> dict:
        # Base URLs and concurrency do not shape an answer; the sampling and template settings do.
        return {
            "kind": self.kind,
            "model": self.model,
            "revision": self.revision,
            "sampling": {"temperature": TEMPERATURE, "max_tokens": self.max_tokens, "seed": self.seed},
            "chat_template_kwargs": self.chat_template_kwargs,
            "extra_body": self.extra_body,
            "reasoning_split": "server field, else <think> tags",
        }

    def generation_settings(self) -> GenerationSettings:
        """What every request carries (``extra_body`` over the engine's own settings, as the
        server sees them: vLLM reads ``max_completion_tokens`` before ``max_tokens``)."""
        sent = self._body_settings()
        max_tokens = sent.get("max_completion_tokens", sent.get("max_tokens"))
        kwargs = sent.get("chat_template_kwargs")
        return GenerationSettings(
            engine=self.kind, model=self.model, revision=self.revision or None,
            temperature=sent.get("temperature"), max_tokens=max_tokens,
            reasoning=template_reasoning(kwargs if isinstance(kwargs, dict) else {}))

    def _body_settings(self) -> dict:
        """The JSON body's fields besides the messages: the engine's settings, then ``extra_body``."""
        body: dict[str, Any] = {"model": self.model, "temperature": TEMPERATURE, "max_tokens": self.max_tokens}
        if self.seed is not None:
            body["seed"] = self.seed
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = self.chat_template_kwargs
        if self.record_prompt:
            body["return_prompt_text"] = True
        body.update(self.extra_body)
        return body

    def request_body(self, request: Request) -> dict:
        """The JSON body sent for ``request``."""
        return {"messages": chat_messages(request), **self._body_settings()}

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        """The generations of ``requests`` in order (through ``stream``); EngineRequestError names
        every request that failed, after the others have finished."""
        return generate_from_stream(self.stream, requests)

    def stream(self, requests: Iterable[Request]) -> Iterator[Completion]:
        """One sliding window over the whole stream: at most ``concurrency`` requests in flight;
        a new one is pulled from ``requests`` (in the caller's thread) as soon as one finishes,
        and each finished request is handed back at once. A request that fails for good is a
        failed Completion and never stops the others. The HTTP client runs on an event loop of
        its own thread; the first request is sent only after the servers answered a probe."""
        iterator = iter(requests)
        try:
            first = next(iterator)
        except StopIteration:
            return
        self.check_servers()
        loop = _LoopThread(self._client_factory())
        finished: "queue.Queue[tuple[Request, concurrent.futures.Future]]" = queue.Queue()
        in_flight, sent, exhausted = 0, 0, False
        pending: Optional[Request] = first
        try:
            while True:
                while not exhausted and in_flight < self.concurrency:
                    if pending is None:
                        pending = next(iterator, None)
                        if pending is None:
                            exhausted = True
                            break
                    request, pending = pending, None
                    try:
                        body = self.request_body(request)  # reads and encodes the image here
                    except (ValueError, OrandCarError, OSError) as exc:
                        yield Completion(request, error=f"cannot build the request: {error_text(exc)}")
                        continue
                    future = loop.submit(self._send(loop.client, sent, request, body))
                    future.add_done_callback(lambda f, r=request: finished.put((r, f)))
                    in_flight += 1
                    sent += 1
                if in_flight == 0:
                    return
                request, future = finished.get()
                in_flight -= 1
                exc = future.exception()
                if exc is None:
                    yield Completion(request, future.result())
                elif isinstance(exc, (_RequestFailed, ValueError, OrandCarError)):
                    yield Completion(request, error=str(exc))
                else:
                    raise exc
        finally:
            loop.close()

    def check_servers(self) -> None:
        """Stop before any request when no server can be reached, or one does not serve the
        model (from ``GET /models``; a server without that route is not held against it). One
        unreachable server among several is left to the per-request retries, which move on."""
        httpx = self._httpx
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        unreachable: list[str] = []
        with httpx.Client(timeout=min(self.timeout_s, PROBE_TIMEOUT_S), headers=headers) as client:
            for base, shown in zip(self.base_urls, self._shown_urls):
                probe = Retrying(stop=stop_after_attempt(PROBE_ATTEMPTS), retry=retry_if_exception_type(httpx.TransportError),
                                 wait=_retry_wait(self.backoff_s), reraise=True)
                try:
                    response = probe(client.get, f"{base}/models")
                except httpx.TransportError as exc:
                    unreachable.append(f"{shown} ({self._scrub(f'{type(exc).__name__}: {exc}')})")
                    continue
                if response.status_code == 200:
                    try:
                        served = [m.get("id") for m in loads_bounded(response.content).get("data", [])]
                    except (ValueError, AttributeError):
                        served = []
                    if served and self.model not in served:
                        raise EngineUnavailable(self._scrub(
                            f"{shown} does not serve model {self.model!r} (it serves {', '.join(map(str, served))}); "
                            "pass the served name with --model"))
        if len(unreachable) == len(self.base_urls):
            raise EngineUnavailable(f"cannot reach the OpenAI-compatible server at {'; '.join(unreachable)}; "
                                    "start it, or pass its address with --engine-option base_urls=...")

    def _client_factory(self):
        httpx = self._httpx
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        return lambda: httpx.AsyncClient(timeout=self.timeout_s, limits=limits, headers=headers)

    async def _send(self, client: Any, index: int, request: Request, body: dict) -> Generation:
        return await self._generate_one(client, index, request, body)

    async def _generate_one(self, client: Any, index: int, request: Request, body: dict) -> Generation:
        retrying = AsyncRetrying(stop=stop_after_attempt(self.max_retries + 1), retry=retry_if_exception_type(_Transient),
                                 wait=_retry_wait(self.backoff_s), reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    # Spread requests over the servers; a retry moves on to the next one.
                    server = (index + attempt.retry_state.attempt_number - 1) % len(self.base_urls)
                    return await self._attempt(client, server, request, body)
        except _Transient as exc:
            raise _RequestFailed(f"{exc} (gave up after {self.max_retries + 1} attempts)") from None
        raise AssertionError("unreachable: tenacity returns or re-raises")

    async def _attempt(self, client: Any, server: int, request: Request, body: dict) -> Generation:
        """One POST to server ``server``: the generation, a _Transient to retry, or a _RequestFailed
        for good; every message names the server by its shown URL and holds no secret."""
        httpx = self._httpx
        url, shown = f"{self.base_urls[server]}/chat/completions", f"{self._shown_urls[server]}/chat/completions"
        try:
            response = await client.post(url, json=body)
        except httpx.TransportError as exc:
            raise _Transient(self._scrub(f"{shown}: {type(exc).__name__}: {exc}")) from None
        if response.status_code == 200:
            return self._generation(request, response, shown)
        # a server may echo the key it refused
        error = self._scrub(f"{shown}: HTTP {response.status_code}: {response.text[:500]}")
        if response.status_code not in TRANSIENT_STATUS:
            raise _RequestFailed(error + " (not retried)")
        raise _Transient(error, _retry_after(response.headers))

    def _scrub(self, text: str) -> str:
        """A message without this engine's secrets (its key, the user-info of its URLs)."""
        return scrub(text, self._secrets)

    def _generation(self, request: Request, response: Any, url: str) -> Generation:
        try:
            reply = reply_from_response(loads_bounded(response.content))  # a server's JSON is bounded too
        except ValueError as exc:
            raise _RequestFailed(f"{url}: unreadable response: {exc}") from None
        return make_generation(
            request,
            reply.text,
            reply.finish_reason,
            model=self.model,
            revision=self.revision,
            prompt=reply.prompt,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
        )


class _RequestFailed(Exception):
    """One request failed for good: a failed Completion (EngineRequestError from ``generate``)."""


class _LoopThread:
    """An asyncio event loop on a thread of its own, holding one HTTP client made on it."""

    def __init__(self, make_client):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="openai_compat", daemon=True)
        self.thread.start()
        self.client = asyncio.run_coroutine_threadsafe(self._make(make_client), self.loop).result()

    @staticmethod
    async def _make(make_client):
        return make_client()

    def submit(self, coro) -> "concurrent.futures.Future":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Cancel what is still in flight (a consumer that stopped early), close the client, stop."""
        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.client.aclose()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
            self.loop.close()
