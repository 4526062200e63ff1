"""The Ray executor on a local two-CPU Ray cluster: the same dataset bytes as the local executor,
a rerun that asks nothing, per-item failures that do not fail the job, and a lost actor that Ray
restarts. Skipped where ray[data] is not installed (the ``ray`` extra)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from orandcar_builder.engines.replay import ReplayEngine
from orandcar_builder.executors.ray_data import RayExecutor, import_ray
from orandcar_builder.families import DEFAULT_FAMILIES
from orandcar_builder.pipeline import build

from .conftest import SAMPLES, dataset_files

POOL = SAMPLES / "pool.jsonl"


def _digests(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256((folder / p).read_bytes()).hexdigest() for p in dataset_files(folder)}


def test_missing_ray_says_how_to_install(monkeypatch):
    from orandcar_builder.engines.base import EngineUnavailable

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(EngineUnavailable, match=r"pip install 'orandcar-builder\[ray\]'"):
        import_ray()
    with pytest.raises(EngineUnavailable, match=r"pip install 'orandcar-builder\[ray\]'"):
        RayExecutor()  # said when the build is set up, though Ray is imported later, on its thread


def test_a_local_cluster_declares_the_cpus_its_actors_take_and_a_joined_one_nothing(monkeypatch):
    """Ray prestarts a worker per declared CPU (the machine's by default): a cluster the build starts
    declares what its replicas take; a cluster it joins is left as it is (ray.init refuses num_cpus)."""
    pytest.importorskip("ray")
    from orandcar_builder.executors import ray_data

    calls = []

    class FakeRay:
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**options):
            calls.append(options)

    monkeypatch.setattr(RayExecutor, "ray", FakeRay)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert RayExecutor(address="local", replicas=3)._connect()
    assert RayExecutor(address="local", replicas=3, cpus_per_replica=0.5)._connect()
    assert RayExecutor(address="local", replicas=2, cpus_per_replica=0)._connect()
    assert [c["num_cpus"] for c in calls] == [3, 2, 1]
    assert ray_data.starts_local_cluster("local") and not ray_data.starts_local_cluster("127.0.0.1:6390")
    calls.clear()
    RayExecutor(address="127.0.0.1:6390", replicas=3)._connect()
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6390")  # Ray joins it when no address is given
    assert not ray_data.starts_local_cluster(None) and ray_data.starts_local_cluster("local")
    RayExecutor(replicas=3)._connect()
    assert calls and all("num_cpus" not in c for c in calls)


def test_blocks_grow_from_one_engine_batch_per_slot_to_several():
    from itertools import islice

    from orandcar_builder.executors.ray_data import BLOCK_BATCHES, block_sizes

    sizes = list(islice(block_sizes(32, 4), 40))
    assert sizes[:8] == [32] * 4 + [64] * 4  # the first asks go out after one batch; every slot gets one
    assert all(size % 32 == 0 for size in sizes) and max(sizes) == 32 * BLOCK_BATCHES
    assert sizes == sorted(sizes)
    blocks, total = 0, 0
    for size in block_sizes(32, 4):
        blocks, total = blocks + 1, total + size
        if total >= 20_000:
            break
    assert blocks <= 40  # a few dozen tasks for 20k asks, not 625
    assert next(block_sizes(7, 0)) == 7


class _Echo:
    """An engine that answers "EXIT" to everything (made in the actor by _EchoFactory)."""

    kind = "echo"

    def fingerprint(self):
        return {"kind": "echo"}

    def generate(self, requests):
        from orandcar_builder.records import Generation

        return [Generation(item_id=r.item_id, text="EXIT", think="", final_answer="EXIT", finish_reason="stop",
                           model="m") for r in requests]


class _EchoFactory:
    def create(self):
        return _Echo()


def test_an_actor_returns_a_block_as_one_chunk_per_column():
    """Ray moves each column chunk's buffers apart: a block's records concatenated from one table
    per engine batch (32 chunks a column at 1,024 items) cost 1-2 s of CPU at 20k items. The
    block comes back as one chunk per column, with the records of every batch in order."""
    import pyarrow as pa

    from orandcar_builder.cache import engine_hash
    from orandcar_builder.engines.base import public_fingerprint
    from orandcar_builder.executors.ray_data import GENERATION_COLUMN, GenerateAndDecide
    from orandcar_builder.records import ADMITTED_SCHEMA

    actor = GenerateAndDecide(_EchoFactory(), engine_hash(public_fingerprint(_Echo())), DEFAULT_FAMILIES)
    block = pa.Table.from_pylist(_admitted_rows(100), schema=ADMITTED_SCHEMA)
    table = actor.decide(block, 8)  # 13 engine batches
    assert table.num_rows == 100 and all(column.num_chunks == 1 for column in table.columns)
    assert table.column("id").to_pylist() == [f"q{i}" for i in range(100)]
    assert table.column("route").to_pylist() == ["accepted"] * 100
    assert all(blob is not None for blob in table.column(GENERATION_COLUMN).to_pylist())
    assert actor(block.slice(0, 8)).column("id").to_pylist() == [f"q{i}" for i in range(8)]


def test_a_ray_error_shows_the_exception_it_carries():
    """An actor that cannot be made on a node (here: another version of this package there) fails
    the build with Ray's first line and the exception at the end of its traceback, not only "the
    actor died"; our own errors show their text alone."""
    from orandcar_builder.executors.ray_data import _cause

    text = ("The actor died because of an error raised in its creation task, \x1b[36mray::GenerateAndDecide."
            "__init__()\x1b[39m (pid=31309, ip=192.0.2.2, actor_id=b1c3, repr=<TemporaryActor object>)\n"
            "           ^^^^^^^^^^^^^^^^^^^^\n"
            "RuntimeError: The actor with name GenerateAndDecide failed to import on the worker.\n\n"
            "AttributeError: Can't get attribute 'GenerateAndDecide._records' on <module "
            "'orandcar_builder.executors.ray_data' from '/old/orandcar_builder/executors/ray_data.py'>")
    assert _cause(RuntimeError(text)) == (
        "The actor died because of an error raised in its creation task, ray::GenerateAndDecide.__init__(): "
        "AttributeError: Can't get attribute 'GenerateAndDecide._records' on <module "
        "'orandcar_builder.executors.ray_data' from '/old/orandcar_builder/executors/ray_data.py'>")
    assert _cause(RuntimeError("Traceback ...\n  x\nExecutorError: the engine made on this Ray worker differs\n")) == \
        "the engine made on this Ray worker differs"
    assert _cause(RuntimeError("The actor died unexpectedly before finishing this task.")) == \
        "The actor died unexpectedly before finishing this task."
    assert _cause(RuntimeError("")) == "RuntimeError"


def _admitted_rows(n: int) -> list[dict]:
    from orandcar_builder.images import ImageRef
    from orandcar_builder.records import Admitted, PoolItem, admitted_row

    return [admitted_row(Admitted(item=PoolItem(id=f"q{i}", image=ImageRef(path=f"/none/{i}.png", sha256="0" * 64),
                                                question="What does the sign say?", reference="EXIT",
                                                family="scene_text"),
                                  order=i, policy="benchmark")) for i in range(n)]


class _FakeReplicas:
    """In place of the actors: records what was admitted when each block went (and whether the
    driver took it), answers every item as failed (no engine), one block at a time: as records, or
    for a block the driver decides (``here``) as a failed generation per item."""

    def __init__(self, admitted: list, per_actor: int):
        self.admitted, self.per_actor = admitted, per_actor
        self.blocks: list[tuple[int, int]] = []  # (rows in the block, rows admitted when it went)
        self.here: list[bool] = []  # per block: the driver decides it
        self.running: list = []
        self.waited = 0.0

    @property
    def busy(self):
        return bool(self.running)

    def has_room(self):
        return len(self.running) < self.per_actor

    def submit(self, block, here=False):
        self.blocks.append((block.num_rows, self.admitted[0]))
        self.here.append(here)
        self.running.append((block, here))

    def done(self, wait):
        import pyarrow as pa

        from orandcar_builder.executors.ray_data import ERROR_COLUMN, GENERATION_COLUMN
        from orandcar_builder.records import DECISION_SCHEMA

        if not self.running:
            return []
        block, here = self.running.pop(0)
        if here:
            return [(pa.table({GENERATION_COLUMN: pa.array([None] * block.num_rows, pa.string()),
                               ERROR_COLUMN: pa.array(["no engine here"] * block.num_rows, pa.string())}), block)]
        table = pa.Table.from_pylist(_failed_records(block.to_pylist()), schema=DECISION_SCHEMA)
        return [(table.append_column(GENERATION_COLUMN, pa.array([None] * table.num_rows, pa.string())), None)]

    def close(self):
        pass


def _failed_records(rows: list[dict]) -> list[dict]:
    """The records an actor makes of admitted rows whose requests all failed (no engine)."""
    from orandcar_builder.executors.steps import decided_rows, request_of_row

    return decided_rows([(row, request_of_row(row, DEFAULT_FAMILIES).question, None, "no engine here")
                         for row in rows], DEFAULT_FAMILIES)


def test_the_driver_sends_blocks_while_admission_goes_on_and_holds_a_bounded_number(tmp_path):
    """The Ray executor's driver without Ray: blocks go out while rows are still being admitted, the
    asks it holds stay bounded, and every admitted item comes back once."""
    import time

    from orandcar_builder.cache import CacheStats
    from orandcar_builder.executors import GenerationJob
    from orandcar_builder.executors.generation import cached_generation
    from orandcar_builder.executors.ray_data import ADMIT_BATCH, _Driver

    rows = _admitted_rows(3000)
    admitted = [0]
    replicas = _FakeReplicas(admitted, per_actor=2)

    def admission():
        for row in rows:
            time.sleep(0.0002)  # admission takes time: Ray starts meanwhile
            admitted[0] += 1
            yield row

    class Executor:
        replicas, batches_per_replica, ray = 1, 2, None

        def _connect(self):
            return False

        def _replicas(self, job, fingerprint):
            return replicas

    class Engine:  # only its fingerprint is read on the driver
        kind = "fake"

        def fingerprint(self):
            return {"kind": "fake"}

    engine = Engine()
    job = GenerationJob(admitted=tmp_path / "none.parquet", work=tmp_path, engine=engine, factory=None, cache=None,
                        stats=CacheStats(), batch_size=32, admitted_rows=admission())
    with cached_generation(None, engine, job.stats) as cached:
        driver = _Driver(Executor(), job, cached)
        driver.most_pending = 256  # a small bound, so that admission has to wait for results
        try:
            orders = [row["order"] for chunk in driver.run() for row in chunk.rows]
        finally:
            driver.close()
    assert sorted(orders) == list(range(3000))
    assert [size for size, _ in replicas.blocks[:4]] == [32, 32, 64, 64]
    assert replicas.blocks[0][1] < 3000, "the first block should go out while admission goes on"
    assert sum(size for size, _ in replicas.blocks) == 3000
    held = [when - sum(size for size, _ in replicas.blocks[:i]) for i, (_, when) in enumerate(replicas.blocks)]
    assert max(held) <= 256 + ADMIT_BATCH  # the asks the driver held before each block went
    assert job.stats.asked == 3000


def _driver_run(tmp_path, cache, admission, connected, replicas=None):
    """The driver without Ray over ``admission`` (a row iterator): ``connected`` is set when it
    starts Ray (``_connect``); returns the records it handed on (``replicas``: a _FakeReplicas)."""
    from orandcar_builder.cache import CacheStats
    from orandcar_builder.executors import GenerationJob
    from orandcar_builder.executors.generation import cached_generation
    from orandcar_builder.executors.ray_data import _Driver

    replicas = replicas if replicas is not None else _FakeReplicas([0], per_actor=2)

    class Executor:
        replicas, batches_per_replica, ray = 1, 2, None

        def _connect(self):
            connected.set()
            return False

        def _replicas(self, job, fingerprint):
            return replicas

    class Engine:
        kind = "fake"

        def fingerprint(self):
            return {"kind": "fake"}

    engine = Engine()
    job = GenerationJob(admitted=tmp_path / "none.parquet", work=tmp_path, engine=engine, factory=None, cache=cache,
                        stats=CacheStats(), batch_size=32, admitted_rows=admission)
    with cached_generation(cache, engine, job.stats) as cached:
        driver = _Driver(Executor(), job, cached)
        try:
            return [row for chunk in driver.run() for row in chunk.rows]
        finally:
            driver.close()


def _orders(records: list[dict]) -> list[int]:
    return sorted(row["order"] for row in records)


def test_ray_starts_as_the_stage_begins_when_the_cache_holds_nothing(tmp_path):
    """Every request of a build with an empty cache will be asked: Ray starts before the first row
    is admitted (its start overlaps the whole admission), not at the first ask."""
    import threading

    from orandcar_builder.cache import GenerationCache

    rows, connected, early = _admitted_rows(100), threading.Event(), []

    def admission():
        early.append(connected.wait(timeout=10))  # the first row waits for Ray's start
        yield from rows

    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        assert _orders(_driver_run(tmp_path, cache, admission(), connected)) == list(range(100))
    assert early == [True], "Ray should start before the first row is admitted"


def test_ray_starts_at_the_first_ask_when_the_cache_holds_generations(tmp_path):
    """A cache that holds generations (a rerun) may answer every request: Ray starts only once an
    item must be asked, and not at all when none must."""
    import threading

    from orandcar_builder.cache import GenerationCache
    from orandcar_builder.records import Generation

    rows, connected, seen = _admitted_rows(100), threading.Event(), []

    def admission():
        for row in rows:
            seen.append(connected.is_set())
            yield row

    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        cache.put({"kind": "other"}, "0" * 64, Generation(item_id="x", text="a", think="", final_answer="a",
                                                           finish_reason="stop", model="m"))
        assert _orders(_driver_run(tmp_path, cache, admission(), connected)) == list(range(100))
        assert connected.is_set() and not seen[0], "Ray should start at the first ask, after the first rows"

        connected.clear()
        assert _driver_run(tmp_path, cache, iter(()), connected) == [] and not connected.is_set()


def test_the_driver_share_follows_who_waits():
    """The driver takes more blocks while it waits for the actors, fewer while results queue up for
    it, within 0 and 1, and takes them in turn by its share."""
    from orandcar_builder.executors.ray_data import _DriverShare

    share = _DriverShare()
    start = share.share
    share.after_wait(1.0, 1)
    assert share.share == pytest.approx(min(1.0, start + _DriverShare.STEP))
    for _ in range(20):
        share.after_wait(1.0, 1)  # the driver waited for the actors
    assert share.share == 1.0 and all(share.take() for _ in range(5))
    share.after_wait(0.0, 1)  # the next result of a steady stream: no change
    share.after_wait(0.0, 2)  # two batches of an actor ending together: no change
    assert share.share == 1.0
    for _ in range(40):
        share.after_wait(0.0, 3)  # results waited for the driver: it is the slower side
    assert share.share == 0.0 and not any(share.take() for _ in range(5))
    share.share = 0.5
    assert [share.take() for _ in range(6)].count(True) == 3
    share.share = 0.25
    assert [share.take() for _ in range(8)].count(True) == 2


@pytest.mark.parametrize("start", [0.0, 1.0])
def test_blocks_the_driver_decides_give_the_actors_records(tmp_path, monkeypatch, start):
    """Every block decided on its actor, or every block only generated there and decided by the
    driver: the same records, every item once."""
    import threading

    import pyarrow as pa

    from orandcar_builder.executors.ray_data import _DriverShare
    from orandcar_builder.records import DECISION_SCHEMA

    monkeypatch.setattr(_DriverShare, "START", start)
    monkeypatch.setattr(_DriverShare, "STEP", 0.0)
    replicas = _FakeReplicas([0], per_actor=2)
    # no cache: the rows' requests are all the same, and would share one ask
    records = _driver_run(tmp_path, None, iter(_admitted_rows(300)), threading.Event(), replicas)
    assert len(replicas.here) > 3 and set(replicas.here) == {bool(start)}
    got = pa.Table.from_pylist(sorted(records, key=lambda r: r["order"]), schema=DECISION_SCHEMA)
    assert got.equals(pa.Table.from_pylist(_failed_records(_admitted_rows(300)), schema=DECISION_SCHEMA))


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    from ray import cloudpickle

    # The engines below live in this test module: ship them by value to the Ray workers.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


class PoisonedReplay(ReplayEngine):
    """Replays, but raises for the ids in ``poison`` (alone or in a batch)."""

    def __init__(self, replay, poison=()):
        super().__init__(replay)
        self.poison = set(poison)

    def generate(self, requests):
        bad = [r.item_id for r in requests if r.item_id in self.poison]
        if bad:
            raise RuntimeError(f"server error for {bad[0]}")
        return super().generate(requests)


class DiesOnce(ReplayEngine):
    """Replays, but the first call anywhere kills its process (marker file): a lost actor."""

    def __init__(self, replay, marker):
        super().__init__(replay)
        self.marker = marker

    def generate(self, requests):
        if not os.path.exists(self.marker):
            Path(self.marker).write_text("died")
            os._exit(1)
        return super().generate(requests)


class Factory:
    def __init__(self, cls, *args):
        self.cls, self.args = cls, args

    def create(self):
        return self.cls(*self.args)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, ocr_engine):
    """The sample pool's OCR generations as a replay file, and the local replay build of it."""
    root = tmp_path_factory.mktemp("ray_recorded")
    gens = root / "gens.jsonl"
    build(POOL, root / "ocr", work=root / "ocr_work", engine=ocr_engine, progress=False, export_generations=gens)
    local = build(POOL, root / "local", work=root / "local_work", engine=ReplayEngine(gens), progress=False)
    assert local.ok, local.problems
    return gens, local.out


