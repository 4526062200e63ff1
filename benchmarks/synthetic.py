"""Shared by the benchmark scripts: synthetic images made in memory (``png``) and the synthetic
pool of bench_build, bench_review and bench_memory (``make_pool``: N QA items over N/2 PNGs, five
families, with replay recordings of the zero-cost engine's answers, ``answer_text``)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image


def png(i: int) -> bytes:
    """A distinct 16x16 PNG (about 100 bytes) for each i."""
    img = Image.new("RGB", (16, 16), ((i * 7) % 256, (i // 256) % 256, (i // 65536) % 256))
    img.putpixel((i % 16, (i // 16) % 16), (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


FAMILIES = ("scene_text", "scene_text", "scene_text", "vqa", "generic", "doc_vqa", "chart_qa")
SCATTER_EVERY = 50  # every 50th item asks about an image first seen SCATTER_BACK items earlier
SCATTER_BACK = 1000


def reference(k: int) -> str:
    family = FAMILIES[k % len(FAMILIES)]
    if family == "chart_qa":
        return str(10 + k % 890)
    return f"Word{k % 997}x"


def answer_text(k: int) -> tuple[str, str]:
    """What the zero-cost engine says for item k: (raw text, finish_reason)."""
    ref, bucket = reference(k), k % 20
    if bucket < 14:
        return ref, "stop"
    if bucket < 16:
        return f"<think>The sign reads {ref}.</think>{ref.upper()}.", "stop"
    if bucket < 19:
        return f"Other{k % 13}", "stop"
    return "<think>Let me look very carefully at", "length"


def image_of(k: int) -> int:
    if k % SCATTER_EVERY == SCATTER_EVERY - 1 and k >= 2 * SCATTER_BACK:
        return (k - SCATTER_BACK) // 2
    return k // 2


def make_pool(root: Path, n: int) -> tuple[Path, Path]:
    """Write ``root/pool.jsonl`` (n QA items), its images and ``root/replay.jsonl``; returns both paths."""
    images = root / "img"
    images.mkdir(parents=True, exist_ok=True)
    for i in range((n + 1) // 2):
        (images / f"{i}.png").write_bytes(png(i))
    pool, replay = root / "pool.jsonl", root / "replay.jsonl"
    with open(pool, "w", encoding="utf-8") as fp, open(replay, "w", encoding="utf-8") as fr:
        for k in range(n):
            family = FAMILIES[k % len(FAMILIES)]
            question = f"What is the value in panel {k % 11}?" if family == "chart_qa" else f"What word is shown, item {k}?"
            fp.write(json.dumps({
                "id": f"q{k}", "image": f"img/{image_of(k)}.png", "question": question, "answer": reference(k),
                "family": family,
                "source": {"dataset": "synthetic", "split": "train", "id": str(k), "origin": "benchmark"},
            }) + "\n")
            text, finish = answer_text(k)
            fr.write(json.dumps({"id": f"q{k}", "text": text, "finish_reason": finish}) + "\n")
    return pool, replay


def warm_page_cache(root: Path) -> None:
    for path in (root / "img").iterdir():
        path.read_bytes()
