"""The replay engine and the export that feeds it."""

from __future__ import annotations

import json

import pytest

from orandcar_builder.engines import create_engine
from orandcar_builder.engines.replay import (
    ReplayEngine,
    ReplayFileError,
    ReplayMissingError,
    ReplayQuestionMismatch,
    ReplayWriter,
    export_generations,
)
from orandcar_builder.records import Generation, Request


def req(item_id: str, question: str = "What is written?") -> Request:
    return Request(item_id=item_id, question=question, family="scene_text")


def write_lines(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines), encoding="utf-8")
    return path


def test_replays_by_id_in_request_order(tmp_path):
    path = write_lines(
        tmp_path / "gen.jsonl",
        [
            {"id": "a", "text": "<think>r1</think>ALPHA", "finish_reason": "stop"},
            {"id": "b", "text": "<think>never ends", "finish_reason": "length"},
            {"id": "c", "text": "GAMMA"},  # judge-style line: finish_reason defaults to stop
        ],
    )
    engine = create_engine("replay", replay=str(path))
    gens = engine.generate([req("c"), req("a"), req("b"), req("a")])
    assert [g.item_id for g in gens] == ["c", "a", "b", "a"]
    assert [(g.think, g.final_answer, g.finish_reason) for g in gens] == [
        ("", "GAMMA", "stop"),
        ("r1", "ALPHA", "stop"),
        ("never ends", "", "length"),
        ("r1", "ALPHA", "stop"),
    ]
    assert gens[1].text == "<think>r1</think>ALPHA"
    assert engine.can_judge is True


def test_missing_recordings_are_all_listed_with_the_file(tmp_path):
    path = write_lines(tmp_path / "gen.jsonl", [{"id": "a", "text": "x"}])
    engine = ReplayEngine(path)
    with pytest.raises(ReplayMissingError) as info:
        engine.generate([req("a"), req("m1"), req("m2"), req("m1")])
    assert info.value.missing == ["m1", "m2"]
    message = str(info.value)
    assert str(path) in message and "m1, m2" in message and "2 request(s)" in message


def test_long_missing_lists_are_shortened_in_the_message_but_kept_whole(tmp_path):
    path = write_lines(tmp_path / "gen.jsonl", [{"id": "a", "text": "x"}])
    ids = [f"q{i}" for i in range(150)]
    with pytest.raises(ReplayMissingError) as info:
        ReplayEngine(path).generate([req(i) for i in ids])
    assert info.value.missing == ids
    assert "and 50 more" in str(info.value)


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"text": "x"}', "missing field 'id'"),
        ('{"id": "z"}', "missing field 'text'"),
        ('{"id": 3, "text": "x"}', "field 'id' must be a string"),
        ('{"id": "", "text": "x"}', "field 'id' is empty"),
        ('{"id": "z", "text": "x", "finish_reason": "abort"}', "finish_reason"),
        ('{"id": "z", "text": "x", "prompt_tokens": "7"}', "prompt_tokens"),
        ('{"id": "a", "text": "different"}', "already recorded differently on line 1"),
    ],
)
def test_malformed_lines_are_reported_with_line_numbers(tmp_path, bad_line, reason):
    path = write_lines(tmp_path / "gen.jsonl", [{"id": "a", "text": "x"}, "", bad_line])
    with pytest.raises(ReplayFileError) as info:
        ReplayEngine(path)
    message = str(info.value)
    assert str(path) in message and "line 3:" in message and reason in message


def test_every_malformed_line_is_reported_at_once(tmp_path):
    path = write_lines(tmp_path / "gen.jsonl", ["{", {"id": "a", "text": "x"}, "[]", '{"id": "b"}'])
    with pytest.raises(ReplayFileError) as info:
        ReplayEngine(path)
    assert "3 malformed line(s)" in str(info.value)
    assert all(f"line {n}:" in str(info.value) for n in (1, 3, 4))


def test_identical_duplicate_lines_are_accepted(tmp_path):
    line = {"id": "a", "text": "x", "finish_reason": "stop"}
    engine = ReplayEngine(write_lines(tmp_path / "gen.jsonl", [line, line]))
    assert engine.generate([req("a")])[0].final_answer == "x"


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ReplayFileError, match="nope.jsonl"):
        ReplayEngine(tmp_path / "nope.jsonl")


def test_fingerprint_follows_the_recording_bytes(tmp_path):
    a = write_lines(tmp_path / "a.jsonl", [{"id": "a", "text": "x"}])
    b = write_lines(tmp_path / "b.jsonl", [{"id": "a", "text": "y"}])
    c = write_lines(tmp_path / "c.jsonl", [{"id": "a", "text": "x"}])
    fa, fb, fc = (ReplayEngine(p).fingerprint() for p in (a, b, c))
    assert fa["kind"] == "replay" and len(fa["sha256"]) == 64
    assert fa != fb and fa == fc  # content, not path


def test_export_then_replay_gives_the_same_generations(tmp_path):
    requests = [req("a", "Read it.\nReply with only the text."), req("b", "Ünïcode?  "), req("c")]
    original = [
        Generation("a", "<think>r</think>A", "r", "A", "stop", "Qwen/Qwen3-VL", "abc123", prompt="<p>a", prompt_tokens=5, completion_tokens=9),
        Generation("b", "<think>cut", "cut", "", "length", "Qwen/Qwen3-VL", "abc123"),
        Generation("c", "", "", "", "stop", "ocr", "", unsupported="engine reads text only"),
    ]
    path = tmp_path / "out" / "generations.jsonl"
    assert export_generations(original, path, requests=requests) == 3
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["question"] == "Read it.\nReply with only the text." and lines[1]["finish_reason"] == "length"
    assert ReplayEngine(path).generate(requests) == original
    assert not list(path.parent.glob("*.tmp"))