def test_ray_build_is_byte_identical_to_local_and_resumes_from_cache(ray_cluster, tmp_path, sample_build):
    local = sample_build[0]  # the local executor, rapidocr engine
    work = tmp_path / "work"
    result = build(POOL, tmp_path / "ray", work=work, engine_name="rapidocr", engine_options={"threads": 1},
                   executor="ray", engine_replicas=2, progress=False)
    assert result.ok, result.problems
    assert _digests(result.out) == _digests(local.out)
    assert result.report["failed"] == 0
    manifest = json.loads((work / "manifest.json").read_text())
    assert manifest["executor"]["executor"] == "ray" and manifest["executor"]["replicas"] == 2

    again = build(POOL, tmp_path / "ray_again", work=work, engine_name="rapidocr", engine_options={"threads": 1},
                  executor="ray", engine_replicas=2, progress=False)
    cache = json.loads((work / "report.json").read_text())["cache"]["generate"]
    assert cache["asked"] == 0 and cache["hits"] == cache["total"] == again.report["admitted"]
    assert _digests(again.out) == _digests(local.out)


@pytest.mark.parametrize("start", [0.0, 1.0])
def test_blocks_decided_on_the_driver_or_the_actors_give_local_bytes(ray_cluster, tmp_path, recorded, monkeypatch,
                                                                    start):
    """Where a block is decided (``_DriverShare``) changes no byte: every block on the actors, or
    every block generated there and decided by the driver, with two replicas."""
    from orandcar_builder.executors.ray_data import _DriverShare

    gens, local_out = recorded
    monkeypatch.setattr(_DriverShare, "START", start)
    monkeypatch.setattr(_DriverShare, "STEP", 0.0)
    result = build(POOL, tmp_path / "out", work=tmp_path / "work", engine=ReplayEngine(gens), executor="ray",
                   engine_factory=Factory(ReplayEngine, gens), engine_replicas=2, progress=False)
    assert result.ok and result.report["failed"] == 0
    assert _digests(result.out) == _digests(local_out)


