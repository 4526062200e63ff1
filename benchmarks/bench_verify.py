"""Speed of the verifiers and of ``recheck`` (a measurement, not a test).

    .venv/bin/python benchmarks/bench_verify.py            # everything, about a minute on 2 cores
    .venv/bin/python benchmarks/bench_verify.py --qa 0     # rules only

Prints, per rule, pairs per second of the production path (``verify.decide`` on one candidate)
and of the readable reference implementation, and their ratio; the ANLS ratio on 100-character
strings (the issue asks for at least 20x; the script exits 1 below that); and the time ``recheck``
takes over a synthetic dataset folder of ``--qa`` QA items spread over the three configs and all
families. All figures come from one process, one thread.
"""

from __future__ import annotations

import argparse
import random
import string
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from orandcar_builder.dataset.recheck import format_recheck, recheck
from orandcar_builder.families import DEFAULT_FAMILIES as FAMILIES
from orandcar_builder.verify import decide, get_rule, math_answer, reference_decide

ANLS_MIN_RATIO = 20.0
ANLS_LENGTH = 100
SEED = 7


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 8))) for _ in range(n))


def _typo(rng: random.Random, text: str, edits: int) -> str:
    chars = list(text)
    for _ in range(edits):
        i = rng.randrange(len(chars))
        chars[i] = rng.choice(string.ascii_letters)
    return "".join(chars)


def rule_pairs(rule: str, n: int, rng: random.Random) -> list[tuple[str, list[str], list[str] | None]]:
    """Short, realistic pairs, about half of them matching; math pairs are all distinct (its parse cache)."""
    pairs = []
    for i in range(n):
        hit = rng.random() < 0.5
        if rule in ("alnum", "exact", "anls"):
            ref = _words(rng, rng.randint(1, 3))
            pred = ref.upper() if hit else _typo(rng, ref, 2)
            pairs.append((pred, [ref], None))
        elif rule == "vqa":
            ref = rng.choice(["two", "yes", "no", "red", "the dog", "3", "blue car"])
            refs = [ref] * rng.randint(0, 10) + ["other"] * 3
            rng.shuffle(refs)
            pairs.append(((ref.title() + ".") if hit else "something else", refs, None))
        elif rule == "relaxed":
            value = rng.uniform(1, 1000)
            pairs.append((f"{value * (1.02 if hit else 1.2):.2f}", [f"{value:.2f}"], None))
        elif rule == "choice":
            options = [_words(rng, 1) for _ in range(4)]
            letter = rng.choice("ABCD")
            pred = rng.choice(["{}", "({})", "The answer is {}.", "**{}**"]).format(letter if hit else "A")
            pairs.append((pred, [letter], options))
        elif rule == "math":
            a, b = rng.randint(1, 99), rng.randint(2, 99)
            pred = f"{a / b:.6f}" if hit else f"\\frac{{{a + 1}}}{{{b}}}"
            pairs.append((f"{pred} ", [f"\\frac{{{a}}}{{{b}}}" + " " * i], None))  # distinct texts
        else:
            raise ValueError(f"no pair generator for rule {rule!r}")
    return pairs


def pairs_per_second(fn, rule, pairs) -> float:
    for pred, refs, options in pairs[:20]:  # warm-up: first calls import and fill library caches
        fn(rule, pred + " warm", refs, options)
    start = time.perf_counter()
    for pred, refs, options in pairs:
        fn(rule, pred, refs, options)
    return len(pairs) / (time.perf_counter() - start)


