"""The review page (work/report.html): time to write it and its size, for the sample build and for a
synthetic 100k-QA build with a judge pass, against reading the decisions once in the same process.

- sample: ``samples/pool.jsonl`` built with the default engine (rapidocr), no judge.
- large: the pool of ``bench_build.py`` (N QA items over N/2 images, five families, replayed
  answers: 70% right, 10% right with reasoning, 15% wrong, 5% cut off at the token limit) built
  with a replayed judge over every rule reject (one reply in three CORRECT, so the promoted list
  is long) and a calibration of 60 items per family.

For each build: ``write_review`` timed REPEAT times (the best and the median; the build itself
wrote the page once before, so fonts and caches are warm, as they are at the end of a build), the
page's size, and the baseline: ``pyarrow.parquet.read_table`` of the decisions columns the page
reads (everything but the raw text and the rendered prompt), the least any page over every
decision must do. With Chromium installed, also the time from navigation to the load event of
the page in headless Chromium (tests/browser.py).

    .venv/bin/python benchmarks/bench_review.py                 # 100000 QA, a few minutes
    .venv/bin/python benchmarks/bench_review.py --items 10000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from synthetic import make_pool, warm_page_cache  # benchmarks/ is on sys.path when a script runs

REPO = Path(__file__).resolve().parents[1]
REPEAT = 3


def judge_replies(path: Path, n: int) -> Path:
    """A judge reply for every item id (only the judged and calibrated ones are asked)."""
    with open(path, "w", encoding="utf-8") as fh:
        for k in range(n):
            verdict = "CORRECT" if k % 3 == 0 else "WRONG"
            fh.write(json.dumps({"id": f"q{k}", "text": f"Compared with the reference.\nVerdict: {verdict}"}) + "\n")
    return path


def measure(out: Path, work: Path) -> dict:
    import pyarrow.parquet as pq

    from orandcar_builder.review import write_review
    from orandcar_builder.review.collect import _SKIPPED_COLUMNS

    target = work / "bench-review.html"
    times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        result = write_review(out, work, target)
        times.append(time.perf_counter() - t0)
    names = pq.ParquetFile(work / "decisions.parquet").schema_arrow.names
    t0 = time.perf_counter()
    table = pq.read_table(work / "decisions.parquet", columns=[c for c in names if c not in _SKIPPED_COLUMNS])
    baseline = time.perf_counter() - t0
    figures = {"items": result.items, "sampled": result.sampled, "bytes": result.bytes,
               "write_s_best": round(min(times), 3), "write_s_median": round(statistics.median(times), 3),
               "baseline_read_s": round(baseline, 3), "decisions_bytes": (work / "decisions.parquet").stat().st_size,
               "ratio": round(min(times) / baseline, 2) if baseline else None,
               "identical_bytes": target.read_bytes() == (work / "report.html").read_bytes()}
    del table
    figures["browser_load_s"] = browser_load(target)
    return figures


def browser_load(page: Path):
    sys.path.insert(0, str(REPO))
    try:
        from tests.browser import Chromium, chromium_binary
    except ImportError:
        return None
    binary = chromium_binary()
    if binary is None:
        return None
    with Chromium(binary) as browser:
        for domain in ("Page", "Runtime"):
            browser.send(f"{domain}.enable")
        t0 = time.perf_counter()
        browser.send("Page.navigate", url=page.resolve().as_uri())
        browser.wait_for("Page.loadEventFired")
        return round(time.perf_counter() - t0, 3)


def sample_build(root: Path) -> tuple[float, Path, Path]:
    from orandcar_builder.pipeline import build

    t0 = time.perf_counter()
    result = build(REPO / "samples" / "pool.jsonl", root / "sample" / "OrandCar", work=root / "sample" / "work",
                   progress=False)
    assert result.ok, result.problems
    return time.perf_counter() - t0, result.out, result.work


def large_build(root: Path, n: int) -> tuple[float, Path, Path, dict]:
    from orandcar_builder.engines.replay import ReplayEngine
    from orandcar_builder.pipeline import build

    pool, replay = make_pool(root / "large", n)
    verdicts = judge_replies(root / "large" / "verdicts.jsonl", n)
    warm_page_cache(root / "large")
    t0 = time.perf_counter()
    result = build(pool, root / "large" / "OrandCar", work=root / "large" / "work", engine=ReplayEngine(replay),
                   judge="replay", judge_options={"replay": verdicts}, calibrate=60, progress=False)
    elapsed = time.perf_counter() - t0
    assert result.ok, result.problems
    return elapsed, result.out, result.work, result.report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000, help="QA items in the synthetic pool")
    parser.add_argument("--workdir", type=Path, default=None, help="where to build (default: a temp dir, removed)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench_review_"))
    figures = {}
    try:
        build_s, out, work = sample_build(root)
        figures["sample"] = {"build_s": round(build_s, 3), **measure(out, work)}
        build_s, out, work, report = large_build(root, args.items)
        figures["large"] = {"build_s": round(build_s, 3), "promoted": report["judge"]["promoted"],
                            **measure(out, work)}
        for name, f in figures.items():
            print(f"{name:>6}: {f['items']:,} QA; page {f['bytes']:,} bytes ({f['sampled']} items with their image); "
                  f"write best {f['write_s_best']:.2f}s median {f['write_s_median']:.2f}s; "
                  f"baseline read of the decisions {f['baseline_read_s']:.2f}s "
                  f"({f['decisions_bytes']:,} bytes), ratio {f['ratio']}; whole build {f['build_s']:.1f}s; "
                  f"same bytes as the build's page: {f['identical_bytes']}; "
                  f"Chromium load {f['browser_load_s']}s")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
