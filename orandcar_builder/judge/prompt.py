"""The judge's prompt: the template (versioned: a change in wording changes verdicts), the item
to judge and the text-only request made from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from ..records import Generation, Request
from ..verify.candidates import strip_reasoning
from ..vocab import JUDGE_FAMILY

JUDGE_PROMPT_VERSION = "1"

JUDGE_PROMPT_TEMPLATE = """\
You are checking a candidate answer against a reference answer.

Your only task is to compare the two. Do not solve the question yourself and do not use your own \
knowledge to decide what is true: a candidate that disagrees with the reference is WRONG even if \
you believe it is right. The question was asked about an image that you are not shown; you do not \
need it to compare the answers.

Reply CORRECT when the candidate gives the same answer as the reference (or as any one of the \
references, when several are given). Differences of letter case, spacing, punctuation, formatting \
or wording that keep the meaning do not matter, nor does an explanation added to the right answer.
Reply WRONG when the candidate gives a different answer, only part of the answer, several \
conflicting answers, or no answer at all. Numbers must agree in value: 0.5 and 1/2 agree, \
12 and 12.5 do not, and neither do answers that differ in sign, exponent or denominator.
Reply UNSURE only when the reference itself is unusable (empty, garbled or self-contradictory) or \
too ambiguous to compare against. Never reply UNSURE because the question is hard.

<question>
{question}
</question>

{references}

<candidate>
{candidate}
</candidate>

You may justify your decision in a sentence or two. The last line of your reply must be exactly \
one of "Verdict: CORRECT", "Verdict: WRONG" or "Verdict: UNSURE"."""

REFERENCE_BLOCK = "<reference>\n{reference}\n</reference>"


def judge_prompt(question: str, references: Union[str, Sequence[str]], candidate: str) -> str:
    """The exact text the judge receives: the template with the question, every reference (one
    block each) and the candidate inserted verbatim. Braces in the inserted texts are kept as is."""
    refs = [references] if isinstance(references, str) else list(references)
    blocks = "\n".join(REFERENCE_BLOCK.format(reference=ref) for ref in refs or [""])
    return JUDGE_PROMPT_TEMPLATE.format(question=question, references=blocks, candidate=candidate)


@dataclass(frozen=True)
class JudgeItem:
    """One answer to judge. ``candidate`` is the model's whole final answer (see
    ``candidate_answer``); ``family`` is used by calibration to stratify and by reports."""

    item_id: str
    question: str
    references: tuple[str, ...]
    candidate: str
    family: str = ""


JudgeItemLike = Union[JudgeItem, Sequence]


def as_judge_item(item: JudgeItemLike) -> JudgeItem:
    """A JudgeItem from itself or from ``(item_id, question, references, candidate[, family])``."""
    if isinstance(item, JudgeItem):
        return item
    if isinstance(item, (tuple, list)) and len(item) in (4, 5):
        item_id, question, references, candidate, *family = item
        refs = (references,) if isinstance(references, str) else tuple(references)
        return JudgeItem(str(item_id), question, refs, candidate, *family)
    raise TypeError(
        f"judge item {item!r}: expected a JudgeItem or (item_id, question, references, candidate"
        "[, family])"
    )


def candidate_answer(generation: Generation) -> str:
    """The text the judge grades and, when promoted, the stored answer: the model's final answer
    with any leaked reasoning removed, stripped. Never includes the ``think`` part."""
    return candidate_text(generation.final_answer)


def candidate_text(final_answer: str) -> str:
    """``candidate_answer`` of a final answer given as text (e.g. read back from decisions.parquet)."""
    return strip_reasoning(final_answer).strip()


def judge_request(item: JudgeItemLike) -> Request:
    """The text-only request for one item: the judge prompt as question, no image."""
    item = as_judge_item(item)
    prompt = judge_prompt(item.question, item.references, item.candidate)
    return Request(item_id=item.item_id, question=prompt, family=JUDGE_FAMILY, image=None)
