"""Reusing the work dir's admission: a rerun whose admission inputs are unchanged skips admission.

Admission (``stages.admit``) is a pure function of its inputs: the pool file's bytes and place,
the files its lines name (images and ``source.image`` files), the admission settings (image
policy, ``--limit``, the folders an import seal vouches for), the families registered and the
cleaning code. When a build admits the whole pool, it records those inputs in
``work/admission.json`` beside work/admitted.parquet and work/dropped.jsonl; the next build in
the same work dir compares them with what it finds and, when every one is the same, takes the
admitted rows, the drops and the cleaning figures as they are instead of admitting again (a
rerun after a rule or verification change, or a second build of the same pool).

What "the same" means, input by input:

- the pool file: the same absolute path, size and sha256 of its bytes (read whole at the start
  of each build, before admission reads it: exact, and cheap beside parsing it);
- each file the pool's lines name (``pool.jsonl.read_pool``'s ``named``): the same
  ``os.stat`` size, mtime_ns, ctime_ns, inode and device, or absent both times. Hashing every
  image again would cost what admission's reads cost; the stat is exact in practice because a
  write to a file always moves its ctime, which no tool can set back (``touch -d`` and ``cp -p``
  set the mtime only), and replacing it by another file changes its inode. Each stat is taken
  while admission reads the files; a file whose mtime or ctime is not older than the
  admission's start (less ``RACY_NS`` for the kernel's coarse file clock) may have changed while
  it was read, so that admission is not recorded (git's "racily clean" rule). The write stage
  still checks every image against the sha256 admission recorded (``images.AdmittedImage``), so
  a change the stat missed is an error, never other bytes in the dataset;
- the settings and code: ``settings()`` (the cleaning policy id, purity threshold, Pillow's
  version and a sha256 of the admission modules' source text, so an edited rule that forgot
  to bump ``POLICY_ID`` still admits again);
- work/admitted.parquet, work/dropped.jsonl and work/admission_images.parquet: the sizes and
  sha256 recorded when they were written (a hand-edited or damaged file admits again).

work/admission.json is written after the three files are in place and removed before an
admission starts, so it only ever describes the files beside it. It holds paths, sizes, times,
hashes and counts: no secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa

from ..files import ABSENT, file_stat, sha256_of_file, write_text_atomic
from ..images import ImagePolicy
from ..parquetio import open_parquet
from ..workdir import WorkDir

SCHEME = 1  # bumped when what admission.json records changes
# A file changed less than this before the admission started may share its timestamp with a
# change made after (Linux stamps files from a clock that ticks every 1-10 ms).
RACY_NS = 20_000_000
# Paths remembered to skip a repeated stat (the QA items of an image come together).
RECENT_PATHS = 4096
# The modules whose code decides what admission admits (their source text is hashed).
ADMISSION_MODULES = ("orandcar_builder.clean.policy", "orandcar_builder.clean.provenance",
                     "orandcar_builder.clean.purity", "orandcar_builder.clean.choices",
                     "orandcar_builder.clean.pool_file", "orandcar_builder.pool.jsonl",
                     "orandcar_builder.pool.seal", "orandcar_builder.images", "orandcar_builder.records")
STAT_FIELDS = ("size", "mtime_ns", "ctime_ns", "ino", "dev")  # files.file_stat's (ABSENT: no file there)
IMAGES_SCHEMA = pa.schema([("path", pa.string())] + [(name, pa.int64()) for name in STAT_FIELDS])


def _code_digest() -> str:
    """sha256 of the admission modules' source text; one that matches nothing when a source
    cannot be read (an install without its .py files): such a build always admits."""
    digest = hashlib.sha256()
    try:
        for name in ADMISSION_MODULES:
            module = sys.modules.get(name) or __import__(name, fromlist=["_"])
            digest.update(name.encode() + b"\0" + Path(module.__file__).read_bytes() + b"\0")
    except (OSError, TypeError):
        return "unreadable-" + os.urandom(16).hex()
    return digest.hexdigest()


def settings(pool: Path, limit: Optional[int], images: Optional[ImagePolicy], families=None) -> dict:
    """What the admission of ``pool`` depends on besides the files' contents (JSON values)."""
    import PIL

    from ..clean.policy import POLICY_ID
    from ..clean.purity import PURITY_THRESHOLD
    from ..families import DEFAULT_FAMILIES
    from ..pool.seal import sealed_roots
    from ..records import ADMITTED_SCHEMA

    images = images or ImagePolicy()
    return {
        "pool": os.path.abspath(pool), "pool_folder": os.path.realpath(os.path.dirname(os.path.abspath(pool))),
        "limit": limit,
        "images": {"max_bytes": images.max_bytes, "read_timeout_s": images.read_timeout_s,
                   "allow_outside_paths": images.allow_outside_paths, "roots": list(images.roots),
                   "sealed_roots": [] if images.allow_outside_paths else list(sealed_roots(pool))},
        "families": sorted(families if families is not None else DEFAULT_FAMILIES),
        "cleaning": {"policy": POLICY_ID, "purity_threshold": PURITY_THRESHOLD, "code": _code_digest(),
                     "pillow": PIL.__version__, "schema": ADMITTED_SCHEMA.to_string()},
    }


