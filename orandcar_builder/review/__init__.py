"""The review page of a build: ``work/report.html`` (every build) or ``orandcar report``.

A self-contained HTML page for a maintainer to look at before publishing: the figures at a
glance, acceptance and rejection reasons per family as charts, the judge's verdicts, promotions
and calibration, a fixed sample of accepted, rejected and promoted items per family with their
image, and the lengths of the model's replies. It reads what the build left in the work dir
and the dataset folder; it never changes either.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..heap import objects_before_frozen
from ..workdir import WorkDir
from .collect import ReviewError
from .page import ReviewResult, render_review, write_review

if TYPE_CHECKING:
    from .ahead import PageAhead

__all__ = ["ReviewError", "ReviewResult", "render_review", "review_after_build", "write_review"]


def review_after_build(out: Path, work: Path, ahead: Optional["PageAhead"] = None) -> Optional[ReviewResult]:
    """Write ``work/report.html`` at the end of a build. The dataset and the report are already
    complete at this point, so a page that cannot be written does not fail the build: the
    reason is printed (and the page of an earlier build removed) and ``orandcar report`` can
    write it later. ``ahead``: the page's part of the decisions, being prepared by a child
    process (``ahead.py``)."""
    try:
        with objects_before_frozen():  # the build's objects: see heap.py
            return write_review(out, work, ahead=ahead)
    except Exception as exc:  # the build's outputs are complete: never lose them to the page
        WorkDir(work).review.unlink(missing_ok=True)  # a page of an earlier build would mislead
        detail = str(exc) if isinstance(exc, ReviewError) else f"{type(exc).__name__}: {exc}"
        sys.stderr.write(f"warning: review page not written: {detail}; write it with "
                         f"`orandcar report {out} --work {work}`\n")
        return None
