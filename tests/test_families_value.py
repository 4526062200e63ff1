"""The family registry is a value each build carries: two builds in one process, running at the
same time with different recipe families, each ask, admit and decide with their own; and the
library calls that read a built folder (validate, recheck) take the families from its card,
with no build around them."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import orandcar_builder.families as families_module
from orandcar_builder.dataset.cardfile import BUILD_KEY, header_families, join_card, split_card
from orandcar_builder.dataset.recheck import recheck
from orandcar_builder.dataset.validate import validate_folder
from orandcar_builder.families import DEFAULT_FAMILIES
from orandcar_builder.pipeline import build
from orandcar_builder.recipe import parse_recipe, resolve
from orandcar_builder.records import Generation

from .conftest import write_png, write_pool

# Build A asks scene text with its own instruction and keeps the code's rule; build B gives scene
# text another instruction and rule and adds a family of its own, which build A does not know.
RECIPE_A = '[families.scene_text]\ninstruction = "Read the word."\nseparator = " "\n'
RECIPE_B = ('[families.scene_text]\ninstruction = "Copy the word exactly."\nrule = "exact"\n'
            '[families.shop_sign]\ninstruction = "Name the shop."\nseparator = " "\nrule = "exact"\n')


class LockStepEngine:
    """Answers every request with its item's reference, after waiting at ``barrier`` for the other
    build's engine: the two builds generate call for call at the same time. Keeps the questions."""

    kind = "lockstep"
    can_judge = False

    def __init__(self, name: str, answers: dict, barrier: threading.Barrier):
        self.name, self.answers, self.barrier = name, answers, barrier
        self.questions: list[str] = []

    def fingerprint(self):
        return {"kind": self.kind, "name": self.name}

    def generate(self, requests):
        self.barrier.wait()
        self.questions += [r.question for r in requests]
        return [Generation(item_id=r.item_id, text=self.answers[r.item_id], think="", final_answer=self.answers[r.item_id],
                           finish_reason="stop", model="lockstep") for r in requests]


def _pool(folder: Path, items: list[tuple[str, str]]) -> Path:
    lines = []
    for k, (item_id, family) in enumerate(items):
        write_png(folder / f"{item_id}.png", colour=(10 + 40 * k, 200 - 30 * k, 90))
        lines.append({"id": item_id, "image": f"{item_id}.png", "question": "What is written?",
                      "answer": item_id.upper(), "family": family})
    return write_pool(folder / "pool.jsonl", lines)


def _verifiers(folder: Path) -> dict[str, str]:
    out = {}
    for shard in sorted((folder / "RS_nothink").glob("train-*.parquet")):
        for row in pq.read_table(shard, columns=["qa", "clean_meta"]).to_pylist():
            for qa, source in zip(row["qa"], row["clean_meta"]["sources"]):
                out[source["family"]] = qa["verifier"]
    return out


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    """Builds A and B run at once in two threads of this process, generate call for generate call."""
    root = tmp_path_factory.mktemp("two-builds")
    pools = {"A": _pool(root / "pa", [("harbor", "scene_text"), ("bakery", "scene_text"), ("ferry", "scene_text"),
                                      ("signa", "shop_sign")]),
             "B": _pool(root / "pb", [("quay", "scene_text"), ("tower", "scene_text"), ("signb", "shop_sign")])}
    recipes = {"A": resolve(parse_recipe(RECIPE_A, source="a.toml")), "B": resolve(parse_recipe(RECIPE_B, source="b.toml"))}
    barrier = threading.Barrier(2, timeout=60)
    engines = {name: LockStepEngine(name, {i: i.upper() for i in ("harbor", "bakery", "ferry", "signa", "quay",
                                                                  "tower", "signb")}, barrier) for name in pools}
    results, errors = {}, {}

    def run(name: str) -> None:
        try:
            results[name] = build(pools[name], root / name, work=root / f"w{name}", engine=engines[name],
                                  recipe=recipes[name], progress=False, use_cache=False, generation_batch=1,
                                  admit_workers=1)
        except BaseException as exc:  # reported below, in the test's thread
            errors[name] = exc
            barrier.abort()

    threads = [threading.Thread(target=run, args=(name,)) for name in pools]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    return root, results, engines


