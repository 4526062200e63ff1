"""Disk-backed "seen before?" structures whose memory does not grow with the number of keys.

A build must not hold per-item state in memory (its peak must not grow with the pool), yet a few
checks need every key seen so far: repeated QA ids, repeated images. ``SpillMap`` and ``SpillSet``
keep their keys in a dict while there are at most ``threshold`` of them, so small pools never touch
the disk. Past it every key moves to an SQLite file in a private temporary folder (under the
caller's ``directory``, e.g. the work dir, or else the system temp dir), and memory stays bounded:

- new keys gather in a dict of at most ``BATCH`` keys, inserted in one statement (SQLite parses
  them from one JSON object; a per-key INSERT costs twice as much, a commit per key ten times);
- a fixed-size Bloom filter (``BLOOM_BYTES``) answers "certainly new" for most new keys without
  asking SQLite; only a key it may have seen is looked up (a repeat, or a rare false positive);
- SQLite's page cache is ``CACHE_KIB``; the rest of the table lives in the file.

The file is scratch data: no journal, no fsync, one transaction that is never committed, and the
folder is removed on ``close()`` (or when the structure is garbage-collected). Keys and values are
str without lone surrogates (SQLite stores UTF-8); SQLite's JSON functions are needed (built in
since SQLite 3.38, and in the usual Python builds before). Not for use from several threads at once.

``Repeats`` answers the same question for fixed-width keys only once all are in (validate's
repeated images): keys and their positions gather in bucket files by a hash of the key, and each
bucket is sorted in numpy at the end, with no per-key SQLite insert.

``Spool`` is the fourth: records written once and read back once in order (a first pass over a
file keeps what it parsed for the second, which then decodes nothing), in an unnamed scratch file,
``SPOOL_BATCH`` records in memory at a time.

Kept rather than a library (issue 26, measured 2026-12-02 on 200,000 new keys): the closest kept
package, ``diskcache`` (SQLite too), writes each key in a transaction of its own: 20,000 adds took
4.0 s (1.2 s with its sync and journal off), i.e. 12-40 s for the 200,000 a ``SpillSet`` adds in
0.5 s, and it keeps no in-memory phase for small pools nor a filter for new keys. ``shelve``/``dbm``
(standard library) pickle every value, answer "seen?" from disk for every key, and which backend
exists depends on the platform (``dbm.dumb`` holds its whole index in memory). Bloom filter
packages (``pybloom-live``, last release 2022) would replace the twenty lines of ``_bloom_position``
and ``_set_bits`` only.
"""

from __future__ import annotations

import json
import marshal
import os
import sqlite3
import struct
import tempfile
from typing import Iterable, Iterator, Optional, Union

import numpy as np

# Keys kept in a dict before spilling to SQLite: a few MiB of short ids and their values.
DEFAULT_THRESHOLD = 32768
# New keys per INSERT once spilled.
BATCH = 4096
# The Bloom filter once spilled: 2**25 bits, one probe per key (two cost more than the lookups
# they save below several million keys). False positives, each one SQLite lookup: 0.3% at 100k
# keys, 3% at a million, 26% at ten million; never a wrong answer.
BLOOM_BYTES = 1 << 22
_BLOOM_MASK = BLOOM_BYTES * 8 - 1
# SQLite's page cache (KiB); pages beyond it are written to the scratch file.
CACHE_KIB = 4096

_PRAGMAS = ("journal_mode=OFF", "synchronous=OFF", "temp_store=FILE", "locking_mode=EXCLUSIVE",
            f"cache_size=-{CACHE_KIB}")


def _bloom_position(key: str) -> tuple[int, int]:
    """The byte of the Bloom filter that holds ``key``'s one probe, and the bit in it."""
    position = hash(key) & _BLOOM_MASK
    return position >> 3, 1 << (position & 7)