def test_failed_items_are_recorded_and_asked_again(ray_cluster, tmp_path, recorded):
    gens, local_out = recorded
    poison = ("scene-03", "chart-01")
    work = tmp_path / "work"
    result = build(POOL, tmp_path / "out", work=work, engine=ReplayEngine(gens), executor="ray",
                   engine_factory=Factory(PoisonedReplay, gens, poison), engine_replicas=2, progress=False)
    assert result.ok, result.problems
    report = result.report
    assert report["failed"] == len(poison)
    assert report["accepted"] + report["rejected"] + report["failed"] == report["admitted"]
    failed = [json.loads(line) for line in (work / "failed.jsonl").read_text().splitlines()]
    assert {f["id"] for f in failed} == set(poison)
    assert all(f["reason"] == "generation_failed" and "server error" in f["detail"] for f in failed)

    healed = build(POOL, tmp_path / "healed", work=work, engine=ReplayEngine(gens), executor="ray",
                   engine_factory=Factory(PoisonedReplay, gens, ()), engine_replicas=2, progress=False)
    cache = json.loads((work / "report.json").read_text())["cache"]["generate"]
    assert cache["asked"] == len(poison) and healed.report["failed"] == 0
    assert _digests(healed.out) == _digests(local_out)


def test_a_lost_actor_is_restarted(ray_cluster, tmp_path, recorded):
    gens, local_out = recorded
    marker = tmp_path / "died"
    result = build(POOL, tmp_path / "out", work=tmp_path / "work", engine=ReplayEngine(gens), executor="ray",
                   engine_factory=Factory(DiesOnce, gens, str(marker)), engine_replicas=1, progress=False)
    assert marker.exists(), "an actor should have died"
    assert result.ok and result.report["failed"] == 0
    assert _digests(result.out) == _digests(local_out)


