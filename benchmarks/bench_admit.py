"""Does the CPU side keep up? Admission throughput on 1 and N processes, and how soon a build's
first request reaches the engine. (issue 13: "The CPU side keeps up")

Makes ``--images`` photo-like JPEGs of about ``--megapixels`` MP (a colour gradient with noise,
so they neither compress nor decode trivially: several hundred KB each, as real photographs),
one QA item each, in ``--dir`` (kept and reused by later runs). Then, from the source tree
``--source`` (this checkout by default; point it at an older checkout to measure the code before
a change):

1. ``admit``: the whole admission (``clean.pool_file.clean_lines``: read every line, read, fully
   decode and hash every image, clean) with 1 and with ``--workers`` processes; admitted
   images/s each, and their ratio. A tree without admission workers is measured on 1 only.
2. ``first request``: ``build`` with an engine that answers at once and notes when the first
   request reached it: seconds from the build's start to the first request, and the build's
   wall time (default admission workers of the tree).
3. ``engine``: the same build with a stand-in GPU engine (``--slots`` requests running at once,
   ``--latency`` seconds each): when its last answer came, and its busy share from the build's
   start until then (the least time it needs, images x latency / slots, over that span): the
   time it spent waiting on admission is what is missing.

    .venv/bin/python benchmarks/bench_admit.py --images 1000
    git archive 05131ac | tar -x -C /tmp/before && .venv/bin/python benchmarks/bench_admit.py --source /tmp/before

Each figure is the best of ``--repeat`` runs, in this one process (the OS page cache holds the
images after the first pass, as on a machine whose pool fits its memory).
"""

from __future__ import annotations

