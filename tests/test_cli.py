"""The command line: every command is documented, and each thin wrapper does what its help says."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main

from .conftest import REPO, write_png


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_every_command_has_help_and_is_in_the_readme():
    readme = (REPO / "README.md").read_text()
    for name, command in main.commands.items():
        assert command.help and command.help.strip(), name
        assert run(name, "--help").exit_code == 0
        assert re.search(rf"`orandcar {re.escape(name)}\b", readme), f"README does not document `orandcar {name}`"


@pytest.mark.parametrize("args, code", [
    (["--family", "scene_text", "--answer", "Hello!", "--reference", "HELLO"], 0),
    (["--family", "scene_text", "--answer", "Hallo", "--reference", "HELLO"], 1),
    (["--family", "multiple_choice", "--answer", "**B**", "--reference", "B", "--option", "cat", "--option", "dog"], 0),
    (["--family", "multiple_choice", "--answer", "A or B", "--reference", "B", "--option", "cat", "--option", "dog"], 1),
    (["--family", "doc_vqa", "--answer", "INV-2041\nIt is printed at the top.", "--reference", "INV-2041"], 0),
])
def test_check_answer_exit_codes(args, code):
    res = run("check-answer", *args)
    assert res.exit_code == code, res.output
    assert "rule:" in res.output and "decision:" in res.output


def test_check_answer_unknown_family_says_did_you_mean():
    res = run("check-answer", "--family", "scene_txt", "--answer", "a", "--reference", "a")
    assert res.exit_code == 2 and "did you mean 'scene_text'" in res.output


def test_recheck_agrees_on_the_sample_build(built_sample):
    res = run("recheck", built_sample)
    assert res.exit_code == 0, res.output


def test_recheck_flags_a_tampered_answer(sample_copy):
    shard = sorted((sample_copy / "RS_nothink").glob("*.parquet"))[0]
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[0]["qa"][0]["answer"] = "definitely not it"
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    res = run("recheck", sample_copy)
    assert res.exit_code == 1, res.output


def test_import_folder_then_build(tmp_path):
    src = tmp_path / "bench"
    for i, label in enumerate(["HELLO", "world"], 1):
        write_png(src / "IMG" / f"{i}.png", colour=(10 * i, 20, 30))
        (src / "label").mkdir(exist_ok=True)
        (src / "label" / f"{i}.txt").write_text(label)
    pool = tmp_path / "pool.jsonl"
    res = run("import", "folder", src, "-o", pool, "--family", "scene_text", "--dataset", "bench", "--split", "test")
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in pool.read_text().splitlines()]
    assert [line["answer"] for line in lines] == ["HELLO", "world"]
    assert all(line["family"] == "scene_text" and line["source"]["dataset"] == "bench" for line in lines)


def test_clean_command_writes_cleaned_pool(tmp_path):
    write_png(tmp_path / "a.png")
    pool = tmp_path / "pool.jsonl"
    base = {"image": "a.png", "family": "scene_text"}
    pool.write_text("\n".join(json.dumps(x) for x in [
        {**base, "id": "1", "question": "What is written?", "answer": "x"},
        {**base, "id": "2", "question": "What is written?", "answer": "x"},  # exact duplicate of 1
    ]) + "\n")
    res = run("clean", pool, "-o", tmp_path / "clean.jsonl")
    assert res.exit_code == 0, res.output
    assert len((tmp_path / "clean.jsonl").read_text().splitlines()) == 1


def test_calibrate_from_a_work_dir(tmp_path, sample_build):
    result, _ = sample_build
    import shutil

    work = tmp_path / "work"
    shutil.copytree(result.work, work)
    accepted = [row["id"] for row in pq.read_table(work / "decisions.parquet").to_pylist() if row["rule_passed"]]
    replies = tmp_path / "judge.jsonl"
    replies.write_text("".join(json.dumps({"id": i, "text": "Verdict: CORRECT" if n % 5 else "Verdict: WRONG"}) + "\n"
                               for n, i in enumerate(accepted)))
    res = run("calibrate", "--work", work, "-n", 10, "--judge", "replay", "--judge-replay", replies)
    assert res.exit_code == 0, res.output
    report = json.loads((work / "calibration.json").read_text())
    from orandcar_builder import judge as judging

    sample = judging.calibration_sample(judging.accepted_items_from_decisions(work / "decisions.parquet"), 10)
    wrong = {i for n, i in enumerate(accepted) if n % 5 == 0}
    expected = sum(item.item_id not in wrong for item in sample)
    assert report["n"] == 10 and report["agreed"] == expected < 10
    assert f"{expected}/10" in res.output


# --- choices come from the registries: a name registered there needs no CLI edit -----------------

def import_one_line(source, writer, *, family="scene_text", dataset=None, split=None, question=None, origin=None):
    """A stand-in importer registered by the test below: one pool line per ``*.png`` in ``source``."""
    for image in sorted(source.glob("*.png")):
        writer.write({"id": image.stem, "image": writer.relative(image), "question": question or "What is written?",
                      "answer": image.stem.upper(), "family": family,
                      "source": {"dataset": dataset or "stand-in", "split": split or "test"}}, where=str(image))


@pytest.fixture
def registered(monkeypatch):
    """A stand-in engine, executor, family and import format, each only added to its registry."""
    from orandcar_builder import families
    from orandcar_builder.engines import ENGINES
    from orandcar_builder.executors import EXECUTORS
    from orandcar_builder.families import Family
    from orandcar_builder.pool import IMPORTERS

    monkeypatch.setitem(ENGINES, "stand_in_engine", ENGINES["replay"])
    monkeypatch.setitem(EXECUTORS, "stand_in_executor", EXECUTORS["local"])
    monkeypatch.setattr(families, "DEFAULT_FAMILIES", families.DEFAULT_FAMILIES.overlay(
        [Family("stand_in_family", rule="exact", instruction="", description="a test family")]))
    monkeypatch.setitem(IMPORTERS, "stand_in_format", f"{__name__}:import_one_line")


def test_registered_names_appear_in_help(registered):
    build_help = run("build", "--help").output
    engine_line = re.search(r"--engine \[(.*?)\]", build_help).group(1).split("|")
    judge_line = re.search(r"--judge \[(.*?)\]", build_help).group(1).split("|")
    executor_line = re.search(r"--executor \[(.*?)\]", build_help).group(1).split("|")
    assert engine_line == ["rapidocr", "replay", "openai_compat", "vllm", "stand_in_engine"]
    assert judge_line == ["none", "same"] + [name for name in engine_line if name != "rapidocr"]  # it cannot judge
    assert executor_line == ["local", "ray", "stand_in_executor"]
    assert "stand_in_engine" in re.search(r"--judge \[(.*?)\]", run("calibrate", "--help").output).group(1)
    assert "stand_in_family" in re.search(r"--family \[(.*?)\]", run("check-answer", "--help").output).group(1)
    import_help = run("import", "--help").output
    assert "stand_in_family" in re.search(r"--family \[(.*?)\]", import_help).group(1)
    assert re.search(r"FORMAT +one of: llava, folder, hf, jsonl, stand_in_format\n", import_help), import_help


def test_unregistered_names_are_refused_with_a_suggestion():
    res = run("build", "pool.jsonl", "-o", "out", "--engine", "stand_in_engine")
    assert res.exit_code == 2 and "unknown engine 'stand_in_engine'" in res.output
    res = run("build", "pool.jsonl", "-o", "out", "--judge", "sme")
    assert res.exit_code == 2 and "unknown judge 'sme'; did you mean 'same'?" in res.output
    res = run("build", "pool.jsonl", "-o", "out", "--executor", "rya")
    assert res.exit_code == 2 and "unknown executor 'rya'; did you mean 'ray'?" in res.output
    res = run("import", "jsnol", "src", "-o", "p.jsonl")
    assert res.exit_code == 2 and "unknown import format 'jsnol'; did you mean 'jsonl'?" in res.output
    res = run("calibrate", "--judge", "none")  # calibrate needs a judge engine: none/same are build's
    assert res.exit_code == 2 and "unknown judge engine 'none'" in res.output


def test_only_engines_that_can_judge_are_offered_as_judges(tmp_path):
    """rapidocr reads text off an image and cannot judge a text-only question: neither calibrate
    nor build offers it, and the library's refusal names what can judge (not --judge none, which
    calibrate has no use for)."""
    from orandcar_builder.engines import ENGINES, engine_class, judge_engine_names
    from orandcar_builder.errors import OrandCarError
    from orandcar_builder.judge import judge

    assert judge_engine_names() == [name for name in ENGINES if engine_class(name).can_judge]
    assert "rapidocr" not in judge_engine_names() and "replay" in judge_engine_names()
    for help_of in ("calibrate", "build"):
        offered = re.search(r"--judge \[(.*?)\]", run(help_of, "--help").output).group(1).split("|")
        assert "rapidocr" not in offered and set(judge_engine_names()) <= set(offered), (help_of, offered)
    (tmp_path / "decisions.parquet").write_bytes(b"")
    res = run("calibrate", "--work", tmp_path, "--judge", "rapidocr")
    assert res.exit_code == 2 and "unknown judge engine 'rapidocr' (known: " in res.output, res.output
    res = run("build", "pool.jsonl", "-o", tmp_path / "out", "--judge", "rapidocr")
    assert res.exit_code == 2 and "unknown judge 'rapidocr'" in res.output, res.output
    with pytest.raises(OrandCarError) as caught:
        judge(type("Reader", (), {"kind": "reader", "can_judge": False})(), [("id", "Q?", ("A",), "A", "scene_text")])
    assert "--judge none" not in str(caught.value) and "judge with an engine that can" in str(caught.value)


def test_registered_engine_judge_and_executor_reach_the_build(registered, monkeypatch, tmp_path):
    from orandcar_builder import pipeline as build_module
    from orandcar_builder.figures import BuildFigures

    seen = {}

    def fake_run_build(config, objects=None):
        seen["config"] = config
        return build_module.BuildResult(out=config.out, work=config.work, figures=BuildFigures())

    monkeypatch.setattr(build_module, "run_build", fake_run_build)
    monkeypatch.setattr(build_module, "format_summary", lambda result: "summary")
    res = run("build", tmp_path / "pool.jsonl", "-o", tmp_path / "out", "--engine", "stand_in_engine",
              "--engine-option", "replay=gens.jsonl", "--engine-option", "max-tokens=16", "--judge",
              "stand_in_engine", "--judge-option", "replay=verdicts.jsonl", "--executor", "stand_in_executor")
    assert res.exit_code == 0, res.output
    config = seen["config"]
    assert (config.engine, config.engine_options) == ("stand_in_engine", {"replay": "gens.jsonl", "max_tokens": 16})
    assert (config.judge, config.judge_options) == ("stand_in_engine", {"replay": "verdicts.jsonl"})
    assert config.recipe.engine == {"name": "stand_in_engine", "replay": "gens.jsonl", "max_tokens": 16}
    assert config.executor == "stand_in_executor"


def test_registered_family_is_checked_by_its_rule(registered):
    passed = run("check-answer", "--family", "stand_in_family", "--answer", "Paris", "--reference", "Paris")
    assert passed.exit_code == 0 and re.search(r"^rule: +exact\b", passed.output, re.MULTILINE), passed.output
    res = run("check-answer", "--family", "stand_in_family", "--answer", "paris!", "--reference", "Paris")
    assert res.exit_code == 1 and re.search(r"^rule: +exact\b", res.output, re.MULTILINE), res.output


def test_registered_import_format_runs(registered, tmp_path):
    for name in ("abc", "xyz"):
        write_png(tmp_path / "src" / f"{name}.png")
    pool = tmp_path / "pool.jsonl"
    res = run("import", "stand_in_format", tmp_path / "src", "-o", pool, "--family", "stand_in_family")
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in pool.read_text().splitlines()]
    assert [(line["id"], line["answer"], line["family"]) for line in lines] == [
        ("abc", "ABC", "stand_in_family"), ("xyz", "XYZ", "stand_in_family")]


# --- the shared option groups ------------------------------------------------------------------

def test_key_value_options_are_checked_where_they_are_parsed(tmp_path):
    res = run("build", tmp_path / "p.jsonl", "-o", tmp_path / "o", "--engine-option", "novalue")
    assert res.exit_code == 2 and "'novalue' is not KEY=VALUE" in res.output and "--engine-option" in res.output
    res = run("import", "hf", tmp_path, "-o", tmp_path / "p.jsonl", "--column", "question=")
    assert res.exit_code == 2 and "'question=' is not KEY=VALUE" in res.output and "--column" in res.output


def test_clean_takes_builds_admission_options(tmp_path):
    """``clean`` admits a pool as ``build`` does: the same image policy and workers, with the same effect."""
    write_png(tmp_path / "small.png")
    write_png(tmp_path / "big.png", size=(64, 64))
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({"id": name, "image": f"{name}.png", "family": "scene_text",
                                        "question": "What is written?", "answer": name}) + "\n"
                            for name in ("small", "big")))
    limit = (tmp_path / "small.png").stat().st_size
    assert (tmp_path / "big.png").stat().st_size > limit
    outputs = []
    for workers in ("1", "2"):
        out = tmp_path / f"clean{workers}" / "clean.jsonl"
        res = run("clean", pool, "-o", out, "--max-image-bytes", limit, "--admit-workers", workers)
        assert res.exit_code == 0, res.output
        assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["small"]
        dropped = [json.loads(line) for line in (out.parent / "dropped.jsonl").read_text().splitlines()]
        assert [d["id"] for d in dropped] == ["big"]
        outputs.append((out.read_text().replace(f"clean{workers}", ""), json.loads(res.output)["lines_dropped"]))
    assert outputs[0] == outputs[1]
    assert run("clean", pool, "-o", tmp_path / "c.jsonl", "--admit-workers", "0").exit_code == 2


# --- a work dir given where a dataset folder is wanted, and the work dir a folder remembers -----

def test_validate_given_a_work_dir_names_the_dataset_folder(sample_build, tmp_path):
    result, _ = sample_build
    res = run("validate", result.work)
    assert res.exit_code == 2, res.output
    assert res.output.count("error:") == 1 and "unexpected file" not in res.output, res.output
    assert f"{result.work} is a work dir" in res.output
    assert f"validate the dataset folder {result.out.resolve()}" in res.output
    # a work dir whose manifest does not name its folder still is one
    bare = tmp_path / "work"
    bare.mkdir()
    (bare / "manifest.json").write_text("{}")
    (bare / "admitted.parquet").write_bytes(b"")
    res = run("validate", bare)
    assert res.exit_code == 2 and "is a work dir" in res.output and "its build wrote (-o)" in res.output
    # the other commands that take a dataset folder say the same
    for command in (["recheck", result.work], ["card", result.work], ["report", result.work],
                    ["push", result.work, "--repo", "org/name", "--dry-run"]):
        res = run(*command)
        assert res.exit_code == 2 and res.output.count("error:") == 1, (command, res.output)
        assert "is a work dir (`orandcar build --work`), not a dataset folder" in res.output, (command, res.output)
        assert str(result.out.resolve()) in res.output


def test_report_and_card_use_the_work_dir_the_folder_remembers(sample_build, sample_copy, tmp_path, monkeypatch):
    from orandcar_builder.dataset.layout import MARKER, remembered_work, scan, write_marker
    from orandcar_builder.dataset.validate import validate_folder

    result, _ = sample_build
    assert remembered_work(result.out) == result.work.resolve()
    assert MARKER not in scan(result.out).published  # local only: push uploads the published files
    monkeypatch.chdir(tmp_path)  # no ./work here: only the remembered one can be found
    res = run("report", sample_copy, "-o", tmp_path / "review.html")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "review.html").stat().st_size > 1000
    res = run("card", sample_copy)
    assert res.exit_code == 0, res.output
    assert validate_folder(sample_copy) == []

    gone = tmp_path / "moved-away"
    write_marker(sample_copy, gone)
    for command in (["report", sample_copy], ["card", sample_copy]):
        res = run(*command)
        assert res.exit_code == 2 and res.output.count("error:") == 1, res.output
        assert f"the work dir that built it, {gone}, is gone; give the work dir with --work" in res.output
    res = run("report", sample_copy, "--work", result.work, "-o", tmp_path / "again.html")
    assert res.exit_code == 0, res.output  # --work wins over the marker


HEAVY_MODULES = ("matplotlib", "sympy", "math_verify", "datasets", "tenacity")  # drawn, math, Hub, engines


@pytest.mark.parametrize("args", [
    ["--help"],
    ["check-answer", "--family", "scene_text", "--answer", "Hello!", "--reference", "HELLO"],
    ["check-answer", "--family", "multiple_choice", "--answer", "(B)", "--reference", "B", "--option", "x",
     "--option", "y"],
])
def test_light_commands_never_import_the_heavy_libraries(args):
    """matplotlib (charts) and sympy (math-verify) are imported by the code that draws or checks
    math, never at start-up: `orandcar --help` and a non-math check-answer stay fast."""
    import subprocess
    import sys

    code = ("import sys, runpy; sys.argv = ['orandcar', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('orandcar_builder.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            f"print('LOADED', sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                         timeout=120).stdout
    assert "LOADED []" in out, out[-500:]


def test_a_math_check_answer_does_load_math_verify():  # the test above can fail: the probe sees imports
    import subprocess
    import sys

    code = ("import sys, runpy; sys.argv = ['orandcar', 'check-answer', '--family', 'math', '--answer', '1/2',"
            " '--reference', '0.5']\ntry:\n    runpy.run_module('orandcar_builder.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\nprint('LOADED', 'sympy' in sys.modules)")
    assert "LOADED True" in subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                                           timeout=120).stdout
