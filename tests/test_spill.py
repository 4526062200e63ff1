"""SpillMap and SpillSet answer like a dict and a set, below their threshold (in memory) and
beyond it (SQLite scratch file, Bloom filter, batched inserts), and leave nothing behind."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orandcar_builder import spill
from orandcar_builder.spill import SpillMap, SpillSet

TRICKY = ["", "a\"b", "back\\slash", "line\nbreak", "tab\t", "é", "😀", "$.x", "\x01", "a" * 500, "u\u2028", "'"]


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(spill, "BATCH", 3)


@pytest.fixture
def colliding_bloom(monkeypatch):
    """Every key hits the same Bloom bit: every lookup past the spill asks SQLite."""
    monkeypatch.setattr(spill, "BLOOM_BYTES", 1)
    monkeypatch.setattr(spill, "_BLOOM_MASK", 0)


def test_below_threshold_stays_in_memory(tmp_path):
    with SpillMap(tmp_path, threshold=4) as seen:
        assert seen.first_seen("a", "1") is None
        assert seen.first_seen("b", "2") is None
        assert seen.first_seen("a", "3") == "1"
        assert seen.get("b") == "2" and seen.get("c") is None
        assert "a" in seen and "c" not in seen and len(seen) == 2
        assert not seen.spilled
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("threshold", [0, 1, 5])
def test_beyond_threshold_answers_the_same(tmp_path, small_batches, threshold):
    keys = [f"k{i}" for i in range(40)] + TRICKY
    with SpillMap(tmp_path, threshold=threshold) as seen:
        for i, key in enumerate(keys):
            assert seen.first_seen(key, f"v{i}") is None
        assert seen.spilled and len(seen) == len(keys)
        assert [p.name.startswith("spill-") for p in tmp_path.iterdir()] == [True]
        for i, key in enumerate(keys):
            assert seen.first_seen(key, "later") == f"v{i}"
            assert seen.get(key) == f"v{i}" and key in seen
        assert seen.get("never") is None and "never" not in seen
        assert len(seen) == len(keys)
    assert list(tmp_path.iterdir()) == []


def test_nul_in_keys_and_values_survives_the_spill(tmp_path, small_batches):
    """SQLite's json_each cuts text at U+0000 (a pool id may hold one, written "\\u0000"): such
    keys must neither collide on their prefix nor lose their repeats."""
    keys = ["x\x00a", "x\x00b", "x", "\x00", "", "y\x00"]
    with SpillMap(tmp_path, threshold=0) as seen:
        for i, key in enumerate(keys):
            assert seen.first_seen(key, f"v\x00{i}") is None
        for i, key in enumerate(keys):
            assert seen.first_seen(key, "later") == f"v\x00{i}"
        assert len(seen) == len(keys)


def test_bloom_false_positives_still_answer_right(tmp_path, small_batches, colliding_bloom):
    with SpillMap(tmp_path, threshold=2) as seen:
        for i in range(20):
            assert seen.first_seen(f"k{i}", str(i)) is None
        assert seen.get("k7") == "7" and seen.get("k20") is None
        assert seen.first_seen("k20", "x") is None and seen.first_seen("k20", "y") == "x"


def test_discard_makes_a_key_new_again(tmp_path, small_batches):
    with SpillSet(tmp_path, threshold=2) as seen:
        for key in ("a", "b", "c", "d", "e", "f", "g"):  # a..f inserted into SQLite, g pending
            assert seen.add(key)
        seen.discard("a")  # on disk
        seen.discard("g")  # pending
        seen.discard("zz")  # never seen: nothing happens
        assert len(seen) == 5 and "a" not in seen and "g" not in seen and "b" in seen
        assert seen.add("a") and seen.add("g") and not seen.add("b")
        assert len(seen) == 7


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["first_seen", "get", "discard"]),
                              st.sampled_from([f"k{i}" for i in range(12)] + TRICKY[:4]),
                              st.text(max_size=3)), max_size=80),
       threshold=st.integers(0, 6), batch=st.integers(1, 5), collide=st.booleans())
def test_spill_map_behaves_like_a_dict(tmp_path_factory, ops, threshold, batch, collide):
    model: dict[str, str] = {}
    saved = spill.BATCH, spill.BLOOM_BYTES, spill._BLOOM_MASK
    spill.BATCH = batch
    if collide:
        spill.BLOOM_BYTES, spill._BLOOM_MASK = 1, 0
    try:
        with SpillMap(tmp_path_factory.mktemp("spill"), threshold=threshold) as seen:
            for op, key, value in ops:
                if op == "first_seen":
                    assert seen.first_seen(key, value) == model.get(key)
                    model.setdefault(key, value)
                elif op == "get":
                    assert seen.get(key) == model.get(key)
                else:
                    seen.discard(key)
                    model.pop(key, None)
                assert len(seen) == len(model)
    finally:
        spill.BATCH, spill.BLOOM_BYTES, spill._BLOOM_MASK = saved


def test_no_directory_uses_a_private_temp_folder(small_batches):
    seen = SpillSet(threshold=1)
    for key in "abcde":
        seen.add(key)
    folder = seen._map._folder.name
    assert os.path.isdir(folder)
    seen.close()
    assert not os.path.exists(folder)
    seen.close()  # closing twice is harmless


@pytest.mark.parametrize("spilled", [False, True])
def test_a_closed_map_refuses_use(tmp_path, spilled):
    seen = SpillMap(tmp_path, threshold=0 if spilled else 10)
    seen.first_seen("a", "1")
    seen.close()
    with pytest.raises(ValueError, match="closed"):
        seen.first_seen("b", "2")
    with pytest.raises(ValueError, match="closed"):
        seen.get("a")
    assert list(tmp_path.iterdir()) == []


def test_negative_threshold_is_refused():
    with pytest.raises(ValueError, match="threshold must be >= 0, got -1"):
        SpillMap(threshold=-1)


def test_default_threshold_is_read_when_made(monkeypatch):
    monkeypatch.setattr(spill, "DEFAULT_THRESHOLD", 2)
    with SpillSet() as seen:
        for key in "abc":
            seen.add(key)
        assert seen.spilled


@pytest.mark.parametrize("count", [0, 1, 5, 6, 7, 23])
def test_spool_gives_back_its_records_in_order_once(tmp_path, monkeypatch, count):
    monkeypatch.setattr(spill, "SPOOL_BATCH", 3)  # several blocks, and a tail still in memory
    records = [(f"pool.jsonl:{i}", TRICKY[i % len(TRICKY)], ("a", None), {"origin": "x"} if i % 2 else None, i)
               for i in range(count)] + [("w", "reason", "detail", None)]
    with spill.Spool(tmp_path) as spool:
        for record in records:
            spool.append(record)
        assert len(spool) == len(records)
        assert list(spool.replay()) == records
        with pytest.raises(ValueError):
            list(spool.replay())
    assert list(tmp_path.iterdir()) == []  # an unnamed file: nothing left behind


def test_spool_refuses_records_once_read_back(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "SPOOL_BATCH", 2)
    with spill.Spool(tmp_path) as spool:
        spool.append((1,))
        replay = spool.replay()
        assert next(replay) == (1,)
        with pytest.raises(ValueError):
            for i in range(3):
                spool.append((i,))


def _repeats_of(keys: list[bytes]) -> list[tuple[int, int]]:
    first: dict[bytes, int] = {}
    out = []
    for position, key in enumerate(keys):
        if key in first:
            out.append((position, first[key]))
        else:
            first[key] = position
    return out


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.sampled_from([bytes([a, b, 0, 255]) for a in (0, 7, 255) for b in (1, 128)]) |
                     st.binary(min_size=4, max_size=4), max_size=300),
       batch=st.integers(1, 40), bucket_keys=st.integers(1, 50), expected=st.integers(0, 400))
def test_repeats_are_the_keys_seen_before_whatever_the_buckets(tmp_path_factory, keys, batch, bucket_keys, expected):
    import numpy as np

    tmp_path = tmp_path_factory.mktemp("repeats")
    with spill.Repeats(4, expected or None, tmp_path, bucket_keys=bucket_keys) as repeats:
        for start in range(0, len(keys), batch):
            part = keys[start:start + batch]
            repeats.add(np.array(part, dtype="S4"), np.arange(start, start + len(part)))
        assert list(repeats.repeats()) == _repeats_of(keys)
    assert os.listdir(tmp_path) == []  # the bucket files are gone


def test_repeats_keep_a_bounded_number_of_entries_in_memory(tmp_path):
    import numpy as np

    keys = np.array([f"{i % 5000:064d}".encode() for i in range(20_000)], dtype="S64")
    with spill.Repeats(64, len(keys), tmp_path, bucket_keys=1000) as repeats:
        for start in range(0, len(keys), 700):
            repeats.add(keys[start:start + 700], np.arange(start, min(start + 700, len(keys))))
            assert repeats._count <= 1000 + 700
        assert repeats.buckets == 20 and len(os.listdir(tmp_path)) == 1
        found = list(repeats.repeats())
    assert len(found) == 15_000 and found[0] == (5000, 0) and found[-1] == (19_999, 4999)
    assert os.listdir(tmp_path) == []
