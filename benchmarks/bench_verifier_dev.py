"""Quality of the string decisions on real model replies (a measurement, not a test).

    .venv/bin/python benchmarks/bench_verifier_dev.py
    .venv/bin/python benchmarks/bench_verifier_dev.py --disagreements verifier_dev_disagreements.jsonl

Reads ``../shared/data/verifier-dev/mathvista_testmini_responses.jsonl`` (MathVista testmini
replies of five published models with the official scorer's verdicts; see that folder's README)
and decides every reply with the project's rules, as a build would decide a final answer:

- ``free_form`` items go to the ``math`` rule with the item's ``answer`` as the reference;
- ``multi_choice`` items go to the ``choice`` rule with ``choices`` as the options and the letter of
  the option whose text is the item's ``answer`` as the reference.

Only the items whose official extraction is usable are counted: for free-form, an extraction that
is a number (``float()`` reads it); for multiple choice, an extraction that is one of the option
texts or a valid option letter. Elsewhere the official scorer guesses (it maps any text to the
nearest option by edit distance), so its verdict says nothing about the reply.

For each (model, kind) the script prints the items, the agreement with the official verdict, the
wrong accepts (rule accepts, official says wrong) over the accepts, and the right answers rejected
(rule rejects, official says right); then the totals per kind. ``--disagreements`` writes every
disagreement as one JSON line (model, pid, kind, official extraction and verdict, the rule's
decision, the reply's tail) for reading; ``--json`` writes the table.

``--audit benchmarks/verifier_dev_audit.tsv`` reads the written-down reading of the disagreements
(one line per ``model/pid``: whether the official ``label`` is wrong, the ``rule`` misses or
accepts wrongly, or the reply is ``ambiguous``, with the reason) and prints the counts per class,
the agreement once label errors are set aside, and the wrong accepts that are the rule's own
error. A disagreement the audit does not list is printed and the script exits 1: after a change
of the rules, read the new ones and add them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from orandcar_builder.verify import verify
from orandcar_builder.vocab import OPTION_LETTERS

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "verifier-dev" / \
    "mathvista_testmini_responses.jsonl"
KINDS = {"free_form": "math", "multi_choice": "choice"}
TAIL_CHARS = 400


def usable(item: dict) -> bool:
    """Whether the official extraction is a number (free-form) or an option (multiple choice)."""
    extraction = (item.get("official_extraction") or "").strip()
    if item["question_type"] == "free_form":
        try:
            float(extraction)
        except ValueError:
            return False
        return True
    choices = item["choices"] or []
    return extraction in choices or extraction in OPTION_LETTERS[: len(choices)]


def case(item: dict) -> tuple[str, list[str], list[str] | None]:
    """(rule, references, options) for one item, as a build would call the rule."""
    rule = KINDS[item["question_type"]]
    if item["question_type"] == "free_form":
        return rule, [str(item["answer"])], None
    choices = list(item["choices"])
    return rule, [OPTION_LETTERS[choices.index(item["answer"])]], choices


def decide_item(item: dict) -> dict:
    rule, references, options = case(item)
    decision = verify(rule, item["response"] or "", references, options)
    return {"passed": decision.passed, "candidate": decision.candidate, "text": decision.text,
            "extraction": decision.extraction, "references": references}


def load(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def measure(items: list[dict], workers: int) -> list[dict]:
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(decide_item, items, chunksize=25))
    return [decide_item(item) for item in items]


def table(items: list[dict], results: list[dict]) -> dict:
    """{(kind, model): counts} plus totals per kind under model "all"."""
    counts: dict = defaultdict(lambda: {"items": 0, "agree": 0, "accepts": 0, "wrong_accepts": 0,
                                        "right_rejected": 0})
    for item, result in zip(items, results):
        for model in (item["model"], "all"):
            c = counts[(item["question_type"], model)]
            c["items"] += 1
            official = bool(item["official_correct"])
            c["agree"] += result["passed"] == official
            c["accepts"] += result["passed"]
            c["wrong_accepts"] += result["passed"] and not official
            c["right_rejected"] += (not result["passed"]) and official
    return dict(counts)


def format_table(counts: dict) -> str:
    lines = ["| kind | model | items | agreement | wrong accepts / accepts | right answers rejected |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for kind, rule in KINDS.items():
        models = sorted(m for k, m in counts if k == kind and m != "all") + ["all"]
        for model in models:
            c = counts[(kind, model)]
            share = c["wrong_accepts"] / c["accepts"] if c["accepts"] else 0.0
            name = f"**{model}**" if model == "all" else model
            lines.append(f"| {kind} (`{rule}`) | {name} | {c['items']} | {c['agree'] / c['items']:.1%} | "
                         f"{c['wrong_accepts']} / {c['accepts']} ({share:.1%}) | {c['right_rejected']} |")
    return "\n".join(lines)


def report_audit(items: list[dict], results: list[dict], counts: dict, path: Path) -> int:
    """Print the audit's counts for the current disagreements (``counts``: the ``table``); 1 when
    one is not in the audit."""
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        audit = {row["item"]: row for row in (dict(zip(header, line.rstrip("\n").split("\t"))) for line in f)}
    classes: dict = defaultdict(int)
    missing = []
    for kind in KINDS:
        for item, result in zip(items, results):
            if item["question_type"] != kind or result["passed"] == bool(item["official_correct"]):
                continue
            key = f"{item['model']}/{item['pid']}"
            if key not in audit:
                missing.append(key)
                continue
            classes[(kind, "wrong accept" if result["passed"] else "right answer rejected", audit[key]["class"])] += 1
    lines = ["| kind | disagreement | class | items |", "| --- | --- | --- | ---: |"]
    lines += [f"| {k} | {d} | {c} | {n} |" for (k, d, c), n in sorted(classes.items())]
    print("\n" + "\n".join(lines))
    for kind in KINDS:
        total = counts[(kind, "all")]
        of_kind, agree, accepts = total["items"], total["agree"], total["accepts"]
        labels = sum(n for (k, _, c), n in classes.items() if k == kind and c == "label")
        own = sum(n for (k, d, c), n in classes.items() if k == kind and d == "wrong accept" and c == "rule")
        print(f"{kind}: agreement {agree / of_kind:.1%}; with the {labels} label errors set right "
              f"{(agree + labels) / of_kind:.1%}; wrong accepts that are the rule's own error: "
              f"{own} / {accepts} ({own / accepts if accepts else 0:.1%})")
    if missing:
        print(f"{len(missing)} disagreement(s) not in {path}: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--disagreements", type=Path, help="write every disagreement here (JSON lines)")
    parser.add_argument("--json", type=Path, help="write the table here")
    parser.add_argument("--audit", type=Path, help="the reading of the disagreements (TSV), to count by class")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        print(f"{args.data}: not found (the verifier-dev data lives in ../shared/data)", file=sys.stderr)
        return 2
    items = [item for item in load(args.data) if item["question_type"] in KINDS and usable(item)]
    results = measure(items, args.workers)
    counts = table(items, results)
    print(format_table(counts))
    if args.disagreements:
        with open(args.disagreements, "w", encoding="utf-8") as f:
            for item, result in zip(items, results):
                if result["passed"] != bool(item["official_correct"]):
                    f.write(json.dumps({
                        "model": item["model"], "pid": item["pid"], "kind": item["question_type"],
                        "official_correct": item["official_correct"],
                        "official_extraction": item["official_extraction"], "answer": item["answer"],
                        "choices": item["choices"], "rule_passed": result["passed"],
                        "candidate": result["candidate"], "extraction": result["extraction"],
                        "text": result["text"][-TAIL_CHARS:],
                        "response_tail": (item["response"] or "")[-TAIL_CHARS:],
                    }, ensure_ascii=False) + "\n")
    if args.audit:
        status = report_audit(items, results, counts, args.audit)
        if status:
            return status
    if args.json:
        args.json.write_text(json.dumps({f"{k}/{m}": c for (k, m), c in counts.items()}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
