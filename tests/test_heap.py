"""heap.objects_before_frozen: the objects alive before the block are not traversed by the cyclic
collector in it, a cycle made in the block is still collected, the heap is unfrozen after (also
on an error), and a heap frozen by the caller stays frozen."""

from __future__ import annotations

import gc
import weakref

import pytest

from orandcar_builder.heap import objects_before_frozen


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
