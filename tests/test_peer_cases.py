"""The peer answer-matching case files are well formed (the benchmark itself is not run here)."""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from pathlib import Path

import pytest

from orandcar_builder.vocab import OPTION_LETTERS

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_peer_suites.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_peer_suites", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cases(bench):
    paths = sorted(bench.CASES_DIR.glob("*.jsonl"))
    assert paths, "no peer case files"
    return bench.read_cases(paths)


def test_every_suite_and_kind_is_present(cases):
    suites = {(c["suite"], c["kind"]) for c in cases}
    assert {("lmms-eval", "choice"), ("lm-eval", "choice"), ("VLMEvalKit", "choice"),
            ("Math-Verify", "math"), ("NeMo-Skills", "math")} <= suites


def test_choice_references_are_letters_and_each_reply_has_at_most_one_accepted(cases):
    accepted = defaultdict(list)
    for c in cases:
        if c["kind"] != "choice":
            continue
        assert len(c["reference"]) == 1 and c["reference"] in OPTION_LETTERS, c["where"]
        key = (c["source"], c["reply"], json.dumps(c["options"]))
        accepted[key].append(c["peer_accepts"])
    assert accepted
    assert all(sum(flags) <= 1 for flags in accepted.values())


def test_math_cases_carry_no_options(cases):
    assert all(c["options"] is None for c in cases if c["kind"] == "math")


def test_sources_name_a_commit_a_store_id_or_a_thread(cases):
    for c in cases:
        assert "@" in c["source"] or "store id" in c["source"] or "#" in c["source"], c["where"]


@pytest.mark.parametrize("line, message", [
    ("not json", "not JSON"),
    (json.dumps({"suite": "x", "source": "y", "kind": "choice"}), "missing reply"),
    (json.dumps({"suite": "x", "source": "y", "kind": "poem", "reply": "B", "options": None,
                 "reference": "B", "peer_accepts": True}), "kind 'poem'"),
    (json.dumps({"suite": "x", "source": "y", "kind": "choice", "reply": "B", "options": None,
                 "reference": "B", "peer_accepts": "yes"}), "peer_accepts must be"),
    (json.dumps({"suite": "x", "source": "y", "kind": "choice", "reply": "B", "options": "A,B",
                 "reference": "B", "peer_accepts": True}), "options must be"),
])
def test_a_bad_line_is_refused_naming_file_and_line(bench, tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n" + line + "\n", encoding="utf-8")
    with pytest.raises(bench.CaseError, match=message) as info:
        bench.read_cases([path])
    assert "bad.jsonl:2" in str(info.value)


def test_main_exits_2_with_one_error_line_on_a_bad_file(bench, tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text("{\n", encoding="utf-8")
    assert bench.main(["--data", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: bad.jsonl:1")


def test_a_small_file_is_decided_and_tabulated(bench, tmp_path, capsys):
    path = tmp_path / "mini.jsonl"
    rows = [
        {"suite": "s", "source": "r@c:p (t)", "kind": "choice", "reply": "The answer is (B).",
         "options": ["red", "blue"], "reference": "A", "peer_accepts": False},
        {"suite": "s", "source": "r@c:p (t)", "kind": "choice", "reply": "The answer is (B).",
         "options": ["red", "blue"], "reference": "B", "peer_accepts": True},
        {"suite": "s", "source": "r@c:p (u)", "kind": "math", "reply": "12", "options": None,
         "reference": "13", "peer_accepts": True, "note": "convention: a made-up expectation"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out_json = tmp_path / "t.json"
    out_cases = tmp_path / "d.jsonl"
    assert bench.main(["--data", str(path), "--json", str(out_json), "--cases", str(out_cases)]) == 0
    table = {(r["suite"], r["kind"]): r for r in json.loads(out_json.read_text())["rows"]}
    assert table[("s", "choice")]["cases"] == 1 and table[("s", "choice")]["agree"] == 1
    math = table[("s", "math")]
    assert math["we_reject_peer_accepts"] == 1 and math["convention_cases"] == 1
    assert math["agree_pct_excl_convention"] is None
    disagreements = [json.loads(line) for line in out_cases.read_text().splitlines()]
    assert [d["reference"] for d in disagreements] == ["13"]
    assert disagreements[0]["ours"]["passed"] is False
