"""Route: turn per-QA outcomes into the rows of the three configs.

One row per distinct image (by sha256) per config, holding that config's QA items of the image
in pool order; rows ordered by the image's first appearance in the pool. Two ways in, same rows
out:

- ``route(outcomes)`` (rows.py): outcomes held in memory (small pools, tests);
- ``RoutePlan(decisions_path)`` (plan.py): a decisions parquet file (``work/decisions.parquet``,
  in pool order), grouped by a sort on disk with memory bounded whatever the pool size. Its
  ``rows_of`` gives RowPlans; ``batches_of`` gives the same rows made a column at a time from a
  window of decisions (columns.py), which is what the write stage hands the writer.

The record routing reads, ``Outcome``, and its Arrow codec live in ``records`` (``executors.steps.outcome_of``
writes them without importing this stage); the route names live in ``vocab``.
"""

from .plan import BUCKET_ROWS, CACHED_ROW_GROUPS, READ_BATCH, WINDOW, RoutePlan
from .rows import RowPlan, qa_entries, route

__all__ = ["BUCKET_ROWS", "CACHED_ROW_GROUPS", "READ_BATCH", "RoutePlan", "RowPlan", "WINDOW", "qa_entries", "route"]
