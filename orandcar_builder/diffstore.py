"""The two sides of ``orandcar diff`` on disk: memory that does not grow with the dataset.

A diff must compare every row and QA item of one version with the other's; held in dicts, that is
kilobytes per item (gigabytes at a million). ``DiffStore`` keeps them in an SQLite file in a
private temporary folder instead (scratch data, as spill.py's: no journal, no fsync, one
transaction never committed, a bounded page cache, sorts spilled to files; the folder goes on
``close()``), and the comparison is a handful of indexed queries, each answered in the order the
dict-based comparison gave (a side's rows and items in the order they were read: insertion order
is rowid order).

What one side holds, per config (``cfg``: its index in ``vocab.CONFIGS``):

- ``row``: one per row, its position in the config, its key (``image_sha256``; a repeated one
  gets ``#position``) and the digest of its QA items and metadata;
- ``item``: one per QA item, its key (a JSON array, ``encode_key``; the second and later
  occurrences of a key in one config get their occurrence number appended), its digest, family,
  full question, the answer fields a flip shows (JSON) and its match (source and image, JSON).

``finish()`` numbers the repeats, indexes, and pairs the leftovers: an item of the new side whose
key no config of the old side holds takes the key of the one old item (absent from the new side)
with its match, where exactly one such item is left on each side (the match of a key held by
several configs is the one of the last config in CONFIGS order).
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from typing import Iterator, Optional, Union

OLD, NEW = 0, 1
# Rows and items per executemany once buffered.
BATCH = 4096
# SQLite's page cache (KiB), also what its sorter holds in memory before it spills to a file.
CACHE_KIB = 16384
_PRAGMAS = ("journal_mode=OFF", "synchronous=OFF", "temp_store=FILE", "locking_mode=EXCLUSIVE",
            f"cache_size=-{CACHE_KIB}")
_SCHEMA = (
    "CREATE TABLE row (side INTEGER NOT NULL, cfg INTEGER NOT NULL, pos INTEGER NOT NULL, key TEXT NOT NULL, "
    "digest BLOB NOT NULL)",
    "CREATE TABLE item (side INTEGER NOT NULL, cfg INTEGER NOT NULL, key TEXT NOT NULL, digest BLOB NOT NULL, "
    "family TEXT NOT NULL, question TEXT NOT NULL, shown TEXT NOT NULL, match TEXT NOT NULL)",
)
# An item as the queries return it: its key, digest, family, question, shown (JSON).
ITEM_FIELDS = "key, digest, family, question, shown"


def encode_key(key: tuple) -> str:
    """An item's key as stored: a compact JSON array (equal keys, equal text)."""
    return json.dumps(list(key), ensure_ascii=False, separators=(",", ":"))


def decode_key(text: str) -> tuple:
    return tuple(json.loads(text))