class OtherModel(ReplayEngine):
    """Replays, but says it is another model: a node with other weights than the driver's."""

    def fingerprint(self):
        return {**super().fingerprint(), "model": "another"}


def test_a_replica_with_another_engine_stops_the_build_with_one_message(ray_cluster, tmp_path, recorded):
    from orandcar_builder.executors.ray_data import ExecutorError

    gens, _ = recorded
    with pytest.raises(ExecutorError) as caught:
        build(POOL, tmp_path / "out", work=tmp_path / "work", engine=ReplayEngine(gens), executor="ray",
              engine_factory=Factory(OtherModel, gens), engine_replicas=1, progress=False)
    message = str(caught.value)
    assert "another fingerprint than the driver's" in message and "'model': 'another'" in message
    assert "Traceback" not in message and "\n" not in message


class SlowStreams(ReplayEngine):
    """Replays slowly, and writes to ``log`` how many of its streams ran at once (in the actor)."""

    def __init__(self, replay, log):
        super().__init__(replay)
        import threading

        self.log, self.lock, self.running, self.most = log, threading.Lock(), 0, 0

    def stream(self, requests):
        import time

        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            Path(self.log).write_text(str(self.most))
        try:
            time.sleep(0.3)
            yield from super().stream(requests)
        finally:
            with self.lock:
                self.running -= 1


