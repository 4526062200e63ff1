"""clean() over whole pools: duplicates, order, policy and actions; clean_pool() and its accounting."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from orandcar_builder.clean import DUPLICATE, POLICY_ID, clean, clean_pool
from orandcar_builder.clean.choices import ACTION_NORMALISED
from orandcar_builder.errors import OrandCarError
from orandcar_builder.images import ImagePolicy, ImageRef
from orandcar_builder.pool import read_pool
from orandcar_builder.records import Admitted, Dropped, PoolItem, Source


def make_png(path: Path, color: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), color).save(path, "PNG")
    return path


@pytest.fixture
def images(tmp_path: Path) -> dict[str, ImageRef]:
    return {c: ImageRef.from_file(make_png(tmp_path / "img" / f"{c}.png", c)) for c in ("red", "blue")}


def qa(n: int, image: ImageRef, question: str = "What is written?", answer="STOP", family="scene_text", **kw) -> PoolItem:
    return PoolItem(id=f"q{n}", image=image, question=question, reference=answer, family=family,
                    where=f"pool.jsonl:{n + 1}", **kw)


# --- duplicates --------------------------------------------------------------------------------


def test_exact_duplicates_are_merged_into_the_first(images):
    red, blue = images["red"], images["blue"]
    items = [qa(0, red), qa(1, red), qa(2, red, answer="EXIT"), qa(3, blue), qa(4, red, question="What is written? "), qa(5, red)]
    report: dict = {}
    records = list(clean(items, report))
    assert [type(r).__name__ for r in records] == ["Admitted", "Dropped", "Admitted", "Admitted", "Admitted", "Dropped"]
    assert [r.reason for r in records if isinstance(r, Dropped)] == [DUPLICATE, DUPLICATE]
    assert all("'q0'" in r.detail for r in records if isinstance(r, Dropped))
    assert report["duplicates_merged"] == 2 and report["dropped_by_reason"] == {DUPLICATE: 2}


def test_duplicates_found_after_the_kept_keys_spill_to_disk(images, monkeypatch):
    from orandcar_builder import spill

    monkeypatch.setattr(spill, "DEFAULT_THRESHOLD", 1)
    monkeypatch.setattr(spill, "BATCH", 2)
    red, blue = images["red"], images["blue"]
    items = [qa(0, red), qa(1, blue), qa(2, red, answer="EXIT"), qa(3, blue, answer="EXIT"), qa(4, red), qa(5, blue)]
    records = list(clean(items))
    assert [r.reason if isinstance(r, Dropped) else "ok" for r in records] == ["ok"] * 4 + [DUPLICATE] * 2
    assert "'q0'" in records[4].detail and "'q1'" in records[5].detail


def test_duplicates_are_judged_after_normalisation(images):
    red = images["red"]
    items = [qa(0, red, "Which? Options: cat, dog", "dog", family="multiple_choice"),
             qa(1, red, "Which?\nA. cat\nB. dog", "B", family="multiple_choice")]
    records = list(clean(items))
    assert isinstance(records[0], Admitted) and ACTION_NORMALISED in records[0].actions
    assert isinstance(records[1], Dropped) and records[1].reason == DUPLICATE


def test_an_item_dropped_by_another_rule_is_no_merge_target(images):
    red = images["red"]
    items = [qa(0, red, source=Source(image="img/gone.png")), qa(1, red)]
    records = list(clean(items, base_dir=Path(red.path).parent.parent))
    assert isinstance(records[0], Dropped) and records[0].reason == "provenance_unresolved"
    assert isinstance(records[1], Admitted)


# --- one record per item, in order, with the policy ---------------------------------------------


def test_one_record_per_item_in_pool_order_with_policy_and_actions(images):
    red, blue = images["red"], images["blue"]
    items = [qa(0, red), qa(1, blue, "Which? Options: cat, dog", "cow", family="multiple_choice"),
             qa(2, blue, "Which? Options: cat, dog", "dog", family="multiple_choice"), qa(3, red)]
    report: dict = {}
    records = list(clean(items, report))
    assert [r.id if isinstance(r, Dropped) else r.item.id for r in records] == ["q0", "q1", "q2", "q3"]
    assert [r.order for r in records if isinstance(r, Admitted)] == [0, 2]
    admitted = [r for r in records if isinstance(r, Admitted)]
    assert all(r.policy == POLICY_ID for r in admitted)
    assert admitted[1].item.reference == "B" and admitted[1].item.options == ("cat", "dog")
    assert report["items"] == 4 and report["admitted"] == 2 and report["dropped"] == 2
    assert report["dropped_by_reason"] == {"mc_unresolvable": 1, DUPLICATE: 1}
    assert report["actions"] == {"mc_normalised": 1, "provenance_unchecked": 2}


def test_clean_holds_no_image_bytes(images, monkeypatch):
    monkeypatch.setattr(ImageRef, "read", lambda self: pytest.fail("clean read image bytes"))
    assert len(list(clean([qa(0, images["red"]), qa(1, images["blue"])]))) == 2


def test_empty_pool_gives_an_empty_report(tmp_path):
    report: dict = {}
    assert list(clean([], report)) == []
    assert report["items"] == 0 and report["policy"] == POLICY_ID


# --- clean_pool: files and accounting ------------------------------------------------------------


def write_pool(path: Path, lines: list) -> Path:
    with open(path, "wb") as fh:
        for line in lines:
            fh.write(line if isinstance(line, bytes) else json.dumps(line).encode("utf-8"))
            fh.write(b"\n")
    return path


def line(n: int, image: str = "img/red.png", **kw) -> dict:
    base = {"id": f"p{n}", "image": image, "question": "What is written?", "answer": f"W{n}", "family": "scene_text",
            "source": {"dataset": "d", "origin": "benchmark", "image": image}}
    base.update(kw)
    return base


@pytest.fixture
def mixed_pool(tmp_path: Path, images) -> Path:
    (tmp_path / "img" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    lines = [
        line(0),
        b"{broken json",
        b'{"id": "\xff"}',
        line(3, question="   "),
        line(4, answer=""),
        line(5, image="img/broken.png"),
        line(6, image="img/gone.png"),
        line(7, source={"origin": "benchmark", "image": "img/blue.png"}),
        line(8, question="Which? Options: cat, dog", answer="dog", family="multiple_choice"),
        line(9, question="Which? Options: cat, dog", answer="cow", family="multiple_choice"),
        line(10, answer="W0", id="dup"),
        line(11, image="img/blue.png", question="Describe the picture.", source={"origin": "InfinityMM"}),
        line(12, image="img/blue.png", question="Describe it again.", source={"origin": "InfinityMM"}),
        line(13, image="img/blue.png"),
        b"",
        line(0),  # duplicate id
    ]
    return write_pool(tmp_path / "pool.jsonl", lines)


EXPECTED_DROPS = {
    "pool.jsonl:2": "malformed_json",
    "pool.jsonl:3": "not_utf8",
    "pool.jsonl:4": "empty_field",
    "pool.jsonl:5": "empty_field",
    "pool.jsonl:6": "image_undecodable",
    "pool.jsonl:7": "image_missing",
    "pool.jsonl:8": "provenance_mismatch",
    "pool.jsonl:10": "mc_unresolvable",
    "pool.jsonl:11": DUPLICATE,
    "pool.jsonl:12": "task_purity",
    "pool.jsonl:13": "task_purity",
    "pool.jsonl:15": "blank_line",
    "pool.jsonl:16": "duplicate_id",
}


def test_every_line_ends_in_exactly_one_place(mixed_pool, tmp_path):
    out = tmp_path / "cleaned" / "pool.jsonl"
    report = clean_pool(mixed_pool, out)
    lines_in = len(mixed_pool.read_bytes().splitlines())
    kept = [json.loads(l) for l in out.read_text(encoding="utf-8").splitlines()]
    dropped = [json.loads(l) for l in (out.parent / "dropped.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(kept) + len(dropped) == lines_in == report["lines"] == 16
    assert report["lines_admitted"] == len(kept) == 3 and report["lines_dropped"] == len(dropped) == 13
    assert {d["where"]: d["reason"] for d in dropped} == EXPECTED_DROPS
    assert [d["where"] for d in dropped] == sorted((d["where"] for d in dropped), key=lambda w: int(w.split(":")[1]))
    assert [k["id"] for k in kept] == ["p0", "p8", "p13"]
    reasons = Counter(d["reason"] for d in dropped)
    assert reasons == Counter({**report["read_dropped_by_reason"], **report["dropped_by_reason"]})


def test_cleaned_pool_reads_back_and_cleans_to_itself(mixed_pool, tmp_path):
    out = tmp_path / "cleaned" / "pool.jsonl"
    clean_pool(mixed_pool, out)
    kept = [json.loads(l) for l in out.read_text(encoding="utf-8").splitlines()]
    assert kept[1]["question"] == "Which?\nA. cat\nB. dog" and kept[1]["answer"] == "B" and kept[1]["options"] == ["cat", "dog"]
    assert kept[1]["clean"] == {"policy": POLICY_ID, "actions": ["mc_normalised"]}
    assert kept[0]["image"] == "../img/red.png" and kept[0]["source"]["image"] == "../img/red.png"
    again = tmp_path / "again" / "pool.jsonl"
    report = clean_pool(out, again, images=ImagePolicy(allow_outside_paths=True))
    assert report["lines_admitted"] == 3 and report["actions"] == {}
    assert [json.loads(l)["question"] for l in again.read_text().splitlines()] == [k["question"] for k in kept]
    assert all(isinstance(r, PoolItem) for r in read_pool(again, images=ImagePolicy(allow_outside_paths=True)))


def test_report_carries_the_measured_figures(mixed_pool, tmp_path):
    report = clean_pool(mixed_pool, tmp_path / "out.jsonl")
    assert report["policy"] == POLICY_ID
    # p0 p8 p9 p10 p13 record their image; p11 p12 record none; p7 records another image
    assert report["provenance"] == {"checked": 5, "unchecked": 2, "unresolved": 0, "mismatch": 1}
    scene = report["purity"]["families"]["scene_text"]
    assert (scene["mixed"], scene["mixed_off_task"], scene["over_threshold"], scene["dropped"]) == (2, 2, True, 2)
    assert report["duplicates_merged"] == 1
    json.dumps(report)  # goes to report.json as is


def test_clean_pool_refuses_to_overwrite_its_input_or_read_nothing(mixed_pool, tmp_path):
    with pytest.raises(OrandCarError, match="must not overwrite"):
        clean_pool(mixed_pool, mixed_pool)
    with pytest.raises(OrandCarError, match="not found"):
        clean_pool(tmp_path / "nope.jsonl", tmp_path / "out.jsonl")


def test_dropped_file_location_can_be_chosen(mixed_pool, tmp_path):
    report = clean_pool(mixed_pool, tmp_path / "a" / "pool.jsonl", dropped=tmp_path / "b" / "drops.jsonl")
    assert len((tmp_path / "b" / "drops.jsonl").read_text().splitlines()) == report["lines_dropped"]
    assert not list(tmp_path.rglob("*.partial"))


def test_ids_spilled_to_disk_clean_the_same(mixed_pool, tmp_path, monkeypatch):
    from orandcar_builder import spill

    expected = clean_pool(mixed_pool, tmp_path / "memory" / "pool.jsonl")
    monkeypatch.setattr(spill, "DEFAULT_THRESHOLD", 0)  # every id seen goes through SQLite
    monkeypatch.setattr(spill, "BATCH", 2)
    report = clean_pool(mixed_pool, tmp_path / "disk" / "pool.jsonl")
    for name in ("pool.jsonl", "dropped.jsonl"):
        assert (tmp_path / "disk" / name).read_bytes() == (tmp_path / "memory" / name).read_bytes()
    assert {k: v for k, v in report.items() if k not in ("out", "dropped_file")} == \
        {k: v for k, v in expected.items() if k not in ("out", "dropped_file")}


def test_the_cleaning_modules_import_no_name_from_their_package():
    """``policy`` and ``pool_file`` sit below ``clean/__init__`` (which re-exports them): they import
    sibling modules only, never a name the package defines, so no late import is needed."""
    import ast
    import pkgutil

    import orandcar_builder.clean as package

    siblings = {info.name for info in pkgutil.iter_modules(package.__path__)}
    assert {"policy", "pool_file"} <= siblings
    for name in ("policy", "pool_file"):
        tree = ast.parse((Path(package.__path__[0]) / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                assert {alias.name for alias in node.names} <= siblings, (name, ast.unparse(node))
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module != "orandcar_builder.clean", (name, ast.unparse(node))
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is not None:
                assert node.module in siblings, (name, ast.unparse(node))
