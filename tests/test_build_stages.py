"""The build as a list of stages over one BuildConfig: the settings checked in one place, a recipe
filling them, the stages each build runs and what they report, and the judge pass reaching the
engine only through the cached generate."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orandcar_builder.executors import get_executor
from orandcar_builder.pipeline import BuildConfig, BuildError, BuildObjects, build, run_build
from orandcar_builder.pipeline.stages import overlaps, stages_for
from orandcar_builder.recipe import parse_recipe, resolve

from .conftest import REPO, dataset_files, write_png, write_pool


def small_pool(folder: Path) -> tuple[Path, Path]:
    write_png(folder / "images" / "a.png", (200, 30, 30))
    write_png(folder / "images" / "b.png", (30, 200, 30))
    pool = write_pool(folder / "pool.jsonl", [
        {"id": "a", "image": "images/a.png", "question": "What is written?", "answer": "STOP", "family": "scene_text"},
        {"id": "b", "image": "images/b.png", "question": "What is written?", "answer": "EXIT", "family": "scene_text"},
    ])
    replay = folder / "replay.jsonl"
    replay.write_text("".join(json.dumps({"id": i, "text": "STOP", "finish_reason": "stop"}) + "\n" for i in "ab"))
    return pool, replay


@pytest.mark.parametrize("settings, message", [
    ({"limit": -1}, "limit must be"),
    ({"limit": True}, "limit must be"),
    ({"generation_batch": 0}, "generation_batch must be at least 1"),
    ({"calibrate": -2}, "calibrate must be"),
    ({"max_shard_bytes": 0}, "max_shard_bytes must be at least 1"),
    ({"max_image_bytes": 0}, "max_bytes"),
    ({"image_read_timeout": -1.0}, "read_timeout_s"),
    ({"admit_workers": 0}, "admit"),
    ({"executor": object()}, "executor must be a name"),
])
def test_a_bad_setting_is_refused_where_the_config_is_made(tmp_path, settings, message):
    with pytest.raises(BuildError, match=message):
        BuildConfig(pool=tmp_path / "pool.jsonl", out=tmp_path / "out", **settings)


def test_the_config_is_a_frozen_value(tmp_path):
    config = BuildConfig(pool=str(tmp_path / "p.jsonl"), out=str(tmp_path / "o"), engine_options={"threads": 1})
    assert isinstance(config.pool, Path) and config.work == Path("work")
    with pytest.raises(AttributeError):
        config.limit = 3  # type: ignore[misc]
    assert config.replace(limit=3).limit == 3 and config.limit is None
    with pytest.raises(BuildError, match="limit"):
        config.replace(limit=-3)


def test_a_recipe_fills_the_config(tmp_path):
    recipe = resolve(parse_recipe('[dataset]\nrepo = "me/Set"\nlicense = "cc-by-4.0"\n'
                                  '[engine]\nname = "replay"\nreplay = "g.jsonl"\n[judge]\nname = "same"\n'
                                  '[calibration]\nsize = 7\n[families.vqa]\ninstruction = "One word."\n'))
    config = BuildConfig.from_recipe(recipe, tmp_path / "p.jsonl", tmp_path / "o", limit=5)
    assert (config.engine, config.engine_options, config.judge, config.calibrate) == ("replay", {"replay": "g.jsonl"},
                                                                                        "same", 7)
    assert config.repo == "me/Set" and config.card_options == {"license": "cc-by-4.0"} and config.limit == 5
    assert config.families["vqa"].instruction == "One word."
    assert config.recipe is recipe
    # an engine object given instead keeps the config's own engine settings
    kept = BuildConfig(pool=tmp_path / "p.jsonl", out=tmp_path / "o").with_recipe(recipe, keep_engine=True)
    assert (kept.engine, kept.engine_options, kept.judge) == ("rapidocr", {}, "same")
    assert BuildConfig(pool=tmp_path / "p", out=tmp_path / "o").with_recipe(None).recipe is None


def test_the_keyword_facade_refuses_an_unknown_setting(tmp_path):
    pool, replay = small_pool(tmp_path / "pool")
    with pytest.raises(TypeError, match="engine_nmae"):
        build(pool, tmp_path / "out", work=tmp_path / "work", engine_nmae="replay")
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("overlap, judge, names", [
    (True, "none", ["generate", "write", "card", "validate"]),
    (False, "none", ["admit", "generate", "write", "card", "validate"]),
    (True, "same", ["generate", "judge", "write", "card", "validate"]),
])
def test_the_stages_a_build_runs(tmp_path, overlap, judge, names):
    config = BuildConfig(pool=tmp_path / "p", out=tmp_path / "o", overlap_admit=overlap, judge=judge)
    stages = stages_for(config, BuildObjects(), get_executor("local"))
    assert [stage.name for stage in stages] == names
    assert all(callable(stage.run) for stage in stages)
    # with no admit stage, the generate stage is the one that admits (the two overlap)
    generate = next(stage for stage in stages if stage.name == "generate")
    assert generate.overlapped is overlap is overlaps(config, get_executor("local"))


def test_run_build_reports_each_stage_and_report_json_gathers_their_timings(tmp_path):
    pool, replay = small_pool(tmp_path / "pool")
    config = BuildConfig(pool=pool, out=tmp_path / "out", work=tmp_path / "work", engine="replay",
                         engine_options={"replay": str(replay)}, judge="same", progress=False, overlap_admit=False)
    result = run_build(config)
    assert result.ok, result.problems
    assert [r.name for r in result.stages] == ["admit", "generate", "judge", "write", "card", "validate"]
    by_name = {r.name: r for r in result.stages}
    assert by_name["admit"].counters == {"admitted": 2, "dropped": 0}
    assert by_name["generate"].counters["asked"] == 2 and by_name["generate"].counters["failed"] == 0
    assert by_name["judge"].counters["judged"] == 1  # b: the rule rejected STOP for EXIT
    assert by_name["write"].counters["accepted"] + by_name["write"].counters["rejected"] == 2
    assert by_name["validate"].counters == {"problems": 0}
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    timings = report["timings_s"]
    assert list(timings) == ["admit", "generate", "verify", "order", "judge", "write", "card", "validate", "total"]
    assert all(v >= 0 for v in timings.values())
    # report.json keeps each stage's own report too, counters as the stage gave them
    assert [s["name"] for s in report["stages"]] == [r.name for r in result.stages]
    assert report["stages"][0] == {"name": "admit", "timings_s": {"admit": round(by_name["admit"].timings["admit"], 3)},
                                   "counters": {"admitted": 2, "dropped": 0}}


def test_overlapped_admission_is_reported_by_the_generate_stage(tmp_path):
    pool, replay = small_pool(tmp_path / "pool")
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay",
                   engine_options={"replay": replay}, progress=False)
    assert result.ok and [r.name for r in result.stages][0] == "generate"
    generate = result.stages[0]
    assert "admit" in generate.timings and generate.counters["admitted"] == 2
    timings = json.loads((tmp_path / "work" / "report.json").read_text())["timings_s"]
    assert set(timings) == {"generate", "verify", "order", "admit", "write", "card", "validate", "total"}


def test_the_judge_pass_asks_through_the_cache_in_generation_batches(tmp_path, monkeypatch):
    from orandcar_builder.pipeline.stages import judge as judge_stage
    from orandcar_builder.vocab import GENERATION_BATCH

    calls = []
    original = judge_stage.generate_through_cache

    def spy(engine, requests, cache, **kwargs):
        calls.append((len(requests), cache is not None, kwargs["batch_size"]))
        return original(engine, requests, cache, **kwargs)

    monkeypatch.setattr(judge_stage, "generate_through_cache", spy)
    pool, replay = small_pool(tmp_path / "pool")
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay",
                   engine_options={"replay": replay}, judge="same", progress=False)
    assert result.ok and calls == [(1, True, GENERATION_BATCH)]
    assert result.report["judge"]["judged"] == 1
    calls.clear()
    result = build(pool, tmp_path / "out2", work=tmp_path / "work2", engine_name="replay",
                   engine_options={"replay": replay}, judge="same", progress=False, generation_batch=7)
    assert result.ok and calls == [(1, True, 7)]  # the config's batch size, not the default


def test_a_newly_registered_executor_runs_a_build(tmp_path, monkeypatch):
    """One registration, no other edit: an executor class with no settings is made with no
    arguments, and gives the local executor's bytes."""
    from orandcar_builder.executors import EXECUTORS

    monkeypatch.setitem(EXECUTORS, "here_too", EXECUTORS["local"])
    pool, replay = small_pool(tmp_path / "pool")
    results = [build(pool, tmp_path / name, work=tmp_path / f"work-{name}", engine_name="replay",
                     engine_options={"replay": replay}, executor=name, progress=False)
               for name in ("local", "here_too")]
    assert all(r.ok for r in results)
    files = [dataset_files(r.out) for r in results]
    assert files[0] == files[1] and all((results[0].out / f).read_bytes() == (results[1].out / f).read_bytes()
                                        for f in files[0])
    manifest = json.loads((tmp_path / "work-here_too" / "manifest.json").read_text())
    assert manifest["executor"]["executor"] == "local"  # the class's own describe()


