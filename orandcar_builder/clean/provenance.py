"""Provenance: the image a QA item's source records must be the image the item is attached to.

A source may record the image as a path (``source.image``, relative to the pool file's
directory) and/or as a hash (``source.image_sha256``). Each recorded locator is checked against
the sha256 of the attached image: a path that does not resolve to a readable file is
``provenance_unresolved``; a path or hash whose bytes differ is ``provenance_mismatch``. An item
that records neither cannot be checked; it is admitted and counted as unchecked. So is a path
locator when no base directory is known to resolve it against (a recorded hash is still checked).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Optional

from ..images import sha256_image_file as sha256_file  # bounded: regular files, size cap, deadline
from ..records import PoolItem

UNRESOLVED = "provenance_unresolved"
MISMATCH = "provenance_mismatch"
UNCHECKED = "provenance_unchecked"  # the action recorded on an item whose source names no image
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ProvenanceResult:
    """``reason`` is None when the item may be admitted; ``checked`` says whether anything was compared."""

    reason: Optional[str]
    detail: str = ""
    checked: bool = True


class SourceImageHashes:
    """sha256 of recorded source image files: the last ``keep`` files' digests are remembered
    (a file's QA items usually come together), so memory does not grow with the pool; a file
    seen again after that is hashed again.

    ``base_dir`` is the pool file's directory; None means relative locators cannot be resolved.
    """

    def __init__(self, base_dir: Optional[os.PathLike | str], *, keep: int = 4096):
        self.base_dir = os.path.abspath(base_dir) if base_dir is not None else None
        self.keep = keep
        # A failure is remembered as its OSError (a value, so lru_cache keeps it like a digest).
        self.digest = functools.lru_cache(maxsize=max(0, keep))(self._digest)

    def path(self, recorded: str) -> Optional[str]:
        """The absolute path ``recorded`` names, or None when it is relative and there is no base."""
        if self.base_dir is None and not os.path.isabs(recorded):
            return None
        return os.path.abspath(os.path.join(self.base_dir or "", recorded))

    def _digest(self, path: str) -> str | OSError:
        try:
            return sha256_file(path)
        except OSError as exc:
            return exc


# The answers that name nothing about the item (frozen values, shared).
_NOTHING_RECORDED = ProvenanceResult(None, "source records no image", checked=False)
_NO_BASE = ProvenanceResult(None, "no base directory to resolve source.image against", checked=False)
_SAME = ProvenanceResult(None)


def check_provenance(item: PoolItem, hashes: SourceImageHashes) -> ProvenanceResult:
    """Compare what ``item.source`` records about its image with ``item.image``."""
    source, attached = item.source, item.image
    if source.image is None and source.image_sha256 is None:
        return _NOTHING_RECORDED
    path = hashes.path(source.image) if source.image is not None else None
    if source.image_sha256 is None and path is None:
        return _NO_BASE
    if source.image_sha256 is not None:
        recorded = source.image_sha256.strip().lower()
        if not _SHA256.match(recorded):
            return ProvenanceResult(MISMATCH, f"source.image_sha256 {source.image_sha256!r} is not a sha256 hex digest")
        if recorded != attached.sha256:
            return ProvenanceResult(MISMATCH, f"source.image_sha256 {recorded[:12]}... differs from the attached image's {attached.sha256[:12]}...")
    if path is not None:
        if path == os.path.abspath(attached.path):
            return _SAME  # the same file: read_pool hashed it when it attached it
        digest = hashes.digest(path)
        if isinstance(digest, FileNotFoundError):
            return ProvenanceResult(UNRESOLVED, f"source.image {source.image!r} not found")
        if isinstance(digest, OSError):
            return ProvenanceResult(UNRESOLVED, f"source.image {source.image!r} cannot be read ({digest.strerror or digest})")
        if digest != attached.sha256:
            return ProvenanceResult(MISMATCH, f"source.image {source.image!r} holds other bytes than the attached image {attached.name!r}")
    return _SAME
