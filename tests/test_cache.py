"""The generation cache: keys, resume, and survival of SIGKILL at any point."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orandcar_builder.cache import (
    KEY_SCHEME,
    CacheError,
    CacheStats,
    GenerationCache,
    cache_fingerprint,
    request_key,
    request_keys,
)
from orandcar_builder.engines.base import EngineContractError
from orandcar_builder.executors.generation import generate_through_cache
from orandcar_builder.images import ImageRef
from orandcar_builder.records import Generation, Request

REPO = Path(__file__).resolve().parents[1]
FP = {"kind": "stub", "model": "m", "revision": "r1", "sampling": {"temperature": 0.0, "max_tokens": 64}}


def req(item_id, question=None, image=None):
    return Request(item_id=item_id, question=question if question is not None else f"Q {item_id}", family="scene_text", image=image)


class StubEngine:
    """Answers ``A:<question>``; records every request it is asked; can be told to misbehave."""

    kind = "stub"
    can_judge = True

    def __init__(self, fingerprint=FP, finish=None, fail_on_call=None):
        self._fingerprint = fingerprint
        self.finish = finish or {}  # question -> finish_reason
        self.fail_on_call = fail_on_call
        self.asked: list[str] = []
        self.calls = 0

    def fingerprint(self):
        return dict(self._fingerprint)

    def generate(self, requests):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("engine crashed")
        self.asked.extend(r.item_id for r in requests)
        return [
            Generation(r.item_id, f"A:{r.question}", "", f"A:{r.question}", self.finish.get(r.question, "stop"), "m", "r1")
            for r in requests
        ]


@pytest.fixture
def cache(tmp_path):
    with GenerationCache(tmp_path / "cache" / "generations.sqlite") as c:
        yield c


def image_ref(tmp_path, name, payload: bytes) -> ImageRef:
    path = tmp_path / name
    path.write_bytes(payload)
    return ImageRef.from_file(path, check_decodes=False)


# --- keys -------------------------------------------------------------------------------------


def test_key_covers_engine_question_and_image(tmp_path):
    img_a = image_ref(tmp_path, "a.png", b"one")
    img_b = image_ref(tmp_path, "b.png", b"two")
    base = request_key(FP, req("x", "Q", img_a))
    assert len(base) == 64
    assert request_key(FP, req("other-id", "Q", img_a)) == base  # item id does not shape output
    assert request_key(FP, replace(req("x", "Q", img_a), family="other")) == base
    assert request_key(FP, req("x", "Q ", img_a)) != base  # exact text, trailing space included
    assert request_key(FP, req("x", "Q", img_b)) != base
    assert request_key(FP, req("x", "Q", None)) != base
    assert request_key({**FP, "revision": "r2"}, req("x", "Q", img_a)) != base
    assert request_key({**FP, "sampling": {"temperature": 0.0, "max_tokens": 65}}, req("x", "Q", img_a)) != base


@given(question=st.text(max_size=40), with_image=st.booleans())
@settings(max_examples=200, deadline=None)
def test_keys_are_the_documented_payload_hash(question, with_image):
    """The assembled payload text is exactly the canonical JSON of the documented payload, so
    caches written by earlier versions keep their keys."""
    image = ImageRef(path="/x.png", sha256="ab" * 32) if with_image else None
    request = Request(item_id="x", question=question, image=image, family="scene_text")
    payload = {"scheme": KEY_SCHEME, "engine": cache_fingerprint(FP), "question": question,
               "image_sha256": image.sha256 if image else None}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert request_key(FP, request) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert request_keys(FP, [request, request]) == [request_key(FP, request)] * 2


def test_key_ignores_key_order_and_record_only_settings(tmp_path):
    reordered = dict(reversed(list(FP.items())))
    assert request_key(reordered, req("x")) == request_key(FP, req("x"))
    recorded = {**FP, "reproducibility": {"hardware": "H100", "VLLM_BATCH_INVARIANT": "1"}}
    assert request_key(recorded, req("x")) == request_key(FP, req("x"))


# --- generation through the cache (executors.generation) ---------------------------------------


def test_asks_only_for_what_is_missing_and_keeps_order(cache):
    engine = StubEngine()
    first = generate_through_cache(engine, [req("a"), req("b")], cache)
    assert engine.asked == ["a", "b"]
    stats = CacheStats()
    second = generate_through_cache(engine, [req("c"), req("b"), req("a"), req("d")], cache, stats=stats, batch_size=1)
    assert engine.asked == ["a", "b", "c", "d"]
    assert [g.item_id for g in second] == ["c", "b", "a", "d"]
    assert [g.final_answer for g in second] == ["A:Q c", "A:Q b", "A:Q a", "A:Q d"]
    assert second[1:3] == [first[1], first[0]]
    assert (stats.total, stats.hits, stats.misses, stats.asked, stats.stored, stats.batches) == (4, 2, 2, 2, 2, 2)


def test_same_question_and_image_is_asked_once_and_answers_each_item(cache):
    engine = StubEngine()
    stats = CacheStats()
    gens = generate_through_cache(engine, [req("a", "same"), req("b", "same"), req("c", "other")], cache, stats=stats)
    assert engine.asked == ["a", "c"]
    assert [g.item_id for g in gens] == ["a", "b", "c"]
    assert gens[0].final_answer == gens[1].final_answer == "A:same"
    assert (stats.asked, stats.shared, stats.hits) == (2, 1, 0)
    again = generate_through_cache(engine, [req("z", "same")], cache)
    assert again[0].item_id == "z" and engine.asked == ["a", "c"]


def test_each_batch_is_committed_before_the_next_is_asked(cache, tmp_path):
    from orandcar_builder.engines.base import EngineUnavailable

    held = []

    class Crashing(StubEngine):
        def generate(self, requests):
            held.append(len(cache))  # what is committed when this batch is asked
            if self.calls == 2:
                raise EngineUnavailable("engine crashed")  # fatal: stops the run
            return super().generate(requests)

    with pytest.raises(EngineUnavailable, match="engine crashed"):
        generate_through_cache(Crashing(), [req(str(i)) for i in range(7)], cache, batch_size=2)
    assert held == [0, 2, 4]
    assert len(cache) == 4
    retry = StubEngine()
    gens = generate_through_cache(retry, [req(str(i)) for i in range(7)], cache, batch_size=2)
    assert retry.asked == ["4", "5", "6"]
    assert [g.item_id for g in gens] == [str(i) for i in range(7)]


def test_a_batch_that_raises_is_asked_again_one_request_at_a_time(cache):
    engine = StubEngine(fail_on_call=2)
    gens = generate_through_cache(engine, [req(str(i)) for i in range(5)], cache, batch_size=2)
    assert [g.item_id for g in gens] == [str(i) for i in range(5)]
    assert engine.asked == ["0", "1", "2", "3", "4"] and len(cache) == 5


def test_incomplete_generations_are_returned_but_not_cached(cache):
    engine = StubEngine(finish={"Q a": "abort", "Q b": "length"})
    stats = CacheStats()
    gens = generate_through_cache(engine, [req("a"), req("b"), req("c")], cache, stats=stats)
    assert [g.finish_reason for g in gens] == ["abort", "length", "stop"]
    assert (stats.stored, stats.uncached) == (2, 1)
    generate_through_cache(engine, [req("a"), req("b"), req("c")], cache)
    assert engine.asked == ["a", "b", "c", "a"]  # only the aborted one is asked again


def test_unsupported_generations_are_cached(cache):
    class Unsupported(StubEngine):
        def generate(self, requests):
            self.asked.extend(r.item_id for r in requests)
            return [Generation(r.item_id, "", "", "", "", "ocr", unsupported="no text-only requests") for r in requests]

    engine = Unsupported()
    generate_through_cache(engine, [req("a")], cache)
    (gen,) = generate_through_cache(engine, [req("a")], cache)
    assert engine.asked == ["a"] and gen.unsupported == "no text-only requests"


def test_a_new_fingerprint_regenerates(cache):
    engine = StubEngine()
    generate_through_cache(engine, [req("a")], cache)
    other = StubEngine(fingerprint={**FP, "revision": "r2"})
    generate_through_cache(other, [req("a")], cache)
    assert other.asked == ["a"] and len(cache) == 2


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda rs: [Generation(r.item_id, "", "", "", "stop", "m") for r in rs[:-1]], "returned 1 generations for 2"),
        (lambda rs: [Generation(r.item_id, "", "", "", "stop", "m") for r in reversed(rs)], "order not kept"),
    ],
)
def test_engine_breaking_the_contract_is_caught_before_caching(cache, answer, message):
    class Broken(StubEngine):
        def generate(self, requests):
            return answer(requests)

    with pytest.raises(EngineContractError, match=message):
        generate_through_cache(Broken(), [req("a"), req("b")], cache)
    assert len(cache) == 0


def test_cache_persists_across_reopen(tmp_path):
    path = tmp_path / "g.sqlite"
    with GenerationCache(path) as cache:
        generate_through_cache(StubEngine(), [req("a")], cache)
    engine = StubEngine()
    with GenerationCache(path) as cache:
        assert generate_through_cache(engine, [req("a")], cache)[0].final_answer == "A:Q a"
        stored = json.loads(cache.connection.execute("SELECT fingerprint FROM engines").fetchone()[0])
    assert engine.asked == [] and stored == FP


def test_put_refuses_incomplete_generations(cache):
    with pytest.raises(ValueError, match="incomplete"):
        cache.put(FP, "k", Generation("a", "", "", "", "abort", "m"))
    assert len(cache) == 0


def test_closed_cache_and_bad_files_are_named(tmp_path):
    cache = GenerationCache(tmp_path / "g.sqlite")
    cache.close()
    with pytest.raises(CacheError, match="closed"):
        len(cache)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(CacheError, match="junk.sqlite"):
        GenerationCache(junk)
    future = tmp_path / "future.sqlite"
    sqlite3.connect(future).execute("PRAGMA user_version=99").connection.close()
    with pytest.raises(CacheError, match="schema version 99"):
        GenerationCache(future)


def test_rejects_a_zero_batch_size(cache):
    with pytest.raises(ValueError, match="batch_size"):
        generate_through_cache(StubEngine(), [req("a")], cache, batch_size=0)


# --- crash safety -------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, os, signal, sys
    from orandcar_builder.cache import GenerationCache
    from orandcar_builder.executors.generation import generate_through_cache
    from orandcar_builder.records import Generation, Request

    cache_path, log_path, out_path = sys.argv[1:4]
    kill_at_op = int(os.environ.get("KILL_AT_OP", "0"))  # SIGKILL inside SQLite's VM step N
    kill_in_call = int(os.environ.get("KILL_IN_CALL", "0"))  # SIGKILL inside engine call N

    # 40 requests, some asking the same question, so shared keys are crash-tested too.
    requests = [Request(f"q{i:02d}", f"question {i % 33}", "scene_text") for i in range(40)]

    class Engine:
        kind, can_judge, calls = "stub", True, 0
        def fingerprint(self):
            return {"kind": "stub", "model": "m"}
        def generate(self, batch):
            if Engine.calls:  # the batches before this one are committed by now
                print("batch", Engine.calls, flush=True)
            Engine.calls += 1
            with open(log_path, "a") as log:
                log.write("".join(r.item_id + "\\n" for r in batch))
            if Engine.calls == kill_in_call:
                os.kill(os.getpid(), signal.SIGKILL)
            return [Generation(r.item_id, "<think>t</think>A " + r.question, "t", "A " + r.question, "stop", "m") for r in batch]

    ops = [0]
    def step():
        ops[0] += 1
        if ops[0] == kill_at_op:
            os.kill(os.getpid(), signal.SIGKILL)
        return 0

    # Every connection to the cache counts its steps: the reads here and the commits on the
    # committer's thread.
    opened = GenerationCache.__init__
    def counted(self, path):
        opened(self, path)
        self.connection.set_progress_handler(step, 1)
    GenerationCache.__init__ = counted

    with GenerationCache(cache_path) as cache:
        gens = generate_through_cache(Engine(), requests, cache, batch_size=4)
    with open(out_path, "w") as out:
        json.dump({"generations": [g.__dict__ for g in gens], "ops": ops[0]}, out, sort_keys=True)
    """
)


