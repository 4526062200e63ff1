"""The Hub-layout writer: ``<config>/train-XXXXX-of-YYYYY.parquet`` shards.

Each shard is a parquet file whose schema carries the datasets features metadata, so
``load_dataset(folder, config)`` returns the documented features without a ``dataset_info``.
Rows are buffered up to a byte bound and flushed; shards are written under temporary names and
renamed once their total is known. Nothing here depends on the clock or the machine: the same rows
give the same bytes.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from .features import CONFIGS, SPLIT, features

DEFAULT_MAX_SHARD_BYTES = 256 * 1024 * 1024
# Small row groups keep a reader's memory low on image-heavy shards (datasets uses 100 for images).
ROW_GROUP_SIZE = 100
SHARD_PATTERN = "{split}-{index:05d}-of-{total:05d}.parquet"


def _row_bytes(row: dict) -> int:
    qa_text = sum(len(str(v)) for qa in row["qa"] for v in qa.values())
    return len(row["image"]["bytes"]) + qa_text + 256


@dataclass
class ConfigWriter:
    """Writes one config's rows into bounded shards; a context manager like datasets' ArrowWriter."""

    folder: Path
    config: str
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    _buffer: list[dict] = field(default_factory=list)
    _buffer_bytes: int = 0
    _temp_shards: list[Path] = field(default_factory=list)
    rows: int = 0
    qa: int = 0

    def __post_init__(self) -> None:
        self.schema = features(self.config).arrow_schema
        self.dir = Path(self.folder) / self.config
        self.dir.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> "ConfigWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            for path in self._temp_shards:
                path.unlink(missing_ok=True)

    def write(self, row: dict) -> None:
        self._buffer.append(row)
        self._buffer_bytes += _row_bytes(row)
        self.rows += 1
        self.qa += len(row["qa"])
        if self._buffer_bytes >= self.max_shard_bytes:
            self._flush()

    def _flush(self) -> None:
        table = pa.Table.from_pylist(self._buffer, schema=self.schema)
        path = self.dir / f".{SPLIT}-{len(self._temp_shards):05d}.parquet.partial"
        pq.write_table(table, path, row_group_size=ROW_GROUP_SIZE, compression="snappy")
        self._temp_shards.append(path)
        self._buffer, self._buffer_bytes = [], 0

    def finalize(self) -> list[Path]:
        """Flush, give the shards their final names; returns them. An empty config gets one
        empty shard so that its ``configs:`` entry still resolves."""
        if self._buffer or not self._temp_shards:
            self._flush()
        total = len(self._temp_shards)
        final = []
        for index, temp in enumerate(self._temp_shards):
            target = self.dir / SHARD_PATTERN.format(split=SPLIT, index=index, total=total)
            os.replace(temp, target)
            final.append(target)
        self._temp_shards = []
        return final


def write_dataset(folder: Path, rows_by_config: dict[str, Iterable[dict]], *,
                  max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> dict[str, dict]:
    """Write every config's rows into ``folder`` (its config subfolders are replaced).

    Returns ``{config: {"rows": n, "qa": n, "shards": [relative paths], "bytes": total}}``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    summary = {}
    for config in CONFIGS:
        target = folder / config
        if target.exists():
            shutil.rmtree(target)
        with ConfigWriter(folder, config, max_shard_bytes) as writer:
            for row in rows_by_config.get(config, ()):
                writer.write(row)
            shards = writer.finalize()
        summary[config] = {
            "rows": writer.rows,
            "qa": writer.qa,
            "shards": [str(p.relative_to(folder)) for p in shards],
            "bytes": sum(p.stat().st_size for p in shards),
        }
    return summary