def test_two_builds_at_once_each_ask_with_their_own_families(two_builds):
    _, results, engines = two_builds
    assert engines["A"].questions == ["What is written? Read the word."] * 3
    assert sorted(engines["B"].questions) == sorted(["What is written? Name the shop."] + [
        "What is written?\nCopy the word exactly."] * 2)


def test_two_builds_at_once_each_admit_and_decide_with_their_own_families(two_builds):
    root, results, _ = two_builds
    a, b = results["A"].report, results["B"].report
    assert a["dropped_by_reason"] == {"unknown_family": 1}  # B's family is not A's
    assert b["dropped"] == 0 and b["accepted"] == 3
    assert a["rules_by_family"] == {"scene_text": ["alnum"]}
    assert b["rules_by_family"] == {"scene_text": ["exact"], "shop_sign": ["exact"]}
    assert _verifiers(root / "A") == {"scene_text": "alnum"}
    assert _verifiers(root / "B") == {"scene_text": "exact", "shop_sign": "exact"}
    # the module's registry is still the object imported before the builds, unchanged
    assert families_module.DEFAULT_FAMILIES is DEFAULT_FAMILIES
    assert "shop_sign" not in DEFAULT_FAMILIES and DEFAULT_FAMILIES.rule_for("scene_text") == "alnum"


def test_library_calls_read_the_families_from_the_card_without_a_build(two_builds):
    root, _, _ = two_builds
    # B's card adds shop_sign and decides scene text with exact: validate and recheck know both
    assert validate_folder(root / "B") == [] and validate_folder(root / "A") == []
    assert recheck(root / "B").ok and recheck(root / "A").ok
    assert recheck(root / "B", workers=2).ok  # the card's registry reaches the worker processes
    # one call after the other, in any order: nothing is left behind by the one before
    assert recheck(root / "A").ok and validate_folder(root / "B") == []


def test_without_the_card_s_families_the_added_family_is_unknown(two_builds, tmp_path):
    import shutil

    root, _, _ = two_builds
    copy = tmp_path / "B"
    shutil.copytree(root / "B", copy)
    readme = copy / "README.md"
    header, body = split_card(readme.read_text(encoding="utf-8"))
    assert header_families(header)["shop_sign"].rule == "exact"
    del header[BUILD_KEY]["recipe"]["families"]
    assert header_families(header) == DEFAULT_FAMILIES
    readme.write_text(join_card(header, body), encoding="utf-8")
    problems = validate_folder(copy)
    assert any("unknown family 'shop_sign'" in p for p in problems), problems
    report = recheck(copy)
    assert not report.ok  # scene text is judged by the code's rule again, shop_sign is unknown
    details = " ".join(d.detail for d in report.disagreements)
    assert "unknown family 'shop_sign'" in details and "is not 'alnum'" in details


def test_families_given_as_a_value_without_a_recipe_are_recorded_on_the_card(tmp_path):
    """A library build handed a Families value (no recipe file) asks with it, and its card records
    it, so validate and recheck of the folder know the family it added and the rule it changed."""
    from orandcar_builder.families import Family

    families = DEFAULT_FAMILIES.overlay([
        Family(name="scene_text", rule="exact", instruction="Copy it.", description="", separator=" "),
        Family(name="plate", rule="exact", instruction="Read the plate.", description="Number plates.")])
    pool = _pool(tmp_path / "pool", [("harbor", "scene_text"), ("plate1", "plate")])
    engine = LockStepEngine("solo", {"harbor": "HARBOR", "plate1": "PLATE1"}, threading.Barrier(1))
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine=engine, families=families,
                   progress=False, use_cache=False, admit_workers=1)
    assert sorted(engine.questions) == sorted(["What is written? Copy it.", "What is written?\nRead the plate."])
    assert _verifiers(result.out) == {"scene_text": "exact", "plate": "exact"}
    header, _ = split_card((result.out / "README.md").read_text(encoding="utf-8"))
    recorded = header_families(header)
    assert recorded["plate"] == families["plate"] and recorded["scene_text"].instruction == "Copy it."
    assert validate_folder(result.out) == [] and recheck(result.out).ok


