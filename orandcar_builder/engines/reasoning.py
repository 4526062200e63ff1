"""Splitting a model's output into its reasoning ("think") and its final answer.

Two ways, one result: a named vLLM reasoning parser when one is configured (imported lazily;
the same code ``vllm serve --reasoning-parser NAME`` runs), otherwise the ``<think>...</think>``
convention, including the Qwen3 form where the chat template opened ``<think>`` in the prompt and
only ``</think>`` appears in the output.

The status says whether the answer can be judged at all:

- ``ok``: there is a final answer;
- ``truncated``: the output hit the token limit (``finish_reason == "length"``) before any final
  answer was written, thinking never ended;
- ``no_answer``: the model stopped without writing a final answer.

Neither ``truncated`` nor ``no_answer`` goes to a rule or the judge; both are rejected with that
reason.
"""

from __future__ import annotations

from typing import Any, Optional

from ..records import Generation, Request
from ..vocab import ANSWER_OK, FINISH_LENGTH, NO_ANSWER, TRUNCATED

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def answer_status(answer: str, finish_reason: str) -> str:
    """The status of a split output from its final answer and finish reason alone.

    An empty answer at the token limit is ``truncated`` (the limit, not the model, ended it); an
    empty answer otherwise is ``no_answer``; anything else is ``ok``.
    """
    if answer.strip():
        return ANSWER_OK
    return TRUNCATED if finish_reason == FINISH_LENGTH else NO_ANSWER


def prompt_opens_thinking(prompt: Optional[str]) -> bool:
    """Whether a rendered prompt ends inside an open ``<think>`` block (Qwen3-style templates
    with thinking enabled), so the output starts in the middle of the reasoning."""
    if not prompt:
        return False
    head, sep, tail = prompt.rpartition(THINK_OPEN)
    return bool(sep) and THINK_CLOSE not in tail


def split_by_tags(text: str, *, opened_in_prompt: bool = False) -> tuple[str, Optional[str]]:
    """``(think, answer)`` by the ``<think>...</think>`` convention; ``answer`` is None when the
    thinking never ended.

    - ``<think>R</think>A`` and ``R</think>A`` (opening tag in the prompt) give ``(R, A)``;
    - ``<think>R`` without a closing tag, or any text when ``opened_in_prompt``, gives ``(R, None)``;
    - text with no tags gives ``("", text)``.
    The first ``</think>`` ends the reasoning, as vLLM's parsers do. Both parts are stripped.
    """
    body = text
    stripped = text.lstrip()
    opened = opened_in_prompt
    if stripped.startswith(THINK_OPEN):
        body, opened = stripped[len(THINK_OPEN):], True
    think, sep, answer = body.partition(THINK_CLOSE)
    if sep:
        return think.strip(), answer.strip()
    if opened:
        return body.strip(), None
    return "", text.strip()


def load_reasoning_parser(name: str, tokenizer: Any) -> Any:
    """A vLLM reasoning parser by name (``"qwen3"``, ``"deepseek_r1"``, ...) bound to the model's
    tokenizer (a tokenizer object, or a model folder / Hub id to load one from). Needs vllm."""
    try:
        from vllm.reasoning import ReasoningParserManager
    except ImportError as exc:  # vllm is an optional extra
        from .base import EngineUnavailable

        raise EngineUnavailable(
            f"reasoning parser {name!r} needs vLLM ({exc}); install it with "
            "`pip install 'orandcar-builder[vllm]'`, or leave the parser unset to split by "
            "<think>...</think>"
        ) from None
    if tokenizer is None:
        raise ValueError(f"reasoning parser {name!r} needs the model's tokenizer (an object, folder or Hub id)")
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer  # vllm depends on transformers

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    try:
        parser_cls = ReasoningParserManager.get_reasoning_parser(name)
    except KeyError as exc:
        raise ValueError(f"unknown vLLM reasoning parser {name!r}: {exc}") from None
    return parser_cls(tokenizer)


def _extract_with_parser(parser: Any, text: str) -> tuple[str, Optional[str]]:
    # vLLM renamed extract_reasoning_content to extract_reasoning; support both.
    extract = getattr(parser, "extract_reasoning", None) or parser.extract_reasoning_content
    reasoning, content = extract(text, request=None)
    return (reasoning or "").strip(), (None if content is None else content.strip())


def split_reasoning(
    text: str,
    finish_reason: str,
    parser: Any = None,
    *,
    prompt: Optional[str] = None,
) -> tuple[str, str, str]:
    """``(think, answer, status)`` for one raw output.

    ``parser`` is a vLLM reasoning parser instance (see ``load_reasoning_parser``) or None for the
    ``<think>`` convention. ``prompt``, the rendered model input where known, tells the convention
    that the template already opened ``<think>``. ``status`` is one of ``vocab.ANSWER_STATUSES``.
    """
    if not isinstance(text, str):
        raise TypeError(f"model output must be a string, got {type(text).__name__}")
    if isinstance(parser, str):
        raise TypeError(
            f"parser {parser!r} is a name: pass load_reasoning_parser({parser!r}, tokenizer) instead"
        )
    if parser is not None:
        think, answer = _extract_with_parser(parser, text)
    else:
        think, answer = split_by_tags(text, opened_in_prompt=prompt_opens_thinking(prompt))
    answer = answer or ""
    return think, answer, answer_status(answer, finish_reason)


def make_generation(
    request: Request,
    text: str,
    finish_reason: str,
    *,
    model: str,
    revision: str = "",
    parser: Any = None,
    prompt: Optional[str] = None,
    prompt_tokens: Optional[int] = None,
    completion_tokens: Optional[int] = None,
) -> Generation:
    """The Generation for ``request`` from a raw output, split by ``split_reasoning``."""
    think, answer, _status = split_reasoning(text, finish_reason, parser, prompt=prompt)
    return Generation(
        item_id=request.item_id,
        text=text,
        think=think,
        final_answer=answer,
        finish_reason=finish_reason,
        model=model,
        revision=revision,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )


def generation_status(generation: Generation) -> str:
    """``ok``, ``truncated`` or ``no_answer`` for a Generation (an unsupported request has no
    answer), consistent with ``split_reasoning``."""
    if generation.unsupported is not None:
        return NO_ANSWER
    return answer_status(generation.final_answer, generation.finish_reason)