def test_settings_made_without_a_recipe_reach_the_card(tmp_path):
    """BuildConfig's repo and card options are the card's, recipe file or not."""
    pool, replay = small_pool(tmp_path / "pool")
    config = BuildConfig(pool=pool, out=tmp_path / "out", work=tmp_path / "work", engine="replay",
                         engine_options={"replay": str(replay)}, progress=False, repo="someone/Elsewhere",
                         card_options={"pretty_name": "Elsewhere"})
    result = run_build(config)
    assert result.ok, result.problems
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "someone/Elsewhere" in card and "ORG/OrandCar" not in card
    assert "pretty_name: Elsewhere" in card
    manifest = json.loads((tmp_path / "work" / "manifest.json").read_text())
    assert manifest["recipe"]["dataset"] == {"pretty_name": "Elsewhere", "repo": "someone/Elsewhere"}


@pytest.mark.parametrize("module, forbidden", [
    ("orandcar_builder.judge", ("orandcar_builder.engines", "orandcar_builder.cache", "orandcar_builder.executors",
                                "orandcar_builder.route", "orandcar_builder.pipeline")),
    ("orandcar_builder.executors.steps", ("orandcar_builder.pipeline", "orandcar_builder.card")),
    ("orandcar_builder.executors.local", ("orandcar_builder.pipeline",)),
])
def test_the_lower_layers_do_not_import_the_upper_ones(module, forbidden):
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=REPO).stdout.split()
    assert not [m for m in loaded if m.startswith(forbidden)]


