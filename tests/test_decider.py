"""Deciding on a process of its own (``executors.decider``): the same records and the same dataset
bytes as deciding in the build's process, whatever side is slower, and it stops with the build."""

from __future__ import annotations

import os
import signal
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orandcar_builder.executors import decider as decider_module
from orandcar_builder.executors import local as local_module
from orandcar_builder.executors.decider import Decider, DeciderError, on_process
from orandcar_builder.executors.steps import decided_rows, make_request, request_of_row
from orandcar_builder.families import DEFAULT_FAMILIES
from orandcar_builder.pipeline import build
from orandcar_builder.records import DECISION_SCHEMA, Generation, admitted_from_row

from .conftest import dataset_files, write_png, write_pool

WORDS = ("STOP", "EXIT", "Hotel", "café", "42", "Main St.")


class MixedEngine:
    """Answers from the item id: right, wrong, with reasoning, cut off, unsupported, incomplete,
    or a failed request, so that every kind of decision record is made."""

    kind = "mixed"
    can_judge = False
    SECRET_OPTIONS = ()

    def fingerprint(self) -> dict:
        return {"kind": self.kind, "version": 1}

    def generate(self, requests):
        out = []
        for r in requests:
            k = zlib.crc32(r.item_id.encode())
            word = r.question.split("«")[1].split("»")[0] if "«" in r.question else "C"
            if k % 23 == 0:
                raise RuntimeError(f"engine refused {r.item_id}")
            kind = k % 7
            if kind == 0:
                out.append(Generation(r.item_id, "no idea", "", "no idea", "stop", "m"))
            elif kind == 1:
                text = f"<think>it says {word}</think>The answer is **{word.lower()}**."
                out.append(Generation(r.item_id, text, "it says " + word, f"The answer is **{word.lower()}**.",
                                      "stop", "m"))
            elif kind == 2:
                out.append(Generation(r.item_id, "<think>" + word, word, "", "length", "m"))  # cut off
            elif kind == 3:
                out.append(Generation(r.item_id, "", "", "", "stop", "m", unsupported="no images here"))
            elif kind == 4:
                out.append(Generation(r.item_id, word, "", word, "abort", "m"))  # never decided: failed
            else:
                out.append(Generation(r.item_id, word, "", word, "stop", "m", prompt_tokens=9, completion_tokens=2))
        return out


def _pool(root: Path, n: int = 240) -> Path:
    lines = []
    for i in range(n):
        image = f"img/{i % 40}.png"
        if i < 40:
            write_png(root / image, (i * 5 % 256, i * 11 % 256, 90), size=(20 + i % 7, 12))
        word = WORDS[i % len(WORDS)]
        if i % 5 == 4:  # multiple choice: the engine answers "C" (right for every fourth)
            options = ["red", "blue", "green", "white"]
            lines.append({"id": f"mc{i}", "image": image, "question": f"Which colour? ({i})", "options": options,
                          "answer": "C" if i % 4 == 0 else "A", "family": "multiple_choice"})
        else:
            lines.append({"id": f"q{i}", "image": image, "question": f"What does it say? «{word}» ({i})",
                          "answer": word, "family": "scene_text" if i % 2 else "vqa"})
    return write_pool(root / "pool.jsonl", lines)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p): (folder / p).read_bytes() for p in dataset_files(folder)}


def _answered(pool: Path, tmp_path: Path):
    """Admitted rows of ``pool`` with MixedEngine's generations (None where it failed)."""
    result = build(pool, tmp_path / "seed-out", work=tmp_path / "seed-work", engine=MixedEngine(), progress=False,
                   decide_process=False)
    assert result.ok, result.problems
    rows = pq.read_table(tmp_path / "seed-work" / "admitted.parquet").to_pylist()
    engine = MixedEngine()
    items = []
    for row in rows:
        request = request_of_row(row, DEFAULT_FAMILIES)
        try:
            generation, error = engine.generate([request])[0], None
        except RuntimeError as exc:
            generation, error = None, str(exc)
        items.append((row, request, generation, error))
    return items


