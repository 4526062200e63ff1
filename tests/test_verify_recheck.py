"""``recheck``: recompute decisions from parquet shards written in the Hub row schema."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orandcar_builder.dataset import recheck as recheck_module
from orandcar_builder.dataset.recheck import format_recheck, recheck
from orandcar_builder.errors import OrandCarError

QA_TYPES = {
    "RS_think": [("question", pa.string()), ("think", pa.string()), ("answer", pa.string()),
                 ("org_answer", pa.string()), ("verifier", pa.string())],
    "RS_nothink": [("question", pa.string()), ("answer", pa.string()), ("org_answer", pa.string()),
                   ("verifier", pa.string())],
    "rejected": [("question", pa.string()), ("answer", pa.string()), ("wrong_vlm", pa.string()),
                 ("reason", pa.string())],
}
SOURCE_FIELDS = [("dataset", pa.string()), ("split", pa.string()), ("id", pa.string()), ("origin", pa.string()),
                 ("family", pa.string()), ("references", pa.list_(pa.string())), ("options", pa.list_(pa.string()))]


def schema(config, source_fields=SOURCE_FIELDS):
    return pa.schema([
        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ("image_sha256", pa.string()),
        ("qa", pa.list_(pa.struct(QA_TYPES[config]))),
        ("clean_meta", pa.struct([("policy", pa.string()), ("sources", pa.list_(pa.struct(source_fields))),
                                  ("actions", pa.list_(pa.string()))])),
    ])


def source(family, references, options=()):
    return {"dataset": "d", "split": "test", "id": "1", "origin": "benchmark", "family": family,
            "references": list(references), "options": list(options)}


def accepted(answer, references, family, verifier, think=True):
    qa = {"question": "q?", "answer": answer, "org_answer": references[0], "verifier": verifier}
    if think:
        qa["think"] = "reasoning"
    return qa, source(family, references)


def rejected(wrong_vlm, references, family, reason, options=()):
    return {"question": "q?", "answer": references[0], "wrong_vlm": wrong_vlm, "reason": reason}, source(
        family, references, options)


def row(items):
    return {
        "image": {"bytes": b"not an image at all", "path": "x.png"},  # never decoded
        "image_sha256": "0" * 64,
        "qa": [qa for qa, _ in items],
        "clean_meta": {"policy": "p", "sources": [s for _, s in items], "actions": []},
    }


def write(folder, config, rows, shard="train-00000-of-00001.parquet", row_group_size=None, table_schema=None):
    path = folder / config / shard
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=table_schema or schema(config))
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def good_dataset(folder):
    for config, think in (("RS_think", True), ("RS_nothink", False)):
        write(folder, config, [
            row([accepted("HELLO!", ["hello"], "scene_text", "alnum", think),
                 accepted("Invoice  1234", ["invoice 1234"], "doc_vqa", "anls", think)]),
            row([accepted("Two", ["2"] * 3 + ["3"] * 7, "vqa", "vqa", think)]),
            row([accepted("41", ["42"], "chart_qa", "relaxed", think),
                 accepted("\\frac{1}{2}", ["0.5"], "math", "math", think),
                 accepted("Paris", ["paris"], "generic", "exact", think),
                 # promoted by the judge: the string rule rejects it, as it must
                 accepted("the capital of France", ["Paris"], "generic", "judge", think)]),
        ])
    write(folder, "rejected", [
        row([rejected("HELL0", ["hello"], "scene_text", "wrong_answer"),
             rejected("A", ["B"], "multiple_choice", "unsure", ["cat", "dog"])]),
        row([rejected("", ["5"], "chart_qa", "no_answer"), rejected("4 and th", ["5"], "chart_qa", "truncated")]),
    ])


def test_a_consistent_dataset_agrees(tmp_path):
    good_dataset(tmp_path)
    report = recheck(tmp_path)
    assert report.ok and report.disagreements == []
    assert report.shards == ["RS_think/train-00000-of-00001.parquet", "RS_nothink/train-00000-of-00001.parquet",
                             "rejected/train-00000-of-00001.parquet"]
    assert report.qa_items == 7 + 7 + 4
    t = report.tallies
    assert (t["RS_think", "generic"].agree, t["RS_think", "generic"].judge) == (1, 1)
    assert t["RS_nothink", "vqa"].agree == 1
    assert t["rejected", "multiple_choice"].agree == 1
    assert t["rejected", "chart_qa"].not_rechecked == {"no_answer": 1, "truncated": 1}
    assert t["rejected", "chart_qa"].agree == 0


def test_format_of_an_agreeing_dataset(tmp_path):
    good_dataset(tmp_path)
    text = format_recheck(recheck(tmp_path))
    lines = text.splitlines()
    assert lines[0] == f"recheck of {tmp_path}: 3 shard(s), 18 QA items"
    assert "RS_think    generic                1      1        0  -" in lines
    assert "rejected    chart_qa               0      -        0  no_answer 1, truncated 1" in lines
    assert lines[-1] == "OK: every decision agrees"


def test_every_kind_of_disagreement_is_listed(tmp_path):
    write(tmp_path, "RS_nothink", [
        row([accepted("Paris", ["paris"], "generic", "exact", False),
             accepted("London", ["paris"], "generic", "exact", False)]),  # 0.1: the rule rejects it
        row([accepted("paris", ["paris"], "generic", "judge", False)]),  # judge, but the rule passes
        row([accepted("paris", ["paris"], "generic", "anls", False)]),  # not the family's rule
        row([({**accepted("paris", ["paris"], "generic", "exact", False)[0], "org_answer": "Paris"},
              source("generic", ["paris"]))]),  # stored reference is not the first reference
        row([accepted("x", ["x"], "genric", "exact", False)]),  # unknown family
    ])
    misaligned = row([accepted("x", ["x"], "generic", "exact")])
    misaligned["clean_meta"]["sources"] = []
    write(tmp_path, "RS_think", [misaligned])
    write(tmp_path, "rejected", [
        row([rejected("HELLO", ["hello"], "scene_text", "wrong_answer"),  # the rule passes it
             rejected("x", ["y"], "scene_text", "gave_up")]),  # unknown reason
    ])
    report = recheck(tmp_path)
    assert not report.ok
    got = [(d.config, d.row, d.qa_index, d.family) for d in report.disagreements]
    assert got == [
        ("RS_think", 0, None, ""),
        ("RS_nothink", 0, 1, "generic"),
        ("RS_nothink", 1, 0, "generic"),
        ("RS_nothink", 2, 0, "generic"),
        ("RS_nothink", 3, 0, "generic"),
        ("RS_nothink", 4, 0, "genric"),
        ("rejected", 0, 0, "scene_text"),
        ("rejected", 0, 1, "scene_text"),
    ]
    details = [d.detail for d in report.disagreements]
    assert details[0] == "1 QA items but 0 clean_meta.sources: they must align"
    assert details[1].startswith("exact rejects the accepted answer against ['paris'] (candidate full 'London'")
    assert details[2].startswith("promoted by the judge but exact already passes it")
    assert details[3] == "verifier 'anls' is not 'exact', the rule of this item"
    assert details[4] == "org_answer 'Paris' is not the first reference 'paris'"
    assert "unknown family 'genric'; did you mean 'generic'?" in details[5]
    assert details[6].startswith("rejected as wrong_answer but alnum passes wrong_vlm")
    assert details[7].startswith("unknown reason 'gave_up'")
    text = format_recheck(report)
    assert "  RS_nothink/train-00000-of-00001.parquet row 0 qa 1 [generic]: exact rejects" in text
    assert "  RS_think/train-00000-of-00001.parquet row 0 [?]: 1 QA items but 0" in text
    assert text.endswith("FAILED: 8 disagreement(s)")
    short = format_recheck(report, limit=2)
    assert "  ... and 6 more\nFAILED: 8 disagreement(s)" in short and "did you mean" not in short


def test_rows_are_counted_across_batches_row_groups_and_shards(tmp_path, monkeypatch):
    monkeypatch.setattr(recheck_module, "BATCH_ROWS", 3)
    rows = [row([accepted(f"w{i}", [f"w{i}"], "generic", "exact", False)] * (1 + i % 3)) for i in range(10)]
    rows[7]["qa"][1] = accepted("wrong", ["w7"], "generic", "exact", False)[0]
    write(tmp_path, "RS_nothink", rows, row_group_size=4)
    write(tmp_path, "RS_nothink", rows[:2], shard="train-00001-of-00002.parquet")
    report = recheck(tmp_path)
    assert [(d.shard, d.row, d.qa_index) for d in report.disagreements] == [
        ("RS_nothink/train-00000-of-00001.parquet", 7, 1)]
    first_shard = sum(1 + i % 3 for i in range(10)) - 1  # all but the wrong one
    assert report.tallies["RS_nothink", "generic"].agree == first_shard + (1 + 2)


def test_rows_without_references_fall_back_to_the_stored_reference(tmp_path):
    old_fields = [f for f in SOURCE_FIELDS if f[0] not in ("references", "options")]
    items = [accepted("Paris", ["paris"], "generic", "exact", False)]
    old_row = row(items)
    old_row["clean_meta"]["sources"] = [{k: v for k, v in s.items() if k not in ("references", "options")}
                                        for s in old_row["clean_meta"]["sources"]]
    write(tmp_path, "RS_nothink", [old_row], table_schema=schema("RS_nothink", old_fields))
    report = recheck(tmp_path)
    assert report.ok and report.tallies["RS_nothink", "generic"].agree == 1


def test_not_a_dataset_folder(tmp_path):
    with pytest.raises(OrandCarError, match="not a directory"):
        recheck(tmp_path / "missing")
    with pytest.raises(OrandCarError, match="no parquet shards found"):
        recheck(tmp_path)


def test_shard_without_the_needed_columns(tmp_path):
    path = tmp_path / "rejected" / "train-00000-of-00001.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"image_sha256": ["x"]}), path)
    with pytest.raises(OrandCarError, match="rejected/train-00000-of-00001.parquet: needs columns qa and clean_meta"):
        recheck(tmp_path)


def test_shard_missing_a_qa_field(tmp_path):
    fields = [f for f in QA_TYPES["rejected"] if f[0] != "reason"]
    bad = schema("rejected").set(2, pa.field("qa", pa.list_(pa.struct(fields))))
    good = row([rejected("x", ["y"], "generic", "wrong_answer")])
    good["qa"] = [{k: v for k, v in qa.items() if k != "reason"} for qa in good["qa"]]
    write(tmp_path, "rejected", [good], table_schema=bad)
    with pytest.raises(OrandCarError, match="qa: missing field\\(s\\) reason"):
        recheck(tmp_path)


def test_not_parquet(tmp_path):
    path = tmp_path / "RS_think" / "train-00000-of-00001.parquet"
    path.parent.mkdir()
    path.write_bytes(b"definitely not parquet")
    with pytest.raises(OrandCarError, match="not a readable parquet file"):
        recheck(tmp_path)


def test_workers_give_the_same_report(tmp_path):
    good_dataset(tmp_path)
    write(tmp_path, "RS_nothink", [row([accepted("London", ["paris"], "generic", "exact", False)])],
          shard="train-00001-of-00002.parquet")
    one, two = recheck(tmp_path), recheck(tmp_path, workers=2)
    assert format_recheck(one) == format_recheck(two)
    assert one.disagreements == two.disagreements and len(one.disagreements) == 1


def test_clean_meta_without_sources(tmp_path):
    path = tmp_path / "rejected" / "train-00000-of-00001.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"qa": pa.array([[]], pa.list_(pa.struct(QA_TYPES["rejected"]))),
                             "clean_meta": pa.array([{"policy": "p"}], pa.struct([("policy", pa.string())]))}), path)
    with pytest.raises(OrandCarError, match="clean_meta must hold sources"):
        recheck(tmp_path)
