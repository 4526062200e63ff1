"""Route: turn per-QA outcomes into the rows of the three configs.

One row per distinct image (by sha256) per config, holding that config's QA items of the image
in pool order; rows ordered by the image's first appearance in the pool. An image whose QA items
split between accepted and rejected appears in both, each row holding only its own items.
Accepted QA items go to both ``RS_think`` (with the reasoning) and ``RS_nothink`` (without).

Two ways in, same rows out:

- ``route(outcomes)``: outcomes held in memory (small pools, tests);
- ``RoutePlan(decisions_path)``: a decisions parquet file (``work/decisions.parquet``, in pool
  order). The grouping is computed from three compact columns (image sha256, order, route) with
  numpy; the QA fields are then read back by row group as rows are produced, so memory holds
  the compact columns and one window of decisions, never every outcome.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .images import ImageRef

ACCEPTED = "accepted"
REJECTED = "rejected"
# A QA item with no outcome: its generation failed (the reason is recorded); it is not routed and a
# rerun asks for it again.
FAILED = "failed"
ROUTES = (ACCEPTED, REJECTED, FAILED)
CONFIG_ROUTE = {"RS_think": ACCEPTED, "RS_nothink": ACCEPTED, "rejected": REJECTED}


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


SOURCE_TYPE = pa.struct([("dataset", pa.string()), ("split", pa.string()), ("id", pa.string()),
                         ("origin", pa.string())])
# The columns of a decision record that describe its outcome (``outcome_record``); ``think``
# is the generation's reasoning, which an accepted outcome carries.
OUTCOME_FIELDS: tuple[pa.Field, ...] = (
    pa.field("order", pa.int64()),
    pa.field("id", pa.string()),
    pa.field("family", pa.string()),
    pa.field("image_sha256", pa.string()),
    pa.field("image", pa.string()),
    pa.field("question", pa.string()),
    pa.field("references", pa.list_(pa.string())),
    pa.field("options", pa.list_(pa.string())),
    pa.field("source", SOURCE_TYPE),
    pa.field("policy", pa.string()),
    pa.field("actions", pa.list_(pa.string())),
    pa.field("think", pa.string()),
    pa.field("route", pa.string()),
    pa.field("answer", pa.string()),
    pa.field("verifier", pa.string()),
    pa.field("wrong_vlm", pa.string()),
    pa.field("reason", pa.string()),
)
OUTCOME_COLUMNS = tuple(f.name for f in OUTCOME_FIELDS)


def outcome_record(outcome: Outcome) -> dict:
    """The outcome's columns of a decision record (see OUTCOME_FIELDS), except ``think``,
    which the record takes from the generation."""
    return {
        "order": outcome.order, "id": outcome.item_id, "family": outcome.family,
        "image_sha256": outcome.image.sha256, "image": outcome.image.path,
        "question": outcome.question, "references": list(outcome.references),
        "options": list(outcome.options), "source": dict(outcome.source), "policy": outcome.policy,
        "actions": list(outcome.actions), "route": outcome.route, "answer": outcome.answer,
        "verifier": outcome.verifier, "wrong_vlm": outcome.wrong_vlm, "reason": outcome.reason,
    }


def outcome_from_record(record: dict) -> Outcome:
    """The Outcome a decision record describes (the inverse of ``outcome_record``)."""
    route_to = record["route"]
    return Outcome(
        order=record["order"], item_id=record["id"],
        image=ImageRef(path=record["image"], sha256=record["image_sha256"]),
        question=record["question"], references=tuple(record["references"]),
        options=tuple(record["options"] or ()), family=record["family"],
        source=dict(record["source"]), policy=record["policy"], actions=tuple(record["actions"] or ()),
        route=route_to, think=(record["think"] or "") if route_to == ACCEPTED else "",
        answer=record["answer"] or "", verifier=record["verifier"] or "",
        wrong_vlm=record["wrong_vlm"] or "", reason=record["reason"],
    )


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
        if outcome.route == FAILED:
            continue
        for config, qa in _qa_entries(outcome).items():
            plan = rows[config].get(outcome.image.sha256)
            if plan is None:
                plan = rows[config][outcome.image.sha256] = RowPlan(image=outcome.image, policy=outcome.policy)
            plan.add(outcome, qa)
    return {
        config: sorted(by_sha.values(), key=lambda p: image_order[p.image.sha256])
        for config, by_sha in rows.items()
    }


# QA items read back per window; about one row group of work/decisions.parquet.
WINDOW = 2048
# Row groups kept decoded between windows (an image's QA items scattered over the pool re-read less).
CACHED_ROW_GROUPS = 4


def _group(shas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(shas, return_index=True, return_inverse=True)`` for 64-hex-digit strings,
    sorting 8-byte keys (the first 16 hex digits) instead of the strings; the full strings are
    compared afterwards and a collision falls back to sorting them."""
    if not len(shas):
        return shas, np.empty(0, np.int64), np.empty(0, np.int64)
    chars = shas.view(np.uint8).reshape(len(shas), 64)
    keys = np.zeros(len(shas), dtype=np.uint64)
    for position in range(16):  # one column at a time: no (N, 16) temporaries
        char = chars[:, position]
        nibble = (char & 0x0F) + 9 * (char >> 6)  # the hex digit's value, for 0-9, a-f and A-F
        keys = (keys << np.uint64(4)) | nibble.astype(np.uint64)
    unique, first, image = np.unique(keys, return_index=True, return_inverse=True)
    image = image.reshape(-1)
    if not np.array_equal(shas, shas[first][image]):
        return np.unique(shas, return_index=True, return_inverse=True)
    return unique, first, image


