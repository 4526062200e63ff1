"""When a build is a failed build, whose dataset must not replace the one already there.

A build that ran to the end can still have produced nothing worth publishing: an expired key or a
server that went down fails every request, a pool written for another folder drops every line.
Such a build is a failed build (``failed_build`` says why, ``BuildFailed`` carries it): the old
dataset stays as it was and the command ends with one ``error:`` line and exit 2, like any failure
the user can fix. It is failed when

- no pool line was admitted (the message gives the top drop reasons), or
- no row was written (every admitted item failed), or
- more than ``max_failed_share`` of the admitted items got no answer (default
  ``config.DEFAULT_MAX_FAILED_SHARE``; ``--max-failed-share``, or ``[build] max_failed_share`` in a
  recipe; 1 turns this rule off). The message gives the top failure reasons, read from
  work/failed.jsonl, an item's own id taken out of its reason so that equal causes count together.

The answered items are cached: once the cause is fixed, the next build asks only for the rest.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

from ..figures import BuildFigures
from ..files import read_json_lines
from ..workdir import WorkDir
from .config import BuildError
from .report import OUTSIDE_POOL_REASONS  # drops that --allow-outside-paths admits

TOP_REASONS = 3  # reasons named in the message
REASON_CHARS = 160  # of each reason's text


class BuildFailed(BuildError):
    """A build that produced no dataset worth publishing; ``figures`` are its figures."""

    def __init__(self, message: str, figures: Optional[BuildFigures] = None):
        super().__init__(message)
        self.figures = figures

    @property
    def report(self) -> Optional[dict]:
        """work/report.json's content (``figures.to_json()``)."""
        return self.figures.to_json() if self.figures is not None else None


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1] + "…"


def _top(counts: Counter) -> str:
    shown = [f"{n} x {reason}" for reason, n in counts.most_common(TOP_REASONS)]
    more = len(counts) - TOP_REASONS
    return "; ".join(shown) + (f"; and {more} other reason(s)" if more > 0 else "")


def failure_reasons(failed_jsonl: Path) -> Counter:
    """How many failed items (work/failed.jsonl) share each reason (its text without the item's id)."""
    counts: Counter = Counter()
    for record in read_json_lines(failed_jsonl):
        if record is None:  # not a JSON object: no reason to read
            continue
        detail = str(record.get("detail") or record.get("reason") or "unknown")
        item = str(record.get("id") or "")
        counts[_short(detail.replace(item, "<id>") if item else detail)] += 1
    return counts


def failed_build(figures: BuildFigures, work: WorkDir, max_failed_share: float) -> Optional[str]:
    """Why the build whose figures are ``figures`` (``report.build_figures``) is a failed build,
    or None when its dataset may replace the old one."""
    admitted, failed = figures.admitted or 0, figures.failed or 0
    if not admitted:
        dropped = Counter(figures.dropped_by_reason or {})
        if not dropped:
            return "the pool holds no item to build (an empty pool file, or --limit 0)"
        hint = ""
        if any(reason in OUTSIDE_POOL_REASONS for reason, _ in dropped.most_common(TOP_REASONS)):
            hint = (" (images outside the pool file's folder: if you trust this pool, one `orandcar import` wrote "
                    "say, build again with --allow-outside-paths)")
        return (f"no pool line was admitted: {sum(dropped.values())} dropped, {_top(dropped)}{hint}; every dropped "
                f"line and its reason is in {work.dropped}")
    rows = sum(config.get("rows", 0) for config in (figures.configs or {}).values())
    share = failed / admitted
    if rows and share <= max_failed_share:
        return None
    if rows:
        why = (f"{failed} of {admitted} admitted items got no answer ({share:.0%}, more than the "
               f"{max_failed_share:.0%} --max-failed-share allows)")
    else:
        why = f"no row was written: {failed} of {admitted} admitted items got no answer"
    return (f"{why}: {_top(failure_reasons(work.failed))}; each item's reason is in "
            f"{work.failed}; fix the cause and build again (the answered items are cached)")
