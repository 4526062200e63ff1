"""Time to decide replies of a model caught in a repetition loop (a measurement, not a test).

    .venv/bin/python benchmarks/bench_hostile_replies.py [--repeats 4000]
    PYTHONPATH=/path/to/other/tree .venv/bin/python benchmarks/bench_hostile_replies.py   # another tree

Each reply repeats one phrase ``--repeats`` times ("the answer is " 4,000 times is 56 kB); the
script decides it with the ``choice`` and ``math`` rules through ``verify`` and prints the seconds,
and the same for a reply a tenth as long: in a linear implementation the ratio is about 10, in a
quadratic one about 100.
"""

from __future__ import annotations

import argparse
import time

import orandcar_builder
from orandcar_builder.verify import verify

PHRASES = ("the answer is ", "\\boxed{", "Final answer: ", ", which", "<answer>", "is not ")
OPTIONS = ["w", "x", "y", "z"]


def seconds(rule: str, reply: str) -> float:
    start = time.perf_counter()
    verify(rule, reply, ["A"] if rule == "choice" else ["5"], OPTIONS if rule == "choice" else None)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=4000)
    args = parser.parse_args()
    print(f"rules from {orandcar_builder.__file__.rsplit('/', 2)[0]}; {args.repeats} repeats per reply")
    print(f"{'phrase':<18} {'rule':<7} {'kB':>6} {'seconds':>9} {'1/10 as long':>13} {'ratio':>6}")
    for phrase in PHRASES:
        for rule in ("choice", "math"):
            seconds(rule, phrase * 10)  # imports and caches
            long, short = seconds(rule, phrase * args.repeats), seconds(rule, phrase * (args.repeats // 10))
            size = len(phrase * args.repeats) / 1000
            print(f"{phrase!r:<18} {rule:<7} {size:>6.1f} {long:>9.3f} {short:>13.4f} {long / max(short, 1e-6):>6.1f}")


if __name__ == "__main__":
    main()
