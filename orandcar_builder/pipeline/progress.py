"""The build's progress bars: one per stage that takes time (admit, generate, judge, write), each
with its own total, so that tqdm shows ``done/total``, the rate and the time left (ETA).

The totals are known before the stage starts, or cheap to count: ``admit``, the pool's lines
(``count_lines``, bounded by ``--limit``); ``generate``, the admitted items (while admission still
runs beside it: the lines read or to read, less those dropped so far, so the total shrinks to the
exact figure); ``judge``, the rule's rejects it will grade, plus the calibration sample when it
starts; ``write``, the QA items the configs' rows hold (an accepted item is in two configs). The
bars go to stderr; ``--no-progress`` turns them off.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

# What each stage's bar counts.
STAGE_UNITS = {"admit": "line", "generate": "qa", "judge": "qa", "write": "qa"}
# Terminal line of a bar drawn while admission runs (generation on the local executor): each bar
# keeps its own line.
ADMIT_BESIDE = 1
COUNT_CHUNK = 1 << 20


def stage_bar(stage: str, total: Optional[int], enabled: bool, *, beside_admit: bool = False):
    """A tqdm bar for ``stage`` out of ``total`` (None: unknown yet, set ``bar.total`` later);
    ``beside_admit``: the admit bar runs at the same time, on the line above."""
    from tqdm import tqdm

    return tqdm(total=total, desc=stage, unit=STAGE_UNITS[stage], disable=not enabled, file=sys.stderr,
                position=ADMIT_BESIDE if beside_admit else 0, leave=True, dynamic_ncols=True)


def set_progress(bar, done: int, total: Optional[int] = None) -> None:
    """Show ``done`` (and a new ``total``, never below ``done``) on ``bar``."""
    if total is not None:
        bar.total = max(total, done)
    bar.n = done
    bar.refresh()


def count_lines(path: Path, limit: Optional[int] = None) -> int:
    """The lines of ``path`` as ``pool.jsonl.decode_json_lines`` reads them (a last line without
    a line break counts), at most ``limit``: one pass over the bytes, no decoding."""
    lines, last = 0, b"\n"
    with open(path, "rb") as fh:
        while block := fh.read(COUNT_CHUNK):
            lines += block.count(b"\n")
            last = block[-1:]
            if limit is not None and lines >= limit:
                return limit
    lines += last != b"\n"
    return lines if limit is None else min(lines, limit)
