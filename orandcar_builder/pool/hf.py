"""The ``hf`` importer: any dataset ``datasets`` reads from a local path.

A ``.parquet`` or ``.arrow`` file, a folder of them, an image folder (with ``metadata.jsonl``),
or a folder written by ``save_to_disk``. Rows are streamed, never loaded whole. The image column
is read undecoded and each image is written once, as its original bytes, to ``images/`` beside
the pool, named by its sha256; the line records that sha256 as ``source.image_sha256`` so the
cleaning stage can check the file still holds those bytes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Mapping, Optional

from ..errors import OrandCarError, UnknownNameError
from ..files import image_format, sha256_bytes, write_bytes_atomic
from ..records import BENCHMARK_ORIGIN

# Pool field -> dataset column, unless the caller's ``columns`` says otherwise.
DEFAULT_COLUMNS = {"image": "image", "question": "question", "answer": "answer",
                   "id": "id", "options": "options", "family": "family"}
REQUIRED_COLUMNS = ("image", "answer")  # question may be fixed text instead
DEFAULT_IMAGES_DIR = "images"
FILE_BUILDERS = {".parquet": "parquet", ".arrow": "arrow"}


def image_suffix(data: bytes, original_name: Optional[str] = None) -> str:
    """The file extension for ``data``: its signature (``files.image_format``), else the original
    name's, else ``.img``. Only the name is chosen from it; the bytes themselves are never touched."""
    known = image_format(data)
    if known is not None:
        return known[1]
    ext = os.path.splitext(original_name or "")[1].lower()
    return ext if ext else ".img"


def open_splits(source: Path) -> dict:
    """``{split name: IterableDataset}`` for a local path, streamed."""
    import datasets  # heavy import: only when this importer runs

    try:
        if source.is_file():
            builder = FILE_BUILDERS.get(source.suffix.lower())
            if builder is None:
                raise OrandCarError(f"{source}: hf import reads {', '.join(FILE_BUILDERS)} files or a folder")
            loaded = datasets.load_dataset(builder, data_files=str(source), streaming=True)
        elif (source / "state.json").is_file() or (source / "dataset_dict.json").is_file():
            loaded = datasets.load_from_disk(str(source))
        else:
            loaded = datasets.load_dataset(str(source), streaming=True)
    except OrandCarError:
        raise
    except Exception as exc:  # datasets raises many types for unreadable input
        raise OrandCarError(f"{source}: datasets cannot read it ({type(exc).__name__}: {exc})") from None
    if isinstance(loaded, (datasets.Dataset, datasets.IterableDataset)):
        loaded = {"train": loaded}
    return {name: (ds.to_iterable_dataset() if isinstance(ds, datasets.Dataset) else ds) for name, ds in loaded.items()}


def _undecoded(split_ds, image_column: str):
    """The split with its image column left as ``{"bytes", "path"}`` (never decoded)."""
    import datasets

    feature = (split_ds.features or {}).get(image_column)
    if isinstance(feature, datasets.Image) and feature.decode:
        return split_ds.cast_column(image_column, datasets.Image(decode=False))
    return split_ds


def image_bytes(value: object, base: Path) -> tuple[Optional[bytes], Optional[str], str]:
    """``(bytes, original name, problem)`` from an image cell: an ``{"bytes", "path"}`` struct,
    raw bytes, or a path (relative to ``base``). ``problem`` is empty on success."""
    path = None
    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
        if data is not None:
            return bytes(data), path, ""
    elif isinstance(value, (bytes, bytearray)):
        return bytes(value), None, ""
    elif isinstance(value, str):
        path = value
    if not path:
        return None, None, f"image cell holds no bytes and no path ({type(value).__name__})"
    try:
        return (base / path).read_bytes(), path, ""
    except OSError as exc:
        return None, path, f"cannot read image file {path!r} ({exc.strerror or exc})"


def _answer(value: object) -> object:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return list(value) if isinstance(value, tuple) else value


