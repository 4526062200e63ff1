"""The build's tally (``report.tally``) counts groups of equal rows (Arrow's group_by); here it is
held against a row-by-row count of the same file: the same numbers, and every counter and dict
with its keys in the same order (report.json and the card list them in that order)."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orandcar_builder.families import DEFAULT_FAMILIES
from orandcar_builder.pipeline import report
from orandcar_builder.vocab import ACCEPTED, FAILED, JUDGE_VERIFIER, REJECTED

SCHEMA = pa.schema([("family", pa.string()), ("route", pa.string()), ("reason", pa.string()),
                    ("verifier", pa.string()), ("options", pa.list_(pa.string())), ("reject_kind", pa.string())])


def _row_by_row(path, families) -> report.Tally:
    counts = report.Tally()
    table = pq.read_table(path)
    names = table.column_names
    for row in table.to_pylist():
        family, route_to, reason = row["family"], row["route"], row["reason"]
        verifier, options, kind = row["verifier"], row.get("options"), row.get("reject_kind")
        counts.routes[route_to] += 1
        rule = families.rule_for(family, options)
        counts.rules.add(rule)
        counts.rules_by_family.setdefault(family, set()).add(rule)
        if route_to == FAILED:
            continue
        counter = counts.families.setdefault(family, Counter())
        counter["qa"] += 1
        counter[route_to] += 1
        if reason:
            counter[f"rejected_{reason}"] += 1
        if route_to == ACCEPTED:
            counts.accepted_by_verifier[verifier] += 1
            if verifier == JUDGE_VERIFIER:
                counts.promoted[family] += 1
        elif route_to == REJECTED:
            counts.rejected_by_reason[reason] += 1
            if kind and "reject_kind" in names:
                counts.reject_kinds.setdefault(family, Counter())[kind] += 1
    return counts


def _ordered(value):
    if isinstance(value, dict):
        return [(key, _ordered(inner)) for key, inner in value.items()]
    if isinstance(value, set):
        return sorted(value)
    return value


def _rows(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    families = list(DEFAULT_FAMILIES)[:4]  # their names
    rows = []
    for _ in range(n):
        route_to = rnd.choice([ACCEPTED, ACCEPTED, REJECTED, FAILED])
        rows.append({
            "family": rnd.choice(families),
            "route": route_to,
            "reason": (rnd.choice(["wrong", "truncated", "no_answer", ""]) if route_to == REJECTED
                       else rnd.choice([None, "engine_error"]) if route_to == FAILED else None),
            "verifier": rnd.choice(["alnum", JUDGE_VERIFIER, "anls", ""]) if route_to == ACCEPTED else rnd.choice([None, ""]),
            "options": rnd.choice([None, [], ["A", "B"], ["x"]]),
            "reject_kind": rnd.choice([None, "", "several_picks", "no_pick"]) if route_to == REJECTED else None,
        })
    return rows


@pytest.mark.parametrize("batch", [7, 64, 65536])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_tally_is_the_row_by_row_count_in_its_order(tmp_path, monkeypatch, batch, seed):
    path = tmp_path / "decisions.parquet"
    pq.write_table(pa.Table.from_pylist(_rows(500, seed), schema=SCHEMA), path, row_group_size=90)
    monkeypatch.setattr(report, "TALLY_BATCH", batch)
    got, expected = report.tally(path, DEFAULT_FAMILIES), _row_by_row(path, DEFAULT_FAMILIES)
    for name in report.Tally.__dataclass_fields__:
        assert _ordered(getattr(got, name)) == _ordered(getattr(expected, name)), name
    assert got.routes[FAILED] and got.promoted and got.reject_kinds and "choice" in got.rules


def test_an_older_work_dir_without_reject_kinds_or_options(tmp_path):
    path = tmp_path / "decisions.parquet"
    rows = [{k: v for k, v in row.items() if k not in ("reject_kind", "options")} for row in _rows(200, 2)]
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([f for f in SCHEMA if f.name not in
                                                               ("reject_kind", "options")])), path)
    got, expected = report.tally(path, DEFAULT_FAMILIES), _row_by_row(path, DEFAULT_FAMILIES)
    for name in report.Tally.__dataclass_fields__:
        assert _ordered(getattr(got, name)) == _ordered(getattr(expected, name)), name
    assert not got.reject_kinds and "choice" not in got.rules


def test_an_empty_file_and_an_unknown_family(tmp_path):
    from orandcar_builder.families import UnknownNameError

    path = tmp_path / "decisions.parquet"
    pq.write_table(SCHEMA.empty_table(), path)
    assert report.tally(path, DEFAULT_FAMILIES).routes == Counter()
    rows = _rows(20, 3)
    rows[11]["family"] = "no_such_family"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    with pytest.raises(UnknownNameError, match="no_such_family"):
        report.tally(path, DEFAULT_FAMILIES)