def test_replay_refuses_a_recording_made_for_another_question(tmp_path):
    path = tmp_path / "g.jsonl"
    export_generations([Generation("a", "A", "", "A", "stop", "m")], path, requests=[req("a", "old question")])
    with pytest.raises(ReplayQuestionMismatch, match="different question"):
        ReplayEngine(path).generate([req("a", "new question")])


def test_export_refuses_unfinished_generations(tmp_path):
    with pytest.raises(ValueError, match="abort"):
        export_generations([Generation("a", "", "", "", "abort", "m")], tmp_path / "g.jsonl")
    assert not (tmp_path / "g.jsonl").exists()


def test_replay_writer_streams_and_replaces_only_when_committed(tmp_path):
    path = tmp_path / "gens.jsonl"
    path.write_text("old\n")
    with ReplayWriter(path) as out:
        out.add(Generation("a", "<think>r</think>A", "r", "A", "stop", "m"), "Q a?")
        out.add(Generation("b", "B", "", "B", "length", "m"))
        assert path.read_text() == "old\n"  # nothing replaced before the end
    assert out.lines == 2
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == ["a", "b"] and lines[0]["question"] == "Q a?" and "question" not in lines[1]


def test_replay_writer_keeps_the_old_file_when_a_generation_cannot_be_replayed(tmp_path):
    path = tmp_path / "gens.jsonl"
    path.write_text("old\n")
    with pytest.raises(ValueError, match="finish_reason 'abort'"):
        with ReplayWriter(path) as out:
            out.add(Generation("a", "A", "", "A", "stop", "m"))
            out.add(Generation("b", "B", "", "B", "abort", "m"))
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["gens.jsonl"]


# --- read when first asked (the build's rerun: open_engines) ----------------------------------------


def test_a_lazy_engine_hashes_now_and_reads_when_first_asked(tmp_path, monkeypatch):
    from orandcar_builder.engines import replay as replay_module

    path = write_lines(tmp_path / "gen.jsonl", [{"id": "a", "text": "ALPHA"}, {"id": "b", "text": "BETA"}])
    reads = []
    real = replay_module._read_file
    monkeypatch.setattr(replay_module, "_read_file", lambda p: reads.append(p) or real(p))
    lazy = ReplayEngine(path, lazy=True)
    assert reads == [] and not lazy.loaded
    assert lazy.fingerprint() == ReplayEngine(path).fingerprint()  # the same sha256 either way
    assert len(reads) == 1  # the eager one
    assert [g.final_answer for g in lazy.generate([req("b"), req("a")])] == ["BETA", "ALPHA"]
    assert lazy.loaded and len(reads) == 2
    lazy.generate([req("a")])
    assert len(reads) == 2  # read once


def test_a_lazy_engine_reports_every_malformed_line_when_it_reads(tmp_path):
    path = write_lines(tmp_path / "gen.jsonl", ["{", {"id": "a", "text": "x"}, "[]"])
    engine = ReplayEngine(path, lazy=True)  # hashed, not read
    with pytest.raises(ReplayFileError) as info:
        engine.generate([req("a")])
    assert "2 malformed line(s)" in str(info.value) and "line 1:" in str(info.value) and "line 3:" in str(info.value)


def test_a_lazy_engine_refuses_a_file_changed_after_it_was_hashed(tmp_path):
    path = write_lines(tmp_path / "gen.jsonl", [{"id": "a", "text": "x"}])
    engine = ReplayEngine(path, lazy=True)
    write_lines(path, [{"id": "a", "text": "y"}])  # the fingerprint named the first bytes
    with pytest.raises(ReplayFileError, match="changed while in use"):
        engine.load()
    assert not engine.loaded


def test_a_lazy_engine_names_a_missing_file_at_once(tmp_path):
    with pytest.raises(ReplayFileError, match="nope.jsonl"):
        ReplayEngine(tmp_path / "nope.jsonl", lazy=True)


def test_a_line_that_is_not_utf8_is_named_and_the_others_read(tmp_path):
    path = tmp_path / "gen.jsonl"
    path.write_bytes(b'{"id": "a", "text": "x"}\n{"id": "b", "text": "\xff"}\n{"id": "c", "text": "\xc3"}\n')
    with pytest.raises(ReplayFileError) as info:
        ReplayEngine(path)
    message = str(info.value)
    assert "2 malformed line(s)" in message
    assert "line 2: not UTF-8 (byte 22)" in message and "line 3: not UTF-8" in message


def test_crlf_line_ends_are_read_as_json_lines_allows(tmp_path):
    path = tmp_path / "gen.jsonl"
    path.write_bytes(b'{"id": "a", "text": "x"}\r\n\r\n{"id": "b", "text": "y"}\r\n')
    engine = ReplayEngine(path)
    assert [g.final_answer for g in engine.generate([req("a"), req("b")])] == ["x", "y"]
    assert engine.recordings["b"].line == 3


def test_a_file_that_fails_when_first_read_stops_the_stream(tmp_path):
    """Read when first asked, a bad file is the engine's failure, not each request's."""
    from orandcar_builder.engines.base import stream_of

    path = write_lines(tmp_path / "gen.jsonl", [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}])
    engine = ReplayEngine(path, lazy=True)
    write_lines(path, [{"id": "a", "text": "x"}, "{"])
    with pytest.raises(ReplayFileError, match="changed while in use"):
        list(stream_of(engine, [req("a"), req("b")], batch_size=2))