def _decided(items) -> list[dict]:
    """``decided_rows`` of items as the executors hold them (admitted row, request, generation, error)."""
    return decided_rows([(row, request.question, generation, error) for row, request, generation, error in items],
                        DEFAULT_FAMILIES)


def test_a_request_made_from_the_row_is_the_items_request(tmp_path):
    rows = pq.read_table(_seed_work(tmp_path) / "admitted.parquet").to_pylist()
    assert {r["family"] for r in rows} == {"scene_text", "vqa", "multiple_choice"}
    for row in rows:
        assert request_of_row(row, DEFAULT_FAMILIES) == make_request(admitted_from_row(row), DEFAULT_FAMILIES)


def _seed_work(tmp_path: Path) -> Path:
    result = build(_pool(tmp_path / "pool"), tmp_path / "out", work=tmp_path / "work", engine=MixedEngine(),
                   progress=False, decide_process=False)
    assert result.ok, result.problems
    return tmp_path / "work"


def test_a_build_deciding_on_its_own_process_gives_the_same_bytes(tmp_path, monkeypatch):
    # Small batches, and the process waited for: a pool this small would otherwise be decided
    # here before the process is ready, and the build would not test the process at all.
    monkeypatch.setattr(local_module, "DECIDE_BATCH", 16)
    enter, finish = Decider.__enter__, Decider.finish
    seconds = []

    def ready_at_once(self):
        enter(self)
        self.wait_ready()
        return self

    def finish_counted(self):
        yield from finish(self)
        seconds.append((self.seconds, self.decided_here))

    monkeypatch.setattr(Decider, "__enter__", ready_at_once)
    monkeypatch.setattr(Decider, "finish", finish_counted)
    pool = _pool(tmp_path / "pool")
    results = {}
    for name, process in (("here", False), ("proc", True)):
        result = build(pool, tmp_path / f"out-{name}", work=tmp_path / f"work-{name}", engine=MixedEngine(),
                       progress=False, decide_process=process)
        assert result.ok, result.problems
        results[name] = result
    assert _tree(tmp_path / "out-here") == _tree(tmp_path / "out-proc")
    for name in ("decisions.parquet", "prompts.jsonl", "failed.jsonl", "unsupported.jsonl"):
        assert (tmp_path / "work-here" / name).read_bytes() == (tmp_path / "work-proc" / name).read_bytes(), name
    decisions = pq.read_table(tmp_path / "work-proc" / "decisions.parquet").to_pylist()
    routes = {(d["route"], d["reason"]) for d in decisions}
    assert {("accepted", None), ("rejected", "wrong_answer"), ("rejected", "truncated"),
            ("rejected", "no_answer"), ("failed", "generation_failed")} <= routes
    here, proc = results["here"].report, results["proc"].report
    assert here["accepted"] == proc["accepted"] and here["rejected"] == proc["rejected"]
    assert proc["timings_s"]["verify"] > 0
    # A rerun (every generation cached, the admission reused) decides there too: the same bytes.
    again = build(pool, tmp_path / "out-again", work=tmp_path / "work-proc", engine=MixedEngine(), progress=False,
                  decide_process=True)
    assert again.report["cache"]["generate"]["hits"] > 0
    assert _tree(tmp_path / "out-again") == _tree(tmp_path / "out-here")
    # both builds on the process decided there (the rest, if any, here, in between)
    assert len(seconds) == 2 and all(spent > 0 and here < 240 for spent, here in seconds)


def _orders(chunks) -> list[int]:
    """The pool orders of the chunks' records, in the order handed back."""
    return [o for c in chunks for o in (c.table.column("order").to_pylist() if c.table is not None
                                        else [r["order"] for r in c.rows])]


def _deciding_here(decided: list):
    """A decider's ``here``: decides a batch in this process, noting its items in ``decided``."""
    from orandcar_builder.executors.base import DecidedChunk

    def here(batch):
        decided.extend(batch)
        return DecidedChunk([i[1] for i in batch], [i[2] for i in batch], _decided(batch))

    return here