import argparse
import inspect
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_pool(root: Path, n: int, megapixels: float) -> Path:
    """``n`` JPEGs (quality 90) and a pool naming each once; reused when already there."""
    import numpy as np
    from PIL import Image

    pool = root / "pool.jsonl"
    stamp = root / "made.json"
    wanted = {"images": n, "megapixels": megapixels}
    if pool.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return pool
    shutil.rmtree(root, ignore_errors=True)
    (root / "img").mkdir(parents=True)
    width = int((megapixels * 1e6 * 4 / 3) ** 0.5)
    height = int(width * 3 / 4)
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 12, (height + 64, width + 64, 3)).astype(np.int16)
    ys, xs = np.mgrid[0:height, 0:width]
    lines = []
    for i in range(n):
        colour = np.array([(i * 37) % 200, (i * 91) % 200, (i * 53) % 200], dtype=np.int16)
        gradient = ((xs[..., None] * 55 // width + ys[..., None] * 55 // height) + colour).astype(np.int16)
        dy, dx = (i * 7) % 64, (i * 13) % 64
        pixels = np.clip(gradient + noise[dy:dy + height, dx:dx + width], 0, 255).astype(np.uint8)
        Image.fromarray(pixels, "RGB").save(root / "img" / f"{i}.jpg", "JPEG", quality=90)
        lines.append({"id": f"q{i}", "image": f"img/{i}.jpg", "question": f"What is written on sign {i}?",
                      "answer": f"w{i}", "family": "scene_text"})
    pool.write_text("".join(json.dumps(line) + "\n" for line in lines))
    stamp.write_text(json.dumps(wanted))
    return pool


class FirstRequestEngine:
    """Notes when the first request arrived. With ``latency`` 0 it answers each at once; else it
    stands for a GPU engine that batches continuously: ``slots`` requests run at once, each for
    ``latency`` seconds from when it was taken (wall clock), the next pulled as a slot frees."""

    kind = "bench-first-request"
    can_judge = False

    def __init__(self, slots: int = 1, latency: float = 0.0):
        self.slots, self.latency = slots, latency
        self.first = None
        self.last_done = None

    def fingerprint(self) -> dict:
        return {"kind": self.kind, "version": 1}

    def describe(self) -> dict:
        return {"kind": self.kind}

    def generate(self, requests):
        return [c.generation for c in self.stream(requests)]

    def stream(self, requests):
        from orandcar_builder.engines.base import Completion
        from orandcar_builder.engines.reasoning import make_generation

        running: list = []  # (finish time, request), oldest first: equal latencies finish in order
        iterator = iter(requests)
        exhausted = False
        while True:
            while not exhausted and len(running) < self.slots:
                request = next(iterator, None)
                if request is None:
                    exhausted = True
                    break
                now = time.perf_counter()
                if self.first is None:
                    self.first = now
                running.append((now + self.latency, request))
            if not running:
                return
            finish, request = running.pop(0)
            wait = finish - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            self.last_done = time.perf_counter()
            yield Completion(request, make_generation(request, "w0", "stop", model="bench"))


def _import_source(source: Path) -> None:
    sys.path.insert(0, str(source))
    for name in [m for m in sys.modules if m == "orandcar_builder" or m.startswith("orandcar_builder.")]:
        del sys.modules[name]


def measure_admit(pool: Path, workers: int, repeat: int) -> float:
    from orandcar_builder.clean.pool_file import clean_lines

    kwargs = {"workers": workers} if "workers" in inspect.signature(clean_lines).parameters else {}
    if workers != 1 and not kwargs:
        return float("nan")
    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as spill:
            t0 = time.perf_counter()
            admitted = sum(1 for r in clean_lines(pool, {}, spill_dir=spill, **kwargs) if hasattr(r, "order"))
            best = min(best, time.perf_counter() - t0)
    return admitted / best


def measure_first_request(pool: Path, repeat: int, slots: int = 1, latency: float = 0.0) -> dict:
    """The best of ``repeat`` builds: seconds to the first request, to the engine's last answer,
    and of the whole build; the engine's busy share from the build's start to its last answer
    (its least possible time, requests x latency / slots, over that span)."""
    from orandcar_builder.pipeline import build

    n = sum(1 for _ in open(pool, encoding="utf-8"))
    best: dict = {}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            engine = FirstRequestEngine(slots, latency)
            t0 = time.perf_counter()
            result = build(pool, Path(tmp) / "out", work=Path(tmp) / "work", engine=engine, progress=False)
            wall = time.perf_counter() - t0
            if not result.ok:
                raise SystemExit(f"build failed validation: {result.problems[:3]}")
            run = {"first_request_s": round(engine.first - t0, 3), "last_answer_s": round(engine.last_done - t0, 2),
                   "build_s": round(wall, 2)}
            if latency:
                run["engine_busy_share"] = round(n * latency / slots / (engine.last_done - t0), 3)
            if not best or run["build_s"] < best["build_s"]:
                best = run
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--megapixels", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=2, help="admission processes compared with 1")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "orandcar-bench-admit"))
    parser.add_argument("--source", default=str(REPO), help="source tree whose orandcar_builder runs")
    parser.add_argument("--skip", choices=["admit", "first", "engine"], action="append", default=[])
    parser.add_argument("--slots", type=int, default=64, help="the stand-in GPU engine's running requests")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds each request runs on it")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    pool = make_pool(Path(args.dir), args.images, args.megapixels)
    sizes = [p.stat().st_size for p in (Path(args.dir) / "img").iterdir()]
    print(f"pool: {args.images} JPEGs, mean {sum(sizes) / len(sizes) / 1e3:.0f} KB ({time.perf_counter() - t0:.1f} s "
          f"to make or find)", flush=True)
    _import_source(Path(args.source).resolve())
    figures: dict = {"source": args.source, "images": args.images, "megapixels": args.megapixels}
    if "admit" not in args.skip:
        one = measure_admit(pool, 1, args.repeat)
        many = measure_admit(pool, args.workers, args.repeat)
        figures["admit_images_per_s"] = {"1": round(one, 1), str(args.workers): round(many, 1)}
        figures["admit_speedup"] = round(many / one, 2)
        print(f"admit: {one:.1f} images/s on 1 process, {many:.1f} on {args.workers} (x{many / one:.2f})", flush=True)
    if "first" not in args.skip:
        figures["build"] = measure_first_request(pool, args.repeat)
        print(f"build: first request after {figures['build']['first_request_s']} s, "
              f"build {figures['build']['build_s']} s", flush=True)
    if "engine" not in args.skip:
        figures["gpu_standin"] = run = measure_first_request(pool, args.repeat, args.slots, args.latency)
        least = args.images * args.latency / args.slots
        print(f"build with a stand-in GPU engine ({args.slots} slots, {args.latency} s per request, least "
              f"{least:.1f} s): first request after {run['first_request_s']} s, last answer after "
              f"{run['last_answer_s']} s (engine busy {run['engine_busy_share']:.0%}), build {run['build_s']} s",
              flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
