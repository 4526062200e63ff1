"""Builder overhead: a whole ``orandcar build`` of a synthetic pool with a zero-cost engine, against
writing the same final rows the way a user would without the builder, in the same run.

The pool has N QA items over N/2 small distinct PNGs (about 100 bytes each; two questions per
image, and every 50th item asks about an image first seen 1000 items earlier so that rows
gather QA items from across the pool) in five families (alnum, vqa, exact, anls and relaxed
rules). The engine is ``replay`` over recordings made with the pool: 70% right, 10% right with
reasoning and extra case/punctuation, 15% wrong, 5% cut off at the token limit.

- ours: ``build(pool, out, engine_name="replay", engine_options={"replay": recordings})``, the
  engine made as ``orandcar build --engine replay`` makes it: read the pool (hash and decode
  check of every image), clean, prompt, generate through the SQLite generation cache, verify,
  route, write the three configs, render the card and validate the folder. The engine is
  created inside the timing (it reads the recordings; a rerun whose cache holds them all only
  hashes the file).
- baseline: for each config, ``datasets.Dataset.from_generator`` over the very rows our build
  wrote (QA lists and clean_meta prepared in memory beforehand; the generator reads each image
  file), with the config's features, then ``to_parquet``. It is given a fixed fingerprint so
  that datasets does not hash the rows.

The image files are read once before either timing so both run from the page cache.

- floor: the least work any build of this pool must do, in one process: parse every pool line
  (``json.loads``), read, sha256 and fully decode (Pillow ``load``) every distinct image, and
  write the rows our build wrote (``pa.Table.from_pylist`` + ``pq.write_table`` per config, the
  image bytes from that one read). Issue 27's target: ours <= 5x the floor, measured in the same run.

- rerun (``--rerun``): after ours, the same build again into another folder with the same work
  dir: the pool and images unchanged, every generation in the cache, so what a rerun after a
  rule change costs (admission reused: ``pipeline/reuse.py``); printed with its ratio to ours.

    .venv/bin/python benchmarks/bench_build.py                  # 100000 QA, a few minutes
    .venv/bin/python benchmarks/bench_build.py --items 10000 --json out.json
    .venv/bin/python benchmarks/bench_build.py --items 20000 --rerun --no-baseline
    .venv/bin/python benchmarks/bench_build.py --items 200000 --rerun --no-baseline --repeat 5   # ratios' spread
    .venv/bin/python benchmarks/bench_build.py --items 50000 --rerun --no-baseline --no-floor --profile-rerun r.prof

Prints the per-stage timings of the build, the floor and ours / floor (target <= 5), the baseline
and ours / baseline, and the build's CPU seconds over its wall seconds (cores used).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from synthetic import make_pool, warm_page_cache  # benchmarks/ is on sys.path when a script runs


def run_ours(pool: Path, replay: Path, out: Path, work: Path, admit_workers: int | None = None,
             decide_process: bool | None = None) -> tuple[float, dict]:
    from orandcar_builder.pipeline import build

    t0, c0 = time.perf_counter(), _cpu()
    # The engine by name and options, as ``orandcar build --engine replay`` makes it (open_engines).
    result = build(pool, out, work=work, engine_name="replay", engine_options={"replay": str(replay)},
                   progress=False, admit_workers=admit_workers, decide_process=decide_process)
    elapsed = time.perf_counter() - t0
    if not result.ok:
        raise SystemExit(f"our build failed validation: {result.problems[:5]}")
    report = json.loads((work / "report.json").read_text())
    report["cpu_s"] = _cpu() - c0
    report["reused"] = any(s["counters"].get("reused") for s in report["stages"])
    return elapsed, report


def _cpu() -> float:
    """CPU seconds of this process and its ended children (the admission workers): on a shared
    machine a steadier measure than the wall clock."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def final_rows(out: Path, work: Path) -> dict[str, list[dict]]:
    """Our build's rows per config, without image bytes; ``image`` is the source file path."""
    import pyarrow.parquet as pq

    paths = dict(zip(*pq.read_table(work / "admitted.parquet", columns=["image_sha256", "image"]).to_pydict().values()))
    rows: dict[str, list[dict]] = {}
    for config in ("RS_think", "RS_nothink", "rejected"):
        rows[config] = []
        for shard in sorted((out / config).glob("*.parquet")):
            table = pq.read_table(shard, columns=["image_sha256", "qa", "clean_meta"])
            for row in table.to_pylist():
                row["image"] = paths[row["image_sha256"]]
                rows[config].append(row)
    return rows


