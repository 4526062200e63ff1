"""Opening parquet files that are read whole, row group after row group.

pyarrow's ``ParquetFile`` pre-buffers by default: it keeps the column chunks of every row group
it has read until the file object is dropped, so reading a file through holds memory in
proportion to the file (all of a 256 MiB shard in validate, all of work/decisions.parquet in
routing). Every reader that walks a whole file opens it here, without pre-buffering.
"""

from __future__ import annotations

import os
from typing import Union

import pyarrow.parquet as pq


def open_parquet(path: Union[str, os.PathLike]) -> pq.ParquetFile:
    """``pq.ParquetFile(path)`` that holds no more than the row group being read."""
    return pq.ParquetFile(path, pre_buffer=False)
