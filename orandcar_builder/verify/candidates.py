"""Which parts of a model's answer a rule is tried on."""

from __future__ import annotations

import re

CANDIDATES = ("full", "first_line", "first_paragraph")
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def strip_reasoning(text: str) -> str:
    """Remove reasoning that leaked into an answer: whole ``<think>..</think>`` blocks, and
    everything up to a stray closing ``</think>`` whose opening tag was in the prompt."""
    text = _THINK_BLOCK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text


def candidates(answer: str) -> list[tuple[str, str]]:
    """The answer as a whole, its first line and its first paragraph, each stripped; a candidate
    equal to an earlier one is not repeated. An empty answer has no candidates."""
    full = strip_reasoning(answer).strip()
    if not full:
        return []
    out = [("full", full)]
    first_line = full.split("\n", 1)[0].strip()
    first_paragraph = _PARAGRAPH_BREAK.split(full, 1)[0].strip()
    seen = {full}
    for label, text in (("first_line", first_line), ("first_paragraph", first_paragraph)):
        if text and text not in seen:
            out.append((label, text))
            seen.add(text)
    return out
