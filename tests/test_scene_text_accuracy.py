"""Word accuracy of the default engine on real scene-text crops (../shared/data, when present)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orandcar_builder.pipeline import build

from .conftest import SHARED_DATA

SCENE_TEXT = SHARED_DATA / "scene-text"
MIN_WORD_ACCURACY = 0.90


def scene_text_pool(root: Path, pool: Path) -> int:
    """Write a native pool for every IMG/N.ext + label/N.txt pair under ``root``."""
    n = 0
    with open(pool, "w", encoding="utf-8") as fh:
        for bench in sorted(p for p in root.iterdir() if (p / "IMG").is_dir()):
            for image in sorted((bench / "IMG").iterdir(), key=lambda p: int(p.stem)):
                label = (bench / "label" / f"{image.stem}.txt").read_text(encoding="utf-8")
                fh.write(json.dumps({
                    "id": f"{bench.name}-{image.stem}", "image": os.path.relpath(image, pool.parent),
                    "question": "What word is written in this image?", "answer": label,
                    "family": "scene_text",
                    "source": {"dataset": bench.name, "split": "test", "id": image.stem, "origin": "benchmark"},
                }) + "\n")
                n += 1
    return n


@pytest.mark.slow
@pytest.mark.skipif(not SCENE_TEXT.is_dir(), reason="../shared/data/scene-text is not present")
def test_word_accuracy_on_shared_scene_text(tmp_path, ocr_engine, record_property):
    pool = tmp_path / "pool.jsonl"
    total = scene_text_pool(SCENE_TEXT, pool)
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine=ocr_engine, progress=False,
                   allow_outside_paths=True)  # the crops stay in ../shared/data
    assert result.ok, result.problems
    report = result.report
    assert report["items"] == total and report["dropped"] == 0
    accuracy = report["accepted"] / total
    seconds = json.loads((tmp_path / "work" / "report.json").read_text())["timings_s"]["generate"]
    record_property("word_accuracy", round(accuracy, 4))
    record_property("ms_per_image", round(1000 * seconds / total, 1))
    print(f"\nrapidocr word accuracy on {total} scene-text crops: {accuracy:.4f} "
          f"({report['accepted']}/{total}); {1000 * seconds / total:.1f} ms per image")
    assert accuracy > MIN_WORD_ACCURACY
