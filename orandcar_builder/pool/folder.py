"""The ``folder`` importer: the ``IMG/N.ext`` + ``label/N.txt`` layout of scene-text benchmarks.

``label/N.txt`` holds the reference for ``IMG/N.<ext>``. Labels are kept as written (spaces,
punctuation, case) except for one trailing line break, which belongs to the file, not to the
label. Items come in natural order of N (2 before 10). Only file names are listed up front;
each label is read when its line is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Optional

from ..errors import OrandCarError
from ..records import BENCHMARK_ORIGIN

IMAGE_DIR = "IMG"
LABEL_DIR = "label"
LABEL_SUFFIX = ".txt"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
DEFAULT_FAMILY = "scene_text"
DEFAULT_SPLIT = "test"
# The question asked of every image when the source has none (scene-text benchmarks do not).
DEFAULT_QUESTION = "What text appears in this image?"


def natural_key(stem: str) -> tuple:
    """Sort key: numeric stems by value, then other stems by text."""
    return (0, int(stem), "") if stem.isdigit() else (1, 0, stem)


def strip_label_newline(text: str) -> str:
    """Remove exactly one trailing line break (LF or CRLF); everything else is the label."""
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


def _listing(directory: Path) -> Iterator[str]:
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_file():
                yield entry.name


def import_folder(
    source: Path,
    writer,
    *,
    family: str = DEFAULT_FAMILY,
    dataset: Optional[str] = None,
    split: str = DEFAULT_SPLIT,
    question: str = DEFAULT_QUESTION,
    origin: str = BENCHMARK_ORIGIN,
) -> None:
    """Write one pool line per label/image pair of ``source``; every unpaired, unreadable or
    empty file is a problem. ``dataset`` defaults to the folder's name."""
    source = Path(source)
    image_dir, label_dir = source / IMAGE_DIR, source / LABEL_DIR
    for needed in (image_dir, label_dir):
        if not needed.is_dir():
            raise OrandCarError(f"{source}: folder import needs {IMAGE_DIR}/ and {LABEL_DIR}/ subfolders; {needed.name}/ is missing")
    dataset = dataset or source.name
    writer.add_root(source)
    images: dict[str, list[str]] = {}
    unexpected: list[str] = []
    for name in _listing(image_dir):
        stem, suffix = os.path.splitext(name)
        if suffix.lower() in IMAGE_SUFFIXES:
            images.setdefault(stem, []).append(name)
        else:
            unexpected.append(name)
    labels = {os.path.splitext(name)[0] for name in _listing(label_dir) if name.endswith(LABEL_SUFFIX)}
    report = writer.report
    for name in sorted(unexpected):
        report.read += 1
        writer.problem(f"{IMAGE_DIR}/{name}", "not_an_image", f"extension is not one of {', '.join(IMAGE_SUFFIXES)}")
    for stem in sorted(images.keys() | labels, key=natural_key):
        report.read += 1
        item_id = f"{dataset}/{split}/{stem}"
        label_where = f"{LABEL_DIR}/{stem}{LABEL_SUFFIX}"
        found = sorted(images.get(stem, ()))
        if not found:
            writer.problem(label_where, "image_missing", f"no {IMAGE_DIR}/{stem}.<ext> for this label", item_id)
            continue
        image_where = f"{IMAGE_DIR}/{found[0]}"
        if len(found) > 1:
            writer.problem(image_where, "ambiguous_image", f"several images for one label: {', '.join(found)}", item_id)
            continue
        if stem not in labels:
            writer.problem(image_where, "label_missing", f"no {label_where} for this image", item_id)
            continue
        try:
            label = strip_label_newline((label_dir / f"{stem}{LABEL_SUFFIX}").read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            writer.problem(label_where, "not_utf8", f"label is not valid UTF-8 ({exc.reason} at byte {exc.start})", item_id)
            continue
        except OSError as exc:
            writer.problem(label_where, "unreadable_label", f"cannot read label ({exc.strerror or exc})", item_id)
            continue
        if not label.strip():
            writer.problem(label_where, "empty_answer", "label is empty", item_id)
            continue
        image_rel = writer.relative(image_dir / found[0])
        line = {
            "id": item_id,
            "image": image_rel,
            "question": question,
            "answer": label,
            "family": family,
            "source": {"dataset": dataset, "split": split, "id": stem, "origin": origin, "image": image_rel},
        }
        writer.write(line, label_where)
