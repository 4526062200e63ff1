"""The on-disk plan: the rows of each config from a decisions parquet file, memory bounded.

``RoutePlan(decisions_path)`` reads ``work/decisions.parquet`` (in pool order) and gives the same
rows as the in-memory ``route`` (rows.py). The grouping is a sort on disk of three compact columns
(image sha256, order, route), one bucket of BUCKET_ROWS decisions in memory at a time; the QA
fields are then read back by row group as rows are produced. Memory holds one bucket and one
window of decisions, whatever the pool size.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..images import ImageRef
from ..parquetio import open_parquet
from ..records import OUTCOME_COLUMNS
from ..spill import append_to_buckets
from ..vocab import ACCEPTED, CONFIG_NOTHINK, CONFIG_REJECTED, CONFIG_ROUTE, CONFIG_THINK, REJECTED, ROUTES
from .columns import RowBatch, row_batch
from .rows import RowPlan

# QA items read back per window; about one row group of work/decisions.parquet.
WINDOW = 2048
# Row groups kept decoded between windows (an image's QA items scattered over the pool re-read less).
CACHED_ROW_GROUPS = 4
# Decisions per bucket of RoutePlan's on-disk grouping: each bucket is grouped or sorted in
# memory, about 150 bytes per decision with numpy's temporaries (some 5 MiB), which bounds
# RoutePlan's memory whatever the pool size.
BUCKET_ROWS = 1 << 15
# Decisions per batch read from the decisions file in the first pass (larger batches cost Arrow
# memory and gain no speed).
READ_BATCH = 4096
# One decision in the first pass: its image, its row in the decisions file, its route's index.
_DECISION = np.dtype([("sha", "S64"), ("row", "<i8"), ("route", "i1")])
# One decision in the second pass: where its image first appears, and its own row.
_PLACED = np.dtype([("first", "<i8"), ("row", "<i8")])


def _prefix_keys(shas: np.ndarray) -> np.ndarray:
    """The first 16 hex digits of each 64-byte sha as a uint64 (any other byte maps to some
    value: equal strings always give equal keys)."""
    chars = shas.view(np.uint8).reshape(len(shas), 64)
    keys = np.zeros(len(shas), dtype=np.uint64)
    for position in range(16):  # one column at a time: no (N, 16) temporaries
        char = chars[:, position]
        nibble = (char & 0x0F) + 9 * (char >> 6)  # the hex digit's value, for 0-9, a-f and A-F
        keys = (keys << np.uint64(4)) | nibble.astype(np.uint64)
    return keys


def _group(shas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(shas, return_index=True, return_inverse=True)[1:]`` for 64-hex-digit strings,
    sorting 8-byte keys (``_prefix_keys``) instead of the strings; the full strings are compared
    afterwards and a collision falls back to sorting them."""
    _, first, image = np.unique(_prefix_keys(shas), return_index=True, return_inverse=True)
    image = image.reshape(-1)
    if not np.array_equal(shas, shas[first][image]):
        _, first, image = np.unique(shas, return_index=True, return_inverse=True)
        image = image.reshape(-1)
    return first, image


