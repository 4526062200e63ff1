"""The seams between the stages (issue 25): one WorkDir names every work file, each stage is
handed what it reads and returns a typed result, and the build's figures are one BuildFigures
value whose JSON is work/report.json, byte for byte."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from orandcar_builder.figures import BuildFigures, FamilyYield, JudgeFigures
from orandcar_builder.files import partial_path
from orandcar_builder.pipeline import BuildConfig, BuildContext, BuildObjects, build
from orandcar_builder.workdir import JUDGED_SUFFIX, WorkDir

from .conftest import REPO
from .test_build_stages import small_pool

# report.json's keys, in the order a build writes them (the sample build's, which has no judge
# and did not fail: build_failed is written only by a failed build).
REPORT_KEYS = [
    "pool", "limit", "items", "admitted", "dropped", "dropped_by_reason", "accepted", "rejected", "failed",
    "rejected_by_reason", "accepted_by_verifier", "families", "rules", "rules_by_family", "reject_kinds", "yield",
    "configs", "cleaning", "engine", "generation", "judge", "recipe", "reproduce", "timings_s", "cache",
    "validation_problems", "stages",
]


def _round_trips(report_json: Path) -> BuildFigures:
    text = report_json.read_text(encoding="utf-8")
    data = json.loads(text)
    figures = BuildFigures.from_json(data)
    assert figures.to_json() == data
    # the same text once written as the runner writes it: same keys, same order
    assert json.dumps(figures.to_json(), indent=2, ensure_ascii=False) + "\n" == text
    return figures


def test_the_sample_builds_report_json_round_trips_through_build_figures(sample_build):
    result = sample_build[0]
    figures = _round_trips(WorkDir(result.work).report)
    assert list(figures.to_json()) == REPORT_KEYS
    assert figures.admitted == result.figures.admitted > 0 and figures.judge is None
    assert all(isinstance(y, FamilyYield) for y in figures.yield_.values())
    assert ({family: y.to_json() for family, y in figures.yield_.items()}
            == json.loads(WorkDir(result.work).report.read_text())["yield"])
    assert result.report == figures.to_json()


def test_a_judged_builds_report_json_round_trips_and_its_judge_entry_is_typed(tmp_path):
    pool, replay = small_pool(tmp_path / "pool")
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay",
                   engine_options={"replay": replay}, judge="same", calibrate=1, progress=False)
    assert result.ok
    figures = _round_trips(WorkDir(result.work).report)
    assert isinstance(figures.judge, JudgeFigures) and figures.judge.judged == 1
    assert figures.judge.calibration is not None and figures.cache["judge"] is not None


def test_a_failed_builds_figures_say_why(tmp_path):
    from orandcar_builder.pipeline import BuildFailed

    pool = tmp_path / "pool.jsonl"
    pool.write_text("{not json\n", encoding="utf-8")
    (tmp_path / "none.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(BuildFailed) as caught:
        build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay", progress=False,
              engine_options={"replay": str(tmp_path / "none.jsonl")})
    figures = _round_trips(WorkDir(tmp_path / "work").report)
    assert figures.build_failed and "no pool line was admitted" in figures.build_failed
    assert list(figures.to_json()).index("build_failed") == REPORT_KEYS.index("reproduce") + 1
    assert caught.value.figures.build_failed == figures.build_failed


def test_figures_an_older_report_lacks_are_none_and_a_value_is_kept_as_read():
    figures = BuildFigures.from_json({"pool": "p.jsonl", "cleaning": "not a mapping", "judge": "nor this"})
    assert figures.pool == "p.jsonl" and figures.items is None and figures.yield_ is None
    assert figures.cleaning == "not a mapping"  # readers check the type, as they did on the dict
    assert figures.judge is None  # a judge entry that is no mapping: no judge the card can show
    assert BuildFigures.from_json(["not", "an", "object"]) == BuildFigures()
    assert BuildFigures.of(figures) is figures


def test_the_judge_stage_is_handed_its_engine_and_needs_no_generate_stage(tmp_path):
    """A judge pass over a finished build's decisions, with an engine given to the stage alone:
    nothing else has run in this process, so nothing could have left it an engine."""
    from orandcar_builder.engines import create_engine
    from orandcar_builder.engines.base import public_fingerprint
    from orandcar_builder.pipeline.stages import JudgeStage

    pool, replay = small_pool(tmp_path / "pool")
    assert build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay",
                 engine_options={"replay": replay}, progress=False).ok
    engine = create_engine("replay", replay=str(replay))
    config = BuildConfig(pool=pool, out=tmp_path / "out", work=tmp_path / "work", progress=False)
    context = BuildContext(config=config, objects=BuildObjects(), out=tmp_path / "out", work=WorkDir(config.work),
                           executor=None)
    judged = JudgeStage().run(context, engine, None)
    assert judged.figures.engine == public_fingerprint(engine)
    assert judged.figures.judged == 1 and judged.stats.counters["judged"] == 1
    assert not WorkDir(config.work).decisions_judged.exists()  # renamed over decisions.parquet


def test_workdir_names_each_file_once_beside_its_temporary_name(tmp_path):
    work = WorkDir(tmp_path / "w")
    paths = [getattr(work, name) for name in dir(WorkDir)
             if isinstance(getattr(WorkDir, name), property)]
    assert len(set(paths)) == len(paths)
    assert all(work.path in p.parents for p in paths)
    assert work.decisions_judged == partial_path(work.decisions, JUDGED_SUFFIX)
    assert work.cache.parent == work.cache_dir
    assert WorkDir(work).path == work.path
    assert not work.is_work_dir() and work.built_output() is None


def _seams():
    spec = importlib.util.spec_from_file_location("seams", REPO / "benchmarks" / "seams.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_module_but_workdir_spells_a_work_file_name():
    seams = _seams()
    package = REPO / "orandcar_builder"
    found = {str(p.relative_to(REPO)): seams.work_file_literals(p.read_text(encoding="utf-8"))
             for p in package.rglob("*.py")}
    assert {p for p, hits in found.items() if hits} == {"orandcar_builder/workdir.py"}


def test_the_seam_counter_finds_a_work_file_spelled_again():
    seams = _seams()
    source = ('def f(work):\n    a = work / "decisions.parquet"\n    b = work / "cache"\n'
              '    c = f"asks-{1:05d}.parquet"\n    return name.endswith(".lock")\n')
    assert [v for _, v in seams.work_file_literals(source)] == ["decisions.parquet", "cache", "fasks-..."]
    assert sorted(k for _, k in seams.figures_reads('r["judge"]; r.get("items"); r.get("elsewhere")')) == ["items", "judge"]