def run_child(tmp_path, workdir: Path, env_extra: dict) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(REPO), **env_extra}
    return subprocess.run(
        [sys.executable, str(script), str(workdir / "g.sqlite"), str(workdir / "asked.log"), str(workdir / "out.json")],
        env=env, capture_output=True, text=True, timeout=60,
    )


def cached_item_ids(path: Path) -> set[str]:
    with GenerationCache(path) as cache:
        return {row[0] for row in cache.connection.execute("SELECT item_id FROM generations")}


def asked_lines(workdir: Path) -> list[str]:
    log = workdir / "asked.log"
    return log.read_text().split() if log.exists() else []


DISTINCT_QUESTIONS = 33  # as in CHILD


def crash_and_resume(tmp_path, workdir: Path, kill_setting, max_kills: int) -> dict:
    """Run the child with ``kill_setting(cached_fraction)`` until ``max_kills`` runs were killed,
    then once to the end. Checks after each run that it never asked for an item already cached
    before it started; returns the final output and the figures."""
    workdir.mkdir()
    kills = reasked = 0
    while True:
        before = cached_item_ids(workdir / "g.sqlite") if (workdir / "g.sqlite").exists() else set()
        asked_earlier = asked_lines(workdir)
        setting = kill_setting(len(before) / DISTINCT_QUESTIONS) if kills < max_kills else {}
        proc = run_child(tmp_path, workdir, {k: str(v) for k, v in setting.items()})
        asked_now = asked_lines(workdir)[len(asked_earlier):]
        assert not (set(asked_now) & before), f"asked again after cached: {sorted(set(asked_now) & before)}"
        reasked += sum(1 for item in asked_now if item in set(asked_earlier))
        if proc.returncode == 0:
            if kills >= max_kills:
                break
            continue  # the kill point lay beyond this shorter run; draw again
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        kills += 1
    counts: dict[str, int] = {}
    for item in asked_lines(workdir):
        counts[item] = counts.get(item, 0) + 1
    out = json.loads((workdir / "out.json").read_text())
    return {"out": out, "kills": kills, "reasked": reasked, "counts": counts}


