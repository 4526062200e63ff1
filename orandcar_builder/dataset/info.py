"""The sizes a dataset card states in its ``dataset_info``, and that header list itself.

Per config the card states the rows, the shard files' bytes (``download_size``) and the rows'
in-memory Arrow size (``num_bytes`` / ``dataset_size``, what ``datasets`` records for a split).
The writer counts all three while it writes the shards (``writer.write_dataset``'s summary, as
datasets' ``ArrowWriter`` counts the tables it writes), so a build never reads its shards back
for them. ``measured_sizes`` is the one fallback that reads them, for a folder whose writer
summary is not at hand (a card rendered again from an old report); ``validate`` measures the
shards itself while it checks their rows, and compares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from ..parquetio import ShardTooLargeError, check_row_groups, open_parquet, row_group_nbytes
from ..vocab import CONFIGS, SHARD_GLOB, SPLIT


def shard_paths(folder: Path, config: str) -> list[Path]:
    """The shard files of ``config`` in a dataset ``folder``, in name (and so shard) order."""
    directory = Path(folder) / config
    return sorted(directory.glob(SHARD_GLOB)) if directory.is_dir() else []


def arrow_bytes(shards: Iterable[Path]) -> int:
    """In-memory (Arrow) size of the shards' rows, read one row group at a time; this is the
    ``num_bytes`` that ``datasets`` records for a split. A shard past the bound of
    ``parquetio.check_row_groups`` raises ``ShardTooLargeError`` unread."""
    total = 0
    for shard in shards:
        parquet = open_parquet(shard)
        try:
            check_row_groups(shard, parquet)
        except ShardTooLargeError as exc:
            raise ShardTooLargeError(f"{shard}: {exc}") from None
        for group in range(parquet.num_row_groups):
            total += row_group_nbytes(parquet, group)
    return total


def measured_sizes(folder: Path) -> dict[str, dict]:
    """Per config: rows, shard count, file bytes and Arrow bytes, measured on the shards in
    ``folder`` (reads every row group: the fallback where no writer summary describes them)."""
    out = {}
    for config in CONFIGS:
        shards = shard_paths(folder, config)
        out[config] = {
            "rows": sum(open_parquet(s).metadata.num_rows for s in shards),
            "shards": len(shards),
            "file_bytes": sum(s.stat().st_size for s in shards),
            "arrow_bytes": arrow_bytes(shards),
        }
    return out


def written_sizes(folder: Path, summary: Any) -> Optional[dict[str, dict]]:
    """The sizes of ``measured_sizes`` taken from ``writer.write_dataset``'s ``summary`` instead,
    without opening a shard; None when the summary does not describe the shards now in ``folder``
    (a summary from before the writer counted Arrow bytes, another build's, or a folder changed
    since: the shard names or their file sizes differ)."""
    if not isinstance(summary, dict):
        return None
    folder = Path(folder)
    out = {}
    for config in CONFIGS:
        written = summary.get(config)
        shards = written.get("shard_sizes") if isinstance(written, dict) else None
        if not isinstance(shards, list) or not all(isinstance(s, dict) for s in shards):
            return None
        on_disk = shard_paths(folder, config)
        try:
            if ([folder / s["path"] for s in shards] != on_disk
                    or any(path.stat().st_size != s["bytes"] for path, s in zip(on_disk, shards))):
                return None
            out[config] = {
                "rows": sum(int(s["rows"]) for s in shards),
                "shards": len(shards),
                "file_bytes": sum(int(s["bytes"]) for s in shards),
                "arrow_bytes": sum(int(s["arrow_bytes"]) for s in shards),
            }
        except (KeyError, TypeError, ValueError, OSError):
            return None
    return out


def dataset_info(sizes: dict[str, dict]) -> list[dict]:
    """The ``dataset_info`` header list, written by ``datasets`` itself from the features and sizes."""
    from datasets import DatasetInfo, SplitDict, SplitInfo
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCardData

    from .features import features  # loads datasets too: only where the header is written
    infos = DatasetInfosDict({
        config: DatasetInfo(
            config_name=config,
            features=features(config),
            splits=SplitDict({SPLIT: SplitInfo(name=SPLIT, num_bytes=s["arrow_bytes"], num_examples=s["rows"])}),
            download_size=s["file_bytes"],
            dataset_size=s["arrow_bytes"],
        )
        for config, s in sizes.items()
    })
    data = DatasetCardData()
    infos.to_dataset_card_data(data)
    by_name = {info["config_name"]: info for info in data["dataset_info"]}
    return [by_name[config] for config in CONFIGS]
