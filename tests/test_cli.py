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