def test_sigkill_at_random_points_resumes_to_the_same_result(tmp_path):
    clean = tmp_path / "clean"
    clean.mkdir()
    proc = run_child(tmp_path, clean, {})
    assert proc.returncode == 0, proc.stderr
    reference = json.loads((clean / "out.json").read_text())
    total_ops = reference["ops"]
    assert sorted(set(asked_lines(clean))) == asked_lines(clean)  # each distinct question asked once
    assert len(asked_lines(clean)) == DISTINCT_QUESTIONS

    rng = random.Random(20261129)

    def kill_setting(cached_fraction: float) -> dict:
        # Mostly inside SQLite (mid-transaction, mid-commit, mid-read), sometimes inside an engine call.
        if rng.random() < 0.25:
            return {"KILL_IN_CALL": rng.randint(1, 3)}
        return {"KILL_AT_OP": rng.randint(1, max(1, int(total_ops * (1 - cached_fraction))))}

    result = crash_and_resume(tmp_path, tmp_path / "crashed", kill_setting, max_kills=8)
    assert result["out"]["generations"] == reference["generations"]
    assert result["kills"] == 8
    # Re-asked only what was in flight when a kill landed: at most one batch (4) per kill.
    assert result["reasked"] <= 4 * result["kills"]
    assert set(result["counts"]) == set(asked_lines(clean))