class SpillMap:
    """A str -> str map for "was this key seen before, and what was recorded then".

    ``first_seen(key, value)`` records ``value`` for a new key and returns None, or returns the
    value recorded when ``key`` was first seen. Up to ``threshold`` keys (None: DEFAULT_THRESHOLD,
    read when the map is made) everything is a dict; beyond, an SQLite table in a temporary
    folder under ``directory`` (None: the system temp dir). Use it as a context manager, or call
    ``close()``, which deletes the scratch folder.
    """

    def __init__(self, directory: Optional[Union[str, os.PathLike]] = None, *,
                 threshold: Optional[int] = None):
        threshold = DEFAULT_THRESHOLD if threshold is None else threshold
        if threshold < 0:
            raise ValueError(f"SpillMap threshold must be >= 0, got {threshold}")
        self.directory = directory
        self.threshold = threshold
        # Every key before the spill; after it, the new keys not yet inserted into SQLite.
        self._memory: dict[str, str] = {}
        self._count = 0  # keys held, in memory and on disk
        self._folder: Optional[tempfile.TemporaryDirectory] = None
        self._db: Optional[sqlite3.Connection] = None
        self._bloom = bytearray()
        self._closed = False

    def first_seen(self, key: str, value: str) -> Optional[str]:
        """None if ``key`` is new (``value`` is then recorded for it); else the value recorded
        when it was first seen (this ``value`` is ignored)."""
        memory = self._memory
        earlier = memory.get(key)
        if earlier is not None:
            return earlier
        if self._db is None:
            if self._closed:
                raise ValueError("this SpillMap is closed")
            memory[key] = value
            self._count += 1
            if self._count > self.threshold:
                self._spill()
            return None
        byte, bit = _bloom_position(key)
        if self._bloom[byte] & bit:
            row = self._db.execute("SELECT value FROM seen WHERE key = ?", (key,)).fetchone()
            if row is not None:
                return row[0]
        else:
            self._bloom[byte] |= bit
        memory[key] = value
        self._count += 1
        if len(memory) >= BATCH:
            self._flush()
        return None

    def get(self, key: str) -> Optional[str]:
        """The value recorded for ``key``, or None when it was never seen (or was discarded)."""
        earlier = self._memory.get(key)
        if earlier is not None:
            return earlier
        if self._db is None:
            if self._closed:
                raise ValueError("this SpillMap is closed")
            return None
        byte, bit = _bloom_position(key)
        if not self._bloom[byte] & bit:
            return None
        row = self._db.execute("SELECT value FROM seen WHERE key = ?", (key,)).fetchone()
        return row[0] if row is not None else None

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def discard(self, key: str) -> None:
        """Forget ``key`` (nothing happens if it is not held): it counts as new again."""
        if self._memory.pop(key, None) is not None:
            self._count -= 1
        elif self._db is not None:
            self._count -= self._db.execute("DELETE FROM seen WHERE key = ?", (key,)).rowcount

    def __len__(self) -> int:
        return self._count

    @property
    def spilled(self) -> bool:
        """True once the keys live in the SQLite file rather than in memory."""
        return self._db is not None

    def close(self) -> None:
        """Drop every key and delete the scratch folder; the map cannot be used afterwards."""
        self._closed = True
        self._memory = {}
        self._bloom = bytearray()
        try:
            if self._db is not None:
                self._db.close()  # the open transaction goes with the file
        finally:
            self._db = None
            if self._folder is not None:
                self._folder.cleanup()
                self._folder = None

    def __enter__(self) -> "SpillMap":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def _spill(self) -> None:
        """Move the dict's keys into a new SQLite file; from now on every key lives there."""
        self._folder = tempfile.TemporaryDirectory(prefix="spill-", dir=self.directory)
        # check_same_thread=False: a generator holding the map may be resumed from another thread.
        db = sqlite3.connect(os.path.join(self._folder.name, "seen.sqlite"), isolation_level=None,
                             check_same_thread=False)
        for pragma in _PRAGMAS:
            db.execute(f"PRAGMA {pragma}")
        db.execute("CREATE TABLE seen (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID")
        db.execute("BEGIN")  # one transaction for the map's whole life
        self._db = db
        self._bloom = bytearray(BLOOM_BYTES)
        self._set_bits(self._memory)
        self._flush()

    def _set_bits(self, keys: Iterable[str]) -> None:
        for key in keys:
            byte, bit = _bloom_position(key)
            self._bloom[byte] |= bit

    def _flush(self) -> None:
        """Insert the pending keys (all new) in one statement: SQLite reads them from a JSON object."""
        if self._memory:
            text = json.dumps(self._memory, ensure_ascii=False)
            if "\\u0000" in text:  # json_each would cut a key or value at U+0000: bind each pair
                self._db.executemany("INSERT INTO seen (key, value) VALUES (?, ?)", self._memory.items())
            else:
                self._db.execute("INSERT INTO seen (key, value) SELECT key, value FROM json_each(?)", (text,))
            self._memory = {}


