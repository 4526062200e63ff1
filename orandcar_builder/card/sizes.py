"""What the card states about the shards, per config: rows, QA items, shard count, file bytes and
Arrow bytes.

A build's figures carry the writer's summary (``BuildFigures.configs``, counted while the shards
were written): the card takes the sizes from it and opens no shard. Figures without one (a
report from before the writer counted Arrow bytes) or one that does not describe the shards in
the folder falls back to measuring them (``dataset.info.measured_sizes``, the one place that
reads them for their sizes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

from ..dataset.info import measured_sizes, written_sizes
from ..figures import BuildFigures
from .markdown import NOT_RECORDED


def _with_qa(sizes: dict[str, dict], figures: BuildFigures) -> dict[str, dict]:
    summary = figures.configs if isinstance(figures.configs, dict) else {}
    out = {}
    for config, s in sizes.items():
        written = summary.get(config) if isinstance(summary.get(config), dict) else {}
        out[config] = {"rows": s["rows"], "qa": written.get("qa", NOT_RECORDED), "shards": s["shards"],
                       "file_bytes": s["file_bytes"], "arrow_bytes": s["arrow_bytes"]}
    return out


def config_sizes(folder: Path, figures: Union[BuildFigures, dict]) -> dict[str, dict]:
    """Per config: rows, QA items (from the build's figures, or report.json's content), shard
    count, file bytes and Arrow bytes, measured on the shards in ``folder``."""
    return _with_qa(measured_sizes(Path(folder)), BuildFigures.of(figures))


def card_sizes(folder: Path, figures: Union[BuildFigures, dict]) -> dict[str, dict]:
    """The sizes of ``config_sizes``, from the writer's summary in ``figures`` where it describes
    the shards in ``folder``, else measured."""
    figures = BuildFigures.of(figures)
    written = written_sizes(Path(folder), figures.configs)
    return _with_qa(written, figures) if written is not None else config_sizes(folder, figures)