def test_sigkill_from_outside_between_batches(tmp_path):
    """Killed by another process as soon as it reports a batch, several times, then resumed."""
    workdir = tmp_path / "outside"
    workdir.mkdir()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, str(script), str(workdir / "g.sqlite"), str(workdir / "asked.log"), str(workdir / "out.json")]
    kills = 0
    for wait_for in (1, 2, 3):
        before = cached_item_ids(workdir / "g.sqlite") if (workdir / "g.sqlite").exists() else set()
        asked_before = len(asked_lines(workdir))
        child = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(wait_for):
            if not child.stdout.readline():
                break
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
        kills += 1
        assert not (set(asked_lines(workdir)[asked_before:]) & before)
    assert run_child(tmp_path, workdir, {}).returncode == 0
    clean = tmp_path / "clean"
    clean.mkdir()
    assert run_child(tmp_path, clean, {}).returncode == 0
    assert json.loads((workdir / "out.json").read_text())["generations"] == json.loads((clean / "out.json").read_text())["generations"]
    assert kills == 3


def test_a_generation_stored_before_the_final_answer_rename_reads_back():
    """Caches written before ``Generation.answer`` became ``final_answer`` (issue 17) still hit."""
    from orandcar_builder.cache import generation_from_json, generation_to_json

    gen = Generation("a", "<think>t</think>A", "t", "A", "stop", "m")
    blob = json.loads(generation_to_json(gen))
    assert "final_answer" in blob and "answer" not in blob
    blob["answer"] = blob.pop("final_answer")
    assert generation_from_json(json.dumps(blob)) == gen


