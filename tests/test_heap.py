"""``pipeline.heap.frozen_heap``: the objects alive at its start are frozen for the block only, and
a freeze made by the caller is left alone."""

from __future__ import annotations

import gc

from orandcar_builder.pipeline.heap import frozen_heap


class Node:
    def __init__(self):
        self.me = self  # a cycle: only the cyclic collector frees it


def test_the_heap_is_frozen_for_the_block_and_given_back():
    gc.collect()
    before = gc.get_freeze_count()
    assert before == 0
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        made = Node()
        del made
        assert gc.collect() >= 1  # what the block makes is still collected
    assert gc.get_freeze_count() == 0


def test_a_freeze_of_the_caller_is_left_as_it_is():
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with frozen_heap():
            pass
        assert gc.get_freeze_count() == count  # not unfrozen by the block
    finally:
        gc.unfreeze()