def image_target(data: bytes, images_dir: Path, original_name: Optional[str]) -> tuple[Path, str]:
    """Where ``data`` is stored: ``images_dir/<sha256><ext>``; returns the path and the sha256."""
    digest = sha256_bytes(data)
    return images_dir / f"{digest}{image_suffix(data, original_name)}", digest


def store_image(data: bytes, target: Path) -> bool:
    """Write ``data`` to ``target`` unless it is already there (same name, same sha256); True when
    written now. Goes through a temporary file, so a crash never leaves a half-written image."""
    if target.exists():
        return False
    write_bytes_atomic(target, data)
    return True


def _rows(splits: dict, wanted: Optional[str]) -> Iterator[tuple[str, object]]:
    if wanted is not None and wanted not in splits:
        raise UnknownNameError("split", wanted, splits)
    for name, split_ds in splits.items():
        if wanted is None or name == wanted:
            yield name, split_ds


def import_hf(
    source: Path,
    writer,
    *,
    columns: Optional[Mapping[str, str]] = None,
    family: Optional[str] = None,
    dataset: Optional[str] = None,
    split: Optional[str] = None,
    origin: str = BENCHMARK_ORIGIN,
    question: Optional[str] = None,
    images_dir: str = DEFAULT_IMAGES_DIR,
) -> None:
    """Write one pool line per row of every split of ``source`` (or only ``split``).

    ``columns`` maps pool fields (image, question, answer, id, options, family) to column names.
    ``question`` is fixed text for every row, for sources without a question column. The family
    is the row's family column, else ``family``. ``dataset`` defaults to the source's name.
    """
    source = Path(source)
    unknown = sorted(set(columns or {}) - set(DEFAULT_COLUMNS))
    if unknown:
        raise OrandCarError(f"hf import: unknown column mapping key(s) {', '.join(unknown)}; known: {', '.join(DEFAULT_COLUMNS)}")
    mapping = {**DEFAULT_COLUMNS, **(columns or {})}
    dataset = dataset or (source.stem if source.is_file() else source.name)
    base = source.parent if source.is_file() else source
    store = writer.out.parent / images_dir
    store.mkdir(parents=True, exist_ok=True)
    report = writer.report
    for split_name, split_ds in _rows(open_splits(source), split):
        present = set(split_ds.features or {})
        for field in REQUIRED_COLUMNS + (() if question is not None else ("question",)):
            if present and mapping[field] not in present:
                raise UnknownNameError(f"column for {field} in split {split_name!r} of {source.name}", mapping[field], present)
        rows = _undecoded(split_ds, mapping["image"])
        for row_index, row in enumerate(rows):
            report.read += 1
            where = f"{source.name}[{split_name}]:{row_index}"
            raw_id = row.get(mapping["id"])
            source_id = str(raw_id) if isinstance(raw_id, (str, int)) and str(raw_id).strip() else str(row_index)
            item_id = f"{dataset}/{split_name}/{source_id}"
            data, original_name, problem = image_bytes(row.get(mapping["image"]), base)
            if data is None:
                writer.problem(where, "image_missing", problem, item_id)
                continue
            target, digest = image_target(data, store, original_name)
            options = row.get(mapping["options"])
            line = {
                "id": item_id,
                "image": writer.relative(target),
                "question": question if question is not None else row.get(mapping["question"]),
                "answer": _answer(row.get(mapping["answer"])),
                "family": row.get(mapping["family"]) or family,
                "source": {"dataset": dataset, "split": split_name, "id": source_id, "origin": origin,
                           "image_sha256": digest},
            }
            if options is not None:  # a list column; anything else is left for the line check to report
                line["options"] = list(options) if isinstance(options, (list, tuple)) else options
            if line["family"] is None:
                writer.problem(where, "no_family", f"no family: give a family or map a family column (columns: {', '.join(sorted(present))})", item_id)
                continue
            if writer.write(line, where):  # the image is stored only for a line that was written
                report.images_written += store_image(data, target)
