"""write: work/decisions.parquet -> route (``route.RoutePlan``: rows grouped by image, on disk) ->
the three configs' shards in the dataset folder; then the build's figures (``work.report``) and
the recipe it ran (``work.ran``), from the decisions and the earlier stages' facts."""

from __future__ import annotations

from typing import Iterator

from ...dataset.writer import write_dataset
from ...route import RoutePlan
from ...vocab import CONFIGS
from ..report import build_report, recipe_ran, reproduce, reproducible, tally
from ..work import BuildWork, StageReport, Timer


def _rows(plans) -> Iterator[dict]:
    for plan in plans:
        yield plan.to_row(plan.image.read())


class WriteStage:
    name = "write"

    def run(self, work: BuildWork) -> StageReport:
        config = work.config
        with Timer() as timer:
            with RoutePlan(work.decisions) as plan:
                summary = write_dataset(work.out, {config_name: _rows(plan.rows(config_name)) for config_name in CONFIGS},
                                        max_shard_bytes=config.max_shard_bytes)
            report = build_report(work, tally(work.decisions), summary)
            work.ran = recipe_ran(config, work.engine, work.judge_engine, engine_given=work.objects.engine is not None,
                                  judge_given=work.objects.judge_engine is not None)
            report["recipe"] = reproducible(work.ran.to_dict())
            report["reproduce"] = reproduce(config, work.ran)
            work.report = report
        counters = {"rows": {name: s["rows"] for name, s in summary.items()},
                    "accepted": report["accepted"], "rejected": report["rejected"], "failed": report["failed"]}
        return StageReport(self.name, {"write": timer.seconds}, counters)
