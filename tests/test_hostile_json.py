"""JSON from outside past the bounds (files.MAX_JSON_DEPTH, files.MAX_JSON_INT_DIGITS): a line
nested thousands deep or holding a number of thousands of digits is dropped (or reported) with a
reason and its line number, in every reader of user input, and the good lines around it go on."""

from __future__ import annotations

import json
import sys

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.engines.replay import ReplayEngine, ReplayFileError
from orandcar_builder.files import (
    JSON_NUMBER_TOO_LONG,
    JSON_TOO_DEEP,
    MAX_JSON_DEPTH,
    MAX_JSON_INT_DIGITS,
    JsonLimitError,
    loads_bounded,
)
from orandcar_builder.pool import read_pool
from orandcar_builder.pool.llava import value_end
from orandcar_builder.records import Dropped, PoolItem

from .conftest import write_png, write_pool

DEEP = sys.getrecursionlimit() * 5  # far past the interpreter's stack, as in the report


def hostile_values() -> list[tuple[str, str]]:
    """(JSON text, reason): nesting shapes and numbers past the bounds, as whole values."""
    return [
        ("[" * DEEP + "]" * DEEP, JSON_TOO_DEEP),
        ('{"a":' * DEEP + "1" + "}" * DEEP, JSON_TOO_DEEP),
        ('[{"a":' * (DEEP // 2) + "1" + "}]" * (DEEP // 2), JSON_TOO_DEEP),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), JSON_TOO_DEEP),  # within the stack: the bound
        ("9" * 5001, JSON_NUMBER_TOO_LONG),  # past Python's own int-from-string limit
        ("-" + "1" * (MAX_JSON_INT_DIGITS + 1), JSON_NUMBER_TOO_LONG),
    ]


def base(i: int) -> dict:
    return {"id": f"ok-{i}", "image": "img/a.png", "question": "What is written?", "answer": f"x{i}",
            "family": "scene_text"}


def hostile_lines() -> list[tuple[str, str]]:
    """(pool line, reason): each hostile value as a line of its own and inside a good-looking line."""
    out = []
    for value, reason in hostile_values():
        out.append((value, reason))
        good = json.dumps({**base(0), "id": f"h{len(out)}"})
        out.append((good[:-1] + f', "extra": {value}}}', reason))
    return out


@pytest.mark.parametrize("text,reason", hostile_values())
def test_loads_bounded_raises_the_limit_error(text, reason):
    with pytest.raises(JsonLimitError) as info:
        loads_bounded(text)
    assert info.value.reason == reason and not isinstance(info.value, json.JSONDecodeError)


def test_values_within_the_bounds_are_read_and_brackets_in_strings_do_not_count():
    text = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_bounded(text) is not None
    assert loads_bounded(json.dumps({"q": "[" * 5000 + "{" * 5000})) == {"q": "[" * 5000 + "{" * 5000}
    assert loads_bounded("1" * MAX_JSON_INT_DIGITS) == int("1" * MAX_JSON_INT_DIGITS)
    assert loads_bounded("1" * 5000 + ".5") > 0  # a float of many digits is no integer conversion


def test_value_end_skips_any_depth_without_recursion():
    text = "[" * DEEP + '"],}"' + "]" * DEEP
    assert value_end(text + ', {"b": 2}]', 0) == len(text)
    assert value_end("9" * 6000 + "]", 0) == 6000
    assert value_end("[" * 10, 0) is None and value_end('["cut', 0) is None


def hostile_pool(tmp_path):
    write_png(tmp_path / "img" / "a.png")
    lines, expected = [base(0)], {}
    for text, reason in hostile_lines():
        lines.append(text)
        expected[f"pool.jsonl:{len(lines)}"] = reason
    lines.append(base(1))
    return write_pool(tmp_path / "pool.jsonl", lines), expected, len(lines)


def test_read_pool_drops_each_hostile_line_with_its_line_and_reads_on(tmp_path):
    pool, expected, n = hostile_pool(tmp_path)
    records = list(read_pool(pool))
    assert [r.id for r in records if isinstance(r, PoolItem)] == ["ok-0", "ok-1"]
    assert {r.where: r.reason for r in records if isinstance(r, Dropped)} == expected
    assert len(records) == n


def test_clean_and_import_drop_hostile_lines_without_a_traceback(tmp_path):
    pool, expected, n = hostile_pool(tmp_path)
    runner = CliRunner()
    cleaned = tmp_path / "cleaned" / "pool.jsonl"
    res = runner.invoke(main, ["clean", str(pool), "-o", str(cleaned)])
    assert res.exit_code == 0, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    dropped = [json.loads(line) for line in (cleaned.parent / "dropped.jsonl").read_text().splitlines()]
    assert {d["where"]: d["reason"] for d in dropped} == expected
    assert [json.loads(line)["id"] for line in cleaned.read_text().splitlines()] == ["ok-0", "ok-1"]

    imported = tmp_path / "imported" / "pool.jsonl"
    res = runner.invoke(main, ["import", "jsonl", str(pool), "-o", str(imported)])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    assert [json.loads(line)["id"] for line in imported.read_text().splitlines()] == ["ok-0", "ok-1"]
    problems = [json.loads(line) for line in (imported.parent / "pool.problems.jsonl").read_text().splitlines()]
    assert {p["where"]: p["reason"] for p in problems} == expected


def test_build_drops_hostile_lines_and_builds_the_good_ones(tmp_path, ocr_engine):
    from orandcar_builder.pipeline import build

    pool, expected, n = hostile_pool(tmp_path)
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine=ocr_engine, progress=False)
    assert result.ok, result.problems
    dropped = [json.loads(line) for line in (tmp_path / "work" / "dropped.jsonl").read_text().splitlines()]
    assert {d["where"]: d["reason"] for d in dropped} == expected
    assert result.report["admitted"] == 2 and result.report["items"] == n


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_llava_import_skips_a_hostile_record_and_reads_on(tmp_path, layout):
    write_png(tmp_path / "img" / "a.png")
    record = lambda i: json.dumps({"id": f"r{i}", "image": "img/a.png",  # noqa: E731
                                   "conversations": [{"from": "human", "value": "Q?"}, {"from": "gpt", "value": "A"}]})
    texts = [record(0)] + [t for t, _ in hostile_values()] + [record(1)]
    reasons = [r for _, r in hostile_values()]
    if layout == "json":
        source = tmp_path / "data.json"
        source.write_text("[\n" + ",\n".join(texts) + "\n]\n", encoding="utf-8")
    else:
        source = tmp_path / "data.jsonl"
        source.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "pool" / "pool.jsonl"
    res = CliRunner().invoke(main, ["import", "llava", str(source), "-o", str(out), "--family", "scene_text"])
    assert res.exit_code == 0, res.output
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert ids == ["r0#0", "r1#0"]
    problems = [json.loads(line) for line in (out.parent / "pool.problems.jsonl").read_text().splitlines()]
    first = 2 if layout == "json" else 1  # the array's '[' stands on a line of its own
    assert [(p["where"], p["reason"]) for p in problems] == [
        (f"{source.name}:{first + 1 + i}", reason) for i, reason in enumerate(reasons)]


@pytest.mark.parametrize("text,reason", hostile_values())
def test_replay_file_names_the_hostile_line(tmp_path, text, reason):
    path = tmp_path / "gen.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "x"}) + "\n" + text + "\n", encoding="utf-8")
    with pytest.raises(ReplayFileError) as info:
        ReplayEngine(path)
    assert "line 2:" in str(info.value) and "Traceback" not in str(info.value)


def test_shard_features_metadata_nested_deep_is_a_problem(sample_copy):
    from orandcar_builder.dataset.validate import validate_folder

    shard = next((sample_copy / "rejected").glob("*.parquet"))
    table = pq.read_table(shard)
    deep = ("[" * DEEP + "]" * DEEP).encode()
    pq.write_table(table.replace_schema_metadata({b"huggingface": deep}), shard)
    problems = validate_folder(sample_copy)
    assert any("datasets features metadata is not readable" in p for p in problems), problems


def test_engine_option_nested_deep_is_no_traceback():
    from orandcar_builder.cli import KeyValue

    key, value = KeyValue(settings=True).convert("x=" + "[" * DEEP + "]" * DEEP, None, None)
    assert key == "x" and isinstance(value, str)
    assert KeyValue(settings=True).convert("n=[1, 2]", None, None) == ("n", [1, 2])


@pytest.mark.parametrize("text,reason", hostile_values()[:2] + hostile_values()[4:5])
def test_a_server_reply_past_the_bounds_fails_that_request_only(text, reason):
    from types import SimpleNamespace

    from orandcar_builder.engines import openai_compat
    from orandcar_builder.records import Request

    reply = SimpleNamespace(content=text.encode())
    with pytest.raises(openai_compat._RequestFailed, match="unreadable response"):
        openai_compat.OpenAICompatEngine._generation(None, Request(item_id="a", question="q", family="scene_text"), reply, "http://x/v1")
