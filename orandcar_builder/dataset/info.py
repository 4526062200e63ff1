"""The ``dataset_info`` of a dataset card: what ``datasets`` records for each config (features,
rows, file and Arrow bytes). The card writes it and ``validate`` recomputes it from the shards, so
both take it from here, below either of them."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..parquetio import open_parquet
from ..vocab import CONFIGS, SPLIT
from .features import features


def arrow_bytes(shards: Iterable[Path]) -> int:
    """In-memory (Arrow) size of the shards' rows, read one row group at a time; this is the
    ``num_bytes`` that ``datasets`` records for a split."""
    total = 0
    for shard in shards:
        parquet = open_parquet(shard)
        for group in range(parquet.num_row_groups):
            total += parquet.read_row_group(group).nbytes
    return total


def dataset_info(sizes: dict[str, dict]) -> list[dict]:
    """The ``dataset_info`` header list, written by ``datasets`` itself from the features and
    ``sizes`` (per config: ``rows``, ``file_bytes``, ``arrow_bytes``), in config order."""
    from datasets import DatasetInfo, SplitDict, SplitInfo
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCardData

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
