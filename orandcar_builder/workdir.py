"""A build's work dir, and the only place a work file is named.

``WorkDir(path)`` has one property per file the stages, the runner and the commands read or
write there (the table in docs/architecture.md says who writes and who reads each), and the
temporary names the stages stage them under, where a stage gives them one of its own. Every
other module asks ``WorkDir`` for the path: no file name of the work dir is spelled twice.

Most files are written under ``files.StagedFile``'s temporary name (the path + ``.tmp``) and
renamed into place; these have names of their own while they are written:

- ``decisions_unsorted``: the generate stage's decisions in completion order, sorted into
  ``decisions`` (pool order) and removed;
- ``decisions_judged``: the judge pass's rewrite of ``decisions``, renamed over it when complete
  (``JUDGED_SUFFIX``);

This module imports nothing of the package: every level may use it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Union

# The suffix the judge pass stages decisions.parquet under (decisions.parquet.judged).
JUDGED_SUFFIX = ".judged"


class WorkDir:
    """The files of the work dir ``path`` (nothing is created; the properties are paths)."""

    def __init__(self, path: Union[str, "Path", "WorkDir"]):
        self.path = path.path if isinstance(path, WorkDir) else Path(path)

    def __repr__(self) -> str:
        return f"WorkDir({str(self.path)!r})"

    # --- admit ---------------------------------------------------------------------------------
    @property
    def admitted(self) -> Path:
        """One row per admitted item, in pool order (``records.ADMITTED_SCHEMA``)."""
        return self.path / "admitted.parquet"

    @property
    def dropped(self) -> Path:
        """Each dropped pool line with its reason (JSON lines)."""
        return self.path / "dropped.jsonl"

    @property
    def admission(self) -> Path:
        """What the last admission read (the pool's identity, the settings) and wrote: a rerun
        with the same inputs takes its files as they are (``pipeline.reuse``)."""
        return self.path / "admission.json"

    @property
    def admission_images(self) -> Path:
        """The stat of every file the pool's lines name, as the last admission found them."""
        return self.path / "admission_images.parquet"

    # --- generate ------------------------------------------------------------------------------
    @property
    def cache_dir(self) -> Path:
        return self.path / "cache"

    @property
    def cache(self) -> Path:
        """The generation cache (SQLite), shared by every build and ``calibrate`` of this work dir."""
        return self.cache_dir / "generations.sqlite"

    @property
    def decisions(self) -> Path:
        """One decision record per QA item, in pool order (``records.DECISION_SCHEMA``)."""
        return self.path / "decisions.parquet"

    @property
    def decisions_unsorted(self) -> Path:
        """The decisions in completion order while the generate stage runs."""
        return self.path / "decisions.unsorted.parquet"

    @property
    def decisions_judged(self) -> Path:
        """The judge pass's rewrite of ``decisions`` while it runs."""
        return self.path / (self.decisions.name + JUDGED_SUFFIX)

    @property
    def prompts(self) -> Path:
        return self.path / "prompts.jsonl"

    @property
    def unsupported(self) -> Path:
        return self.path / "unsupported.jsonl"

    @property
    def failed(self) -> Path:
        return self.path / "failed.jsonl"

    @property
    def ray_dir(self) -> Path:
        """Where the Ray executor staged its asks before it streamed them (2026-12-01 to 12-02):
        removed when a Ray build starts, so no such leftover stays."""
        return self.path / "ray"

    # --- the runner and the commands -----------------------------------------------------------
    @property
    def report(self) -> Path:
        """The build's figures (``figures.BuildFigures``) and this run's timings."""
        return self.path / "report.json"

    @property
    def manifest(self) -> Path:
        """What ran, where, with which versions."""
        return self.path / "manifest.json"

    @property
    def review(self) -> Path:
        """The review page (``review/``)."""
        return self.path / "report.html"

    @property
    def calibration(self) -> Path:
        """``orandcar calibrate``'s report."""
        return self.path / "calibration.json"

    @property
    def lock(self) -> Path:
        """The lock one build holds (``dataset.output.WorkLock``)."""
        return self.path / ".lock"

    # --- what a work dir is --------------------------------------------------------------------
    def is_work_dir(self) -> bool:
        """Whether this is a build's work dir: its manifest and a stage's parquet file (a dataset
        folder never holds them, so a command that wants a dataset folder can tell it was given a
        work dir)."""
        return self.manifest.is_file() and (self.decisions.is_file() or self.admitted.is_file())

    def built_output(self) -> Optional[Path]:
        """The dataset folder the last build wrote, as its manifest names it (None: unknown)."""
        try:
            out = json.loads(self.manifest.read_text(encoding="utf-8")).get("out")
        except (OSError, ValueError, AttributeError):
            return None
        return Path(out) if isinstance(out, str) and out else None