def bench_rules(n: int) -> None:
    rng = random.Random(SEED)
    print(f"{'rule':<8} {'production pairs/s':>19} {'reference pairs/s':>18} {'ratio':>7}")
    for name in sorted({family.rule for family in FAMILIES.values()}):
        rule = get_rule(name)
        count = max(200, n // 10) if name == "math" else n
        pairs = rule_pairs(name, count, rng)
        math_answer.clear_caches()
        fast = pairs_per_second(decide, rule, pairs)
        slow = pairs_per_second(reference_decide, rule, pairs)
        print(f"{name:<8} {fast:>19,.0f} {slow:>18,.0f} {fast / slow:>6.1f}x   ({count} pairs)")


def bench_anls_100(n: int) -> float:
    rng = random.Random(SEED + 1)
    anls = get_rule("anls")
    pairs = []
    for _ in range(n):
        ref = _words(rng, 40)[:ANLS_LENGTH].ljust(ANLS_LENGTH, "x")
        pairs.append((_typo(rng, ref, 10), [ref]))
    start = time.perf_counter()
    fast_scores = [anls.score(p, r) for p, r in pairs]
    fast = time.perf_counter() - start
    start = time.perf_counter()
    slow_scores = [anls.reference_score(p, r) for p, r in pairs]
    slow = time.perf_counter() - start
    assert fast_scores == slow_scores, "anls production and reference disagree"
    ratio = slow / fast
    print(f"anls on {ANLS_LENGTH}-character strings: production {n / fast:,.0f} pairs/s, reference "
          f"{n / slow:,.0f} pairs/s: {ratio:.0f}x (required >= {ANLS_MIN_RATIO:.0f}x)")
    return ratio


_FAMILY_ITEMS = {  # family -> (accepted answer, wrong answer, references, options)
    "scene_text": ("HELLO!", "HELL0", ["hello"], []),
    "doc_vqa": ("Invoice  1234", "Invoice 1235", ["invoice 1234"], []),
    "vqa": ("Two", "four", ["2"] * 4 + ["3"] * 6, []),
    "chart_qa": ("41.5", "50", ["42"], []),
    "multiple_choice": ("The answer is B.", "A", ["B"], ["cat", "dog", "fox", "cow"]),
    "math": ("", "", [""], []),  # made distinct per item below
    "generic": ("Paris", "London", ["paris"], []),
}


def _schema(qa_fields: list[str]) -> pa.Schema:
    source = pa.struct([("dataset", pa.string()), ("split", pa.string()), ("id", pa.string()),
                        ("origin", pa.string()), ("family", pa.string()),
                        ("references", pa.list_(pa.string())), ("options", pa.list_(pa.string()))])
    return pa.schema([
        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ("image_sha256", pa.string()),
        ("qa", pa.list_(pa.struct([(f, pa.string()) for f in qa_fields]))),
        ("clean_meta", pa.struct([("policy", pa.string()), ("sources", pa.list_(source)),
                                  ("actions", pa.list_(pa.string()))])),
    ])


def write_synthetic(folder: Path, qa_total: int, families: list[str], qa_per_row: int = 2,
                    rows_per_shard: int = 10_000) -> None:
    """A dataset folder of ``qa_total`` QA items: 35% accepted (in both accepted configs), 30% rejected."""
    accepted = int(qa_total * 0.35)
    plan = {"RS_think": accepted, "RS_nothink": accepted, "rejected": qa_total - 2 * accepted}
    fields = {"RS_think": ["question", "think", "answer", "org_answer", "verifier"],
              "RS_nothink": ["question", "answer", "org_answer", "verifier"],
              "rejected": ["question", "answer", "wrong_vlm", "reason"]}
    reasons = ["wrong_answer", "wrong_answer", "unsure", "truncated", "no_answer"]
    for config, count in plan.items():
        rows: list[dict] = []
        for i in range(count):
            family = families[i % len(families)]
            right, wrong, refs, options = _FAMILY_ITEMS[family]
            if family == "math":  # distinct texts, so math-verify's parse cache cannot flatter the figure
                a, b = i % 97 + 1, i // 97 % 89 + 2
                right, wrong, refs = f"{a / b:.6f}", f"\\frac{{{a + 1}}}{{{b}}}", [f"\\frac{{{a}}}{{{b}}}"]
            if config == "rejected":
                qa = {"question": "q?", "answer": refs[0], "wrong_vlm": wrong, "reason": reasons[i % len(reasons)]}
            else:
                qa = {"question": "q?", "think": "because", "answer": right, "org_answer": refs[0],
                      "verifier": FAMILIES[family].rule}
            src = {"dataset": "synthetic", "split": "test", "id": str(i), "origin": "benchmark", "family": family,
                   "references": refs, "options": options}
            if i % qa_per_row == 0:
                rows.append({"image": {"bytes": b"\x89PNG" + i.to_bytes(8, "big"), "path": f"{i}.png"},
                             "image_sha256": f"{i:064x}", "qa": [],
                             "clean_meta": {"policy": "synthetic", "sources": [], "actions": []}})
            rows[-1]["qa"].append({k: qa.get(k, "") for k in fields[config]})
            rows[-1]["clean_meta"]["sources"].append(src)
        shards = max(1, -(-len(rows) // rows_per_shard))
        for shard in range(shards):
            path = folder / config / f"train-{shard:05d}-of-{shards:05d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            chunk = rows[shard * rows_per_shard:(shard + 1) * rows_per_shard]
            pq.write_table(pa.Table.from_pylist(chunk, schema=_schema(fields[config])), path)


def bench_recheck(qa_total: int, families: list[str], label: str, workers: int = 1) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_synthetic(folder, qa_total, families)
        math_answer.clear_caches()
        start = time.perf_counter()
        report = recheck(folder, workers=workers)
        seconds = time.perf_counter() - start
    assert report.ok, format_recheck(report, limit=5)
    print(f"recheck, {label}, {workers} worker(s): {report.qa_items:,} QA items in {len(report.shards)} shards: {seconds:.2f} s "
          f"({report.qa_items / seconds:,.0f} QA/s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5000, help="pairs per rule (math: a tenth, at least 200)")
    parser.add_argument("--anls-pairs", type=int, default=300, help="100-character ANLS pairs")
    parser.add_argument("--qa", type=int, default=100_000, help="QA items of the synthetic recheck folder (0: skip)")
    parser.add_argument("--workers", type=int, default=2, help="processes for the second math recheck run")
    args = parser.parse_args(argv)
    bench_rules(args.pairs)
    ratio = bench_anls_100(args.anls_pairs)
    if args.qa:
        all_families = sorted(FAMILIES)
        bench_recheck(args.qa, [f for f in all_families if f != "math"], "every family but math")
        bench_recheck(args.qa, all_families, "every family, math (all distinct) one in seven")
        if args.workers > 1:
            bench_recheck(args.qa, all_families, "every family, math (all distinct) one in seven", args.workers)
    return 0 if ratio >= ANLS_MIN_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
