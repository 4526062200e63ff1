"""Other projects' answer-matching test cases decided by our rules (a benchmark, not a test).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_peer_suites.py
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_peer_suites.py --json peer.json --cases peer_disagreements.jsonl

Reads every ``benchmarks/peer_cases/*.jsonl`` (or the files given with ``--data``): one case a
line, taken from the test suites of lmms-eval, Math-Verify, NeMo-Skills, lm-evaluation-harness
and VLMEvalKit (``peer_cases/README.md`` says where each comes from). Each line is decided as a
build decides a final answer:

- ``choice``: ``verify("choice", reply, [reference_letter], options)``;
- ``math``: ``verify("math", reply, [gold])``;

and our decision (passed or not) is compared with the peer's expectation ``peer_accepts``.

A multiple-choice reply is stored once per valid letter (the peer accepts exactly the letter it
extracts, or none), so a *case* is one reply: it agrees when our decision equals the peer's on
every letter. A math case is one line. Per suite and kind the script prints the cases, the
agreement, and the lines where we accept what the peer rejects (wrong accepts, the dangerous
side; in brackets those of convention cases) and where we reject what the peer accepts;
"excl. conv." leaves out the cases whose note says the peer's expectation is its own convention.
It then lists every line where we accept and the peer rejects. ``--json`` writes the table,
``--cases`` every disagreeing line with our decision (candidate, text, extraction) for reading.

The package is imported from ``PYTHONPATH``: run it with another tree first on the path to
measure that tree's rules. The figures are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import orandcar_builder
from orandcar_builder.verify import EXTRACTION_VERSION, get_rule, verify

CASES_DIR = Path(__file__).resolve().parent / "peer_cases"
FIELDS = ("suite", "source", "kind", "reply", "options", "reference", "peer_accepts")
KINDS = ("choice", "math")
CONVENTION = "convention:"


class CaseError(ValueError):
    """A case line that cannot be read; the message names the file and line."""


def read_cases(paths: list[Path]) -> list[dict]:
    cases = []
    for path in paths:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path.name}:{number}"
                try:
                    case = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CaseError(f"{where}: not JSON ({exc.msg})") from None
                missing = [name for name in FIELDS if name not in case]
                if missing:
                    raise CaseError(f"{where}: missing {', '.join(missing)}")
                if case["kind"] not in KINDS:
                    raise CaseError(f"{where}: kind {case['kind']!r} is not one of {', '.join(KINDS)}")
                if not isinstance(case["reply"], str) or not isinstance(case["reference"], str):
                    raise CaseError(f"{where}: reply and reference must be strings")
                if not isinstance(case["peer_accepts"], bool):
                    raise CaseError(f"{where}: peer_accepts must be true or false")
                options = case["options"]
                if options is not None and not (isinstance(options, list) and all(isinstance(o, str) for o in options)):
                    raise CaseError(f"{where}: options must be null or a list of strings")
                case["where"] = where
                cases.append(case)
    return cases


def decide(case: dict) -> dict:
    """Our decision on one line, as a build makes it."""
    options = case["options"] if case["kind"] == "choice" else None
    d = verify(case["kind"], case["reply"], [case["reference"]], options)
    return {"passed": d.passed, "score": d.score, "candidate": d.candidate, "text": d.text,
            "extraction": d.extraction}


def case_key(index: int, case: dict) -> tuple:
    """Lines of one multiple-choice reply share a key; every math line is its own case."""
    if case["kind"] == "math":
        return ("math", index)
    return ("choice", case["suite"], case["source"], case["reply"], json.dumps(case["options"]))


def is_convention(case: dict) -> bool:
    return CONVENTION in (case.get("note") or "")


def tabulate(cases: list[dict], decisions: list[dict]) -> list[dict]:
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, case in enumerate(cases):
        groups[case_key(i, case)].append(i)
    rows: dict[tuple, dict] = {}
    for indexes in groups.values():
        first = cases[indexes[0]]
        for key in ((first["suite"], first["kind"]), ("all", first["kind"])):
            row = rows.setdefault(key, {"suite": key[0], "kind": key[1], "cases": 0, "agree": 0, "lines": 0,
                                        "we_accept_peer_rejects": 0, "we_reject_peer_accepts": 0,
                                        "we_accept_peer_rejects_convention": 0, "convention_cases": 0,
                                        "agree_excl_convention": 0})
            agree = all(decisions[i]["passed"] == cases[i]["peer_accepts"] for i in indexes)
            convention = any(is_convention(cases[i]) for i in indexes)
            row["cases"] += 1
            row["agree"] += agree
            row["lines"] += len(indexes)
            row["convention_cases"] += convention
            row["agree_excl_convention"] += agree and not convention
            for i in indexes:
                ours, peer = decisions[i]["passed"], cases[i]["peer_accepts"]
                row["we_accept_peer_rejects"] += ours and not peer
                row["we_accept_peer_rejects_convention"] += ours and not peer and is_convention(cases[i])
                row["we_reject_peer_accepts"] += peer and not ours
    out = []
    for key in sorted(rows, key=lambda k: (k[0] == "all", k[1], k[0].lower())):
        row = rows[key]
        row["agree_pct"] = round(100.0 * row["agree"] / row["cases"], 1)
        counted = row["cases"] - row["convention_cases"]
        row["agree_pct_excl_convention"] = round(100.0 * row["agree_excl_convention"] / counted, 1) if counted else None
        out.append(row)
    return out


def format_table(rows: list[dict]) -> str:
    head = (f"{'suite':<20} {'kind':<7} {'cases':>6} {'agree':>7} {'excl. conv.':>12} {'lines':>6} "
            f"{'we accept, peer rejects (conv.)':>32} {'we reject, peer accepts':>24}")
    lines = [head, "-" * len(head)]
    for r in rows:
        excl = "-" if r["agree_pct_excl_convention"] is None else f"{r['agree_pct_excl_convention']:.1f}%"
        wrong = f"{r['we_accept_peer_rejects']} ({r['we_accept_peer_rejects_convention']})"
        lines.append(f"{r['suite']:<20} {r['kind']:<7} {r['cases']:>6} {r['agree_pct']:>6.1f}% {excl:>12} "
                     f"{r['lines']:>6} {wrong:>32} {r['we_reject_peer_accepts']:>24}")
    return "\n".join(lines)


def disagreement(case: dict, decision: dict) -> dict:
    return {"where": case["where"], "suite": case["suite"], "source": case["source"], "kind": case["kind"],
            "reply": case["reply"], "options": case["options"], "reference": case["reference"],
            "peer_accepts": case["peer_accepts"], "note": case.get("note"), "ours": decision}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, nargs="+", help="case files (default: benchmarks/peer_cases/*.jsonl)")
    parser.add_argument("--json", type=Path, help="write the table as JSON here")
    parser.add_argument("--cases", type=Path,
                        help="write every disagreeing line, with our decision, as JSON lines here")
    args = parser.parse_args(argv)
    paths = args.data or sorted(CASES_DIR.glob("*.jsonl"))
    if not paths:
        print(f"error: no case files in {CASES_DIR}", file=sys.stderr)
        return 2
    try:
        cases = read_cases(paths)
    except (OSError, CaseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    versions = {kind: get_rule(kind).VERSION for kind in KINDS}
    print(f"rules from {Path(orandcar_builder.__file__).resolve().parent}: "
          f"choice {versions['choice']}, math {versions['math']}, extraction {EXTRACTION_VERSION}; "
          f"{len(cases)} lines from {len(paths)} files")
    decisions = [decide(case) for case in cases]
    rows = tabulate(cases, decisions)
    print(format_table(rows))
    wrong = [(c, d) for c, d in zip(cases, decisions) if d["passed"] and not c["peer_accepts"]]
    print(f"\nwe accept, the peer rejects ({len(wrong)} lines):")
    for case, d in wrong:
        conv = "  [convention]" if is_convention(case) else ""
        print(f"  {case['suite']} {case['kind']} ref={case['reference']!r} reply={case['reply']!r} "
              f"-> {d['candidate']}/{d['extraction'] or '-'} {d['text']!r}{conv}")
    if args.json:
        args.json.write_text(json.dumps({"rules": versions, "extraction": EXTRACTION_VERSION,
                                         "package": str(Path(orandcar_builder.__file__).resolve().parent),
                                         "rows": rows}, indent=2) + "\n", encoding="utf-8")
    if args.cases:
        with args.cases.open("w", encoding="utf-8") as f:
            for case, d in zip(cases, decisions):
                if d["passed"] != case["peer_accepts"]:
                    f.write(json.dumps(disagreement(case, d), ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
