"""Work-dir files a stage writes, each under a temporary name renamed into place when complete
(or removed when the stage fails): JSON lines, Parquet appended in chunks, and the replay export
of the generations."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..executors.base import CHUNK_SIZE


class JsonlFile:
    def __init__(self, path: Path, *, fsync: bool = False):
        self.path, self.fsync = Path(path), fsync
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.fh = open(self.tmp, "w", encoding="utf-8", newline="\n")
        self.lines = 0

    def write(self, record: dict) -> None:
        self.fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.lines += 1

    def commit(self) -> None:
        if self.fsync:
            self.fh.flush()
            os.fsync(self.fh.fileno())
        self.fh.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)


class ParquetFile:
    """Rows appended in chunks (one row group each) to a parquet file with a fixed schema."""

    def __init__(self, path: Path, schema: pa.Schema, *, chunk: int = CHUNK_SIZE):
        self.path, self.schema, self.chunk = Path(path), schema, chunk
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        # No column statistics: nothing filters these work files, and the writer would hold every
        # row group's min/max strings (its footer) in memory until it closes.
        self.writer = pq.ParquetWriter(self.tmp, schema, write_statistics=False)
        self.buffer: list[dict] = []
        self.rows = 0

    def add(self, row: dict) -> None:
        self.buffer.append(row)
        if len(self.buffer) >= self.chunk:
            self.flush()

    def write_rows(self, rows: list[dict]) -> None:
        self.flush()
        if rows:
            self.writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))
            self.rows += len(rows)

    def flush(self) -> None:
        if self.buffer:
            rows, self.buffer = self.buffer, []
            self.write_rows(rows)

    def commit(self) -> None:
        self.flush()
        self.writer.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.writer.close()
        self.tmp.unlink(missing_ok=True)


class WorkFiles:
    """Work-dir files written together: committed all at once, or removed on an error."""

    def __init__(self, **files):
        self.files = files

    def __getattr__(self, name: str):
        try:
            return self.__dict__["files"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __enter__(self) -> "WorkFiles":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for f in self.files.values():
            if f is not None:
                (f.abort if exc_type is not None else f.commit)()
