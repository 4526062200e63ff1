"""Peak memory and time of ``orandcar diff`` against the dataset's size.

For each ``--items`` N, writes two dataset folders with ``write_dataset`` (N QA items, two per
image, one of synthetic.py's 16x16 PNGs each; 70% of the rows accepted, in RS_nothink and
RS_think, the rest rejected), the new one with ``--changes`` rows of changes whatever N is (a
third of them flipped to rejected, a third with a new answer, a third removed), so the lists
the diff reports stay the same size. Then runs ``orandcar diff --json OLD NEW`` in a child
process (``--tree``: the source tree whose code runs, e.g. an older checkout) and prints its
wall time and peak RSS (the child's own ``VmHWM``).

    .venv/bin/python benchmarks/bench_diff.py --items 20000 100000 200000 --json bench_diff.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import png  # noqa: E402

from orandcar_builder.dataset.writer import write_dataset  # noqa: E402
from orandcar_builder.vocab import CONFIG_NOTHINK, CONFIG_REJECTED, CONFIG_THINK, WRONG_ANSWER  # noqa: E402

CARD = "---\nlicense: cc-by-4.0\n---\n# Synthetic dataset for bench_diff\n"


def _row(i: int, config: str, answer: str) -> dict:
    data = png(i)
    qa, sources = [], []
    for j in range(2):
        k = 2 * i + j
        question = f"What word is shown, item {k}?"
        if config == CONFIG_REJECTED:
            qa.append({"question": question, "answer": f"Word{k % 997}x", "wrong_vlm": answer, "reason": WRONG_ANSWER})
        else:
            item = {"question": question, "answer": answer, "org_answer": f"Word{k % 997}x", "verifier": "alnum"}
            qa.append({"question": question, "think": "It reads so.", **item} if config == CONFIG_THINK else item)
        sources.append({"dataset": "synthetic", "split": "train", "id": str(k), "origin": "benchmark",
                        "family": "scene_text", "references": [f"Word{k % 997}x"], "options": []})
    return {"image": {"bytes": data, "path": f"img/{i}.png"}, "image_sha256": hashlib.sha256(data).hexdigest(),
            "qa": qa, "clean_meta": {"policy": "bench", "sources": sources, "actions": []}}


def _rows(images: int, config: str, changes: int, new: bool):
    """The rows of one config: image i is accepted when i % 10 < 7. On the new side the first
    ``changes`` accepted images are changed: i % 3 == 0 flipped to rejected, 1 answered anew, 2 removed."""
    for i in range(images):
        accepted = i % 10 < 7
        change = new and accepted and i < changes * 10 // 7 and i % 3
        flipped = new and accepted and i < changes * 10 // 7 and i % 3 == 0
        if change == 2:
            continue
        if config == CONFIG_REJECTED:
            if not accepted or flipped:
                yield _row(i, config, f"Other{i % 13}")
        elif accepted and not flipped:
            yield _row(i, config, "Changed" if change == 1 else "Word")


def _write(folder: Path, images: int, changes: int, new: bool) -> None:
    write_dataset(folder, {c: _rows(images, c, changes, new) for c in (CONFIG_NOTHINK, CONFIG_THINK, CONFIG_REJECTED)})
    (folder / "README.md").write_text(CARD, encoding="utf-8")


# The child runs the CLI and writes its own peak RSS (KiB) to the file named by its first argument:
# VmHWM, the high-water mark of its own address space. Not ru_maxrss: Linux carries it across exec,
# so a child spawned by this process (vfork) reports at least this process's peak, which holds
# the folders it wrote (that made the figures of 2026-12-02 before 3:20 UTC grow with the dataset).
_CHILD = """
import re, sys
from pathlib import Path
from orandcar_builder.cli import main
try:
    main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
peak = re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)
open(sys.argv[1], "w").write(peak)
sys.exit(code)
"""


def _run_diff(tree: Path, old: Path, new: Path) -> dict:
    peak_file = old.parent / "peak_rss_kib"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(peak_file), "diff", "--json", str(old), str(new)],
                          cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"diff failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout)["summary"]
    peak = int(peak_file.read_text())
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(peak / 1024, 1), "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[20_000, 100_000, 200_000])
    parser.add_argument("--changes", type=int, default=300, help="rows changed on the new side, whatever N is")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the source tree whose diff runs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    for items in sorted(args.items):
        with tempfile.TemporaryDirectory() as tmp:
            old, new = Path(tmp) / "old", Path(tmp) / "new"
            _write(old, items // 2, args.changes, False)
            _write(new, items // 2, args.changes, True)
            result = {"items": items, **_run_diff(args.tree.resolve(), old, new)}
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