class RoutePlan:
    """The rows of each config, planned from a decisions parquet file in pool order.

    Construction reads only ``image_sha256``, ``order`` and ``route`` (about 90 bytes per QA
    item as numpy arrays) and computes, per config, the order in which decision rows are consumed: grouped by
    image, groups ordered by the image's first appearance in the pool (any route), items within a
    group in pool order. ``rows(config)`` then yields RowPlans, reading the other columns of the
    needed decisions by row group.
    """

    def __init__(self, decisions: Path, *, window: int = WINDOW):
        self.path = Path(decisions)
        self.window = window
        self._file = pq.ParquetFile(self.path)
        meta = self._file.metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self._group_starts = np.cumsum([0] + sizes)
        shas, routes, orders = [], [], []
        value_set = pa.array(ROUTES)
        # Arrow and numpy do the grouping work: no Python object per decision is made here, and
        # one thread keeps the allocator from growing per-thread arenas.
        for batch in self._file.iter_batches(batch_size=4096, columns=["image_sha256", "route", "order"],
                                             use_threads=False):
            try:
                sha = batch.column(0).cast(pa.binary(64))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise ValueError(f"{self.path}: image_sha256 must be 64 hex digits in every row") from None
            shas.append(np.frombuffer(sha.buffers()[1], dtype="S64")[sha.offset:sha.offset + len(sha)].copy())
            routes.append(pc.fill_null(pc.index_in(batch.column(1), value_set=value_set), -1).to_numpy().astype(np.int8))
            orders.append(batch.column(2).to_numpy())
        sha_all = np.concatenate(shas) if shas else np.empty(0, "S64")
        del shas
        self._route = np.concatenate(routes) if routes else np.empty(0, np.int8)
        order = np.concatenate(orders) if orders else np.empty(0, np.int64)
        if len(order) > 1 and not np.all(np.diff(order) > 0):
            bad = int(np.flatnonzero(np.diff(order) <= 0)[0]) + 1
            raise ValueError(f"{self.path}: decisions are not in pool order (row {bad}, order {int(order[bad])})")
        unknown = np.flatnonzero(self._route < 0)
        if len(unknown):
            raise ValueError(f"{self.path}: row {int(unknown[0])}: unknown route")
        _, first, image = _group(sha_all)
        del sha_all
        self._image = image.reshape(-1)  # per decision: its image's number
        self._first = first[self._image]  # per decision: where its image first appears
        self._cache: OrderedDict[int, pa.Table] = OrderedDict()

    def __len__(self) -> int:
        return len(self._route)

    def sequence(self, config: str) -> np.ndarray:
        """Indices of the decisions that make up ``config``'s rows, in the order they are consumed."""
        selected = np.flatnonzero(self._route == ROUTES.index(CONFIG_ROUTE[config]))
        return selected[np.lexsort((selected, self._first[selected]))]

    def rows(self, config: str) -> Iterator[RowPlan]:
        """``config``'s RowPlans in order, one per image."""
        sequence = self.sequence(config)
        plan: Optional[RowPlan] = None
        image = -1
        for start in range(0, len(sequence), self.window):
            window = sequence[start:start + self.window]
            records = self._read(window)
            for index in window:
                outcome = outcome_from_record(records[int(index)])
                qa = _qa_entries(outcome)[config]
                if self._image[index] != image:
                    if plan is not None:
                        yield plan
                    plan, image = RowPlan(image=outcome.image, policy=outcome.policy), self._image[index]
                plan.add(outcome, qa)
        if plan is not None:
            yield plan

    def _read(self, indices: np.ndarray) -> dict[int, dict]:
        """The records at ``indices`` (file row numbers), converted to Python only for those rows."""
        groups = np.searchsorted(self._group_starts, indices, side="right") - 1
        records: dict[int, dict] = {}
        for group in np.unique(groups):
            wanted = indices[groups == group]
            table = self._row_group(int(group))
            rows = table.take(pa.array(wanted - self._group_starts[group])).to_pylist()
            records.update(zip(wanted.tolist(), rows))
        return records

    def _row_group(self, group: int) -> pa.Table:
        if group in self._cache:
            self._cache.move_to_end(group)
            return self._cache[group]
        table = self._file.read_row_group(group, columns=list(OUTCOME_COLUMNS), use_threads=False)
        self._cache[group] = table
        if len(self._cache) > CACHED_ROW_GROUPS:
            self._cache.popitem(last=False)
        return table
