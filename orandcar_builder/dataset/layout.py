"""The exact file layout of a built dataset folder, shared by the build, ``validate`` and ``push``.

A dataset folder holds:

- ``README.md``: the card (YAML header with ``configs:`` and ``dataset_info``);
- ``examples/<config>-<k>.<ext>``: the example images the card links to, and
  ``examples/acceptance-by-family.png``, its acceptance-per-family chart;
- ``<config>/train-XXXXX-of-YYYYY.parquet``: the shards of each config;
- ``.orandcar-dataset``: the marker that says the folder was written by this tool. It is not
  part of the dataset: ``push`` never uploads it, and ``load_dataset`` skips hidden files (the
  configs name their shards explicitly anyway). A build replaces only a folder that carries it.
  Being local, it also remembers the work dir of the build that wrote the folder (an absolute
  path of this machine), so ``report`` and ``card`` find it without ``--work``.

Anything else (a stray ``README.md.tmp``, a half-written shard, ``secrets.txt``, a ``work/`` dir,
a symbolic link) is unexpected: ``validate`` reports it and ``push`` refuses the folder. Symbolic
links are never followed.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..vocab import CONFIGS, SHARD_NAME, SPLIT

README = "README.md"
EXAMPLES_DIR = "examples"
MARKER = ".orandcar-dataset"
# Fixed text, then the work dir's line: nothing the dataset publishes depends on the clock or
# the machine, and the marker is never published.
MARKER_TEXT = "This folder is a dataset written by orandcar-builder (`orandcar build`).\n" \
              "A rebuild replaces it as a whole; files added here by hand make a rebuild stop.\n"
# The card's acceptance-per-family chart, drawn beside the example images.
ACCEPTANCE_CHART_NAME = "acceptance-by-family.png"
EXAMPLE_NAME = re.compile(rf"^(?:(?:{'|'.join(map(re.escape, CONFIGS))})-\d+\.[a-z0-9]{{1,5}}|{re.escape(ACCEPTANCE_CHART_NAME)})$")


@dataclass
class Layout:
    """What a folder holds, sorted into the dataset's own files and everything else."""

    published: list[str] = field(default_factory=list)  # repo paths a push uploads, sorted
    marker: bool = False
    unexpected: list[str] = field(default_factory=list)  # relative paths, with a "/" for a folder

    @property
    def empty(self) -> bool:
        return not (self.published or self.marker or self.unexpected)


def _kind(path: Path) -> str:
    """'link', 'dir', 'file' or 'other' (a FIFO, a device, a socket), without following links."""
    if path.is_symlink():
        return "link"
    if path.is_dir():
        return "dir"
    return "file" if path.is_file() else "other"


def _describe(relative: str, kind: str) -> str:
    if kind == "link":
        return f"{relative} (symbolic link)"
    if kind == "dir":
        return relative + "/"
    if kind == "other":
        return f"{relative} (not a regular file)"
    return relative


def scan(folder: Path) -> Layout:
    """Sort every entry of ``folder`` (which must be a directory) into the layout; follows no link."""
    folder = Path(folder)
    layout = Layout()
    for entry in sorted(os.listdir(folder)):
        path = folder / entry
        kind = _kind(path)
        if entry == README and kind == "file":
            layout.published.append(README)
        elif entry == MARKER and kind == "file":
            layout.marker = True
        elif kind == "dir" and (entry in CONFIGS or entry == EXAMPLES_DIR):
            pattern = SHARD_NAME if entry in CONFIGS else EXAMPLE_NAME
            for name in sorted(os.listdir(path)):
                inner = path / name
                inner_kind = _kind(inner)
                relative = f"{entry}/{name}"
                if inner_kind == "file" and pattern.match(name):
                    layout.published.append(relative)
                else:
                    layout.unexpected.append(_describe(relative, inner_kind))
        else:
            layout.unexpected.append(_describe(entry, kind))
    layout.published.sort()
    return layout


MARKER_WORK = "work dir: "  # then the path as a JSON string (any character, one line)


def write_marker(folder: Path, work: Optional[Path] = None) -> None:
    """The marker, remembering ``work`` (made absolute) when given."""
    text = MARKER_TEXT
    if work is not None:
        text += MARKER_WORK + json.dumps(os.path.abspath(work), ensure_ascii=False) + "\n"
    (Path(folder) / MARKER).write_text(text, encoding="utf-8")


def remembered_work(folder: Path) -> Optional[Path]:
    """The work dir the marker of ``folder`` remembers; None when it has no marker or names none."""
    try:
        lines = (Path(folder) / MARKER).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        if line.startswith(MARKER_WORK):
            try:
                path = json.loads(line[len(MARKER_WORK):])
            except ValueError:
                return None
            return Path(path) if isinstance(path, str) and path else None
    return None


def expected_layout_text() -> str:
    """One line naming the layout, for messages."""
    return (f"{README}, {MARKER}, {EXAMPLES_DIR}/<config>-<k>.<ext>, {EXAMPLES_DIR}/{ACCEPTANCE_CHART_NAME}, "
            f"<config>/{SPLIT}-XXXXX-of-YYYYY.parquet for {', '.join(CONFIGS)}")


# Files the Hub writes into every repo itself (a new repo's LFS patterns).
HUB_FILES = frozenset({".gitattributes"})


def scan_repo(paths) -> Layout:
    """``scan`` for the files of a Hub revision (repo paths; the Hub holds regular files only, and
    folders only as parts of paths). The Hub's own ``HUB_FILES`` are neither published nor
    unexpected; a folder that does not belong is named once, as ``scan`` names it (``work/``)."""
    layout = Layout()
    for path in sorted(paths):
        top, _, rest = path.partition("/")
        layout_dir = top in CONFIGS or top == EXAMPLES_DIR
        if path == README:
            layout.published.append(README)
        elif path == MARKER:
            layout.marker = True
        elif path in HUB_FILES:
            continue
        elif layout_dir and rest and "/" not in rest and (SHARD_NAME if top in CONFIGS else EXAMPLE_NAME).match(rest):
            layout.published.append(path)
        else:
            inner = rest.split("/", 1)[0] if layout_dir else ""
            entry = f"{top}/{inner}/" if layout_dir and "/" in rest else f"{top}/" if rest and not layout_dir else path
            if entry not in layout.unexpected:
                layout.unexpected.append(entry)
    return layout
