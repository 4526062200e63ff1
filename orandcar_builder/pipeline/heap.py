"""The cyclic garbage collector kept off what a build holds for its whole length.

A build allocates millions of short-lived objects (rows, records, generations), which reference
counting frees; but their allocations start collections, and each full collection traverses every
object alive: the engine's state (the replay engine's recordings: hundreds of thousands at 200k
items), the modules, the caches. ``frozen_heap`` moves the objects alive when it starts into the
collector's permanent generation (``gc.freeze``) for the block, so collections traverse only what
the block made, and gives them back after (``gc.unfreeze``). Objects made in the block are still
collected; an object alive at the start that becomes cyclic garbage in the block is collected
after it. Where the heap is frozen already (a caller's own freeze), it is left as it is.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def frozen_heap() -> Iterator[None]:
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