class RoutePlan:
    """The rows of each config, planned from a decisions parquet file in pool order.

    Rows group each config's decisions by image, groups ordered by the image's first appearance
    in the pool (any route), items within a group in pool order. The plan is a distribution sort
    on disk, in a temporary folder beside the decisions file or in ``scratch`` (removed by
    ``close()``; use the plan as a context manager), so memory is bounded by BUCKET_ROWS, not by
    the pool (but for the decisions file's footer, which pyarrow holds whole while the file is
    open: about 70 kB per row group, 17 bytes per decision with the work files' 4096-row groups):

    1. the ``image_sha256``, ``order`` and ``route`` columns are read in batches and each
       decision (sha, row, route) is appended to one of B bucket files by a hash of its image, so
       all decisions of an image share a bucket (B = decisions / ``bucket_rows``, rounded up);
    2. each bucket is grouped by image in memory: every accepted or rejected decision gets its
       image's first row, and (first, row) is appended to one of B files per route by range of
       first (first * B // decisions), so the files, read in order and each sorted, give the
       config's whole sequence;
    3. ``rows(config)`` sorts one range file at a time by (first, row) and yields RowPlans,
       reading the other columns of the needed decisions by row group, a column at a time;
       ``rows_of(configs)`` does it once for configs of one route (RS_think and RS_nothink), and
       ``batches_of`` makes the same rows a window at a time as Arrow columns (``columns.py``).
    """

    def __init__(self, decisions: Path, *, window: int = WINDOW, bucket_rows: int = BUCKET_ROWS,
                 scratch: Optional[Path] = None):
        self.path = Path(decisions)
        self.window = window
        self._file = open_parquet(self.path)
        meta = self._file.metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self._group_starts = np.cumsum([0] + sizes)
        self._rows = meta.num_rows
        self._buckets = max(1, -(-self._rows // bucket_rows))
        self._bucket_rows = bucket_rows
        # The last CACHED_ROW_GROUPS row groups read, per plan (an lru_cache of this instance's method).
        self._row_group = functools.lru_cache(maxsize=CACHED_ROW_GROUPS)(self._read_row_group)
        self._folder: Optional[tempfile.TemporaryDirectory] = tempfile.TemporaryDirectory(
            prefix=".route-", dir=scratch if scratch is not None else self.path.parent)
        self._dir = Path(self._folder.name)
        try:
            self._bucket_by_image()
            for bucket in range(self._buckets):
                self._place(bucket)
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return self._rows

    def close(self) -> None:
        """Delete the plan's bucket files and close the decisions file; ``rows`` cannot be used
        afterwards."""
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None
            self._file.close()
        self._row_group.cache_clear()

    def __enter__(self) -> "RoutePlan":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def _bucket_by_image(self) -> None:
        """Pass 1: every decision to its image's bucket file, checking order, sha and route.

        Decisions are read READ_BATCH at a time and distributed a bucket's worth at a time (one
        append per bucket file each time), so pass 1 makes about B * B appends, not B per batch.
        """
        value_set = pa.array(ROUTES)
        row, last_order, unknown = 0, None, None
        gathered: list[tuple[np.ndarray, np.ndarray]] = []  # (records, their buckets) per batch
        # Arrow and numpy do the work: no Python object per decision is made here, and one thread
        # keeps the allocator from growing per-thread arenas.
        for batch in self._file.iter_batches(batch_size=min(READ_BATCH, self._bucket_rows),
                                             columns=["image_sha256", "route", "order"], use_threads=False):
            n = batch.num_rows
            try:
                sha = batch.column(0).cast(pa.binary(64))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                sha = None
            if sha is None or sha.null_count:
                raise ValueError(f"{self.path}: image_sha256 must be 64 hex digits in every row")
            order = batch.column(2).to_numpy()
            steps = np.diff(order) if last_order is None else np.diff(order, prepend=last_order)
            if np.any(steps <= 0):
                bad = row + int(np.flatnonzero(steps <= 0)[0]) + (last_order is None)
                raise ValueError(
                    f"{self.path}: decisions are not in pool order (row {bad}, order {int(order[bad - row])})")
            last_order = order[-1]
            shas = np.frombuffer(sha.buffers()[1], dtype="S64")[sha.offset:sha.offset + n]
            records = np.empty(n, dtype=_DECISION)
            records["sha"] = shas
            records["row"] = np.arange(row, row + n)
            records["route"] = pc.fill_null(pc.index_in(batch.column(1), value_set=value_set), -1).to_numpy()
            if unknown is None and np.any(records["route"] < 0):
                unknown = row + int(np.flatnonzero(records["route"] < 0)[0])
            gathered.append((records, (_prefix_keys(shas) % np.uint64(self._buckets)).astype(np.int64)))
            row += n
            if sum(len(r) for r, _ in gathered) >= self._bucket_rows:
                self._distribute(gathered)
                gathered = []
        self._distribute(gathered)
        if unknown is not None:
            raise ValueError(f"{self.path}: row {unknown}: unknown route")

    def _distribute(self, gathered: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Append gathered decisions to their bucket files, each bucket's in pool order."""
        if not gathered:
            return
        append_to_buckets(np.concatenate([r for r, _ in gathered]), np.concatenate([b for _, b in gathered]),
                          self._buckets, lambda bucket: self._dir / f"images-{bucket}")  # rows stay in pool order

    def _place(self, bucket: int) -> None:
        """Pass 2: one image bucket's accepted and rejected decisions, with their images' first
        rows, into the range files of their route."""
        path = self._dir / f"images-{bucket}"
        if not path.exists():
            return
        records = np.fromfile(path, dtype=_DECISION)
        path.unlink()
        # The records are in pool order, so an image's first record holds its first row.
        first, image = _group(np.ascontiguousarray(records["sha"]))
        placed = np.empty(len(records), dtype=_PLACED)
        placed["first"] = records["row"][first][image]
        placed["row"] = records["row"]
        ranges = placed["first"] * self._buckets // self._rows
        for route_to in (ACCEPTED, REJECTED):
            mine = records["route"] == ROUTES.index(route_to)
            append_to_buckets(placed[mine], ranges[mine], self._buckets,
                              lambda part, route_to=route_to: self._dir / f"{route_to}-{part}")

    def _sequence(self, config: str) -> Iterator[np.ndarray]:
        """``config``'s decisions as (first, row) records in the order they are consumed, one
        range file at a time."""
        if self._folder is None:
            raise ValueError(f"{self.path}: this RoutePlan is closed")
        route_to = CONFIG_ROUTE[config]
        for part in range(self._buckets):
            path = self._dir / f"{route_to}-{part}"
            if path.exists():
                placed = np.fromfile(path, dtype=_PLACED)
                yield placed[np.lexsort((placed["row"], placed["first"]))]

    def rows(self, config: str) -> Iterator[RowPlan]:
        """``config``'s RowPlans in order, one per image."""
        for (plan,) in self.rows_of((config,)):
            yield plan

    def rows_of(self, configs: tuple[str, ...]) -> Iterator[tuple[RowPlan, ...]]:
        """The RowPlans of several configs of one route at once (``RS_think`` and ``RS_nothink``
        both take the accepted items): one tuple per image, its configs' plans in ``configs``'
        order, which share their sources and actions. Each decision is read once for all of them."""
        columns = _route_columns(configs)
        builders = tuple(_QA_BUILDERS[config] for config in configs)
        group: Optional[_Group] = None
        image = -1
        for placed in self._sequence(configs[0]):
            for start in range(0, len(placed), self.window):
                window = placed[start:start + self.window]
                values = self._read(window["row"], columns)
                for k, first in enumerate(window["first"].tolist()):
                    record = {name: values[name][k] for name in columns}
                    if first != image:
                        if group is not None:
                            yield group.plans()
                        group, image = _Group(record, len(configs)), first
                    group.add(record, [build(record) for build in builders])
        if group is not None:
            yield group.plans()

    def record_windows(self, configs: tuple[str, ...]) -> Iterator[tuple[pa.Table, np.ndarray]]:
        """The decisions of ``configs`` (of one route) in the order their rows take them, a
        window at a time: the columns the rows are made of (``_READ_COLUMNS``) and each
        decision's image's first row (equal within an image). A window holds about ``window``
        decisions and never cuts an image's: it ends where an image's decisions start, or (an
        image with more than ``window`` of them) where that image's end."""
        columns = _route_columns(configs)
        for placed in self._sequence(configs[0]):
            first = placed["first"]
            count = len(placed)
            starts = np.flatnonzero(np.r_[True, first[1:] != first[:-1]])
            start = 0
            while start < count:
                end = start + self.window
                if end < count:
                    image = int(np.searchsorted(starts, end, side="right")) - 1  # the image of decision ``end``
                    end = int(starts[image])
                    if end <= start:  # that image began the window: the window ends with it
                        end = int(starts[image + 1]) if image + 1 < len(starts) else count
                else:
                    end = count
                yield self._read_table(placed["row"][start:end], columns), first[start:end]
                start = end

    def batches_of(self, schemas: dict) -> Iterator[RowBatch]:
        """The rows of several configs of one route (``schemas``: config -> its Arrow schema), a
        window of decisions at a time, made a column at a time (``columns.row_batch``): the rows
        ``rows_of`` plans, in its order, with the values its RowPlans' ``to_row`` gives."""
        for table, first in self.record_windows(tuple(schemas)):
            yield row_batch(table, first, schemas)

    def _read(self, indices: np.ndarray, columns: tuple[str, ...]) -> dict[str, list]:
        """``columns`` of the records at ``indices`` (file row numbers), in that order, as Python
        lists (a column at a time: no dict per record)."""
        table = self._read_table(indices, columns)
        return {name: table.column(name).to_pylist() for name in columns}

    def _read_table(self, indices: np.ndarray, columns: tuple[str, ...]) -> pa.Table:
        """``columns`` of the records at ``indices`` (file row numbers), in that order."""
        groups = np.searchsorted(self._group_starts, indices, side="right") - 1
        by_group = np.argsort(groups, kind="stable")
        parts = []
        for group in np.unique(groups):
            wanted = indices[by_group][groups[by_group] == group]
            table = self._row_group(int(group)).select(list(columns))
            parts.append(table.take(pa.array(wanted - self._group_starts[group])))
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:  # back from row group order to the order asked
            restore = np.empty(len(indices), dtype=np.int64)
            restore[by_group] = np.arange(len(indices))
            table = table.take(pa.array(restore))
        return table

    def _read_row_group(self, group: int) -> pa.Table:
        return self._file.read_row_group(group, columns=list(OUTCOME_COLUMNS), use_threads=False)


# The decision columns each route's rows are made of (``rows.qa_entries`` and ``RowPlan.add``).
_COMMON_COLUMNS = ("id", "image", "image_sha256", "policy", "question", "references", "options", "family",
                   "source", "actions")
_READ_COLUMNS = {ACCEPTED: _COMMON_COLUMNS + ("think", "accepted_text", "verifier"),
                 REJECTED: _COMMON_COLUMNS + ("wrong_vlm", "reason")}


def _route_columns(configs: tuple[str, ...]) -> tuple[str, ...]:
    """The decision columns the rows of ``configs`` are made of; ValueError unless the configs
    take the items of one route."""
    routes = {CONFIG_ROUTE[config] for config in configs}
    if len(routes) != 1:
        raise ValueError(f"configs {configs} do not take the items of one route")
    return _READ_COLUMNS[routes.pop()]


# A config's QA entry from a decision record, as ``rows.qa_entries`` makes it from its Outcome
# (``records.outcome_from_record``: a missing text is "").
def _think_qa(r: dict) -> dict:
    return {"question": r["question"], "think": r["think"] or "", "answer": r["accepted_text"] or "",
            "org_answer": r["references"][0], "verifier": r["verifier"] or ""}


def _nothink_qa(r: dict) -> dict:
    return {"question": r["question"], "answer": r["accepted_text"] or "", "org_answer": r["references"][0],
            "verifier": r["verifier"] or ""}


def _rejected_qa(r: dict) -> dict:
    return {"question": r["question"], "answer": r["references"][0], "wrong_vlm": r["wrong_vlm"] or "",
            "reason": r["reason"]}


_QA_BUILDERS = {CONFIG_THINK: _think_qa, CONFIG_NOTHINK: _nothink_qa, CONFIG_REJECTED: _rejected_qa}


class _Group:
    """One image's row in each of several configs, filled from decision records in pool order
    (what ``RowPlan.add`` does with Outcomes, the sources and actions shared by the configs)."""

    def __init__(self, record: dict, configs: int):
        self.image = ImageRef(path=record["image"], sha256=record["image_sha256"])
        self.policy = record["policy"]
        self.qa: list[list[dict]] = [[] for _ in range(configs)]
        self.sources: list[dict] = []
        self.actions: list[str] = []

    def add(self, record: dict, entries: list[dict]) -> None:
        item_id = record["id"]
        if record["policy"] != self.policy:
            raise ValueError(f"item {item_id}: cleaning policy differs within one image row")
        for qa, entry in zip(self.qa, entries):
            qa.append(entry)
        self.sources.append({**record["source"], "family": record["family"],
                             "references": list(record["references"]), "options": list(record["options"] or ())})
        self.actions.extend(f"{action}:{item_id}" for action in record["actions"] or ())

    def plans(self) -> tuple[RowPlan, ...]:
        return tuple(RowPlan(image=self.image, qa=qa, sources=self.sources, actions=self.actions, policy=self.policy)
                     for qa in self.qa)
