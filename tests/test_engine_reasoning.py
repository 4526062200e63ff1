"""The think/answer split and its status."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orandcar_builder.engines.reasoning import (
    generation_status,
    make_generation,
    prompt_opens_thinking,
    split_reasoning,
)
from orandcar_builder.records import Request
from orandcar_builder.vocab import ANSWER_OK, NO_ANSWER, TRUNCATED

QWEN3_PROMPT = "<|im_start|>user\nWhat is written?<|im_end|>\n<|im_start|>assistant\n<think>\n"
QWEN3_NOTHINK_PROMPT = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.mark.parametrize(
    "text, finish, prompt, expected",
    [
        ("<think>It says STOP.</think>\n\nSTOP", "stop", None, ("It says STOP.", "STOP", ANSWER_OK)),
        ("  <think>\nR\n</think>A\nB  ", "stop", None, ("R", "A\nB", ANSWER_OK)),
        # Qwen3: the template opened <think>, only the closing tag is in the output.
        ("reasoning here\n</think>\n\nanswer", "stop", QWEN3_PROMPT, ("reasoning here", "answer", ANSWER_OK)),
        ("reasoning here\n</think>\n\nanswer", "stop", None, ("reasoning here", "answer", ANSWER_OK)),
        # Thinking never ended.
        ("<think>still thinking", "length", None, ("still thinking", "", TRUNCATED)),
        ("still thinking", "length", QWEN3_PROMPT, ("still thinking", "", TRUNCATED)),
        ("<think>gave up", "stop", None, ("gave up", "", NO_ANSWER)),
        # Thinking ended but nothing after it.
        ("<think>R</think>\n\n", "stop", None, ("R", "", NO_ANSWER)),
        ("", "stop", None, ("", "", NO_ANSWER)),
        ("", "length", None, ("", "", TRUNCATED)),
        # No tags and no open block: all answer (a model without thinking, or thinking disabled).
        ("STOP", "stop", None, ("", "STOP", ANSWER_OK)),
        ("a long answer cut", "length", None, ("", "a long answer cut", ANSWER_OK)),
        ("STOP", "stop", QWEN3_NOTHINK_PROMPT, ("", "STOP", ANSWER_OK)),
        # The first closing tag ends the reasoning, as vLLM's parsers do.
        ("<think>R</think>A</think>B", "stop", None, ("R", "A</think>B", ANSWER_OK)),
    ],
)
def test_split_by_think_tags(text, finish, prompt, expected):
    assert split_reasoning(text, finish, prompt=prompt) == expected


@pytest.mark.parametrize(
    "prompt, opens",
    [(QWEN3_PROMPT, True), (QWEN3_NOTHINK_PROMPT, False), ("plain", False), (None, False), ("", False)],
)
def test_prompt_opens_thinking(prompt, opens):
    assert prompt_opens_thinking(prompt) is opens


class StubParser:
    """Behaves like vLLM's qwen3 parser: content None while thinking never ended."""

    def __init__(self):
        self.calls = []

    def extract_reasoning(self, text, request):
        self.calls.append((text, request))
        head, sep, tail = text.partition("[END]")
        return (head, tail) if sep else (text, None)


class OldStubParser:
    def extract_reasoning_content(self, text, request):
        return None, text


@pytest.mark.parametrize(
    "text, finish, expected",
    [
        ("thinking[END] answer ", "stop", ("thinking", "answer", ANSWER_OK)),
        ("thinking forever", "length", ("thinking forever", "", TRUNCATED)),
        ("thinking forever", "stop", ("thinking forever", "", NO_ANSWER)),
        ("thinking[END]", "stop", ("thinking", "", NO_ANSWER)),
        # a parser decides alone: tags mean nothing to this one
        ("<think>x</think>y", "stop", ("<think>x</think>y", "", NO_ANSWER)),
    ],
)
def test_split_by_named_parser(text, finish, expected):
    parser = StubParser()
    assert split_reasoning(text, finish, parser) == expected
    assert parser.calls == [(text, None)]


def test_older_parser_method_name_is_used():
    assert split_reasoning("just content", "stop", OldStubParser()) == ("", "just content", ANSWER_OK)


def test_parser_name_without_tokenizer_is_a_clear_error():
    with pytest.raises(TypeError, match="load_reasoning_parser"):
        split_reasoning("x", "stop", "qwen3")


def test_non_string_output_is_rejected():
    with pytest.raises(TypeError, match="string"):
        split_reasoning(None, "stop")  # type: ignore[arg-type]


@given(st.text(), st.text(), st.sampled_from(["stop", "length"]))
def test_closed_block_round_trips(think, answer, finish):
    """Whatever the parts, <think>T</think>A splits back into T and A (as stripped)."""
    if "</think>" in think or "<think>" in think:
        return
    got_think, got_answer, status = split_reasoning(f"<think>{think}</think>{answer}", finish)
    assert got_think == think.strip()
    assert got_answer == answer.strip()
    assert status == (ANSWER_OK if answer.strip() else (TRUNCATED if finish == "length" else NO_ANSWER))


def test_make_generation_and_status_agree():
    request = Request(item_id="q1", question="Q?", family="scene_text")
    gen = make_generation(request, "<think>long", "length", model="m", prompt="p", prompt_tokens=3, completion_tokens=7)
    assert (gen.item_id, gen.think, gen.final_answer, gen.finish_reason) == ("q1", "long", "", "length")
    assert (gen.prompt, gen.prompt_tokens, gen.completion_tokens, gen.model) == ("p", 3, 7, "m")
    assert generation_status(gen) == TRUNCATED
    ok = make_generation(request, "<think>r</think>A", "stop", model="m")
    assert generation_status(ok) == ANSWER_OK
