"""Decision records back into pool order, on disk.

A streaming executor hands decisions back in the order generations finish, which is not pool
order; each record carries its pool ``order``. ``sort_by_order`` rewrites such a parquet file in
pool order with memory bounded by ``bucket_rows`` records, not by the file: an early request that
finishes last costs nothing more than any other (no reorder buffer in front of the engine).

1. the ``order`` column alone is read, sorted, and cut into buckets of ``bucket_rows`` orders;
2. the file is read in batches and each batch's records are appended to their bucket's scratch
   files (Arrow IPC, one per bucket and batch that has records for it);
3. each bucket is read back, sorted by order, and written out.

Completion order is close to pool order (a window apart), so most batches touch one or two
buckets; a file already in order is renamed as it is.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ..files import naming, replaced_on_success
from ..parquetio import open_parquet
from .base import WORK_ROW_GROUP_ROWS

BUCKET_ROWS = 8192
ROW_GROUP = WORK_ROW_GROUP_ROWS  # rows per row group of the sorted file: as the other work files'


def sort_by_order(src: Path, dst: Path, *, bucket_rows: int = BUCKET_ROWS, row_group: int = ROW_GROUP) -> int:
    """Write ``src``'s records to ``dst`` sorted by their ``order`` column (unique per record);
    ``src`` is removed. Returns the number of records. ``dst`` appears only when complete."""
    src, dst = Path(src), Path(dst)
    source = open_parquet(src)
    schema = source.schema_arrow
    orders = np.concatenate([b.column(0).to_numpy() for b in source.iter_batches(columns=["order"])]
                            or [np.empty(0, dtype=np.int64)])
    if len(orders) == 0 or bool(np.all(np.diff(orders) > 0)):
        source.close()
        os.replace(src, dst)
        return len(orders)
    ranked = np.sort(orders)
    if np.any(np.diff(ranked) == 0):
        duplicate = int(ranked[np.flatnonzero(np.diff(ranked) == 0)[0]])
        raise ValueError(f"{src}: order {duplicate} appears more than once")
    bounds = ranked[::bucket_rows]  # the first order of each bucket
    scratch = Path(tempfile.mkdtemp(prefix=".order-", dir=dst.parent))
    with naming(dst), _removed(scratch):
        parts: list[list[Path]] = [[] for _ in bounds]
        for number, batch in enumerate(source.iter_batches(batch_size=bucket_rows)):
            buckets = np.searchsorted(bounds, batch.column(schema.get_field_index("order")).to_numpy(), side="right") - 1
            for bucket in np.unique(buckets):
                part = scratch / f"{bucket}-{number}.arrow"
                with ipc.new_file(part, schema) as writer:
                    writer.write_table(pa.Table.from_batches([batch]).filter(pa.array(buckets == bucket)))
                parts[int(bucket)].append(part)
        source.close()
        with replaced_on_success(dst) as tmp, pq.ParquetWriter(tmp, schema, write_statistics=False) as writer:
            for files in parts:
                tables = []
                for part in files:
                    with ipc.open_file(part) as reader:
                        tables.append(reader.read_all())
                    part.unlink()
                if tables:
                    table = pa.concat_tables(tables)
                    table = table.take(pc.sort_indices(table, sort_keys=[("order", "ascending")]))
                    writer.write_table(table, row_group_size=row_group)
        src.unlink()
    return len(orders)


@contextmanager
def _removed(folder: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)
