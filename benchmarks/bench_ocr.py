"""The rapidocr engine's throughput: word crops per second with 1 and with 2 onnxruntime threads.

Reads the scene-text crops under ../shared/data/scene-text (CUTE80 and SVT test sets, about 935
JPEG word crops; override with --data) and asks the engine exactly what a build asks (the
scene_text question text, the crop as the image). Each thread count gets its own engine
(``threads`` sets onnxruntime's intra-op threads; inter-op is 1), one untimed warm-up batch, then
``--repeat`` timed passes over all crops in batches of the build's size; the best pass counts.
The crops are read once beforehand, so the figure is the engine alone (decode + recognition).

    .venv/bin/python benchmarks/bench_ocr.py
    .venv/bin/python benchmarks/bench_ocr.py --threads 1 2 --repeat 3 --processes 2 --json ocr.json
    .venv/bin/python benchmarks/bench_ocr.py --threads 1 --repeat 1 --builds   # needs ray[data]

``--processes P`` adds the other way to use P cores: P engine processes of one thread each
over a share of the crops (what P Ray replicas with one CPU each do), timed from a common start.
``--builds`` also times whole builds of those crops (imported with the folder importer, no
cache): the local executor with 1 and 2 threads, and the ray executor with 2 replicas of 1
thread on a local Ray cluster (started first, its start timed apart); and checks that the ray
build's folder is byte-identical to the local one.

The host's load average is printed with the figures: on a shared machine, other work takes cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "scene-text"
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}


def crops(data: Path) -> list[Path]:
    return sorted(p for p in data.rglob("IMG/*") if p.suffix.lower() in IMAGE_SUFFIXES)


def requests_for(paths: list[Path]):
    from orandcar_builder.families import DEFAULT_FAMILIES
    from orandcar_builder.images import ImageRef
    from orandcar_builder.prompts import question_text
    from orandcar_builder.records import Request

    question = question_text("What is written in this image?", DEFAULT_FAMILIES["scene_text"])
    return [Request(item_id=str(i), question=question, family="scene_text", image=ImageRef.from_file(p))
            for i, p in enumerate(paths)]


def run(threads: int, requests, batch: int, repeat: int) -> dict:
    from orandcar_builder.engines import create_engine

    engine = create_engine("rapidocr", threads=threads)
    engine.generate(requests[:batch])  # warm-up: session start, first allocations
    passes = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for start in range(0, len(requests), batch):
            engine.generate(requests[start:start + batch])
        passes.append(time.perf_counter() - t0)
    best = min(passes)
    return {"threads": threads, "images": len(requests), "best_s": round(best, 3),
            "images_per_s": round(len(requests) / best, 1), "ms_per_image": round(1000 * best / len(requests), 2),
            "passes_s": [round(p, 3) for p in passes]}


def _worker(paths, batch, start, results):
    requests = requests_for(paths)
    from orandcar_builder.engines import create_engine

    engine = create_engine("rapidocr", threads=1)
    engine.generate(requests[:batch])
    start.wait()
    t0 = time.perf_counter()
    for i in range(0, len(requests), batch):
        engine.generate(requests[i:i + batch])
    results.put(time.perf_counter() - t0)


def run_processes(processes: int, paths: list[Path], batch: int) -> dict:
    """``processes`` single-thread engines in parallel over interleaved shares of the crops; the
    wall time is the slowest one's."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    start, results = ctx.Barrier(processes), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(paths[i::processes], batch, start, results)) for i in range(processes)]
    for w in workers:
        w.start()
    times = [results.get() for _ in workers]
    for w in workers:
        w.join()
    wall = max(times)
    return {"processes": processes, "threads": 1, "images": len(paths), "best_s": round(wall, 3),
            "images_per_s": round(len(paths) / wall, 1), "ms_per_image": round(1000 * wall / len(paths), 2)}