# -- progress: one bar per stage, each with its total ------------------------------------------------

@pytest.mark.parametrize("text, limit, lines", [
    (b"", None, 0), (b"a\n", None, 1), (b"a\nb", None, 2), (b"a\n\nb\n", None, 3), (b"a\nb\nc\n", 2, 2),
    (b"a\nb", 5, 2), (b"\xef\xbb\xbfa\r\nb\r\n", None, 2),
])
def test_count_lines_counts_the_lines_the_pool_reader_reads(tmp_path, text, limit, lines):
    from orandcar_builder.pipeline.progress import count_lines
    from orandcar_builder.pool.jsonl import decode_json_lines

    path = tmp_path / "pool.jsonl"
    path.write_bytes(text)
    assert count_lines(path, limit) == lines
    assert count_lines(path) == sum(1 for _ in decode_json_lines(path))


def _bar_totals(stderr: str) -> dict:
    """The last "done/total" each stage's bar showed (tqdm redraws a bar with \\r)."""
    totals = {}
    for line in re.split(r"[\r\n]+", stderr):
        found = re.search(r"\b(admit|generate|judge|write):.*?\b(\d+)/(\d+) \[", line)
        if found:
            totals[found.group(1)] = (int(found.group(2)), int(found.group(3)))
    return totals


