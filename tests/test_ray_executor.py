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
from orandcar_builder.executors.ray_data import import_ray
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


def test_blocks_hold_several_engine_batches_and_every_batch_slot_gets_blocks():
    from orandcar_builder.executors.ray_data import BLOCK_BATCHES, BLOCKS_PER_SLOT, block_rows

    assert block_rows(20_000, 32, 4) == 32 * BLOCK_BATCHES  # a few dozen tasks, not 625
    for asks, batch, slots in ((20_000, 32, 4), (3_000, 32, 4), (100, 32, 8), (1, 32, 1), (10**6, 7, 64)):
        rows = block_rows(asks, batch, slots)
        assert rows % batch == 0 and batch <= rows <= batch * BLOCK_BATCHES
        assert -(-asks // rows) >= min(-(-asks // batch), slots * BLOCKS_PER_SLOT)  # every slot fed


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