def test_an_actor_runs_several_batches_at_once(ray_cluster, tmp_path, recorded):
    gens, local_out = recorded
    log = tmp_path / "most"
    result = build(POOL, tmp_path / "out", work=tmp_path / "work", engine=ReplayEngine(gens), executor="ray",
                   engine_factory=Factory(SlowStreams, gens, str(log)), engine_replicas=1,
                   generation_batch=4, progress=False)
    assert result.ok and result.report["failed"] == 0
    assert int(log.read_text()) > 1, "one actor should have had several batches in its engine at once"
    assert _digests(result.out) == _digests(local_out)


def test_ray_workers_compose_the_recipes_prompts(ray_cluster, tmp_path, recorded):
    """A recipe's family settings reach the Ray workers, which compose the questions: the same
    bytes as the local executor with the same recipe."""
    import pyarrow.parquet as pq

    from orandcar_builder.recipe import parse_recipe, resolve

    gens, _ = recorded
    answers = tmp_path / "answers.jsonl"  # the recordings without the question they were made for
    answers.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "question"}) + "\n"
                               for line in gens.read_text().splitlines()))
    recipe = resolve(parse_recipe(f'[engine]\nname = "replay"\nreplay = "{answers}"\n'
                                  '[families.scene_text]\ninstruction = "Read it."\nseparator = " "\n'))
    local = build(POOL, tmp_path / "local", work=tmp_path / "wl", recipe=recipe, progress=False)
    on_ray = build(POOL, tmp_path / "ray", work=tmp_path / "wr", recipe=recipe, executor="ray", engine_replicas=2,
                   progress=False)
    assert local.ok and on_ray.ok, (local.problems, on_ray.problems)
    assert _digests(on_ray.out) == _digests(local.out)
    questions = {qa["question"] for row in pq.read_table(on_ray.out / "RS_nothink").to_pylist() for qa in row["qa"]}
    assert "What is written in this image? Read it." in questions


