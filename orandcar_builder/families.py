"""Family registry: which rule decides a family's answers and which instruction its prompt gets.

The instruction is appended to the source question (see prompts.py); the stored question is the
result, byte for byte.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

from .errors import UnknownNameError

DEFAULT_SEPARATOR = "\n"  # between the question (with its options) and the instruction


@dataclass(frozen=True)
class Family:
    name: str
    rule: str
    instruction: str
    description: str
    separator: str = DEFAULT_SEPARATOR


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    if family.name in FAMILIES:
        raise ValueError(f"family {family.name!r} registered twice")
    FAMILIES[family.name] = family
    return family


def get_family(name: str) -> Family:
    """The registered family ``name``; UnknownNameError (with "did you mean") otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise UnknownNameError("family", name, FAMILIES) from None


register(
    Family(
        name="scene_text",
        rule="alnum",
        instruction="Reply with only the text shown in the image, exactly as written, and nothing else.",
        description="Scene-text recognition on word crops (IIIT5K, CUTE80, SVT, IC13/15, WordArt, Total-Text).",
    )
)
register(
    Family(
        name="doc_vqa",
        rule="anls",
        instruction="Answer with the words or number exactly as they appear in the document, and nothing else.",
        description="Questions about documents, infographics and scene text (DocVQA, InfographicVQA, ST-VQA).",
    )
)
register(
    Family(
        name="vqa",
        rule="vqa",
        instruction="Answer with a single word or a short phrase, and nothing else.",
        description="Open-ended questions about photographs (VQAv2, TextVQA, VizWiz, OK-VQA).",
    )
)
register(
    Family(
        name="chart_qa",
        rule="relaxed",
        instruction=(
            "Answer with only the value or label read from the chart; write a number as plain digits, "
            "without units, currency signs or thousands separators."
        ),
        description="Questions about charts and plots (ChartQA, PlotQA).",
    )
)
register(
    Family(
        name="multiple_choice",
        rule="choice",
        instruction="Reply with only the letter of the correct option.",
        description="Multiple-choice questions with lettered options (MMBench, MMMU, ScienceQA, AI2D, SEED).",
    )
)
register(
    Family(
        name="math",
        rule="math",
        instruction="Give only the final answer, as a number or a LaTeX expression, without any working.",
        description="Mathematical reasoning over figures (MathVista, MathVerse, MATH-V).",
    )
)
register(
    Family(
        name="generic",
        rule="exact",
        instruction="Reply with only the answer, as briefly as possible.",
        description="Any other question with a short answer that must match the reference exactly.",
    )
)


def use_families(families: Iterable[Family]) -> None:
    """Lay ``families`` over the registry (a family of the same name is replaced), with no
    restore: for a process that keeps them to its end (a Ray worker); a build uses
    ``families_in_use``."""
    for family in families:
        FAMILIES[family.name] = family


@contextlib.contextmanager
def families_in_use(families: Optional[Iterable[Family]]) -> Iterator[None]:
    """Make ``families`` (a build recipe's: changed instructions, separators or rules, and new
    families with an existing rule) the registry for the duration of the block, then restore the
    code's own. ``None`` changes nothing. A build runs inside it; so does each Ray worker."""
    if families is None:
        yield
        return
    saved = dict(FAMILIES)
    try:
        use_families(families)
        yield
    finally:
        FAMILIES.clear()
        FAMILIES.update(saved)


# An item that carries lettered options (its own, or rendered by the multiple-choice
# normalisation of the cleaning stage) has a bare letter as its reference, whatever its family:
# it is decided by the option-letter rule, not by the family's free-text rule.
OPTIONS_RULE = "choice"


def rule_for(family: str, options=None) -> str:
    """The rule that decides an item of ``family``: ``choice`` when it has options, else the
    family's own rule."""
    rule = get_family(family).rule
    return OPTIONS_RULE if options else rule