def test_a_checkout_s_validation_reads_the_families_from_its_card(two_builds, tmp_path):
    """``validate --tracked`` (remote validation of a git checkout) knows the card's added family."""
    import shutil
    import subprocess

    from orandcar_builder.remote import validate_checkout

    root, _, _ = two_builds
    copy = tmp_path / "B"
    shutil.copytree(root / "B", copy)
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    subprocess.run(["git", "add", "-A"], cwd=copy, check=True)
    assert validate_checkout(copy) == []
    assert validate_folder(root / "A") == []  # and a call for another folder after it sees its own


class _Factory:
    """A picklable engine factory (what Ray ships to an actor): a LockStepEngine that never waits."""

    def create(self):
        return LockStepEngine("ray-actor", {"w1": "HARBOR", "w2": "LOBBY"}, threading.Barrier(1))


def test_a_ray_actor_asks_and_decides_with_the_families_it_is_shipped():
    """The Ray executor's actor gets the build's registry as a constructor argument (pickled, as
    Ray sends it) and uses it alone: no process-wide state is set on the worker."""
    import pickle

    import pyarrow as pa

    from orandcar_builder.cache import engine_hash
    from orandcar_builder.engines.base import public_fingerprint
    from orandcar_builder.executors.ray_data import GenerateAndDecide
    from orandcar_builder.families import Family
    from orandcar_builder.images import ImageRef
    from orandcar_builder.records import ADMITTED_SCHEMA, Admitted, PoolItem, admitted_row

    families = DEFAULT_FAMILIES.overlay([Family(name="scene_text", rule="exact", instruction="Copy it.",
                                                description="", separator=" ")])
    rows = [admitted_row(Admitted(PoolItem(id=i, image=ImageRef(path=f"{i}.png", sha256="0" * 64),
                                           question="What is written?", reference="HARBOR", family="scene_text"),
                                  order=k, policy="test")) for k, i in enumerate(("w1", "w2"))]
    kwargs = pickle.loads(pickle.dumps({"factory": _Factory(), "families": families,
                                        "expected_engine": engine_hash(public_fingerprint(_Factory().create()))}))
    actor = GenerateAndDecide(**kwargs)
    out = actor(pa.Table.from_pylist(rows, schema=ADMITTED_SCHEMA)).to_pylist()
    assert actor.engine.questions == ["What is written? Copy it."] * 2
    assert [(r["id"], r["route"], r["verifier"], r["rule"]) for r in out] == [
        ("w1", "accepted", "exact", "exact"), ("w2", "rejected", "", "exact")]
    assert families_module.DEFAULT_FAMILIES is DEFAULT_FAMILIES  # nothing rebound in this process
    assert DEFAULT_FAMILIES["scene_text"].rule == "alnum"


def test_the_config_carries_a_registry_value(tmp_path):
    from orandcar_builder.families import Families, Family
    from orandcar_builder.pipeline import BuildConfig, BuildError

    plain = BuildConfig(pool=tmp_path / "p.jsonl", out=tmp_path / "o")
    assert plain.families is DEFAULT_FAMILIES
    added = Family(name="plate", rule="exact", instruction="Read the plate.", description="")
    laid = BuildConfig(pool=tmp_path / "p.jsonl", out=tmp_path / "o", families=[added])
    assert isinstance(laid.families, Families) and list(laid.families) == [*DEFAULT_FAMILIES, "plate"]
    assert plain.replace(families=laid.families).families == laid.families
    for bad in ("vqa", {"plate": added}, [added, "vqa"], 3, (added, added)):
        with pytest.raises(BuildError, match="families|given twice"):
            BuildConfig(pool=tmp_path / "p.jsonl", out=tmp_path / "o", families=bad)