class Inputs:
    """The admission's inputs as found at the start of a build: ``settings`` and the pool file's
    stat and sha256 (``start_ns``: when they were taken)."""

    def __init__(self, pool: Path, limit: Optional[int], images: Optional[ImagePolicy], families=None):
        self.start_ns = time.time_ns()
        self.pool = Path(pool)
        self.settings = settings(pool, limit, images, families)
        self.pool_stat = file_stat(str(pool))
        self.pool_sha256 = sha256_of_file(pool)

    def pool_record(self) -> dict:
        return {"size": self.pool_stat[0], "sha256": self.pool_sha256}

    def pool_unchanged(self) -> bool:
        """Whether the pool file is still as it was at the start (not changed while admitted)."""
        return (self.pool_stat is not None and file_stat(str(self.pool)) == self.pool_stat
                and not _racy(self.pool_stat, self.start_ns))


def _racy(stat: tuple, start_ns: int) -> bool:
    return stat != ABSENT and max(stat[1], stat[2]) >= start_ns - RACY_NS


class NamedFiles:
    """The stat of each file the pool's lines name, as admission goes (``read_pool``'s ``named``),
    into ``file`` (a ``ParquetFile`` of IMAGES_SCHEMA, committed with admission's other files).
    ``racy`` turns True when one may have changed while admitted, or cannot be told."""

    def __init__(self, file, start_ns: int):
        self.file, self.start_ns = file, start_ns
        self.recent: OrderedDict[str, None] = OrderedDict()
        self.racy = False

    def __call__(self, path: str) -> None:
        recent = self.recent
        if path in recent:
            recent.move_to_end(path)
            return
        recent[path] = None
        if len(recent) > RECENT_PATHS:
            recent.popitem(last=False)
        stat = file_stat(path)
        if stat is None or _racy(stat, self.start_ns):
            self.racy = True
            stat = ABSENT if stat is None else stat
        self.file.add(dict(zip(("path",) + STAT_FIELDS, (path,) + stat)))


def _outputs(work: WorkDir) -> tuple[Path, ...]:
    """The work files an admission writes, which its record describes."""
    return work.admitted, work.dropped, work.admission_images


def forget(work: Path) -> None:
    """Remove the record of the work dir's admission (its files are about to be replaced, or one
    of them proved stale): the next build admits again."""
    WorkDir(work).admission.unlink(missing_ok=True)


def _file_record(path: Path) -> dict:
    return {"size": path.stat().st_size, "sha256": sha256_of_file(path)}


def record(work: Path, inputs: Inputs, figures: dict) -> bool:
    """Write work/admission.json for the admission just committed in ``work`` from ``inputs``,
    with its ``figures`` (counts and the cleaning report, JSON values). Returns whether it was
    written: not when the pool changed while it was admitted."""
    work = WorkDir(work)
    if not inputs.pool_unchanged():
        return False
    data = {"scheme": SCHEME, "settings": inputs.settings, "pool": inputs.pool_record(),
            "files": {path.name: _file_record(path) for path in _outputs(work)},
            "figures": figures}
    write_text_atomic(work.admission, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return True


def reusable(work: Path, inputs: Inputs) -> Optional[dict]:
    """The figures of the admission recorded in ``work`` when every input in ``inputs`` and on
    disk is the one it admitted (see the module docstring); None otherwise."""
    work = WorkDir(work)
    try:
        data = json.loads(work.admission.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("scheme") != SCHEME or data.get("settings") != inputs.settings:
        return None
    if inputs.pool_stat is None or data.get("pool") != inputs.pool_record():
        return None
    files = data.get("files")
    if not isinstance(files, dict):
        return None
    try:
        for path in _outputs(work):
            if files.get(path.name) != _file_record(path):
                return None
        if not _files_unchanged(work.admission_images):
            return None
    except (OSError, ValueError, pa.ArrowException):
        return None
    figures = data.get("figures")
    if (not isinstance(figures, dict) or not isinstance(figures.get("admitted"), int)
            or not isinstance(figures.get("dropped"), dict) or not isinstance(figures.get("cleaning"), dict)):
        return None
    return figures


def _files_unchanged(images: Path) -> bool:
    """Whether every file work/admission_images.parquet names has the stat it records."""
    for batch in open_parquet(images).iter_batches(batch_size=65536):
        paths = batch.column("path").to_pylist()
        recorded = np.column_stack([batch.column(name).to_numpy() for name in STAT_FIELDS])
        now = np.array([file_stat(p) or (-2,) * len(STAT_FIELDS) for p in paths], dtype=np.int64)
        if len(paths) and not np.array_equal(now.reshape(len(paths), -1), recorded):
            return False
    return True