def _digests(folder: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run_builds(data: Path, root: Path) -> list[dict]:
    """Whole builds of the crops: local 1 thread, local 2 threads, ray 2 replicas x 1 thread."""
    from orandcar_builder.pipeline import build
    from orandcar_builder.pool import import_source

    pool = root / "pool.jsonl"
    with open(pool, "w", encoding="utf-8") as out:
        for folder in sorted(p.parent for p in data.glob("*/IMG")):
            part = root / f"{folder.name}.jsonl"
            import_source("folder", folder, part, family="scene_text", dataset=folder.name, split="test")
            out.write(part.read_text(encoding="utf-8"))
    figures = []
    runs = [("local", 1, 1), ("local", 2, 1), ("ray", 1, 2)]
    for executor, threads, replicas in runs:
        name = f"{executor}-t{threads}-r{replicas}"
        extra = {}
        if executor == "ray":
            import ray

            t0 = time.perf_counter()
            ray.init(num_cpus=replicas, include_dashboard=False, log_to_driver=False)
            extra["ray_init_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        result = build(pool, root / name, work=root / f"work-{name}", engine_name="rapidocr",
                       engine_options={"threads": threads}, executor=executor, engine_replicas=replicas,
                       use_cache=False, progress=False, allow_outside_paths=True)  # the crops stay in data/
        wall = time.perf_counter() - t0
        if executor == "ray":
            ray.shutdown()
        report = json.loads((root / f"work-{name}" / "report.json").read_text())["timings_s"]
        fig = {"executor": executor, "threads": threads, "replicas": replicas, "items": result.report["items"],
               "build_s": round(wall, 2), "generate_s": report.get("generate"), **extra,
               "accepted": result.report["accepted"], "ok": result.ok}
        figures.append(fig)
        print(f"build {executor:<5} threads={threads} replicas={replicas}: {wall:6.1f}s "
              f"(generate {fig['generate_s']}s{', ray.init ' + str(extra['ray_init_s']) + 's' if extra else ''}), "
              f"{fig['accepted']}/{fig['items']} accepted", flush=True)
    same = _digests(root / "ray-t1-r2") == _digests(root / "local-t1-r1")
    print(f"ray folder byte-identical to local: {same}")
    figures.append({"ray_identical_to_local": same})
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    from orandcar_builder.vocab import GENERATION_BATCH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with */IMG/* crops")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2, help="timed passes per thread count (best counts)")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N crops")
    parser.add_argument("--processes", type=int, default=None, help="also run this many 1-thread engine processes")
    parser.add_argument("--builds", action="store_true", help="also time whole builds (local and ray executors)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    paths = crops(args.data)[:args.limit]
    if not paths:
        raise SystemExit(f"{args.data}: no crops found (expected */IMG/*.jpg)")
    requests = requests_for(paths)
    print(f"{len(requests)} crops from {args.data}; {os.cpu_count()} CPUs, load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    figures = []
    for threads in args.threads:
        fig = run(threads, requests, GENERATION_BATCH, args.repeat)
        figures.append(fig)
        print(f"threads={threads}: {fig['images_per_s']:7.1f} images/s  ({fig['ms_per_image']:.2f} ms/image, "
              f"passes {fig['passes_s']})", flush=True)
    if args.processes:
        fig = run_processes(args.processes, paths, GENERATION_BATCH)
        figures.append(fig)
        print(f"{args.processes} processes x 1 thread: {fig['images_per_s']:7.1f} images/s "
              f"({fig['ms_per_image']:.2f} ms/image wall)", flush=True)
    if args.builds:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="bench_ocr_") as tmp:
            figures.extend(run_builds(args.data, Path(tmp)))
    print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    threaded = [f for f in figures if "processes" not in f and "executor" not in f and "threads" in f]
    if len(threaded) > 1:
        print(f"speed-up {threaded[-1]['threads']} vs {threaded[0]['threads']} threads: "
              f"{threaded[-1]['images_per_s'] / threaded[0]['images_per_s']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