class DiffStore:
    """Both sides' rows and items in one SQLite scratch file (see the module docstring)."""

    def __init__(self, directory: Optional[Union[str, os.PathLike]] = None):
        self._folder = tempfile.TemporaryDirectory(prefix="diff-", dir=directory)
        self.db = sqlite3.connect(os.path.join(self._folder.name, "diff.sqlite"), isolation_level=None,
                                  check_same_thread=False)
        for pragma in _PRAGMAS:
            self.db.execute(f"PRAGMA {pragma}")
        for statement in _SCHEMA:
            self.db.execute(statement)
        self.db.execute("BEGIN")
        self._rows: list[tuple] = []
        self._items: list[tuple] = []

    def __enter__(self) -> "DiffStore":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.db is not None:
                self.db.close()
        finally:
            self.db = None
            if self._folder is not None:
                self._folder.cleanup()
                self._folder = None

    # --- loading ---------------------------------------------------------------------------------

    def add_row(self, side: int, cfg: int, pos: int, sha: str, digest: bytes) -> None:
        self._rows.append((side, cfg, pos, sha, digest))
        if len(self._rows) >= BATCH:
            self._flush()

    def add_item(self, side: int, cfg: int, key: tuple, digest: bytes, family: str, question: str,
                 shown: dict, match: tuple) -> None:
        self._items.append((side, cfg, encode_key(key), digest, family, question,
                            json.dumps(shown, ensure_ascii=False), encode_key(match)))
        if len(self._items) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            self.db.executemany("INSERT INTO row VALUES (?, ?, ?, ?, ?)", self._rows)
            self._rows = []
        if self._items:
            self.db.executemany("INSERT INTO item VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self._items)
            self._items = []

    def finish(self) -> None:
        """Number repeated keys, index, pair the leftovers (see the module docstring)."""
        self._flush()
        db = self.db
        db.execute("CREATE INDEX row_key ON row (side, key, cfg)")
        db.execute("CREATE INDEX row_part ON row (side, cfg)")
        db.execute("CREATE INDEX item_key ON item (side, key, cfg)")
        db.execute("CREATE INDEX item_part ON item (side, cfg)")
        # A repeated image in one config: the second and later rows are keyed sha#position.
        self._number_repeats("row", "key || '#' || pos")
        # A repeated item in one config: the n-th occurrence (n >= 2) gets n appended to its key.
        self._number_repeats("item", "substr(key, 1, length(key) - 1) || ',' || rep.n || ']'")
        db.execute("CREATE TEMP TABLE last AS SELECT side, key, match, MAX(cfg) AS cfg FROM item GROUP BY side, key")
        db.execute("CREATE INDEX temp.last_key ON last (side, key)")
        db.execute("""CREATE TEMP TABLE rename AS
            WITH o AS (SELECT match, MIN(key) AS key FROM last a WHERE side = 0
                       AND NOT EXISTS (SELECT 1 FROM last b WHERE b.side = 1 AND b.key = a.key)
                       GROUP BY match HAVING COUNT(*) = 1),
                 n AS (SELECT match, MIN(key) AS key FROM last a WHERE side = 1
                       AND NOT EXISTS (SELECT 1 FROM last b WHERE b.side = 0 AND b.key = a.key)
                       GROUP BY match HAVING COUNT(*) = 1)
            SELECT n.key AS new_key, o.key AS old_key FROM o JOIN n ON o.match = n.match""")
        db.execute("CREATE INDEX temp.rename_new ON rename (new_key)")
        db.execute("""UPDATE item SET key = (SELECT old_key FROM rename WHERE new_key = item.key)
                      WHERE side = 1 AND key IN (SELECT new_key FROM rename)""")
        db.execute("DROP TABLE last")
        db.execute("DROP TABLE rename")

    def _number_repeats(self, table: str, new_key: str) -> None:
        """Rekey the second and later rows of ``table`` that share a key within one config of a
        side (``new_key``: an SQL expression over the row and ``rep.n``, its occurrence)."""
        self.db.execute(f"""CREATE TEMP TABLE rep AS SELECT id, n FROM (
            SELECT t.rowid AS id, ROW_NUMBER() OVER (PARTITION BY t.side, t.cfg, t.key ORDER BY t.rowid) AS n
            FROM {table} t JOIN (SELECT side, cfg, key FROM {table} GROUP BY side, key, cfg HAVING COUNT(*) > 1) d
            ON t.side = d.side AND t.cfg = d.cfg AND t.key = d.key) WHERE n > 1""")
        self.db.execute(f"UPDATE {table} SET key = {new_key} FROM rep WHERE rep.id = {table}.rowid")
        self.db.execute("DROP TABLE rep")

    # --- queries ---------------------------------------------------------------------------------

    def count(self, table: str, side: int, cfg: int) -> int:
        return self.db.execute(f"SELECT COUNT(*) FROM {table} WHERE side = ? AND cfg = ?", (side, cfg)).fetchone()[0]

    def only_in(self, table: str, side: int, cfg: int) -> Iterator[tuple]:
        """Rows (key, digest[, family, question, shown]) of ``side``'s config whose key the other
        side's same config lacks, in ``side``'s order."""
        fields = "key, digest" if table == "row" else ITEM_FIELDS
        return self.db.execute(
            f"SELECT {fields} FROM {table} a INDEXED BY {table}_part WHERE side = ? AND cfg = ? AND NOT EXISTS "
            f"(SELECT 1 FROM {table} b WHERE b.side = ? AND b.key = a.key AND b.cfg = a.cfg) ORDER BY a.rowid",
            (side, cfg, 1 - side))

    def changed(self, table: str, cfg: int) -> Iterator[tuple]:
        """(old fields, new fields) of each key in the config on both sides whose digest differs,
        in the new side's order."""
        fields = "key, digest" if table == "row" else ITEM_FIELDS
        width = len(fields.split(","))
        cols = ", ".join([f"o.{f.strip()}" for f in fields.split(",")] + [f"n.{f.strip()}" for f in fields.split(",")])
        for record in self.db.execute(
                f"SELECT {cols} FROM {table} n INDEXED BY {table}_part JOIN {table} o INDEXED BY {table}_key "
                f"ON o.side = 0 AND o.key = n.key AND o.cfg = n.cfg "
                f"WHERE n.side = 1 AND n.cfg = ? AND o.digest != n.digest ORDER BY n.rowid", (cfg,)):
            yield record[:width], record[width:]

    def flipped(self, old_cfg: int, new_cfg: int) -> Iterator[tuple]:
        """(old item, new item) of each key in ``new_cfg`` on the new side and ``old_cfg`` on the
        old, and not in ``old_cfg`` on the new side, in the new side's order."""
        cols = ", ".join([f"o.{f.strip()}" for f in ITEM_FIELDS.split(",")] + [f"n.{f.strip()}" for f in ITEM_FIELDS.split(",")])
        for record in self.db.execute(
                f"SELECT {cols} FROM item n INDEXED BY item_part JOIN item o INDEXED BY item_key "
                "ON o.side = 0 AND o.key = n.key AND o.cfg = ? "
                "WHERE n.side = 1 AND n.cfg = ? AND NOT EXISTS "
                "(SELECT 1 FROM item x WHERE x.side = 1 AND x.key = n.key AND x.cfg = ?) ORDER BY n.rowid",
                (old_cfg, new_cfg, old_cfg)):
            yield record[:5], record[5:]

    def families(self, side: int, cfg: int) -> dict[str, int]:
        return dict(self.db.execute("SELECT family, COUNT(*) FROM item WHERE side = ? AND cfg = ? GROUP BY family",
                                    (side, cfg)))

    # --- the dataset as a whole: the accepted and the rejected items of a side, as one ------------

    def union(self, accepted: int, rejected: int) -> None:
        """Table ``uni``: per side, each key of config ``accepted`` or ``rejected`` once, with the
        config whose item stands for it (``rejected`` where both hold it) and its place (the
        accepted items in order, then the rejected ones the accepted config lacks)."""
        db = self.db
        db.execute("CREATE TEMP TABLE uni (side INTEGER, key TEXT, grp INTEGER, ord INTEGER, cfg INTEGER)")
        db.execute("""INSERT INTO uni SELECT a.side, a.key, 0, a.rowid,
                          CASE WHEN EXISTS (SELECT 1 FROM item r WHERE r.side = a.side AND r.key = a.key AND r.cfg = :rej)
                          THEN :rej ELSE :acc END
                      FROM item a WHERE a.cfg = :acc""", {"acc": accepted, "rej": rejected})
        db.execute("""INSERT INTO uni SELECT r.side, r.key, 1, r.rowid, :rej FROM item r WHERE r.cfg = :rej
                      AND NOT EXISTS (SELECT 1 FROM item a WHERE a.side = r.side AND a.key = r.key AND a.cfg = :acc)""",
                   {"acc": accepted, "rej": rejected})
        db.execute("CREATE INDEX temp.uni_key ON uni (side, key)")
        db.execute("CREATE INDEX temp.uni_order ON uni (side, grp, ord)")

    def union_count(self, side: int) -> int:
        return self.db.execute("SELECT COUNT(*) FROM uni WHERE side = ?", (side,)).fetchone()[0]

    def union_only_in(self, side: int) -> Iterator[tuple]:
        cols = ", ".join(f"i.{f.strip()}" for f in ITEM_FIELDS.split(","))
        return self.db.execute(
            f"SELECT {cols} FROM uni u INDEXED BY uni_order JOIN item i INDEXED BY item_key "
            "ON i.side = u.side AND i.key = u.key AND i.cfg = u.cfg WHERE u.side = ? "
            "AND NOT EXISTS (SELECT 1 FROM uni v WHERE v.side = ? AND v.key = u.key) ORDER BY u.grp, u.ord",
            (side, 1 - side))

    def union_changed(self) -> Iterator[tuple]:
        """(old item, new item) of each key on both sides under the same decision whose digest
        differs, in the new side's order."""
        cols = ", ".join([f"oi.{f.strip()}" for f in ITEM_FIELDS.split(",")] + [f"ni.{f.strip()}" for f in ITEM_FIELDS.split(",")])
        for record in self.db.execute(
                f"SELECT {cols} FROM uni n INDEXED BY uni_order JOIN uni o ON o.side = 0 AND o.key = n.key "
                "JOIN item ni ON ni.side = 1 AND ni.key = n.key AND ni.cfg = n.cfg "
                "JOIN item oi ON oi.side = 0 AND oi.key = o.key AND oi.cfg = o.cfg "
                "WHERE n.side = 1 AND o.cfg = n.cfg AND oi.digest != ni.digest ORDER BY n.grp, n.ord"):
            yield record[:5], record[5:]
