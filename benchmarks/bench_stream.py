"""How full does a build keep a continuously batching server? (issue: keep the accelerator busy)

Starts the stand-in server of ``standin.py`` on 127.0.0.1 (``--slots`` slots, one token per
running sequence per ``--step-ms`` step, reply lengths lognormal with median 100 tokens, capped
at 2,000, a pure function of the question), makes a pool of ``--requests`` distinct items, and
runs ``orandcar build --engine openai_compat --engine-option concurrency=N`` on it as a user
would (a subprocess), from the source tree ``--source`` (this checkout by default; point it at
an older checkout to measure the code before a change). Prints the server's figures: slot
utilization while the build had requests to hand over (target >= 0.90), the whole span against
the least any schedule needs, and the build's wall time.

    .venv/bin/python benchmarks/bench_stream.py --requests 2000 --concurrency 256
    .venv/bin/python benchmarks/bench_stream.py --engine vllm --requests 2000

``--engine vllm`` drives our ``vllm`` engine's feeding loop (in this process) against the
stand-in of ``vllm.LLM``'s step-wise engine on the same clock; no vLLM is needed. Its window
defaults to twice the slots, as against a real engine's ``max_num_seqs``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from standin import ContinuousBatcher, StandInServer  # noqa: E402
from synthetic import png  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def make_pool(root: Path, n: int) -> Path:
    images = root / "img"
    images.mkdir(parents=True)
    lines = []
    for i in range(n):
        (images / f"{i}.png").write_bytes(png(i))
        lines.append({"id": f"q{i}", "image": f"img/{i}.png", "question": f"What is written on sign {i}?",
                      "answer": f"w{i}", "family": "scene_text"})
    pool = root / "pool.jsonl"
    pool.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return pool


def run_openai_compat(args, root: Path, pool: Path, batcher: ContinuousBatcher) -> dict:
    with StandInServer(batcher) as server:
        command = [sys.executable, "-m", "orandcar_builder.cli", "build", str(pool), "-o", str(root / "out"),
                   "--work", str(root / "work"), "--engine", "openai_compat",
                   "--engine-option", f"model={server.model}", "--engine-option", f"base_urls={server.url}",
                   "--engine-option", f"concurrency={args.concurrency}", "--no-progress"]
        env = {**os.environ, "PYTHONPATH": str(Path(args.source).resolve())}
        t0 = time.perf_counter()
        done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"build failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return {"build_s": round(wall, 1), "summary": done.stdout.strip().splitlines()[:2]}


def run_vllm(args, root: Path, pool: Path, batcher: ContinuousBatcher) -> dict:
    """Our vllm engine's stream over the pool's requests, against the stand-in of vllm.LLM's
    step-wise engine (a stub ``vllm`` module stands for the package, which is not needed)."""
    import types

    sys.path.insert(0, str(Path(args.source).resolve()))
    if "vllm" not in sys.modules:
        stub = types.ModuleType("vllm")
        stub.SamplingParams = lambda **kwargs: kwargs
        stub.__version__ = "stand-in"
        sys.modules["vllm"] = stub
    from standin import StandInLLM

    for name in [m for m in sys.modules if m == "orandcar_builder" or m.startswith("orandcar_builder.")]:
        del sys.modules[name]  # import the tree given by --source
    from orandcar_builder.engines.vllm import VLLMEngine
    from orandcar_builder.images import ImageRef
    from orandcar_builder.records import Request

    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    requests = [Request(f"q{i}", f"What is written on sign {i}?", "scene_text",
                        ImageRef.from_file(root / "img" / f"{i}.png")) for i in range(args.requests)]
    batcher.start()
    try:
        options = {"concurrency": args.concurrency} if args.concurrency else {}
        engine = VLLMEngine(str(root / "model"), llm=StandInLLM(batcher), **options)
        t0 = time.perf_counter()
        if hasattr(engine, "stream"):
            done = sum(1 for c in engine.stream(iter(requests)) if c.ok)
        else:  # the engine before streaming: generate() in LLM.chat chunks, as a build called it
            done = sum(len(engine.generate(requests[i:i + 32])) for i in range(0, len(requests), 32))
        wall = time.perf_counter() - t0
    finally:
        batcher.stop()
    return {"stream_s": round(wall, 1), "answered": done, "window": getattr(engine, "window", lambda: None)()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=None,
                        help="requests in flight (openai_compat: 256 when not given; vllm: its own default)")
    parser.add_argument("--engine", choices=["openai_compat", "vllm"], default="openai_compat")
    parser.add_argument("--source", default=str(REPO), help="source tree whose orandcar_builder runs")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.engine == "openai_compat" and args.concurrency is None:
        args.concurrency = 256

    batcher = ContinuousBatcher(slots=args.slots, step_s=args.step_ms / 1000)
    with tempfile.TemporaryDirectory(prefix="bench_stream-") as tmp:
        root = Path(tmp)
        pool = make_pool(root, args.requests)
        run = run_openai_compat if args.engine == "openai_compat" else run_vllm
        timing = run(args, root, pool, batcher)
    figures = {"engine": args.engine, "source": args.source, "concurrency": args.concurrency,
               **batcher.report(), **timing}
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
