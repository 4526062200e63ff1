"""The generation cache: completed generations in SQLite, keyed by what shaped them.

The key is the sha256 of the engine fingerprint (kind, model id and revision, sampling and
template settings), the exact question text and the image sha256. Nothing else is in it, so a
changed rule or judge never triggers regeneration, and two QA items that ask the same question
of the same image share one generation.

Writes are atomic: each ``put_many`` is one transaction in a write-ahead-logged database, so a
process killed at any point (SIGKILL included) leaves every earlier batch intact and none of its
current one; the next run asks the engine only for what is missing. The judge pass uses the same
cache with the judge engine's fingerprint.

This module is storage only: keys, reads, writes, counts and the messages for a disk that refuses
a write. It runs no engine: generating through the cache (what is asked, what is shared, when
generations are committed) is ``executors.generation``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from dataclasses import dataclass, fields
from json.encoder import encode_basestring
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

from .errors import OrandCarError
from .records import Generation, Request
from .vocab import FINISH_REASONS, RECORD_ONLY_KEYS

SCHEMA_VERSION = 1
KEY_SCHEME = "orandcar-generation/1"
# vocab.RECORD_ONLY_KEYS: fingerprint keys recorded in the manifest but left out of the key: where
# a job ran (hardware, batch-invariance switch, vLLM version) must not throw away finished work
# when it resumes elsewhere. A generation is complete (cached) when it ended in vocab.FINISH_REASONS.
# SQLite's default limit on bound parameters is 999 in old builds; stay under it.
_LOOKUP_CHUNK = 500
_GENERATION_FIELDS = frozenset(f.name for f in fields(Generation))
_new_generation = object.__new__

_SCHEMA = """
CREATE TABLE IF NOT EXISTS generations (
    key TEXT PRIMARY KEY,
    item_id TEXT NOT NULL,
    engine TEXT NOT NULL,
    generation TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS engines (
    hash TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL
);
"""


class CacheError(OrandCarError):
    """A cache file that cannot be used; the message names it."""


class CacheFullError(CacheError):
    """The cache cannot be written: the disk under it is full (or a file size limit was reached).
    Nothing is wrong with the file: what was stored before stays."""


# SQLite's primary result codes for a write the disk refused (the extended codes keep them in the low byte).
SQLITE_FULL = getattr(sqlite3, "SQLITE_FULL", 13)
SQLITE_IOERR = getattr(sqlite3, "SQLITE_IOERR", 10)
# Below this many free bytes a failed write is put down to a full disk.
LOW_SPACE_BYTES = 1 << 20


def _file_size_limit() -> Optional[int]:
    """The largest file this process may write (``ulimit -f``), or None when unlimited."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def _largest_file(path: str | os.PathLike) -> int:
    """The size of the largest of a SQLite file and its journals."""
    sizes = [0]
    for suffix in ("", "-wal", "-journal"):
        try:
            sizes.append(os.path.getsize(f"{path}{suffix}"))
        except OSError:
            pass
    return max(sizes)


def storage_problem(exc: BaseException, path: str | os.PathLike) -> Optional[str]:
    """The message for a SQLite error that says the disk refused a write to ``path`` (SQLITE_FULL,
    or a disk I/O error), naming the folder and its free space; None for any other error."""
    code = getattr(exc, "sqlite_errorcode", None)
    base = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    full = base == SQLITE_FULL or "disk is full" in text
    if not (full or base == SQLITE_IOERR or "disk I/O error" in text):
        return None
    folder = Path(path).parent
    try:
        free: Optional[int] = shutil.disk_usage(folder).free
    except OSError:
        free = None
    limit = _file_size_limit()
    hint = "make room there or choose another --work"
    if full or (free is not None and free < LOW_SPACE_BYTES):
        what = "the disk is full"
    elif limit is not None and _largest_file(path) + LOW_SPACE_BYTES >= limit:  # EFBIG: an I/O error to SQLite
        what, hint = f"a file reached this process's file size limit (ulimit -f: {limit:,} bytes)", "raise the limit"
    else:
        what = "the disk refused a write (disk I/O error: a full disk or quota, a file size limit, or a failing disk)"
    room = f"{free:,} bytes free in {folder}" if free is not None else f"in {folder}"
    return (f"{path}: cannot store generations: {what} ({room}); {hint} and build again: the generations "
            f"stored so far are kept")


def _canonical(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _json_text(text: str) -> str:
    """``_canonical`` of a str: what ``json.dumps(text, ensure_ascii=False)`` returns, without
    making an encoder for each call."""
    if text.__class__ is not str:
        return _canonical(text)
    return encode_basestring(text)


def cache_fingerprint(fingerprint: dict) -> dict:
    """The part of an engine fingerprint that shapes its output (RECORD_ONLY_KEYS removed)."""
    return {k: v for k, v in fingerprint.items() if k not in RECORD_ONLY_KEYS}


def engine_hash(fingerprint: dict) -> str:
    return hashlib.sha256(_canonical(cache_fingerprint(fingerprint)).encode("utf-8")).hexdigest()


def request_key(fingerprint: dict, request: Request) -> str:
    """The cache key of ``request`` for an engine with ``fingerprint``: hex sha256 of the canonical
    JSON of ``{"scheme", "engine": fingerprint less RECORD_ONLY_KEYS, "question": the exact
    text, "image_sha256"}``."""
    return request_keys(fingerprint, [request])[0]


def request_keys(fingerprint: dict, requests: Iterable[Request]) -> list[str]:
    """``request_key`` of each request; the fingerprint is serialised once, and each payload is the
    same canonical JSON text, put together in sorted key order."""
    head = '{"engine":' + _canonical(cache_fingerprint(fingerprint)) + ',"image_sha256":'
    tail = ',"scheme":' + _canonical(KEY_SCHEME) + "}"
    keys = []
    for request in requests:
        image = _json_text(request.image.sha256) if request.image is not None else "null"
        text = head + image + ',"question":' + _json_text(request.question) + tail
        keys.append(hashlib.sha256(text.encode("utf-8")).hexdigest())
    return keys


def is_complete(generation: Generation) -> bool:
    """Whether a generation may be cached: the engine finished it (``stop`` or ``length``), or
    declared the request unsupported, which is deterministic too."""
    return generation.unsupported is not None or generation.finish_reason in FINISH_REASONS


def generation_to_json(generation: Generation) -> str:
    # Generation holds only flat values: a plain dict gives asdict's JSON without its deep copy.
    return _canonical({name: getattr(generation, name) for name in _GENERATION_FIELDS})


def generation_from_json(blob: str) -> Generation:
    data = json.loads(blob)
    if type(data) is not dict:  # a row damaged by hand: get_many names it
        raise TypeError(f"a stored generation is a JSON object, not {type(data).__name__}")
    if data.keys() == _GENERATION_FIELDS:  # what generation_to_json wrote
        generation = _new_generation(Generation)  # a frozen dataclass's __init__ sets each field through
        generation.__dict__.update(data)  # object.__setattr__: a third of a cache hit's cost
        return generation
    try:
        return Generation(**data)
    except TypeError:
        pass
    if "answer" in data and "final_answer" not in data:  # stored before the field was renamed (issue 17)
        data["final_answer"] = data.pop("answer")
    return Generation(**{k: v for k, v in data.items() if k in _GENERATION_FIELDS})


@dataclass
class CacheStats:
    """Counts for one run through the cache (``executors.generation``): ``hits`` requests answered
    from the cache, ``asked`` requests sent to the engine (one per distinct key), ``shared``
    requests answered by another request of the same run with the same key, ``stored``
    generations written in ``batches`` transactions, ``uncached`` incomplete generations
    returned but not written."""

    total: int = 0
    hits: int = 0
    asked: int = 0
    shared: int = 0
    stored: int = 0
    uncached: int = 0
    batches: int = 0

    @property
    def misses(self) -> int:
        return self.total - self.hits

    @property
    def done(self) -> int:
        """Requests answered so far."""
        return self.hits + self.asked + self.shared


class GenerationCache:
    """A SQLite file of completed generations. Use as a context manager, or call ``close()``."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE ... COMMIT).
            self._conn = sqlite3.connect(self.path, isolation_level=None, timeout=60)
            self._conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL under WAL survives a killed process; only a power loss may lose the last batch.
            self._conn.execute("PRAGMA synchronous=NORMAL")
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise CacheError(
                    f"{self.path}: cache schema version {version}, this version reads {SCHEMA_VERSION}; "
                    "use a new work dir or delete the cache file"
                )
            self._conn.executescript(_SCHEMA)
            self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            full = storage_problem(exc, self.path)
            if full:
                raise CacheFullError(full) from None
            raise CacheError(f"{self.path}: not a usable generation cache ({exc})") from None

    def __enter__(self) -> "GenerationCache":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None  # type: ignore[assignment]

    @property
    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise CacheError(f"{self.path}: cache is closed")
        return self._conn

    def __len__(self) -> int:
        return self.connection.execute("SELECT COUNT(*) FROM generations").fetchone()[0]

    def __contains__(self, key: str) -> bool:
        row = self.connection.execute("SELECT 1 FROM generations WHERE key = ?", (key,)).fetchone()
        return row is not None

    def holds_engine(self, fingerprint: dict) -> bool:
        """Whether generations of an engine with ``fingerprint`` were ever stored here."""
        row = self.connection.execute("SELECT 1 FROM engines WHERE hash = ?", (engine_hash(fingerprint),)).fetchone()
        return row is not None

    def keys(self) -> set[str]:
        return {row[0] for row in self.connection.execute("SELECT key FROM generations")}

    def get(self, key: str) -> Optional[Generation]:
        return self.get_many([key]).get(key)

    def get_many(self, keys: Iterable[str]) -> dict[str, Generation]:
        """The cached generations among ``keys``, by key."""
        found: dict[str, Generation] = {}
        for rows in self._select("key, generation", keys):
            for key, blob in rows:
                try:
                    found[key] = generation_from_json(blob)
                except (TypeError, ValueError) as exc:  # a row damaged on disk or by hand
                    raise CacheError(f"{self.path}: the cached generation {key[:16]}... is damaged "
                                     f"({type(exc).__name__}); delete the cache file to ask the engine again") from None
        return found

    def put_many(self, fingerprint: dict, entries: Sequence[tuple[str, Generation]]) -> int:
        """Store complete generations under their keys in one transaction; returns how many were
        given. An incomplete one is a ValueError (nothing is written)."""
        for _key, gen in entries:
            if not is_complete(gen):
                raise ValueError(f"generation {gen.item_id!r} is incomplete (finish_reason {gen.finish_reason!r})")
        ehash = engine_hash(fingerprint)
        conn = self.connection
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT OR IGNORE INTO engines (hash, fingerprint) VALUES (?, ?)",
                (ehash, _canonical(cache_fingerprint(fingerprint))),
            )
            conn.executemany(
                "INSERT OR REPLACE INTO generations (key, item_id, engine, generation) VALUES (?, ?, ?, ?)",
                [(key, gen.item_id, ehash, generation_to_json(gen)) for key, gen in entries],
            )
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:  # SQLite has already rolled back after a full disk, say
                conn.execute("ROLLBACK")
            full = storage_problem(exc, self.path) if isinstance(exc, sqlite3.DatabaseError) else None
            if full:
                raise CacheFullError(full) from None
            raise
        return len(entries)

    def put(self, fingerprint: dict, key: str, generation: Generation) -> None:
        self.put_many(fingerprint, [(key, generation)])

    def _select(self, columns: str, keys: Iterable[str]) -> Iterator[list[tuple]]:
        """``columns`` of the rows among ``keys`` (each distinct key once), a list of rows per
        query, the queries in chunks under SQLite's bound-parameter limit."""
        keys = list(dict.fromkeys(keys))
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            yield self.connection.execute(f"SELECT {columns} FROM generations WHERE key IN ({marks})", chunk).fetchall()
