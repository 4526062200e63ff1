"""Routing: the streaming RoutePlan over a decisions file gives exactly the rows of the in-memory
``route``, whatever the row groups, the read window and how an image's items scatter."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orandcar_builder.images import ImageRef
from orandcar_builder.records import OUTCOME_FIELDS, Outcome, outcome_from_record, outcome_record
from orandcar_builder.route import RoutePlan, route
from orandcar_builder.vocab import ACCEPTED, CONFIGS, FAILED, REJECTED


def _image(k: int) -> ImageRef:
    return ImageRef(path=f"/pool/img/{k}.png", sha256=hashlib.sha256(str(k).encode()).hexdigest())


def _outcome(order: int, image: int, route_to: str, **extra) -> Outcome:
    fields = dict(
        order=order, item_id=f"q{order}", image=_image(image), question=f"What is {order}?\nAnswer.",
        references=(f"ref{order}", "alt"), options=("a", "b") if order % 3 == 0 else (), family="scene_text",
        source={"dataset": "d", "split": "test", "id": str(order), "origin": "benchmark"},
        policy="policy/1", actions=("normalised",) if order % 4 == 0 else (), route=route_to,
    )
    if route_to == ACCEPTED:
        fields.update(think=f"think {order}", accepted_text=f"ans{order}", verifier="alnum")
    elif route_to == REJECTED:
        fields.update(wrong_vlm=f"wrong{order}", reason="wrong_answer")
    else:
        fields.update(reason="generation_failed")
    fields.update(extra)
    return Outcome(**fields)


def _write_decisions(path, outcomes, row_group_size):
    schema = pa.schema(list(OUTCOME_FIELDS))
    records = [{**outcome_record(o), "think": o.think} for o in outcomes]
    pq.write_table(pa.Table.from_pylist(records, schema=schema), path, row_group_size=row_group_size)
    return path


def _plans(plans):
    return [(p.image.sha256, p.image.path, p.qa, p.sources, p.actions, p.policy) for p in plans]


ROUTE_CHOICES = (ACCEPTED, ACCEPTED, REJECTED, FAILED)
routes = st.sampled_from(ROUTE_CHOICES)


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.tuples(st.integers(0, 12), routes), max_size=80),
       row_group=st.integers(1, 17), window=st.integers(1, 9), bucket_rows=st.integers(1, 30))
def test_streaming_plan_equals_in_memory_route(tmp_path_factory, items, row_group, window, bucket_rows):
    outcomes = [_outcome(2 * i + 1, image, route_to) for i, (image, route_to) in enumerate(items)]
    folder = tmp_path_factory.mktemp("route")
    path = _write_decisions(folder / "decisions.parquet", outcomes, row_group)
    expected = route(outcomes)
    with RoutePlan(path, window=window, bucket_rows=bucket_rows) as plan:
        assert len(plan) == len(outcomes)
        for config in CONFIGS:
            assert _plans(plan.rows(config)) == _plans(expected[config])
    assert [p.name for p in folder.iterdir()] == ["decisions.parquet"]  # the bucket files are gone


@settings(max_examples=25, deadline=None)
@given(images=st.integers(1, 60), repeats=st.lists(st.tuples(st.integers(0, 59), st.integers(0, 399), routes),
                                                    max_size=40),
       bucket_rows=st.sampled_from([5, 16, 64, 1000]), seed=st.randoms(use_true_random=False))
def test_images_repeating_far_apart_group_as_in_memory(tmp_path_factory, images, repeats, bucket_rows, seed):
    # Every image first appears within the first `images` items; the repeats land anywhere in a
    # pool of a few hundred items, so an image's rows gather items from across the pool and the
    # buckets of both passes (by image, then by first appearance) each hold many images.
    pool = [(k, seed.choice(ROUTE_CHOICES)) for k in range(images)]
    pool += [(seed.randrange(images), seed.choice(ROUTE_CHOICES)) for _ in range(200)]
    for image, position, route_to in repeats:
        pool.insert(min(position, len(pool)), (image % images, route_to))
    outcomes = [_outcome(i, image, route_to) for i, (image, route_to) in enumerate(pool)]
    path = _write_decisions(tmp_path_factory.mktemp("far") / "decisions.parquet", outcomes, 37)
    expected = route(outcomes)
    with RoutePlan(path, window=50, bucket_rows=bucket_rows) as plan:
        for config in CONFIGS:
            assert _plans(plan.rows(config)) == _plans(expected[config])


def test_rows_follow_first_appearance_and_pool_order(tmp_path):
    # image 1 first appears with a failed item: it still ranks by that first appearance.
    outcomes = [_outcome(0, 1, FAILED), _outcome(1, 2, ACCEPTED), _outcome(2, 1, ACCEPTED),
                _outcome(3, 2, REJECTED), _outcome(4, 3, ACCEPTED), _outcome(5, 2, ACCEPTED)]
    plan = RoutePlan(_write_decisions(tmp_path / "d.parquet", outcomes, 2), window=2)
    think = list(plan.rows("RS_think"))
    assert [p.image.sha256 for p in think] == [_image(1).sha256, _image(2).sha256, _image(3).sha256]
    assert [qa["answer"] for qa in think[1].qa] == ["ans1", "ans5"]
    assert [s["id"] for s in think[1].sources] == ["1", "5"]
    assert [p.qa[0]["wrong_vlm"] for p in plan.rows("rejected")] == ["wrong3"]
    assert think[2].actions == ["normalised:q4"]


def test_out_of_order_decisions_are_refused(tmp_path):
    outcomes = [_outcome(3, 1, ACCEPTED), _outcome(2, 1, ACCEPTED)]
    with pytest.raises(ValueError, match="not in pool order"):
        route(outcomes)
    with pytest.raises(ValueError, match=r"not in pool order \(row 1, order 2\)"):
        RoutePlan(_write_decisions(tmp_path / "d.parquet", outcomes, 10))
    assert [p.name for p in tmp_path.iterdir()] == ["d.parquet"]  # nothing left behind


@pytest.mark.parametrize("bucket_rows", [1, 2, 3, 100])
def test_order_is_checked_across_batches(tmp_path, bucket_rows):
    outcomes = [_outcome(order, 1, ACCEPTED) for order in (0, 1, 2, 2, 5)]
    with pytest.raises(ValueError, match=r"not in pool order \(row 3, order 2\)"):
        RoutePlan(_write_decisions(tmp_path / "d.parquet", outcomes, 10), bucket_rows=bucket_rows)


def _records(outcomes):
    return [{**outcome_record(o), "think": o.think} for o in outcomes]


@pytest.mark.parametrize("sha", ["abc", None, "f" * 65])
def test_a_bad_image_sha_is_refused(tmp_path, sha):
    records = _records([_outcome(0, 1, ACCEPTED), _outcome(1, 2, ACCEPTED)])
    records[1]["image_sha256"] = sha
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(records, schema=pa.schema(list(OUTCOME_FIELDS))), path)
    with pytest.raises(ValueError, match="image_sha256 must be 64 hex digits in every row"):
        RoutePlan(path)


def test_an_unknown_route_is_refused(tmp_path):
    records = _records([_outcome(i, i % 2, ACCEPTED) for i in range(5)])
    records[3]["route"] = "maybe"
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(records, schema=pa.schema(list(OUTCOME_FIELDS))), path)
    with pytest.raises(ValueError, match=r"d.parquet: row 3: unknown route"):
        RoutePlan(path, bucket_rows=2)


def test_a_closed_plan_refuses_rows(tmp_path):
    plan = RoutePlan(_write_decisions(tmp_path / "d.parquet", [_outcome(0, 1, ACCEPTED)], 10))
    plan.close()
    with pytest.raises(ValueError, match="closed"):
        list(plan.rows("RS_think"))
    assert [p.name for p in tmp_path.iterdir()] == ["d.parquet"]


def test_policy_must_agree_within_a_row(tmp_path):
    outcomes = [_outcome(0, 1, ACCEPTED), _outcome(1, 1, ACCEPTED, policy="policy/2")]
    with pytest.raises(ValueError, match="policy differs"):
        route(outcomes)
    with pytest.raises(ValueError, match="policy differs"):
        list(RoutePlan(_write_decisions(tmp_path / "d.parquet", outcomes, 10)).rows("RS_think"))


@pytest.mark.parametrize("route_to", [ACCEPTED, REJECTED, FAILED])
def test_outcome_record_round_trip(route_to):
    outcome = _outcome(6, 4, route_to)
    record = {**outcome_record(outcome), "think": outcome.think}
    assert outcome_from_record(record) == outcome


def test_empty_decisions(tmp_path):
    path = _write_decisions(tmp_path / "d.parquet", [], 10)
    assert all(list(RoutePlan(path).rows(c)) == [] for c in CONFIGS)


def test_row_groups_are_read_once_while_cached_and_the_cache_is_bounded(tmp_path, monkeypatch):
    from orandcar_builder.route.plan import CACHED_ROW_GROUPS

    outcomes = [_outcome(i, i // 2, ACCEPTED) for i in range(40)]  # two items per image, side by side
    path = _write_decisions(tmp_path / "d.parquet", outcomes, 4)  # 10 row groups
    plan = RoutePlan(path, window=3)
    reads = []
    real = plan._file.read_row_group
    monkeypatch.setattr(plan._file, "read_row_group", lambda g, **kw: reads.append(g) or real(g, **kw))
    assert len(list(plan.rows("RS_think"))) == 20
    info = plan._row_group.cache_info()
    assert sorted(reads) == list(range(10))  # each group read once: its rows are wanted while it is held
    assert info.currsize <= CACHED_ROW_GROUPS and info.misses == 10
    plan.close()
    assert plan._row_group.cache_info().currsize == 0  # a closed plan holds no table


@settings(max_examples=30, deadline=None)
@given(items=st.lists(st.tuples(st.integers(0, 9), routes), max_size=60), row_group=st.integers(1, 11),
       window=st.integers(1, 7))
def test_accepted_configs_in_one_pass_equal_each_config_alone(tmp_path_factory, items, row_group, window):
    # RS_think and RS_nothink are read together (the write stage); each config's plans must be
    # those of rows(config) alone, the sources and actions shared, the QA entries each config's own.
    outcomes = [_outcome(i, image, route_to) for i, (image, route_to) in enumerate(items)]
    path = _write_decisions(tmp_path_factory.mktemp("pair") / "d.parquet", outcomes, row_group)
    expected = route(outcomes)
    with RoutePlan(path, window=window, bucket_rows=8) as plan:
        pairs = list(plan.rows_of(("RS_think", "RS_nothink")))
        assert _plans(p for p, _ in pairs) == _plans(expected["RS_think"])
        assert _plans(p for _, p in pairs) == _plans(expected["RS_nothink"])
        assert all("think" in qa for p, _ in pairs for qa in p.qa)
        assert not any("think" in qa for _, p in pairs for qa in p.qa)
        assert _plans(p for (p,) in plan.rows_of(("rejected",))) == _plans(expected["rejected"])


def test_configs_of_two_routes_are_not_read_together(tmp_path):
    with RoutePlan(_write_decisions(tmp_path / "d.parquet", [_outcome(0, 1, ACCEPTED)], 10)) as plan:
        with pytest.raises(ValueError, match="one route"):
            list(plan.rows_of(("RS_think", "rejected")))


def test_a_missing_text_reads_as_empty_as_in_memory(tmp_path):
    # A decision written with null texts (think, answer, verifier, wrong_vlm) gives "" where the
    # in-memory route (records.outcome_from_record) gives "", and a null reason stays null.
    records = _records([_outcome(0, 1, ACCEPTED), _outcome(1, 1, REJECTED), _outcome(2, 2, ACCEPTED)])
    for record in records:
        record.update(think=None, accepted_text=None, verifier=None, wrong_vlm=None, options=None, actions=None)
    records[1]["reason"] = None
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(records, schema=pa.schema(list(OUTCOME_FIELDS))), path)
    expected = route([outcome_from_record(r) for r in records])
    with RoutePlan(path, window=2) as plan:
        for config in CONFIGS:
            assert _plans(plan.rows(config)) == _plans(expected[config])
    assert expected["rejected"][0].qa[0]["reason"] is None and expected["RS_think"][0].qa[0]["think"] == ""
