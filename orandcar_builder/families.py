"""Family registry: which rule decides a family's answers and which instruction its prompt gets.

The instruction is appended to the source question (see prompts.py); the stored question is the
result, byte for byte.

The registry is a value, ``Families``: an immutable, ordered mapping name -> ``Family``. The
code's own families are ``DEFAULT_FAMILIES``; a build recipe's changes make another value
(``overlay``), which the build config carries and hands to whatever needs it (the per-item
steps, the executors and their workers, the report). Nothing swaps a module global, so two
builds in one process, or a library call made outside any build, each see their own families.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Optional

from .errors import UnknownNameError

DEFAULT_SEPARATOR = "\n"  # between the question (with its options) and the instruction

# An item that carries lettered options (its own, or rendered by the multiple-choice
# normalisation of the cleaning stage) has a bare letter as its reference, whatever its family:
# it is decided by the option-letter rule, not by the family's free-text rule.
OPTIONS_RULE = "choice"


@dataclass(frozen=True)
class Family:
    name: str
    rule: str
    instruction: str
    description: str
    separator: str = DEFAULT_SEPARATOR


class Families(Mapping[str, Family]):
    """An immutable family registry: name -> ``Family``, in the order given. Looking up a name it
    lacks (``families[name]``) raises UnknownNameError (a KeyError) with "did you mean"; ``in``
    and ``get`` answer without one. Equal when they hold the same families; hashable; pickles
    (so it travels to worker processes and Ray actors as it is)."""

    __slots__ = ("_by_name",)

    def __init__(self, families: Iterable[Family] = ()):
        by_name: dict[str, Family] = {}
        for family in families:
            if not isinstance(family, Family):
                raise TypeError(f"a family registry holds families.Family records, not {family!r}")
            if family.name in by_name:
                raise ValueError(f"family {family.name!r} given twice")
            by_name[family.name] = family
        object.__setattr__(self, "_by_name", by_name)

    def __setattr__(self, name, value):
        raise AttributeError("a Families value cannot be changed; overlay() makes a new one")

    def __reduce__(self):
        return (Families, (tuple(self._by_name.values()),))

    def __getitem__(self, name: str) -> Family:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            raise UnknownNameError("family", str(name), self._by_name) from None

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._by_name
        except TypeError:  # an unhashable name is no family's
            return False

    def get(self, name, default=None):
        return self._by_name.get(name, default) if name in self else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Families):
            return self._by_name == other._by_name
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._by_name.items()))

    def __repr__(self) -> str:
        return f"Families({', '.join(self._by_name)})"

    def overlay(self, families: Optional[Iterable[Family]]) -> "Families":
        """A new registry: these families laid over this one's (a family of the same name is
        replaced where it stands, a new one comes after); ``None`` gives this one back. The
        families given must have distinct names."""
        if families is None:
            return self
        given = Families(families)
        merged = dict(self._by_name)
        merged.update(given._by_name)
        return Families(merged.values())

    def rule_for(self, family: str, options=None) -> str:
        """The rule that decides an item of ``family``: ``choice`` when it has options, else the
        family's own rule. An unknown family is an UnknownNameError, options or not."""
        rule = self[family].rule
        return OPTIONS_RULE if options else rule


DEFAULT_FAMILIES = Families((
    Family(
        name="scene_text",
        rule="alnum",
        instruction="Reply with only the text shown in the image, exactly as written, and nothing else.",
        description="Scene-text recognition on word crops (IIIT5K, CUTE80, SVT, IC13/15, WordArt, Total-Text).",
    ),
    Family(
        name="doc_vqa",
        rule="anls",
        instruction="Answer with the words or number exactly as they appear in the document, and nothing else.",
        description="Questions about documents, infographics and scene text (DocVQA, InfographicVQA, ST-VQA).",
    ),
    Family(
        name="vqa",
        rule="vqa",
        instruction="Answer with a single word or a short phrase, and nothing else.",
        description="Open-ended questions about photographs (VQAv2, TextVQA, VizWiz, OK-VQA).",
    ),
    Family(
        name="chart_qa",
        rule="relaxed",
        instruction=(
            "Answer with only the value or label read from the chart; write a number as plain digits, "
            "without units, currency signs or thousands separators."
        ),
        description="Questions about charts and plots (ChartQA, PlotQA).",
    ),
    Family(
        name="multiple_choice",
        rule="choice",
        instruction="Reply with only the letter of the correct option.",
        description="Multiple-choice questions with lettered options (MMBench, MMMU, ScienceQA, AI2D, SEED).",
    ),
    Family(
        name="math",
        rule="math",
        instruction="Give only the final answer, as a number or a LaTeX expression, without any working.",
        description="Mathematical reasoning over figures (MathVista, MathVerse, MATH-V).",
    ),
    Family(
        name="generic",
        rule="exact",
        instruction="Reply with only the answer, as briefly as possible.",
        description="Any other question with a short answer that must match the reference exactly.",
    ),
))