class SpillSet:
    """A set of str keys with SpillMap's memory bound (it is a SpillMap with empty values)."""

    def __init__(self, directory: Optional[Union[str, os.PathLike]] = None, *,
                 threshold: Optional[int] = None):
        self._map = SpillMap(directory, threshold=threshold)

    def add(self, key: str) -> bool:
        """Add ``key``; True if it was new, False if it was already there."""
        return self._map.first_seen(key, "") is None

    def __contains__(self, key: str) -> bool:
        return key in self._map

    def discard(self, key: str) -> None:
        """Forget ``key`` (nothing happens if it is not held)."""
        self._map.discard(key)

    def __len__(self) -> int:
        return len(self._map)

    @property
    def spilled(self) -> bool:
        """True once the keys live in the SQLite file rather than in memory."""
        return self._map.spilled

    def close(self) -> None:
        """Drop every key and delete the scratch folder."""
        self._map.close()

    def __enter__(self) -> "SpillSet":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


# Records a Spool holds in memory before it writes them out as one block: few, so that what is
# read back and written out stays in the CPU caches (256 read back about twice as fast as 4096).
SPOOL_BATCH = 256
_BLOCK_HEADER = struct.Struct("<I")


class Spool:
    """Records appended once, then read back once in the same order, with memory bounded by
    ``SPOOL_BATCH`` records: a pass that must see a whole file before the next pass starts keeps
    what it found for the next instead of reading and decoding the file again.

    A record is a value ``marshal`` writes (tuples, str, int, float, None, dicts and lists of
    them): the fastest codec of the standard library for such values, and safe to read back here
    since only this process wrote the file. The file is an unnamed temporary file under
    ``directory`` (None: the system temp dir), gone once closed (or once the process ends, however
    it ends). ``append`` is not allowed after ``replay`` has started.
    """

    def __init__(self, directory: Optional[Union[str, os.PathLike]] = None):
        self.directory = directory
        self._batch: list = []
        self._file = None
        self._count = 0  # records written to the file
        self._blocks = 0
        self._replayed = False

    def append(self, record) -> None:
        batch = self._batch
        batch.append(record)
        if len(batch) >= SPOOL_BATCH:
            self._write()

    def __len__(self) -> int:
        return self._count + len(self._batch)

    def _write(self) -> None:
        if self._replayed:
            raise ValueError("records cannot be added to a Spool being read back")
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="spool-", dir=self.directory)
        block = marshal.dumps(self._batch)
        self._file.write(_BLOCK_HEADER.pack(len(block)))
        self._file.write(block)
        self._count += len(self._batch)
        self._blocks += 1
        self._batch = []

    def replay(self) -> Iterator:
        """The records in the order they were appended (once)."""
        if self._replayed:
            raise ValueError("a Spool is read back once")
        self._replayed = True
        tail, self._batch = self._batch, []
        if self._file is not None:
            fh = self._file
            fh.flush()
            fh.seek(0)
            read, size = fh.read, _BLOCK_HEADER.size
            for _ in range(self._blocks):
                (length,) = _BLOCK_HEADER.unpack(read(size))
                yield from marshal.loads(read(length))
        yield from tail

    def close(self) -> None:
        self._batch = []
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


def append_to_buckets(records: np.ndarray, buckets: np.ndarray, count: int, path_of) -> None:
    """Append each of ``records`` (a numpy array) to the file ``path_of(bucket)`` of its bucket
    (``buckets``, ints below ``count``), keeping their order within each bucket; one append per
    bucket that gets any."""
    order = np.argsort(buckets, kind="stable")
    records, buckets = records[order], buckets[order]
    bounds = np.searchsorted(buckets, np.arange(count + 1))
    for bucket in range(count):
        part = records[bounds[bucket]:bounds[bucket + 1]]
        if len(part):
            with open(path_of(bucket), "ab") as fh:
                fh.write(part.tobytes())


# Keys a Repeats holds in memory before it writes them to its bucket files, and the keys per
# bucket it aims at (each bucket is read and sorted whole by ``repeats()``).
REPEATS_BUCKET_KEYS = 1 << 15
# Buckets of a Repeats not told how many keys to expect: a bucket holds 1/256 of the keys (40k
# at ten million).
REPEATS_BUCKETS = 256