def test_the_ray_executor_takes_the_admission_as_it_comes(tmp_path):
    pytest.importorskip("ray")
    from orandcar_builder.executors import get_executor
    from orandcar_builder.pipeline.config import BuildConfig, BuildObjects
    from orandcar_builder.pipeline.stages import overlaps, stages_for

    config = BuildConfig(pool=tmp_path / "p", out=tmp_path / "o")
    assert overlaps(config, get_executor("ray"))
    assert [stage.name for stage in stages_for(config, BuildObjects(), get_executor("ray"))][0] == "generate"


def test_a_build_that_starts_its_own_ray_cluster(tmp_path, recorded):
    """``orandcar build --executor ray`` with no cluster running: Ray starts on a thread while the
    pool is admitted (and must outlive it: its processes die with the thread that started them),
    and the shards are the local executor's (the card names the engine as the command line did)."""
    import subprocess

    gens, local_out = recorded
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, "-m", "orandcar_builder.cli", "build", str(POOL), "-o", str(tmp_path / "out"),
                           "--work", str(tmp_path / "work"), "--engine", "replay", "--replay", str(gens),
                           "--executor", "ray"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shards = {k: v for k, v in _digests(tmp_path / "out").items() if k.endswith(".parquet")}
    assert shards and shards == {k: v for k, v in _digests(local_out).items() if k.endswith(".parquet")}
    assert "SIGTERM handler" not in proc.stderr


