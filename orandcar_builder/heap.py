"""Keeping the cyclic garbage collector off the objects a build already holds.

After generation a build holds hundreds of thousands of live objects (at 200k items), and the
steps after it (write, card, validate, review page) allocate many short-lived ones: each full
collection those allocations start traverses every live object, some 2.5 s of the write stage and
0.5 s of the card at 200k, though the new objects are freed by their reference counts.
``objects_before_frozen()`` moves the objects alive before a block to the permanent generation
(``gc.freeze``) for the block: collections in it traverse only the objects made in it, which are
still collected as before. Where the heap is frozen already (a caller froze it), it is left so.
"""

from __future__ import annotations

import functools
import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def objects_before_frozen() -> Iterator[None]:
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``), where there is one.

    A stage ends having freed what it held (the generate stage: its keys, its batches), but glibc
    keeps freed memory inside its heap for the next allocation unless it lies at the heap's top, so
    the next stage starts from a resident size that carries the last one's peak. Called between
    stages; a no-op on other C libraries."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim`` from the process's own symbols, or None (another C library)."""
    import ctypes

    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # TypeError: Windows takes no None
        return None
    function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
    return function