class Repeats:
    """Which keys were added more than once: fixed-width byte keys, each added with its position
    (an int that grows with each key added), and once all are in, ``repeats()`` gives every entry
    whose key was added before, with the position of the key's first entry. Memory holds
    ``bucket_keys`` entries whatever their number: past that, entries are appended to bucket
    files (by a hash of the key, so all entries of a key share one) in a temporary folder under
    ``directory``, and ``repeats()`` reads and sorts one bucket at a time. A ``SpillMap`` answers
    "seen?" as each key comes, at the cost of an SQLite insert per key; here nothing is answered
    before the end, in numpy (for validate's one row per image and config: 0.10-0.15 s against
    0.75 s for 180k rows). ``expected``: about how many keys will be added (sets the buckets: one per
    ``bucket_keys``, or REPEATS_BUCKETS when None);
    ``bucket_keys``: None for REPEATS_BUCKET_KEYS, read when the structure is made. Keys are
    compared as numpy's ``S<width>`` compares them: give keys of exactly ``width`` bytes (a
    shorter one would equal itself padded with NUL bytes)."""

    def __init__(self, width: int, expected: Optional[int] = None, directory: Optional[Union[str, os.PathLike]] = None,
                 *, bucket_keys: Optional[int] = None):
        bucket_keys = REPEATS_BUCKET_KEYS if bucket_keys is None else bucket_keys
        if width < 1 or bucket_keys < 1:
            raise ValueError("Repeats needs a key width and bucket_keys of at least 1")
        self.dtype = np.dtype([("key", f"S{width}"), ("position", "<i8")])
        self.width, self.directory, self.bucket_keys = width, directory, bucket_keys
        self.buckets = REPEATS_BUCKETS if expected is None else max(1, -(-max(0, expected) // bucket_keys))
        self._held: list[np.ndarray] = []
        self._count = 0  # entries held in memory
        self._folder: Optional[tempfile.TemporaryDirectory] = None

    def add(self, keys: np.ndarray, positions: np.ndarray) -> None:
        """Add ``keys`` (bytes of ``width`` each: a numpy ``S<width>`` array) at ``positions``."""
        entries = np.empty(len(keys), dtype=self.dtype)
        entries["key"], entries["position"] = keys, positions
        self._held.append(entries)
        self._count += len(entries)
        if self._count > self.bucket_keys:
            self._write_out()

    def _bucket_of(self, keys: np.ndarray) -> np.ndarray:
        """Each key's bucket: a hash of its first eight bytes (any bytes: equal keys, equal buckets)."""
        head = np.zeros(len(keys), dtype=np.uint64)
        raw = np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), self.width)
        for i in range(min(8, self.width)):
            head = (head << np.uint64(8)) | raw[:, i].astype(np.uint64)
        return ((head * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) % np.uint64(self.buckets)

    def _write_out(self) -> None:
        if not self._held:
            return
        entries = np.concatenate(self._held)
        self._held, self._count = [], 0
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="repeats-", dir=self.directory)
        append_to_buckets(entries, self._bucket_of(entries["key"]).astype(np.int64), self.buckets, self._path)

    def _path(self, bucket: int) -> str:
        return os.path.join(self._folder.name, str(bucket))

    def _parts(self) -> Iterator[np.ndarray]:
        if self._folder is None:
            if self._held:
                yield np.concatenate(self._held)
            return
        self._write_out()
        for bucket in range(self.buckets):
            path = self._path(bucket)
            if os.path.exists(path):
                yield np.fromfile(path, dtype=self.dtype)

    def repeats(self) -> Iterator[tuple[int, int]]:
        """(position, first position) of every entry whose key was added at a smaller position
        before, in order of position. Read once, after the last ``add``."""
        found_positions, found_firsts = [], []
        for part in self._parts():
            order = np.lexsort((part["position"], part["key"]))
            keys, positions = part["key"][order], part["position"][order]
            starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
            firsts = np.repeat(positions[starts], np.diff(np.r_[starts, len(keys)]))
            later = positions != firsts
            found_positions.append(positions[later])
            found_firsts.append(firsts[later])
        if not found_positions:
            return
        positions, firsts = np.concatenate(found_positions), np.concatenate(found_firsts)
        order = np.argsort(positions, kind="stable")
        yield from zip(positions[order].tolist(), firsts[order].tolist())

    def close(self) -> None:
        """Drop every entry and delete the bucket files."""
        self._held, self._count = [], 0
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def __enter__(self) -> "Repeats":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
