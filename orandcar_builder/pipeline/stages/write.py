"""write: work/decisions.parquet -> route (``route.RoutePlan``: rows grouped by image, on disk) ->
the three configs' shards in the dataset folder; returns the writer's summary and the decisions'
tally (the runner makes the build's figures from them: ``report.build_figures``)."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

from ...dataset.writer import DatasetWriter
from ...parquetio import open_parquet
from ...route import RoutePlan
from ...vocab import ACCEPTED, ACCEPTED_CONFIGS, CONFIG_REJECTED, CONFIG_ROUTE, CONFIGS, FAILED, REJECTED
from ..progress import stage_bar
from ..report import tally
from ..work import BuildContext, StageStats, Timer, WriteResult


@contextmanager
def objects_before_frozen() -> Iterator[None]:
    """Keep the cyclic garbage collector off the objects alive before the block (``gc.freeze``):
    the rows made here are freed by their reference counts, but the allocations they make start
    full collections, and each traverses every object the build holds (hundreds of thousands at
    200k items: some 2.5 s of the write at 200k). Objects made in the block are still collected.
    Where something else froze the heap already, it is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def write_rows(writer: DatasetWriter, plan: RoutePlan, bar) -> None:
    """Every config's rows into ``writer``: the accepted items are read once for ``RS_think`` and
    ``RS_nothink`` (one image row of each at a time, the image's bytes read once for both), then
    the rejected ones."""
    for configs in (ACCEPTED_CONFIGS, (CONFIG_REJECTED,)):
        for plans in plan.rows_of(configs):
            data = plans[0].image.read()
            for config, row_plan in zip(configs, plans):
                writer.write(config, row_plan.to_row(data))
                bar.update(len(row_plan.qa))


def qa_in_rows(decisions) -> int:
    """The QA items the configs' rows hold, from the decisions' route column: each config takes
    the items of its route, so an accepted item counts twice (the write bar's total)."""
    import pyarrow.compute as pc

    routes = open_parquet(decisions).read(columns=["route"]).column("route")
    by_route = {entry["values"]: entry["counts"] for entry in pc.value_counts(routes).to_pylist()}
    return sum(by_route.get(CONFIG_ROUTE[name], 0) for name in CONFIGS)


class WriteStage:
    name = "write"

    def run(self, context: BuildContext) -> WriteResult:
        config, decisions = context.config, context.work.decisions
        with Timer() as timer, objects_before_frozen():
            total = qa_in_rows(decisions) if config.progress else None
            with RoutePlan(decisions) as plan, stage_bar("write", total, config.progress) as bar, \
                    DatasetWriter(context.out, max_shard_bytes=config.max_shard_bytes) as writer:
                write_rows(writer, plan, bar)
            summary = writer.summary()
            counts = tally(decisions, config.families)
        counters = {"rows": {name: s["rows"] for name, s in summary.items()},
                    "accepted": counts.routes[ACCEPTED], "rejected": counts.routes[REJECTED],
                    "failed": counts.routes[FAILED]}
        return WriteResult(summary, counts, StageStats(self.name, {"write": timer.seconds}, counters))
