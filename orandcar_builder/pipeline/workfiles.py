"""Work-dir files a stage writes, each under a temporary name renamed into place when complete
(or removed when the stage fails): Parquet appended in chunks (``ParquetFile``), and ``WorkFiles``,
which commits a stage's files together. JSON lines are ``files.JsonLinesFile`` and the replay
export is ``engines.replay.ReplayWriter``: all three are ``files.StagedFile``s."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..executors.base import CHUNK_SIZE
from ..files import StagedFile, naming


class ParquetFile(StagedFile):
    """Rows appended in chunks (one row group each) to a parquet file with a fixed schema, staged
    under ``path`` + ``suffix``."""

    def __init__(self, path: Path, schema: pa.Schema, *, chunk: int = CHUNK_SIZE, suffix: str = ".tmp"):
        super().__init__(path, suffix=suffix)
        self.schema, self.chunk = schema, chunk
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
            with naming(self.path):
                self.writer.write_table(pa.Table.from_pylist(rows, schema=self.schema))
            self.rows += len(rows)

    def flush(self) -> None:
        if self.buffer:
            rows, self.buffer = self.buffer, []
            self.write_rows(rows)

    def commit(self) -> None:
        self.flush()
        super().commit()

    def close(self, *, sync: bool) -> None:
        with naming(self.path):
            self.writer.close()


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
