"""The card's "Source datasets" section: the datasets the QA items come from, as the pool named
them (``clean_meta.sources[].dataset``), each with its QA items accepted and rejected, its splits
and its families. Counted from the shards themselves (only the ``clean_meta`` column, one batch at
a time): accepted items from ``RS_nothink`` (``RS_think`` holds the same ones), rejected from
``rejected``."""

from __future__ import annotations

from pathlib import Path

from ..dataset.info import shard_paths
from ..parquetio import open_parquet
from ..vocab import ACCEPTED, CONFIG_NOTHINK, CONFIG_REJECTED, REJECTED
from .markdown import NAME_MAX_CHARS, code_span, number, percent

COUNTED_CONFIGS = {CONFIG_NOTHINK: ACCEPTED, CONFIG_REJECTED: REJECTED}
UNNAMED = "(not named)"  # a source without a dataset name
BATCH_ROWS = 1024  # rows read at a time: the column of a large shard is never held whole


def _sources(folder: Path, config: str):
    for shard in shard_paths(folder, config):
        parquet = open_parquet(shard)
        if "clean_meta" not in parquet.schema_arrow.names:
            continue
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=["clean_meta"]):
            for meta in batch.column(0).to_pylist():
                for source in (meta or {}).get("sources") or []:
                    if isinstance(source, dict):
                        yield source


def source_counts(folder: Path) -> dict[str, dict]:
    """dataset name -> {"accepted", "rejected", "splits", "families"}, in order of first appearance."""
    out: dict[str, dict] = {}
    for config, route in COUNTED_CONFIGS.items():
        for source in _sources(Path(folder), config):
            name = str(source.get("dataset") or "") or UNNAMED
            counts = out.setdefault(name, {ACCEPTED: 0, REJECTED: 0, "splits": {}, "families": {}})
            counts[route] += 1
            for key, value in (("splits", source.get("split")), ("families", source.get("family"))):
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
