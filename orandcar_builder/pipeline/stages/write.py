"""write: work/decisions.parquet -> route (``route.RoutePlan``: rows grouped by image, on disk) ->
the three configs' shards in the dataset folder; returns the writer's summary and the decisions'
tally (the runner makes the build's figures from them: ``report.build_figures``).

On two cores or more, a large build writes ``RS_nothink`` in a process of its own (``writeproc``)
while this one writes ``RS_think`` and then ``rejected``: each config's bytes depend only on its
own rows, which each process plans from the same decisions file, so the split changes no byte.
Elsewhere this process writes ``RS_think`` and ``RS_nothink`` together, in one pass over the
accepted items (two row groups open at once), then ``rejected``."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Optional

from ...dataset.writer import DatasetWriter
from ...heap import objects_before_frozen
from ...images import ImageRef
from ...parquetio import open_parquet
from ...pool.prefetch import usable_cpus
from ...route import RoutePlan
from ...vocab import (
    ACCEPTED,
    ACCEPTED_CONFIGS,
    CONFIG_NOTHINK,
    CONFIG_REJECTED,
    CONFIG_ROUTE,
    CONFIGS,
    FAILED,
    REJECTED,
)
from ..progress import stage_bar
from ..report import tally
from ..work import BuildContext, StageStats, Timer, WriteResult
from ..writeproc import ApartWriter

# The configs written by a process of their own (``writeproc``) on a machine of two cores or more,
# where the decisions are at least APART_MIN_DECISIONS: below, the process's start (some 1.3 s of
# CPU: the interpreter, pyarrow, datasets) costs more than it saves. ``RS_nothink``: each process
# then holds one open row group at a time (up to writer.ROW_GROUP_MAX_BYTES), where writing both
# accepted configs in one pass held two (at 200k QA the build's peak rose from 410 to 555 MiB);
# RS_think alone costs this process about what the one pass did, and ``rejected`` (about a sixth
# of the rows' work) follows it here while the other process writes RS_nothink.
APART_CONFIGS = (CONFIG_NOTHINK,)
APART_MIN_DECISIONS = 50_000


def write_rows(writer: DatasetWriter, plan: RoutePlan, bar, configs: tuple[str, ...] = CONFIGS) -> None:
    """``configs``' rows into ``writer``: the accepted items are read once for ``RS_think`` and
    ``RS_nothink`` (a window of decisions at a time, made into both configs' rows a column at a
    time: ``RoutePlan.batches_of``; each image's bytes read once for both), then the rejected
    ones. Each image is read (and its sha256 checked) as its row is written, so memory holds the
    images of the writer's pending chunk, not of the window."""
    for route_configs in (ACCEPTED_CONFIGS, (CONFIG_REJECTED,)):
        together = tuple(config for config in route_configs if config in configs)
        if not together:
            continue
        for batch in plan.batches_of({config: writer.schema(config) for config in together}):
            for index, (path, sha, name) in enumerate(zip(batch.paths, batch.shas, batch.names)):
                data = ImageRef(path=path, sha256=sha).read()
                for rows in batch.configs:
                    writer.write_columns(rows, index, data, name)
            if bar is not None:
                bar.update(sum(sum(rows.qa) for rows in batch.configs))
        for config in together:
            writer.finish(config)  # its last row group leaves memory before the next configs are written


def write_configs(decisions: Path, out: Path, configs: tuple[str, ...], *, max_shard_bytes: int,
                  scratch: Optional[Path] = None, bar=None) -> dict[str, dict]:
    """Plan and write ``configs``' shards from ``decisions`` (the route plan's files in ``scratch``
    or beside ``decisions``); the writer's summary of them."""
    with RoutePlan(decisions, scratch=scratch) as plan, \
            DatasetWriter(out, max_shard_bytes=max_shard_bytes, configs=configs) as writer:
        write_rows(writer, plan, bar, configs)
    return writer.summary()


def apart_configs(decisions: Path) -> tuple[str, ...]:
    """The configs a process of their own writes (``writeproc``, APART_CONFIGS), where the build
    has two cores and enough decisions to pay for the process's start; none elsewhere."""
    return apart_configs_of(open_parquet(decisions).metadata.num_rows)


def apart_configs_of(decisions: int) -> tuple[str, ...]:
    """``apart_configs`` of a build of ``decisions`` items (one decision per admitted item)."""
    if usable_cpus() < 2 or decisions < APART_MIN_DECISIONS:
        return ()
    return APART_CONFIGS


def qa_in_rows(decisions) -> int:
    """The QA items the configs' rows hold, from the decisions' route column: each config takes
    the items of its route, so an accepted item counts twice (the write bar's total)."""
    import pyarrow.compute as pc

    routes = open_parquet(decisions).read(columns=["route"]).column("route")
    by_route = {entry["values"]: entry["counts"] for entry in pc.value_counts(routes).to_pylist()}
    return sum(by_route.get(CONFIG_ROUTE[name], 0) for name in CONFIGS)


class WriteStage:
    name = "write"

    def __init__(self):
        self._ahead: Optional[ApartWriter] = None  # started by ``prepare``

    def prepare(self, context: BuildContext, decisions: int) -> None:
        """Once generation has ended (``decisions`` items decided), before the build sorts them:
        start the process that will write configs apart, so that its start (some 1 s of CPU)
        overlaps the sort, on the core the sort leaves idle. It waits for ``run``, and ends with
        the build if the build stops first."""
        apart = apart_configs_of(decisions)
        if apart and self._ahead is None:
            self._ahead = ApartWriter(apart, context.config.max_shard_bytes, context.work.path)
            context.on_close(self._let_go)

    def _let_go(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.close()

    def run(self, context: BuildContext) -> WriteResult:
        config, decisions = context.config, context.work.decisions
        with Timer() as timer, objects_before_frozen():
            total = qa_in_rows(decisions) if config.progress else None
            apart = apart_configs(decisions)
            here = tuple(name for name in CONFIGS if name not in apart)
            ahead, self._ahead = self._ahead, None
            with ExitStack() as stack:
                if ahead is not None and (ahead.configs != apart or not ahead.waiting()):
                    ahead.close()  # not the configs written apart after all, or gone meanwhile (killed)
                    ahead = None
                child = None
                if apart:
                    child = stack.enter_context(ahead or ApartWriter(apart, config.max_shard_bytes, context.work.path))
                    child.write(decisions, context.out)
                bar = stack.enter_context(stage_bar("write", total, config.progress))
                written = write_configs(decisions, context.out, here, max_shard_bytes=config.max_shard_bytes, bar=bar)
                if child is not None:
                    written.update(child.result())
                    bar.update(sum(written[name]["qa"] for name in apart))
            summary = {name: written[name] for name in CONFIGS}
            counts = tally(decisions, config.families)
        counters = {"rows": {name: s["rows"] for name, s in summary.items()},
                    "accepted": counts.routes[ACCEPTED], "rejected": counts.routes[REJECTED],
                    "failed": counts.routes[FAILED]}
        return WriteResult(summary, counts, StageStats(self.name, {"write": timer.seconds}, counters))
