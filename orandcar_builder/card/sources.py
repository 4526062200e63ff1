"""The card's "Source datasets" section: the datasets the QA items come from, as the pool named
them (``clean_meta.sources[].dataset``), each with its QA items accepted and rejected, its splits
and its families. Counted from the shards themselves (only the ``clean_meta`` column, one batch at
a time): accepted items from ``RS_nothink`` (``RS_think`` holds the same ones), rejected from
``rejected``. A batch whose sources have the written type is counted column-wise (Arrow groups the
(dataset, split, family) triples, with their count and first row); any other is read row by row,
with the same result."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ..dataset.info import shard_paths
from ..parquetio import open_parquet
from ..vocab import ACCEPTED, CONFIG_NOTHINK, CONFIG_REJECTED, REJECTED
from .markdown import NAME_MAX_CHARS, code_span, number, percent

COUNTED_CONFIGS = {CONFIG_NOTHINK: ACCEPTED, CONFIG_REJECTED: REJECTED}
UNNAMED = "(not named)"  # a source without a dataset name
BATCH_ROWS = 1024  # rows read at a time: the column of a large shard is never held whole


# The fields of a source the section counts by.
COUNTED_FIELDS = ("dataset", "split", "family")


def _sources(folder: Path, config: str) -> Iterator[tuple[Optional[str], Optional[str], Optional[str], int]]:
    """(dataset, split, family, how many) of the config's sources, each triple at its first
    appearance in the shards, in row order; a triple recurs once per batch it appears in."""
    for shard in shard_paths(folder, config):
        parquet = open_parquet(shard)
        if "clean_meta" not in parquet.schema_arrow.names:
            continue
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=["clean_meta"]):
            column = batch.column(0)
            counted = _counted(column) if _countable(column.type) else None
            yield from counted if counted is not None else _row_by_row(column)


def _countable(kind: pa.DataType) -> bool:
    """Whether ``clean_meta`` of this type holds a list of sources whose counted fields are text."""
    if not pa.types.is_struct(kind) or kind.get_field_index("sources") < 0:
        return False
    sources = kind.field("sources").type
    if not pa.types.is_list(sources) or not pa.types.is_struct(sources.value_type):
        return False
    source = sources.value_type
    return all(source.get_field_index(name) >= 0 and pa.types.is_string(source.field(name).type)
               for name in COUNTED_FIELDS)


def _counted(meta: pa.Array) -> list[tuple]:
    """The triples of ``_sources`` from one batch's ``clean_meta``, column-wise: a null
    ``clean_meta``, sources list or source counts nothing (as row by row)."""
    meta = meta.filter(meta.is_valid())
    lists = pc.struct_field(meta, "sources")
    flat = pc.list_flatten(lists.filter(lists.is_valid()))
    flat = flat.filter(flat.is_valid())
    if not len(flat):
        return []
    table = pa.table({name: pc.struct_field(flat, name) for name in COUNTED_FIELDS}).append_column(
        "row", pa.array(range(len(flat)), pa.int64()))
    groups = table.group_by(list(COUNTED_FIELDS), use_threads=False).aggregate([("row", "min"), ("row", "count")])
    groups = groups.sort_by("row_min")
    return list(zip(*(groups.column(name).to_pylist() for name in (*COUNTED_FIELDS, "row_count"))))


def _row_by_row(meta: pa.Array) -> Iterator[tuple]:
    for row in meta.to_pylist():
        for source in (row or {}).get("sources") or []:
            if isinstance(source, dict):
                yield source.get("dataset"), source.get("split"), source.get("family"), 1


def source_counts(folder: Path) -> dict[str, dict]:
    """dataset name -> {"accepted", "rejected", "splits", "families"}, in order of first appearance."""
    out: dict[str, dict] = {}
    for config, route in COUNTED_CONFIGS.items():
        for dataset, split, family, n in _sources(Path(folder), config):
            name = str(dataset or "") or UNNAMED
            counts = out.setdefault(name, {ACCEPTED: 0, REJECTED: 0, "splits": {}, "families": {}})
            counts[route] += n
            for key, value in (("splits", split), ("families", family)):
                if value:
                    counts[key][str(value)] = None
    return out


def source_rows(folder: Path) -> list[list[str]]:
    """The section's table: one row per source dataset, most QA items first (then by name)."""
    counts = source_counts(folder)
    rows = []
    for name, c in sorted(counts.items(), key=lambda kv: (-(kv[1][ACCEPTED] + kv[1][REJECTED]), kv[0])):
        total = c[ACCEPTED] + c[REJECTED]
        rows.append([code_span(name, NAME_MAX_CHARS) if name != UNNAMED else f"*{UNNAMED}*",
                     ", ".join(code_span(s, NAME_MAX_CHARS) for s in sorted(c["splits"])) or "–",
                     ", ".join(code_span(f, NAME_MAX_CHARS) for f in sorted(c["families"])) or "–",
                     number(total), number(c[ACCEPTED]), number(c[REJECTED]), percent(c[ACCEPTED], total)])
    return rows