def test_a_stored_generation_with_other_keys_reads_back_its_fields():
    """A blob with a key Generation lacks (a field of another version) gives the fields it has;
    one with the old ``answer`` beside ``final_answer`` keeps ``final_answer``."""
    from orandcar_builder.cache import generation_from_json, generation_to_json

    gen = Generation("a", "B", "", "B", "stop", "m", prompt_tokens=3)
    blob = json.loads(generation_to_json(gen))
    assert generation_from_json(json.dumps({**blob, "logprobs": [0.1]})) == gen
    assert generation_from_json(json.dumps({**blob, "answer": "C"})) == gen
    with pytest.raises(TypeError):  # a required field missing: get_many names it as damaged
        generation_from_json(json.dumps({k: v for k, v in blob.items() if k != "model"}))


def test_a_stored_generation_reads_back_as_the_constructor_makes_it():
    """The read of a blob holding exactly Generation's fields sets them without the frozen
    dataclass's ``__init__``: it must give what ``Generation(**fields)`` gives, for every value a
    field may hold, and stop being taken if Generation grows a check of its own."""
    import dataclasses
    import pickle

    from orandcar_builder.cache import generation_from_json, generation_to_json

    assert not hasattr(Generation, "__post_init__") and "__slots__" not in vars(Generation)
    for gen in (Generation("a", "<think>t</think>A", "t", "A", "stop", "m"),
                Generation("b", "", "", "", "length", "m", revision="r", unsupported="no image", prompt="p",
                           prompt_tokens=0, completion_tokens=12),
                Generation("c", "é\u2028\"\\", "", "\U0001d400", "stop", "m", prompt_tokens=None)):
        read = generation_from_json(generation_to_json(gen))
        assert type(read) is Generation and read == gen and hash(read) == hash(gen)
        assert dataclasses.asdict(read) == dataclasses.asdict(gen)
        assert pickle.loads(pickle.dumps(read)) == gen
        with pytest.raises(dataclasses.FrozenInstanceError):
            read.text = "changed"
        assert vars(read) == vars(Generation(**json.loads(generation_to_json(gen))))
    # not a JSON object: a TypeError, which get_many names as damaged (a list once escaped as
    # an AttributeError from the renamed field's fallback)
    for blob in ("[1, 2]", '"text"', "null", "3"):
        with pytest.raises(TypeError):
            generation_from_json(blob)