class NodeRecording(ReplayEngine):
    """Replays, and writes the Ray node it was made on to a file in ``folder`` (one per engine)."""

    def __init__(self, replay, folder):
        super().__init__(replay)
        import ray

        node = ray.get_runtime_context().get_node_id()
        Path(folder, f"{os.getpid()}.node").write_text(node)


def test_a_build_on_a_two_node_cluster_is_byte_identical_to_local(tmp_path, recorded):
    """Two Ray nodes on this machine (``ray.cluster_utils.Cluster``: a head and a second raylet, one
    CPU each), joined by address as a real cluster is: one replica on each node, the driver's cache
    and work dir its own, and the local executor's bytes. Last in this module: it ends any Ray
    this process had started (the module's local cluster) first. While it runs, Ray's address file
    (/tmp/ray/ray_current_cluster) names this cluster: a ``ray.init()`` without an address on
    the machine would join it (``Cluster.shutdown`` resets the file)."""
    ray = pytest.importorskip("ray")
    from ray import cloudpickle
    from ray.cluster_utils import Cluster

    from orandcar_builder.executors.ray_data import _RayStart

    gens, local_out = recorded
    by_value_here = not ray.is_initialized()  # else the module's cluster fixture registered it
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        if by_value_here:
            cloudpickle.register_pickle_by_value(sys.modules[__name__])
        nodes = tmp_path / "nodes"
        nodes.mkdir()
        result = build(POOL, tmp_path / "out", work=tmp_path / "work", engine=ReplayEngine(gens), executor="ray",
                       engine_factory=Factory(NodeRecording, gens, str(nodes)), engine_replicas=2,
                       ray_address=cluster.address, progress=False)
        assert result.ok and result.report["failed"] == 0
        made_on = {p.read_text() for p in nodes.glob("*.node")}
        assert len(made_on) == 2, f"the two replicas should run on the two nodes, not {made_on}"
        assert _digests(result.out) == _digests(local_out)
        _RayStart.join_last()  # the build lets Ray go on its thread while it writes
        assert not ray.is_initialized(), "the build joined the cluster: it leaves it when done"
    finally:
        if by_value_here:
            cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        cluster.shutdown()
