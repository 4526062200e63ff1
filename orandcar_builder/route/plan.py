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

from ..parquetio import open_parquet
from ..records import OUTCOME_COLUMNS, outcome_from_record
from ..vocab import ACCEPTED, CONFIG_ROUTE, REJECTED, ROUTES
from .rows import RowPlan, qa_entries

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


def _append(path: Path, records: np.ndarray) -> None:
    if len(records):
        with open(path, "ab") as fh:
            fh.write(records.tobytes())


class RoutePlan:
    """The rows of each config, planned from a decisions parquet file in pool order.

    Rows group each config's decisions by image, groups ordered by the image's first appearance
    in the pool (any route), items within a group in pool order. The plan is a distribution sort
    on disk, in a temporary folder beside the decisions file (removed by ``close()``; use the plan
    as a context manager), so memory is bounded by BUCKET_ROWS, not by the pool (but for the
    decisions file's footer, which pyarrow holds whole while the file is open: about 70 kB per
    row group, 17 bytes per decision with the work files' 4096-row groups):

    1. the ``image_sha256``, ``order`` and ``route`` columns are read in batches and each
       decision (sha, row, route) is appended to one of B bucket files by a hash of its image, so
       all decisions of an image share a bucket (B = decisions / ``bucket_rows``, rounded up);
    2. each bucket is grouped by image in memory: every accepted or rejected decision gets its
       image's first row, and (first, row) is appended to one of B files per route by range of
       first (first * B // decisions), so the files, read in order and each sorted, give the
       config's whole sequence;
    3. ``rows(config)`` sorts one range file at a time by (first, row) and yields RowPlans,
       reading the other columns of the needed decisions by row group.
    """

    def __init__(self, decisions: Path, *, window: int = WINDOW, bucket_rows: int = BUCKET_ROWS):
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
            prefix=".route-", dir=self.path.parent)
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
        records = np.concatenate([r for r, _ in gathered])
        buckets = np.concatenate([b for _, b in gathered])
        by_bucket = np.argsort(buckets, kind="stable")  # stable: rows stay in pool order
        records, buckets = records[by_bucket], buckets[by_bucket]
        bounds = np.searchsorted(buckets, np.arange(self._buckets + 1))
        for bucket in range(self._buckets):
            _append(self._dir / f"images-{bucket}", records[bounds[bucket]:bounds[bucket + 1]])

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
            ordered = np.argsort(ranges[mine], kind="stable")
            chosen, keys = placed[mine][ordered], ranges[mine][ordered]
            bounds = np.searchsorted(keys, np.arange(self._buckets + 1))
            for part in range(self._buckets):
                _append(self._dir / f"{route_to}-{part}", chosen[bounds[part]:bounds[part + 1]])

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
        plan: Optional[RowPlan] = None
        image = -1
        for placed in self._sequence(config):
            for start in range(0, len(placed), self.window):
                window = placed[start:start + self.window]
                records = self._read(window["row"])
                for first, index in window.tolist():
                    outcome = outcome_from_record(records[index])
                    qa = qa_entries(outcome)[config]
                    if first != image:
                        if plan is not None:
                            yield plan
                        plan, image = RowPlan(image=outcome.image, policy=outcome.policy), first
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

    def _read_row_group(self, group: int) -> pa.Table:
        return self._file.read_row_group(group, columns=list(OUTCOME_COLUMNS), use_threads=False)
