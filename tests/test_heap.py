"""heap.objects_before_frozen: the objects alive before the block are not traversed by the cyclic
collector in it, a cycle made in the block is still collected, the heap is unfrozen after (also
on an error), and a heap frozen by the caller stays frozen."""

from __future__ import annotations

import gc
import weakref

import pytest

from orandcar_builder.heap import objects_before_frozen, release_free_memory


class Node:
    pass


def test_the_heap_is_frozen_in_the_block_only_and_cycles_made_in_it_are_collected():
    assert gc.get_freeze_count() == 0
    with objects_before_frozen():
        assert gc.get_freeze_count() > 0
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made in the block
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
    assert gc.get_freeze_count() == 0
    with pytest.raises(KeyError):
        with objects_before_frozen():
            raise KeyError("x")
    assert gc.get_freeze_count() == 0


def test_a_heap_frozen_by_the_caller_stays_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with objects_before_frozen():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_freed_heap_memory_goes_back_to_the_system():
    """Blocks freed inside glibc's heap stay resident until ``release_free_memory`` trims it (run
    in a fresh process: the test's own heap is not touched)."""
    import subprocess
    import sys

    from orandcar_builder.heap import _malloc_trim

    if _malloc_trim() is None:
        pytest.skip("no malloc_trim in this C library")
    program = """if True:
        import ctypes, numpy as np
        from orandcar_builder.heap import release_free_memory
        def rss():
            with open('/proc/self/status') as fh:
                return next(int(line.split()[1]) for line in fh if line.startswith('VmRSS'))
        ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: blocks under 1 MiB on the heap
        blocks = [np.ones(100_000) for _ in range(200)]  # 160 MB in blocks of 800 kB
        pinned = np.ones(100_000)  # above them: the heap's top is not free
        del blocks
        freed = rss()
        release_free_memory()
        print(freed - rss())
    """
    released_kb = int(subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                                     check=True).stdout.strip())
    assert released_kb > 100_000
    release_free_memory()  # and in this process: harmless