@pytest.mark.parametrize("executor_args", [["--admit-workers", "1"], ["--admit-workers", "2"]])
def test_every_stage_bar_shows_its_total(tmp_path, executor_args):
    """8 pool lines (one malformed, one naming a missing image): admit counts 8 lines, generate the
    6 admitted items, judge the 2 rule rejects with an answer, write the QA items of the rows (the 4
    accepted twice, the 2 rejected once). The summary shows the cache counts and timings."""
    from click.testing import CliRunner

    from orandcar_builder.cli import main

    lines, replies = [], []
    for k in range(6):
        write_png(tmp_path / "images" / f"{k}.png", (20 * k, 30, 30))
        lines.append({"id": f"q{k}", "image": f"images/{k}.png", "question": "What is written?", "answer": "STOP",
                      "family": "scene_text"})
        replies.append({"id": f"q{k}", "text": "STOP" if k < 4 else "EXIT", "finish_reason": "stop"})
    lines += ["{not json", {"id": "gone", "image": "images/none.png", "question": "Q?", "answer": "A",
                           "family": "scene_text"}]
    pool = write_pool(tmp_path / "pool.jsonl", lines)
    (tmp_path / "gens.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies))
    (tmp_path / "verdicts.jsonl").write_text("".join(json.dumps({"id": f"q{k}", "text": "Verdict: WRONG"}) + "\n"
                                                     for k in (4, 5)))
    args = ["build", str(pool), "-o", str(tmp_path / "out"), "--work", str(tmp_path / "work"),
            "--engine", "replay", "--replay", str(tmp_path / "gens.jsonl"),
            "--judge", "replay", "--judge-replay", str(tmp_path / "verdicts.jsonl"), *executor_args]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    assert _bar_totals(run.stderr) == {"admit": (8, 8), "generate": (6, 6), "judge": (2, 2), "write": (10, 10)}
    assert "<" in run.stderr.split("generate:")[-1]  # tqdm's "elapsed<remaining": an ETA is shown
    # QA items and rows (one per image) are never mixed: each figure says which it counts
    assert "pool.jsonl: 8 lines, one QA item each: 6 admitted, 2 dropped" in run.stdout
    assert "QA items: accepted 4  rejected 2" in run.stdout and "judge: 2 QA items judged" in run.stdout
    assert "rows (one per image, holding its QA items):" in run.stdout
    assert not re.search(r"\b(accepted|rejected|judged) \d+ rows", run.stdout)
    assert re.search(r"RS_think +4 rows, 4 QA items, in 1 shard", run.stdout), run.stdout
    assert "cache: generate 0 of 6 requests from the cache, 6 asked of the engine; judge 0 of 2" in run.stdout
    assert re.search(r"time: .*generate \d+\.\d s.*judge \d+\.\d s.*write \d+\.\d s.*; total \d+\.\d s", run.stdout)
    again = CliRunner().invoke(main, [*args, "--no-progress"])
    assert "cache: generate 6 of 6 requests from the cache, 0 asked" in again.stdout and again.stderr == ""
    page = (tmp_path / "work" / "report.html").read_text(encoding="utf-8")
    assert re.search(r'<table id="run-cache">.*<td>generate</td><td class="n">6</td><td class="n">6</td>', page, re.S)
    assert re.search(r'<table id="run-timings">.*<td>write</td><td class="n">\d+\.\d\d</td>', page, re.S)


def test_bars_have_totals_when_admission_runs_first(tmp_path, capsys):
    """The admit stage whole before generation (the ray executor's order): generate's total is
    the admitted items from the start."""
    pool, replay = small_pool(tmp_path / "pool")
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay",
                   engine_options={"replay": replay}, overlap_admit=False, progress=True)
    assert result.ok and [s.name for s in result.stages][:2] == ["admit", "generate"]
    totals = _bar_totals(capsys.readouterr().err)
    assert totals["admit"] == (2, 2) and totals["generate"] == (2, 2) and totals["write"][0] == totals["write"][1]


