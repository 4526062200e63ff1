"""The request an admitted row asks, read straight from the row (ADMITTED_SCHEMA).

``request_from_row(row)`` equals ``steps.make_request(steps.admitted_from_row(row))`` without
building the Admitted item (no ``source`` JSON decoded, no PoolItem): the local executor
classifies every admitted row by its request's cache key first, and builds the Admitted item
only for the rows it then decides, once each (an item the cache answers is decided after the
stream, from the row read again)."""

from __future__ import annotations

from ..images import ImageRef
from ..prompts import question_text
from ..records import Request


def request_from_row(row: dict) -> Request:
    options = row["options"]
    return Request(
        item_id=row["id"],
        question=question_text(row["question"], row["family"], tuple(options) if options is not None else None),
        family=row["family"],
        image=ImageRef(path=row["image"], sha256=row["image_sha256"]),
    )