def test_batches_decided_there_are_the_records_decided_here(tmp_path):
    items = _answered(_pool(tmp_path / "pool"), tmp_path)
    expected = pa.Table.from_pylist(_decided(items), schema=DECISION_SCHEMA)
    here_calls = []

    def here(batch):
        here_calls.append(len(batch))
        raise AssertionError("a process that keeps up decides every batch itself")

    chunks = []
    with Decider(DEFAULT_FAMILIES) as decider:
        decider.wait_ready()  # from here on, batches go to the process
        for start in range(0, len(items), 50):
            chunks.extend(decider.submit(items[start:start + 50], here))
            while decider._out:  # wait for each batch: nothing is ever decided here
                decider._receive()
                chunks.extend(decider._ready())
        chunks.extend(decider.finish())
    assert not here_calls and decider.seconds > 0
    got = pa.concat_tables([c.table for c in chunks])
    assert got.equals(expected)
    assert [r.item_id for c in chunks for r in c.requests] == [i[1].item_id for i in items]
    assert decider.process.exitcode == 0


def test_while_the_process_is_busy_the_batch_is_decided_here(tmp_path, monkeypatch):
    monkeypatch.setattr(decider_module, "HELD", decider_module.IN_FLIGHT + 3)  # reached: some go out of order
    items = _answered(_pool(tmp_path / "pool"), tmp_path)
    decided_here = []
    here = _deciding_here(decided_here)
    flushed = 0
    with Decider(DEFAULT_FAMILIES) as decider:
        decider.wait_ready()  # from here on, batches go to the process
        os.kill(decider.process.pid, signal.SIGSTOP)  # it takes nothing while stopped
        try:
            chunks = []
            for start in range(0, len(items), 20):
                before = len(chunks)
                chunks.extend(decider.submit(items[start:start + 20], here))
                # a stuck process: what is decided here is handed back out of order, not held
                assert len(decider._pending) <= decider_module.HELD
                if len(chunks) > before:
                    flushed += 1
                    assert len(decider._pending) == decider_module.IN_FLIGHT  # only the batches out wait
        finally:
            os.kill(decider.process.pid, signal.SIGCONT)
        chunks.extend(decider.finish())
    assert len(decided_here) == len(items) - decider_module.IN_FLIGHT * 20 == decider.decided_here
    assert flushed >= 2
    assert sorted(_orders(chunks)) == sorted(i[0]["order"] for i in items)  # each item once
    assert len(_orders(chunks)) == len(set(_orders(chunks)))
    rows = [r for c in chunks for r in (c.table.to_pylist() if c.table is not None else c.rows)]
    assert sorted(rows, key=lambda r: r["order"]) == sorted(_decided(items),
                                                             key=lambda r: r["order"])


def test_chunks_come_back_in_the_order_submitted_wherever_they_were_decided(tmp_path):
    """Batches decided here while the process is busy wait behind the ones out before them, so
    answers taken in pool order give decisions in pool order (the sort then only renames)."""
    batch = 10
    submitted = decider_module.IN_FLIGHT + decider_module.HELD // 2  # some decided here, fewer than HELD wait
    items = _answered(_pool(tmp_path / "pool"), tmp_path)[:batch * submitted]
    decided_here = []
    here = _deciding_here(decided_here)
    chunks = []
    with Decider(DEFAULT_FAMILIES) as decider:
        decider.wait_ready()  # from here on, batches go to the process
        os.kill(decider.process.pid, signal.SIGSTOP)
        try:
            for start in range(0, batch * submitted, batch):
                chunks.extend(decider.submit(items[start:start + batch], here))
            assert not chunks  # all wait behind the first batch out
        finally:
            os.kill(decider.process.pid, signal.SIGCONT)
        chunks.extend(decider.finish())
    assert len(decided_here) == batch * (submitted - decider_module.IN_FLIGHT)
    assert _orders(chunks) == [i[0]["order"] for i in items]
    assert [r.item_id for c in chunks for r in c.requests] == [i[1].item_id for i in items]