def test_work_parquet_files_have_few_large_row_groups(tmp_path):
    """A work file's footer, held whole by its writer and by every reader while the file is open,
    grows with its row groups (about 70 kB each for decisions.parquet): rows written in the
    executors' chunks of 1024 gather into row groups of WORK_ROW_GROUP_ROWS, in their order, and
    a byte bound keeps a row group of long rows small."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from orandcar_builder.pipeline import workfiles

    schema = pa.schema([("order", pa.int64()), ("text", pa.string())])
    path = tmp_path / "work.parquet"
    with workfiles.WorkFiles(f=workfiles.ParquetFile(path, schema)) as files:
        for start in range(0, 10_000, 1024):
            files.f.write_rows([{"order": i, "text": "x"} for i in range(start, min(start + 1024, 10_000))])
        files.f.add({"order": 10_000, "text": "last"})
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [4096, 4096, 1809]
    assert pq.read_table(path).column("order").to_pylist() == list(range(10_001))

    long = tmp_path / "long.parquet"
    with workfiles.WorkFiles(f=workfiles.ParquetFile(long, schema)) as files:
        for start in range(0, 64, 8):
            files.f.write_rows([{"order": i, "text": "y" * (1 << 20)} for i in range(start, start + 8)])
    meta = pq.ParquetFile(long).metadata
    assert meta.num_rows == 64 and meta.num_row_groups == 4  # 16 rows of 1 MiB: WORK_ROW_GROUP_BYTES

    added = tmp_path / "added.parquet"  # rows added one at a time (admit) gather the same way
    with workfiles.WorkFiles(f=workfiles.ParquetFile(added, schema)) as files:
        for i in range(5000):
            files.f.add({"order": i, "text": "z"})
    meta = pq.ParquetFile(added).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [4096, 904]


def test_a_rerun_answered_from_the_cache_never_reads_the_replay_file(tmp_path, monkeypatch):
    """The replay file is read at the build's start unless the cache holds generations of its
    fingerprint (the same bytes, read without a problem before); then only when first asked."""
    from orandcar_builder.engines import replay as replay_module

    pool, replay = small_pool(tmp_path / "pool")
    with open(replay, "a") as fh:  # recorded for an item the first pool does not have yet
        fh.write(json.dumps({"id": "c", "text": "EXIT", "finish_reason": "stop"}) + "\n")
    reads: list[str] = []
    real = replay_module._read_file
    monkeypatch.setattr(replay_module, "_read_file", lambda p: reads.append(p) or real(p))

    def run(out: str):
        result = build(pool, tmp_path / out, work=tmp_path / "work", engine_name="replay",
                       engine_options={"replay": replay}, judge="same", progress=False)
        assert result.ok, result.problems
        return result

    first = run("out1")
    assert len(reads) == 1 and first.figures.cache["generate"]["asked"] == 2  # a new work dir: read at once
    again = run("out2")
    assert len(reads) == 1 and again.figures.cache["generate"]["hits"] == 2  # nothing asked, nothing read
    assert dataset_files(tmp_path / "out1") == dataset_files(tmp_path / "out2")
    write_png(tmp_path / "pool" / "images" / "c.png", (30, 30, 200))
    with open(pool, "a") as fh:
        fh.write(json.dumps({"id": "c", "image": "images/c.png", "question": "What is written?", "answer": "EXIT",
                             "family": "scene_text"}) + "\n")
    grown = run("out3")
    assert len(reads) == 2 and grown.figures.cache["generate"]["asked"] == 1  # read when c was asked


def test_a_malformed_replay_file_stops_a_new_build_before_any_image_is_read(tmp_path):
    pool, replay = small_pool(tmp_path / "pool")
    replay.write_text(replay.read_text() + "{not json\n")
    from orandcar_builder.engines.replay import ReplayFileError

    with pytest.raises(ReplayFileError, match=r"replay\.jsonl: 1 malformed line\(s\):\n  line 3: not valid JSON"):
        build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay",
              engine_options={"replay": replay}, progress=False)
    assert not (tmp_path / "work" / "admitted.parquet").exists() and not (tmp_path / "out").exists()
