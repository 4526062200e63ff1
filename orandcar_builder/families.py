"""Family registry: which rule decides a family's answers and which instruction its prompt gets.

The instruction is appended to the source question (see prompts.py); the stored question is the
result, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UnknownNameError


@dataclass(frozen=True)
class Family:
    name: str
    rule: str
    instruction: str
    description: str


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    if family.name in FAMILIES:
        raise ValueError(f"family {family.name!r} registered twice")
    FAMILIES[family.name] = family
    return family


def get_family(name: str) -> Family:
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
