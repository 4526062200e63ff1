"""write: work/decisions.parquet -> route (``route.RoutePlan``: rows grouped by image, on disk) ->
the three configs' shards in the dataset folder; then the build's figures (``work.report``) and
the recipe it ran (``work.ran``), from the decisions and the earlier stages' facts."""

from __future__ import annotations

from typing import Iterator

from ...dataset.writer import write_dataset
from ...parquetio import open_parquet
from ...route import RoutePlan
from ...vocab import CONFIG_ROUTE, CONFIGS
from ..progress import stage_bar
from ..report import build_report, recipe_ran, reproduce, reproducible, tally
from ..work import BuildWork, StageReport, Timer


def _rows(plans, bar) -> Iterator[dict]:
    for plan in plans:
        yield plan.to_row(plan.image.read())
        bar.update(len(plan.qa))


def qa_in_rows(decisions) -> int:
    """The QA items the configs' rows hold, from the decisions' route column: each config takes
    the items of its route, so an accepted item counts twice (the write bar's total)."""
    import pyarrow.compute as pc

    routes = open_parquet(decisions).read(columns=["route"]).column("route")
    by_route = {entry["values"]: entry["counts"] for entry in pc.value_counts(routes).to_pylist()}
    return sum(by_route.get(CONFIG_ROUTE[name], 0) for name in CONFIGS)


class WriteStage:
    name = "write"

    def run(self, work: BuildWork) -> StageReport:
        config = work.config
        with Timer() as timer:
            total = qa_in_rows(work.decisions) if config.progress else None
            with RoutePlan(work.decisions) as plan, stage_bar("write", total, config.progress) as bar:
                summary = write_dataset(work.out, {config_name: _rows(plan.rows(config_name), bar)
                                                   for config_name in CONFIGS},
                                        max_shard_bytes=config.max_shard_bytes)
            report = build_report(work, tally(work.decisions, work.config.families), summary)
            work.ran = recipe_ran(config, work.engine, work.judge_engine, engine_given=work.objects.engine is not None,
                                  judge_given=work.objects.judge_engine is not None)
            report["recipe"] = reproducible(work.ran.to_dict())
            report["reproduce"] = reproduce(config, work.ran)
            work.report = report
        counters = {"rows": {name: s["rows"] for name, s in summary.items()},
                    "accepted": report["accepted"], "rejected": report["rejected"], "failed": report["failed"]}
        return StageReport(self.name, {"write": timer.seconds}, counters)