def run_baseline(rows: dict[str, list[dict]], target: Path, cache_dir: Path) -> float:
    import datasets

    from orandcar_builder.dataset.features import features

    datasets.disable_progress_bars()

    def generate(config: str):
        for row in rows[config]:
            with open(row["image"], "rb") as fh:
                data = fh.read()
            yield {"image": {"bytes": data, "path": os.path.basename(row["image"])},
                   "image_sha256": row["image_sha256"], "qa": row["qa"], "clean_meta": row["clean_meta"]}

    t0 = time.perf_counter()
    for config in rows:
        ds = datasets.Dataset.from_generator(generate, features=features(config), gen_kwargs={"config": config},
                                             cache_dir=str(cache_dir), fingerprint=f"baseline-{config}-{time.time_ns()}")
        ds.to_parquet(str(target / config / "train-00000-of-00001.parquet"))
    return time.perf_counter() - t0


def run_floor(pool: Path, rows: dict[str, list[dict]], target: Path) -> float:
    """Seconds of the floor (module docstring): parse, read + hash + decode, write the rows."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from orandcar_builder.dataset.features import features

    t0 = time.perf_counter()
    paths = []
    with open(pool, encoding="utf-8") as fh:
        for line in fh:
            paths.append(json.loads(line)["image"])
    images: dict[str, bytes] = {}
    for name in paths:
        path = str(pool.parent / name)
        if path not in images:
            with open(path, "rb") as fh:
                data = fh.read()
            hashlib.sha256(data).hexdigest()
            with Image.open(io.BytesIO(data)) as img:
                img.load()
            images[path] = data
    for config, config_rows in rows.items():
        (target / config).mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(
            [{"image": {"bytes": images.get(row["image"]) or Path(row["image"]).read_bytes(),
                        "path": os.path.basename(row["image"])},
              "image_sha256": row["image_sha256"], "qa": row["qa"], "clean_meta": row["clean_meta"]}
             for row in config_rows], schema=features(config).arrow_schema)
        pq.write_table(table, target / config / "train-00000-of-00001.parquet", compression="snappy")
    return time.perf_counter() - t0


def profiled(profile: Path | None, what: str, *args) -> tuple[float, dict]:
    """``run_ours(*args)``, under cProfile when ``profile`` names a file to write its stats to."""
    if profile is None:
        return run_ours(*args)
    import cProfile

    profiler = cProfile.Profile()
    result = profiler.runcall(run_ours, *args)
    profiler.dump_stats(str(profile))
    print(f"profile of the {what}'s process written to {profile} (read it with pstats)")
    return result


def _timings_line(label: str, seconds: float, timings: dict) -> str:
    """The build's seconds, its stages' (report.json), and what came after the stages: the swap of
    the staged folder and the review page (``after``)."""
    stages = "  ".join(f"{k} {v:.2f}" for k, v in timings.items() if k != "total")
    return f"{label:<9} {seconds:8.2f}s  {stages}  after {seconds - timings['total']:.2f}"


def one_turn(args: argparse.Namespace, root: Path, pool: Path, replay: Path, decide: bool | None,
             profile: bool, keep_rows: bool = False) -> tuple[dict, Optional[list]]:
    """One fresh build, then (``--rerun``) the rerun and (unless ``--no-floor``) the floor, with
    their lines printed; their figures, and with ``keep_rows`` the build's final rows (read once
    for the floor and the baseline)."""
    ours, report = profiled(args.profile if profile else None, "build", pool, replay, root / "out", root / "work",
                            args.admit_workers, decide)
    stages = report["timings_s"]
    print(_timings_line("ours", ours, stages))
    print(f"          accepted {report['accepted']}  rejected {report['rejected']}  "
          + "  ".join(f"{c} {s['rows']} rows" for c, s in report["configs"].items()))
    figures = {"items": args.items, "ours_s": round(ours, 3), "stages_s": stages}
    if args.rerun:
        rerun, again = profiled(args.profile_rerun if profile else None, "rerun", pool, replay, root / "out_rerun",
                                root / "work", args.admit_workers, decide)
        print(_timings_line("rerun", rerun, again["timings_s"]))
        print(f"ratio rerun/ours = {rerun / ours:.2f} wall, {again['cpu_s'] / report['cpu_s']:.2f} CPU "
              f"({again['cpu_s']:.1f} / {report['cpu_s']:.1f} s)  (target <= 0.50)  "
              f"admission reused: {again['reused']}")
        figures.update({"rerun_s": round(rerun, 3), "rerun_ratio": round(rerun / ours, 3),
                        "cpu_s": round(report["cpu_s"], 3), "rerun_cpu_s": round(again["cpu_s"], 3),
                        "rerun_stages_s": again["timings_s"], "admission_reused": again["reused"]})
    rows = final_rows(root / "out", root / "work") if keep_rows or not args.no_floor else None
    if not args.no_floor:
        floor = run_floor(pool, rows, root / "floor")
        print(f"floor     {floor:8.2f}s  (parse the pool, read + sha256 + decode each image, write the rows)")
        print(f"ratio ours/floor = {ours / floor:.2f}  (target <= 5.00)  CPU {report['cpu_s']:.1f} s "
              f"for {ours:.1f} s wall ({report['cpu_s'] / ours:.2f} cores)")
        figures.update({"floor_s": round(floor, 3), "floor_ratio": round(ours / floor, 3),
                        "cpu_s": round(report["cpu_s"], 3)})
    return figures, rows if keep_rows else None


# (figure, its target, what it measures) summarised over the turns of --repeat
TARGETS = (("floor_ratio", 5.0, "ours / floor"), ("rerun_ratio", 0.5, "rerun / ours"))


def summary(turns: list[dict]) -> dict:
    """Per target ratio measured in every turn: its median, least and most, and the turns within
    the target; printed too."""
    out = {}
    for key, target, label in TARGETS:
        values = sorted(t[key] for t in turns if key in t)
        if not values:
            continue
        within = sum(v <= target for v in values)
        out[key] = {"median": statistics.median(values), "min": values[0], "max": values[-1], "within": within,
                    "turns": len(values), "target": target}
        print(f"{label} over {len(values)} turns: median {statistics.median(values):.2f}, {values[0]:.2f}-"
              f"{values[-1]:.2f}; {within} of {len(values)} within {target:.2f}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000, help="QA items in the synthetic pool")
    parser.add_argument("--workdir", type=Path, default=None, help="where to build (default: a temp dir, removed)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--rerun", action="store_true",
                        help="then build again with the same work dir (cache warm, pool unchanged) and time it")
    parser.add_argument("--no-baseline", action="store_true", help="skip the datasets baseline")
    parser.add_argument("--profile", type=Path, default=None,
                        help="run the (first) build under cProfile and write its stats here")
    parser.add_argument("--profile-rerun", type=Path, default=None,
                        help="run the rerun (--rerun) under cProfile and write its stats here")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor (parse, hash + decode, write)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="fresh build (and rerun, floor) this many times, each from a new work dir, and "
                             "print each target ratio's median, range and turns within it (the baseline runs once)")
    parser.add_argument("--admit-workers", type=int, default=None,
                        help="the build's --admit-workers (default: the build's own, the CPUs up to 8)")
    parser.add_argument("--decide-process", choices=("auto", "on", "off"), default="auto",
                        help="decide on a process of its own (executors.decider): the build's choice (auto), or not")
    args = parser.parse_args(argv)
    if args.profile_rerun and not args.rerun:
        parser.error("--profile-rerun profiles the rerun: give --rerun too")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench_build_"))
    try:
        t = time.perf_counter()
        pool, replay = make_pool(root, args.items)
        print(f"pool: {args.items} QA over {(args.items + 1) // 2} images, made in {time.perf_counter() - t:.1f}s")
        warm_page_cache(root)

        decide = {"auto": None, "on": True, "off": False}[args.decide_process]
        turns = []
        for turn in range(1, args.repeat + 1):
            if turn > 1:  # a fresh build again: nothing left of the turn before but the pool
                for name in ("out", "work", "out_rerun", "floor"):
                    shutil.rmtree(root / name, ignore_errors=True)
                print(f"-- turn {turn} of {args.repeat}")
            turn_figures, rows = one_turn(args, root, pool, replay, decide, profile=turn == 1,
                                          keep_rows=turn == args.repeat and not args.no_baseline)
            turns.append(turn_figures)
        figures = dict(turns[0])
        if args.repeat > 1:
            figures["turns"] = turns
            figures["summary"] = summary(turns)
        if not args.no_baseline:  # against the last turn's build, whose rows it writes
            ours = turns[-1]["ours_s"]
            baseline = run_baseline(rows, root / "baseline", root / "hf_cache")
            print(f"baseline  {baseline:8.2f}s  (datasets.Dataset.from_generator + to_parquet, same rows)")
            ratio = ours / baseline
            print(f"ratio ours/baseline = {ratio:.2f}  (target <= 1.00)  {args.items / ours:,.0f} QA/s through the "
                  f"whole build")
            figures.update({"baseline_s": round(baseline, 3), "ratio": round(ratio, 3)})
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