def test_an_error_there_is_raised_here_as_it_is(tmp_path):
    items = _answered(_pool(tmp_path / "pool"), tmp_path)
    row, request, generation, error = items[0]
    broken = {k: v for k, v in row.items() if k != "source"}  # a bug, not a rule's error: it stops the build
    with Decider(DEFAULT_FAMILIES) as decider:
        decider.wait_ready()  # from here on, batches go to the process
        with pytest.raises(KeyError, match="source"):
            list(decider.submit([(broken, request, generation, error)], lambda batch: None))
            list(decider.finish())


@pytest.mark.parametrize("ready", [False, True])
def test_a_process_that_dies_is_an_error_naming_its_exit_code(tmp_path, ready):
    items = _answered(_pool(tmp_path / "pool"), tmp_path)
    with Decider(DEFAULT_FAMILIES) as decider:  # killed before it says it is ready, or after
        if ready:
            decider.wait_ready()
        os.kill(decider.process.pid, signal.SIGKILL)
        decider.process.join(10)
        with pytest.raises(DeciderError, match="exit code -9"):
            for start in range(0, len(items), 10):
                list(decider.submit(items[start:start + 10], lambda batch: pytest.fail("decided here")))
            list(decider.finish())


def test_a_build_that_stops_early_ends_the_process(tmp_path):
    items = _answered(_pool(tmp_path / "pool"), tmp_path)
    decider = Decider(DEFAULT_FAMILIES)
    with pytest.raises(RuntimeError, match="the engine stopped"):
        with decider:
            list(decider.submit(items[:30], lambda batch: None))
            raise RuntimeError("the engine stopped")
    assert decider.process.exitcode is not None and not decider.process.is_alive()


def test_a_rule_registered_at_run_time_decides_there_too(tmp_path, monkeypatch):
    from orandcar_builder.verify import RULE_MODULES

    items = _answered(_pool(tmp_path / "pool"), tmp_path)
    module = tmp_path / "mods" / "always_right_rule.py"
    module.parent.mkdir()
    module.write_text('NAME = "alnum"\nVERSION = "x1"\nCONSTANTS = ()\n'
                      'def score(text, references, options):\n    return 1.0\n'
                      'def reference_score(text, references, options):\n    return 1.0\n'
                      'def passes(score):\n    return True\n')
    monkeypatch.syspath_prepend(str(module.parent))
    monkeypatch.setitem(RULE_MODULES._targets, "alnum", "always_right_rule")
    monkeypatch.setattr(RULE_MODULES, "_loaded", {})
    with Decider(DEFAULT_FAMILIES) as decider:
        decider.wait_ready()  # from here on, batches go to the process
        chunks = list(decider.submit(items, lambda batch: None)) + list(decider.finish())
    rows = [r for c in chunks for r in c.table.to_pylist()]
    alnum = [r for r in rows if r["rule"] == "alnum"]
    assert alnum and all(r["rule_version"] == "x1" and r["rule_passed"] for r in alnum)
    assert alnum == [r for r in _decided(items) if r["rule"] == "alnum"]


def test_which_builds_decide_on_a_process(tmp_path, monkeypatch):
    small = _pool(tmp_path / "small", 20)
    big = tmp_path / "big.jsonl"
    big.write_bytes(small.read_bytes() * (decider_module.MIN_POOL_BYTES // small.stat().st_size + 1))
    monkeypatch.setattr(decider_module, "usable_cpus", lambda: 2)
    assert not on_process(small, None)
    assert on_process(big, None)
    assert not on_process(big, 100)  # --limit 100: the process would not pay for its start
    assert not on_process(tmp_path / "gone.jsonl", None)
    monkeypatch.setattr(decider_module, "usable_cpus", lambda: 1)
    assert not on_process(big, None)


def test_a_decider_started_and_closed_at_once_leaves_nothing_running():
    t0 = time.monotonic()
    with Decider(DEFAULT_FAMILIES) as decider:
        decider.wait_ready()  # from here on, batches go to the process
        assert list(decider.finish()) == []
    assert decider.process.exitcode == 0 and time.monotonic() - t0 < 60

