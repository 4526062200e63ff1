"""Our ``vllm`` engine against raw vLLM offline generation of everything at once, on a GPU.

The same requests (synthetic photographs-sized JPEGs with a question each) go through one started
``vllm.LLM`` twice: once as our engine streams them (``VLLMEngine.stream``: queued one by one
with ``LLM.enqueue_chat``, a window of twice ``max_num_seqs``, each finished request handed back
by ``LLMEngine.step``), once as a single ``LLM.chat`` call over all of them (vLLM's own best
case: every request known up front). Prefix caching is off so the second run gains nothing from
the first; ``--order`` says which runs first. Prints both wall times and their ratio (target
ours / raw <= 1.10) as JSON.

    python benchmarks/bench_vllm_gpu.py --model Qwen/Qwen2.5-VL-3B-Instruct --requests 2000
    python benchmarks/bench_vllm_gpu.py --model /models/Qwen3-VL-8B-Thinking --max-tokens 4096 \\
        --chat-template-kwargs '{"enable_thinking": true}' --json vllm_gpu.json

Needs vLLM (``pip install 'orandcar-builder[vllm]'``) and the model (a Hub id or a local folder;
pass ``--revision`` with a Hub id to skip the revision lookup). Run it from the repository root.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def make_requests(folder: Path, n: int, seed: int):
    """``n`` requests over 640x480 JPEGs (about 30-60 KB each) with a few words drawn on them."""
    from PIL import Image, ImageDraw

    from orandcar_builder.images import ImageRef
    from orandcar_builder.records import Request

    rng = random.Random(seed)
    words = ["STOP", "EXIT", "OPEN", "CAFE", "HOTEL", "PARK", "BANK", "TAXI", "SALE", "PUSH"]
    questions = ["What is written on the sign?", "How many words are in the image?",
                 "Describe the image in one sentence.", "What colour is the background?",
                 "Is there any text in the image? Explain your reasoning step by step."]
    requests = []
    for i in range(n):
        image = Image.new("RGB", (640, 480), tuple(rng.randrange(256) for _ in range(3)))
        draw = ImageDraw.Draw(image)
        for _ in range(rng.randint(1, 4)):
            draw.text((rng.randrange(560), rng.randrange(440)), rng.choice(words), fill=(255, 255, 255))
        for _ in range(200):  # noise, so the JPEG is photograph-sized
            x, y = rng.randrange(640), rng.randrange(480)
            draw.rectangle([x, y, x + 8, y + 8], fill=tuple(rng.randrange(256) for _ in range(3)))
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=90)
        path = folder / f"{i}.jpg"
        path.write_bytes(buf.getvalue())
        requests.append(Request(f"r{i}", f"{rng.choice(questions)} (image {i})", "vqa", ImageRef.from_file(path)))
    return requests


def run_ours(engine, requests) -> dict:
    t0 = time.perf_counter()
    tokens = ok = 0
    for completion in engine.stream(iter(requests)):
        ok += completion.ok
        tokens += (completion.generation.completion_tokens or 0) if completion.ok else 0
    return {"seconds": round(time.perf_counter() - t0, 2), "answered": ok, "completion_tokens": tokens}


def run_raw(engine, requests) -> dict:
    kwargs = {"chat_template_kwargs": engine.chat_template_kwargs, "use_tqdm": False}
    if engine.chat_template is not None:
        kwargs["chat_template"] = engine.chat_template
    t0 = time.perf_counter()
    conversations = [engine.conversation(r) for r in requests]  # image decoding counts, as in ours
    outputs = engine.llm.chat(conversations, engine.sampling_params(), **kwargs)
    seconds = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {"seconds": round(seconds, 2), "answered": len(outputs), "completion_tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--revision", default=None)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--chat-template-kwargs", type=json.loads, default=None)
    parser.add_argument("--concurrency", type=int, default=None, help="our window (default: 2 x max_num_seqs)")
    parser.add_argument("--order", choices=["raw-first", "ours-first"], default="raw-first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from orandcar_builder.engines.vllm import VLLMEngine

    with tempfile.TemporaryDirectory(prefix="bench_vllm_gpu-") as tmp:
        requests = make_requests(Path(tmp), args.requests, args.seed)
        engine = VLLMEngine(args.model, revision=args.revision, max_tokens=args.max_tokens,
                            max_model_len=args.max_model_len, chat_template_kwargs=args.chat_template_kwargs,
                            concurrency=args.concurrency, llm_kwargs={"enable_prefix_caching": False})
        t0 = time.perf_counter()
        _ = engine.llm  # start it (weights load) outside both timings
        started = time.perf_counter() - t0
        runs = {}
        for name in (("raw", "ours") if args.order == "raw-first" else ("ours", "raw")):
            runs[name] = (run_raw if name == "raw" else run_ours)(engine, requests)
    figures = {
        "model": args.model, "requests": args.requests, "max_tokens": args.max_tokens, "order": args.order,
        "window": engine.window(), "engine_start_s": round(started, 1), **{f"{k}": v for k, v in runs.items()},
        "ratio_ours_over_raw": round(runs["ours"]["seconds"] / runs["raw"]["seconds"], 3),
        "fingerprint": engine.fingerprint(),
    }
    print(json.dumps(figures, indent=2, default=str))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
