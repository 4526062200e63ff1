"""Route: turn per-QA outcomes into the rows of the three configs.

One row per distinct image (by sha256) per config, holding that config's QA items of the image
in pool order; rows ordered by the image's first appearance in the pool. Two ways in, same rows
out:

- ``route(outcomes)`` (rows.py): outcomes held in memory (small pools, tests);
- ``RoutePlan(decisions_path)`` (plan.py): a decisions parquet file (``work/decisions.parquet``,
  in pool order), grouped by a sort on disk with memory bounded whatever the pool size.

The record routing reads, ``Outcome``, and its Arrow codec live in ``records`` (the decide step
writes them without importing this stage); the route names live in ``vocab``. Both are
re-exported here for the callers that import them from ``route``.
"""

from ..records import (OUTCOME_COLUMNS, OUTCOME_FIELDS, SOURCE_TYPE, Outcome, outcome_from_record,
                       outcome_record)
from ..vocab import ACCEPTED, CONFIG_ROUTE, FAILED, REJECTED, ROUTES
from .plan import BUCKET_ROWS, CACHED_ROW_GROUPS, READ_BATCH, WINDOW, RoutePlan
from .rows import RowPlan, qa_entries, route

__all__ = [
    "ACCEPTED", "BUCKET_ROWS", "CACHED_ROW_GROUPS", "CONFIG_ROUTE", "FAILED", "OUTCOME_COLUMNS",
    "OUTCOME_FIELDS", "Outcome", "READ_BATCH", "REJECTED", "ROUTES", "RowPlan", "RoutePlan",
    "SOURCE_TYPE", "WINDOW", "outcome_from_record", "outcome_record", "qa_entries", "route",
]
