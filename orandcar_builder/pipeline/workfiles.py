"""Work-dir files a stage writes, each under a temporary name renamed into place when complete
(or removed when the stage fails): Parquet appended in chunks (``ParquetFile``), and ``WorkFiles``,
which commits a stage's files together. JSON lines are ``files.JsonLinesFile`` and the replay
export is ``engines.replay.ReplayWriter``: all three are ``files.StagedFile``s."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..executors.base import CHUNK_SIZE, WORK_ROW_GROUP_ROWS
from ..files import StagedFile, naming

# A work file's row group ends at WORK_ROW_GROUP_ROWS (executors.base) or at this much Arrow data.
WORK_ROW_GROUP_BYTES = 16 * 1024 * 1024


class ParquetFile(StagedFile):
    """Rows appended to a parquet file with a fixed schema, staged under ``path`` + ``suffix``:
    made Arrow ``chunk`` rows (or one ``write_rows`` call) at a time and written in row groups of
    WORK_ROW_GROUP_ROWS rows or WORK_ROW_GROUP_BYTES of Arrow data, whichever comes first."""

    def __init__(self, path: Path, schema: pa.Schema, *, chunk: int = CHUNK_SIZE, suffix: str = ".tmp"):
        super().__init__(path, suffix=suffix)
        self.schema, self.chunk = schema, chunk
        # No column statistics: nothing filters these work files, and the writer would hold every
        # row group's min/max strings (its footer) in memory until it closes.
        self.writer = pq.ParquetWriter(self.tmp, schema, write_statistics=False)
        self.buffer: list[dict] = []
        self.tables: list[pa.Table] = []  # rows made Arrow, not yet written (one row group)
        self.table_rows = self.table_bytes = 0
        self.rows = 0

    def add(self, row: dict) -> None:
        self.buffer.append(row)
        if len(self.buffer) >= self.chunk:
            self._buffered()  # made Arrow; written with its row group

    def write_rows(self, rows: list[dict]) -> None:
        """Append ``rows``; they are made Arrow now and written with the next row group."""
        self._buffered()
        self._gather(rows)

    def write_table(self, table: pa.Table) -> None:
        """Append rows already made Arrow (this file's schema); written with the next row group."""
        if not table.schema.equals(self.schema):
            raise ValueError(f"{self.path}: a table of another schema cannot be appended")
        self._buffered()
        self._gather_table(table)

    def _gather(self, rows: list[dict]) -> None:
        if rows:
            self._gather_table(pa.Table.from_pylist(rows, schema=self.schema))

    def _gather_table(self, table: pa.Table) -> None:
        if table.num_rows:
            self.tables.append(table)
            self.table_rows += table.num_rows
            self.table_bytes += table.nbytes
            self.rows += table.num_rows
            if self.table_rows >= WORK_ROW_GROUP_ROWS or self.table_bytes >= WORK_ROW_GROUP_BYTES:
                self._write_group()

    def _buffered(self) -> None:
        if self.buffer:
            rows, self.buffer = self.buffer, []
            self._gather(rows)

    def _write_group(self) -> None:
        if self.tables:
            table = pa.concat_tables(self.tables)
            self.tables, self.table_rows, self.table_bytes = [], 0, 0
            with naming(self.path):
                self.writer.write_table(table, row_group_size=max(1, table.num_rows))

    def flush(self) -> None:
        """Write every row added so far (a row group of its own)."""
        self._buffered()
        self._write_group()

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
