"""Route: turn per-QA outcomes into the rows of the three configs.

One row per distinct image (by sha256) per config, holding that config's QA items of the image
in pool order; rows ordered by the image's first appearance in the pool. An image whose QA items
split between accepted and rejected appears in both, each row holding only its own items.
Accepted QA items go to both ``RS_think`` (with the reasoning) and ``RS_nothink`` (without).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from .images import ImageRef

ACCEPTED = "accepted"
REJECTED = "rejected"


@dataclass(frozen=True)
class Outcome:
    """Everything routing needs about one QA item, in pool order."""

    order: int
    item_id: str
    image: ImageRef
    question: str  # the exact text the model received
    references: tuple[str, ...]
    options: tuple[str, ...]
    family: str
    source: dict  # {dataset, split, id, origin}
    policy: str
    actions: tuple[str, ...]
    route: str  # ACCEPTED or REJECTED
    think: str = ""
    answer: str = ""  # accepted: the candidate that passed (or the judge-promoted answer)
    verifier: str = ""  # accepted: the rule name, or "judge"
    wrong_vlm: str = ""  # rejected: what the model said
    reason: Optional[str] = None  # rejected: wrong_answer / unsure / truncated / no_answer


@dataclass
class RowPlan:
    """A row before its image bytes are read: the writer fills in the image."""

    image: ImageRef
    qa: list[dict] = field(default_factory=list)
    sources: list[dict] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    policy: str = ""

    def to_row(self, image_bytes: bytes) -> dict:
        return {
            "image": {"bytes": image_bytes, "path": self.image.name},
            "image_sha256": self.image.sha256,
            "qa": self.qa,
            "clean_meta": {"policy": self.policy, "sources": self.sources, "actions": self.actions},
        }


def _qa_entries(outcome: Outcome) -> dict[str, dict]:
    reference = outcome.references[0]
    if outcome.route == ACCEPTED:
        nothink = {"question": outcome.question, "answer": outcome.answer, "org_answer": reference,
                   "verifier": outcome.verifier}
        think = {"question": outcome.question, "think": outcome.think, "answer": outcome.answer,
                 "org_answer": reference, "verifier": outcome.verifier}
        return {"RS_think": think, "RS_nothink": nothink}
    if outcome.route == REJECTED:
        return {"rejected": {"question": outcome.question, "answer": reference,
                             "wrong_vlm": outcome.wrong_vlm, "reason": outcome.reason}}
    raise ValueError(f"item {outcome.item_id}: unknown route {outcome.route!r}")


def route(outcomes: Iterable[Outcome]) -> dict[str, list[RowPlan]]:
    """Group outcomes into rows per config. ``outcomes`` must come in pool order."""
    rows: dict[str, dict[str, RowPlan]] = {"RS_think": {}, "RS_nothink": {}, "rejected": {}}
    image_order: dict[str, int] = {}
    last_order = -1
    for outcome in outcomes:
        if outcome.order <= last_order:
            raise ValueError(f"item {outcome.item_id}: outcomes are not in pool order")
        last_order = outcome.order
        image_order.setdefault(outcome.image.sha256, len(image_order))
        source = {**outcome.source, "family": outcome.family, "references": list(outcome.references),
                  "options": list(outcome.options)}
        for config, qa in _qa_entries(outcome).items():
            plan = rows[config].get(outcome.image.sha256)
            if plan is None:
                plan = rows[config][outcome.image.sha256] = RowPlan(image=outcome.image, policy=outcome.policy)
            elif plan.policy != outcome.policy:
                raise ValueError(f"item {outcome.item_id}: cleaning policy differs within one image row")
            plan.qa.append(qa)
            plan.sources.append(source)
            plan.actions.extend(f"{action}:{outcome.item_id}" for action in outcome.actions)
    return {
        config: sorted(by_sha.values(), key=lambda p: image_order[p.image.sha256])
        for config, by_sha in rows.items()
    }
