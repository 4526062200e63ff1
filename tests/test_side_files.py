"""The generate stage's side files (prompts.jsonl, unsupported.jsonl, failed.jsonl, the replay
export) are written column-wise from work/decisions.parquet; here they are held against a
record-by-record writing of the same file, byte for byte, with the same facts."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orandcar_builder.engines.replay import ReplayWriter
from orandcar_builder.files import JsonLinesFile
from orandcar_builder.pipeline.stages.generate import side_files
from orandcar_builder.pipeline.work import GenerationFacts
from orandcar_builder.records import DECISION_SCHEMA, generation_from_row
from orandcar_builder.vocab import ACCEPTED, FAILED, REJECTED
from orandcar_builder.workdir import WorkDir


def _rows(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    rows = []
    for order in range(n):
        row = {name: None for name in DECISION_SCHEMA.names}
        route = rnd.choice([ACCEPTED, ACCEPTED, REJECTED, FAILED, None])
        row.update(order=order, id=f"item-{order}-" + rnd.choice(["", "ü", '"', "%s"]), route=route,
                   family=rnd.choice(["alnum", "vqa", "math"]),
                   question=rnd.choice(["What is written?", "Wie heißt das?\n<image>", "", "a \\ b"]),
                   prompt=rnd.choice([None, "<|im_start|>user\nWhat?<|im_end|>"]),
                   unsupported=rnd.choice([None, None, "", "no images on this engine"]),
                   model=rnd.choice([None, "", "model-a", "model-b"]),
                   revision=rnd.choice([None, "", "r1"]),
                   reason=rnd.choice([None, "engine_error", "timeout"]),
                   error=rnd.choice([None, "HTTP 500", "connection reset\n"]),
                   text=rnd.choice(["", "B", "<think>x</think>B"]), think=rnd.choice(["", "x"]),
                   final_answer=rnd.choice(["", "B"]), finish_reason="stop",
                   prompt_tokens=rnd.choice([None, 12]), completion_tokens=rnd.choice([None, 3]))
        if route == FAILED:  # what a failed item holds is not a generation's: never a fact
            row.update(model=rnd.choice([None, "model-f"]), revision=rnd.choice([None, "r-f"]))
        rows.append(row)
    return rows


def _one_by_one(work: WorkDir, folder, export: bool) -> GenerationFacts:
    """The side files written a record at a time (the oracle)."""
    facts = GenerationFacts()
    rows = pq.read_table(work.decisions).to_pylist()
    with JsonLinesFile(folder / "prompts.jsonl") as prompts, JsonLinesFile(folder / "unsupported.jsonl") as unsupported, \
            JsonLinesFile(folder / "failed.jsonl") as failed:
        replay = ReplayWriter(folder / "export.jsonl") if export else None
        for row in rows:
            if row["route"] == FAILED:
                failed.write({"id": row["id"], "reason": row["reason"], "detail": row["error"]})
                facts.failed += 1
                continue
            prompts.write({"id": row["id"], "question": row["question"], "prompt": row["prompt"]})
            if row["unsupported"]:
                unsupported.write({"id": row["id"], "family": row["family"], "explanation": row["unsupported"]})
            if replay is not None:
                replay.add(generation_from_row(row), row["question"])
            if row["model"]:
                facts.models.add(row["model"])
            if row["revision"]:
                facts.revisions.add(row["revision"])
        if replay is not None:
            replay.commit()
    return facts


@pytest.mark.parametrize("n, export", [(0, False), (5, False), (2500, False), (1500, True)])
def test_side_files_are_the_bytes_of_writing_them_record_by_record(tmp_path, n, export):
    work = WorkDir(tmp_path / "work")
    work.path.mkdir()
    pq.write_table(pa.Table.from_pylist(_rows(n, seed=n), schema=DECISION_SCHEMA), work.decisions,
                   row_group_size=700)  # row groups across the stage's batches
    facts = side_files(work, tmp_path / "export.jsonl" if export else None)
    oracle = tmp_path / "oracle"
    oracle.mkdir()
    expected = _one_by_one(work, oracle, export)
    assert facts == expected
    for name in ("prompts.jsonl", "unsupported.jsonl", "failed.jsonl"):
        assert (work.path / name).read_bytes() == (oracle / name).read_bytes(), name
    if export:
        assert (tmp_path / "export.jsonl").read_bytes() == (oracle / "export.jsonl").read_bytes()
    if n >= 1500:  # the material holds every case the files distinguish
        assert facts.failed and expected.models == {"model-a", "model-b"} and expected.revisions == {"r1"}
        assert (work.path / "unsupported.jsonl").read_text().count("\n") > 0
