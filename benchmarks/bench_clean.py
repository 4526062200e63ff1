"""Import + cleaning of a pool of small images, against merely reading and hashing the same files.

Makes N small distinct PNGs. Most are in the scene-text layout (IMG/N.png + label/N.txt) and
imported with the folder importer as benchmark QA; the rest come with a LLaVA JSONL imported as a
mixed collection (origin "InfinityMM"), with a planted share of off-task questions, a few prose
multiple-choice ones and a few exact duplicates, so every cleaning rule does real work. The two pools are joined and cleaned
with ``clean_pool``. The baseline reads and sha256-hashes every image file, in the same run,
before and after (the faster of the two counts), with the files in the page cache both times.

    .venv/bin/python benchmarks/bench_clean.py               # 50000 images, about a minute
    .venv/bin/python benchmarks/bench_clean.py --items 100000 --json bench.json

Prints one line per phase and the ratio (import + clean) / (read + hash).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from synthetic import png  # benchmarks/ is on sys.path when a script runs

from orandcar_builder.clean import clean_pool
from orandcar_builder.images import ImagePolicy, sha256_file
from orandcar_builder.pool import import_source, read_pool

MIXED_SHARE = 0.2  # of the images, imported as a mixed collection
OFF_TASK_SHARE = 0.3  # of the mixed items, off-task for scene_text (so purity triggers)
MC_EVERY = 50  # every 50th mixed item is a prose multiple-choice question
DUPLICATE_EVERY = 100  # every 100th mixed record (a multiple-choice one) asks its question twice
IMAGE_DIRS = ("scene/IMG", "mixed")
OUTSIDE_OK = ImagePolicy(allow_outside_paths=True)


def mixed_turns(k: int, i: int) -> list[tuple[str, str]]:
    if k % MC_EVERY == 0:
        turns = [("human", f"<image>\nWhich word is shown? Options: WORD0, WORD{i}, WORDX"), ("gpt", f"WORD{i}")]
        return turns * 2 if k % DUPLICATE_EVERY == 0 else turns
    if k % 10 < OFF_TASK_SHARE * 10:
        return [("human", "<image>\nDescribe the picture."), ("gpt", "A small square.")]
    return [("human", "<image>\nWhat text is shown?"), ("gpt", f"WORD{i}")]


def make_sources(workdir: Path, n: int) -> Path:
    """n images: the first (1 - MIXED_SHARE) in the scene-text layout with labels, the rest in
    mixed/ behind a LLaVA JSONL (returned)."""
    first_mixed = n - int(n * MIXED_SHARE)
    for sub in ("scene/IMG", "scene/label", "mixed"):
        (workdir / sub).mkdir(parents=True)
    llava = workdir / "mixed.jsonl"
    with open(llava, "w", encoding="utf-8") as fh:
        for i in range(n):
            if i < first_mixed:
                (workdir / "scene" / "IMG" / f"{i}.png").write_bytes(png(i))
                (workdir / "scene" / "label" / f"{i}.txt").write_text(f"WORD{i}", encoding="utf-8")
                continue
            (workdir / "mixed" / f"{i}.png").write_bytes(png(i))
            turns = mixed_turns(i - first_mixed, i)
            record = {"id": f"m{i}", "image": f"mixed/{i}.png", "source": "infinity",
                      "conversations": [{"from": r, "value": v} for r, v in turns]}
            if (i - first_mixed) % MC_EVERY == 0:
                record["family"] = "multiple_choice"
            fh.write(json.dumps(record) + "\n")
    return llava


class Clock:
    """Wall and CPU (user + system) seconds of a block; CPU time is less disturbed by other load."""

    def __enter__(self) -> "Clock":
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def read_and_hash(workdir: Path) -> Clock:
    with Clock() as clock:
        for sub in IMAGE_DIRS:
            for entry in os.scandir(workdir / sub):
                sha256_file(entry.path)
    return clock


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(n: int, workdir: Path) -> dict:
    scene = workdir / "scene"
    t = time.perf_counter()
    llava = make_sources(workdir, n)
    figures: dict = {"items": n, "generate_s": time.perf_counter() - t, "rss_after_generate_mb": peak_rss_mb()}

    hash_before = read_and_hash(workdir)

    with Clock() as importing:
        folder_report = import_source("folder", scene, workdir / "pools" / "bench.jsonl", family="scene_text")
        mixed_report = import_source("llava", llava, workdir / "pools" / "mixed.jsonl", family="scene_text", origin="InfinityMM")
        with open(workdir / "pools" / "pool.jsonl", "wb") as out:
            for part in ("bench.jsonl", "mixed.jsonl"):
                with open(workdir / "pools" / part, "rb") as fh:
                    shutil.copyfileobj(fh, out)
    figures["import_s"], figures["import_cpu_s"] = importing.wall, importing.cpu
    figures["rss_after_import_mb"] = peak_rss_mb()
    figures["imported"] = folder_report.written + mixed_report.written
    figures["import_problems"] = folder_report.problems_total + mixed_report.problems_total

    with Clock() as cleaning:
        # The imported pools name their images with ../ paths (the images stay where they are).
        report = clean_pool(workdir / "pools" / "pool.jsonl", workdir / "cleaned" / "pool.jsonl", images=OUTSIDE_OK)
    figures["clean_s"], figures["clean_cpu_s"] = cleaning.wall, cleaning.cpu
    figures["rss_after_clean_mb"] = peak_rss_mb()

    with Clock() as reading:
        for _ in read_pool(workdir / "pools" / "pool.jsonl", images=OUTSIDE_OK):
            pass
    figures["read_pool_s"] = reading.wall  # part of clean_s: JSON, hash and decode check per line

    hash_after = read_and_hash(workdir)
    figures["hash_s"] = min(hash_before.wall, hash_after.wall)
    figures["hash_cpu_s"] = min(hash_before.cpu, hash_after.cpu)
    figures["hash_runs_s"] = [hash_before.wall, hash_after.wall]
    figures["ratio"] = (figures["import_s"] + figures["clean_s"]) / figures["hash_s"]
    figures["cpu_ratio"] = (figures["import_cpu_s"] + figures["clean_cpu_s"]) / figures["hash_cpu_s"]
    figures["clean_report"] = {k: report[k] for k in ("lines", "lines_admitted", "lines_dropped", "dropped_by_reason",
                                                      "actions", "duplicates_merged")}
    figures["purity"] = report["purity"]["families"]
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=50000, help="images to make (default 50000; the issue asks for 100000)")
    parser.add_argument("--workdir", type=Path, default=None, help="where to build (default: a temporary dir, removed)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_clean_"))
    try:
        figures = run(args.items, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    n = figures["items"]
    print(f"items {n}  (python {sys.version.split()[0]}, {os.cpu_count()} cpus)")
    print(f"read + sha256 of {n} image files: {figures['hash_s']:.2f} s  (runs: {', '.join(f'{x:.2f}' for x in figures['hash_runs_s'])})")
    print(f"import (folder + llava + join): {figures['import_s']:.2f} s  ({figures['imported']} lines)")
    print(f"clean_pool: {figures['clean_s']:.2f} s  (of which read_pool, hash + decode check: ~{figures['read_pool_s']:.2f} s)")
    print(f"ratio (import + clean) / (read + hash): wall {figures['ratio']:.1f}x, cpu {figures['cpu_ratio']:.1f}x "
          f"(cpu s: {figures['import_cpu_s'] + figures['clean_cpu_s']:.2f} / {figures['hash_cpu_s']:.2f})")
    print(f"peak RSS: after import {figures['rss_after_import_mb']:.0f} MB, after clean {figures['rss_after_clean_mb']:.0f} MB")
    print(f"cleaning: {json.dumps(figures['clean_report'])}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
