"""Rows in memory: a RowPlan per image and config, and ``route`` over outcomes held in memory.

One row per distinct image (by sha256) per config, holding that config's QA items of the image
in pool order; rows ordered by the image's first appearance in the pool. An image whose QA items
split between accepted and rejected appears in both, each row holding only its own items.
Accepted QA items go to both ``RS_think`` (with the reasoning) and ``RS_nothink`` (without).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..images import ImageRef
from ..records import Outcome
from ..vocab import ACCEPTED, CONFIG_NOTHINK, CONFIG_REJECTED, CONFIG_THINK, CONFIGS, FAILED, REJECTED


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

    def add(self, outcome: Outcome, qa: dict) -> None:
        if self.policy != outcome.policy:
            raise ValueError(f"item {outcome.item_id}: cleaning policy differs within one image row")
        self.qa.append(qa)
        self.sources.append({**outcome.source, "family": outcome.family,
                             "references": list(outcome.references), "options": list(outcome.options)})
        self.actions.extend(f"{action}:{outcome.item_id}" for action in outcome.actions)


def qa_entries(outcome: Outcome) -> dict[str, dict]:
    """The QA entry ``outcome`` contributes to each config it goes to."""
    reference = outcome.references[0]
    if outcome.route == ACCEPTED:
        nothink = {"question": outcome.question, "answer": outcome.accepted_text, "org_answer": reference,
                   "verifier": outcome.verifier}
        think = {"question": outcome.question, "think": outcome.think, "answer": outcome.accepted_text,
                 "org_answer": reference, "verifier": outcome.verifier}
        return {CONFIG_THINK: think, CONFIG_NOTHINK: nothink}
    if outcome.route == REJECTED:
        return {CONFIG_REJECTED: {"question": outcome.question, "answer": reference,
                             "wrong_vlm": outcome.wrong_vlm, "reason": outcome.reason}}
    raise ValueError(f"item {outcome.item_id}: unknown route {outcome.route!r}")


def route(outcomes: Iterable[Outcome]) -> dict[str, list[RowPlan]]:
    """Group outcomes into rows per config. ``outcomes`` must come in pool order."""
    rows: dict[str, dict[str, RowPlan]] = {config: {} for config in CONFIGS}
    image_order: dict[str, int] = {}
    last_order = -1
    for outcome in outcomes:
        if outcome.order <= last_order:
            raise ValueError(f"item {outcome.item_id}: outcomes are not in pool order")
        last_order = outcome.order
        image_order.setdefault(outcome.image.sha256, len(image_order))
        if outcome.route == FAILED:
            continue
        for config, qa in qa_entries(outcome).items():
            plan = rows[config].get(outcome.image.sha256)
            if plan is None:
                plan = rows[config][outcome.image.sha256] = RowPlan(image=outcome.image, policy=outcome.policy)
            plan.add(outcome, qa)
    return {
        config: sorted(by_sha.values(), key=lambda p: image_order[p.image.sha256])
        for config, by_sha in rows.items()
    }
