"""``clean_lines`` gives, line for line, the records and report the code at main a838389 gave
(issue 27 item 1: the admission's CPU per line was cut, its records must not move).

The test builds a hostile pool itself (``build_pool``: every way a line can be dropped, repeated
ids and keys, bad UTF-8, lone surrogates, bad fields, unknown families, missing, corrupt and
outside images, provenance, duplicate QA, multiple choice needing normalisation, a family over
the purity threshold, and a seeded random mix of all of it), cleans it with and without
``--limit``, with the spill structures in memory and spilled, on one and two processes, and
compares every record, the cleaning report and ``clean_pool``'s files with
``golden/clean_lines_a838389.json``. That golden was written by the code at a838389 (before the
change), from this same builder:

    git archive a838389 | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base python tests/test_clean_lines_equal.py tests/golden/clean_lines_a838389.json

(the builder only uses what a838389 has; rerunning it with a later tree would only copy that
tree's answers, so the golden is not regenerated when the code changes).
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import sys
from dataclasses import asdict
from pathlib import Path

from PIL import Image

GOLDEN = Path(__file__).resolve().parent / "golden" / "clean_lines_a838389.json"
# (limit, spill threshold) of each case of the golden; threshold None: the default.
CASES = [(None, None), (None, 3), (57, None), (240, 2), (0, None), (1, None)]


def _png(i: int, size: int = 6) -> bytes:
    img = Image.new("RGB", (size, size), ((i * 37) % 256, (i * 11) % 256, (i * 5) % 256))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _line(item_id, image="img/0.png", question="What is written on the sign?", answer="STOP",
          family="scene_text", **extra) -> dict:
    line = {"id": item_id, "image": image, "question": question, "answer": answer, "family": family}
    line.update(extra)
    return line


def _fixed_lines(images: dict) -> list:
    """The hand-made hostile lines: a dict is written as JSON, bytes and str as they are."""
    sha0 = images["img/0.png"]
    mixed = {"origin": "InfinityMM"}
    lines: list = [
        _line("a1"),
        _line("a2", image="img/1.png", question="What does the label say?", answer=["EXIT", "Exit"]),
        _line("a1", image="img/2.png"),  # repeated id
        '{"id": "k1", "id": "k2", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa"}',
        '{"id": "k3", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", '
        '"source": {"origin": "a", "origin": "b"}}',  # repeated key, nested
        b'{"id": "u1", "image": "img/0.png", "question": "Caf\xe9?", "answer": "x", "family": "vqa"}',
        '{"id": "s1", "image": "img/0.png", "question": "What \\ud800 is it?", "answer": "x", "family": "vqa"}',
        '{"id": "s2", "image": "img/3.png", "question": "Emoji \\ud83d\\ude00 here?", "answer": "x", "family": "vqa"}',
        '{"id": "s3", "image": "img/3.png", "question": "Late \\udc00", "answer": "x", "family": "vqa"}',
        "",
        "   \t",
        "{not json",
        "[1, 2]",
        '"a string"',
        "5",
        "null",
        '{"id": "deep", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", "x": '
        + "[" * 70 + "]" * 70 + "}",
        '{"id": "num", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", "n": ' + "9" * 150 + "}",
        {"id": "m1", "image": "img/0.png", "question": "Q?"},  # missing fields
        {"id": 7, "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa"},
        {"id": "b2", "image": "img/0.png", "question": "Q?", "answer": [], "family": "vqa"},
        {"id": "b3", "image": "img/0.png", "question": "Q?", "answer": ["ok", " "], "family": "vqa"},
        {"id": "b4", "image": "img/0.png", "question": "Q?", "answer": ["ok", 3], "family": "vqa"},
        {"id": "b5", "image": "img/0.png", "question": "Q?", "answer": 3.5, "family": "vqa"},
        {"id": "b6", "image": "img/0.png", "question": "Q?", "answer": "  ", "family": "vqa"},
        {"id": "b7", "image": "img/0.png", "question": "   ", "answer": "x", "family": "vqa"},
        {"id": "b8", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", "options": ["one"]},
        {"id": "b9", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", "options": "a, b"},
        {"id": "b10", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa",
         "options": [f"o{i}" for i in range(27)]},
        {"id": "b11", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", "options": ["a", 1]},
        {"id": "b12", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", "source": "web"},
        {"id": "b13", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa",
         "source": {"origin": "x", "colour": "red", "alpha": 1}},
        {"id": "b14", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", "source": {"split": 3}},
        {"id": "b15", "image": "img/4.png", "question": "Q null?", "answer": "x", "family": "vqa",
         "source": {"split": None, "dataset": "d", "id": ""}},
        {"id": "b16", "image": 5, "question": "Q?", "answer": "x", "family": "vqa"},
        {"id": "b17", "image": "img/0.png", "question": "Q?", "answer": "x", "family": None},
        {"id": "b18", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", "source": []},
        {"id": "b19", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "vqa", "source": {}},
        {"id": "f1", "image": "img/0.png", "question": "Q?", "answer": "x", "family": "poetry"},
        {"id": "f2", "image": "img/0.png", "question": "Q?", "answer": "x", "family": ""},
        _line("i1", image="img/missing.png"),
        _line("i2", image="img/corrupt.png"),
        _line("i3", image="img"),  # a folder
        _line("i4", image="../outside/o.png"),
        _line("i5", image="img/../../outside/o.png"),
        _line("i6", image="img/link.png"),  # a link out of the pool's folder
        _line("i7", image="img/empty.png"),
        _line("i1", image="img/5.png"),  # the first i1's image failed: this one is the first i1
        _line("i1", image="img/5.png"),  # and this one repeats it
        _line("p1", image="img/0.png", source={"image": "img/0.png"}),
        _line("p2", image="img/0.png", question="Which word?", source={"image": "img/1.png"}),
        _line("p3", image="img/0.png", question="Which sign?", source={"image": "img/nope.png"}),
        _line("p4", image="img/0.png", question="What letters?", source={"image_sha256": sha0.upper()}),
        _line("p5", image="img/0.png", question="What word here?", source={"image_sha256": "12ab"}),
        _line("p6", image="img/0.png", question="What text?", source={"image_sha256": "0" * 64}),
        _line("p7", image="img/6.png", question="What says?", source={"image": "img/6copy.png"}),
        _line("p8", image="img/0.png", question="What reads?", source={"image": "../outside/o.png"}),
        _line("p9", image="img/0.png", question="Read it?", source={"image": "img", "image_sha256": sha0}),
        _line("d1", image="img/7.png", question="What is the word?", answer="CAT"),
        _line("d2", image="img/7.png", question="What is the word?", answer="CAT"),  # duplicate QA
        _line("d3", image="img/7copy.png", question="What is the word?", answer=["CAT"]),  # same bytes, 1-list
        _line("d4", image="img/7.png", question="What is the word?", answer="cat"),
        _line("d5", image="img/7.png", question="What is the word? ", answer="CAT"),
        _line("c1", image="img/8.png", question="Which animal? (A) cat (B) dog (C) bird", answer="dog",
              family="multiple_choice"),
        _line("c2", image="img/8.png", question="Which animal? (A) cat (B) dog (C) bird", answer="B",
              family="multiple_choice"),  # the same after normalisation: a duplicate
        _line("c3", image="img/8.png", question="Which animal? Options: cat, dog or bird", answer="Bird.",
              family="multiple_choice"),
        _line("c4", image="img/8.png", question="Which animal? (A) cat (B) dog", answer="horse",
              family="multiple_choice"),
        _line("c5", image="img/8.png", question="Which one? (A) cat (B) dog", answer="horse", family="vqa"),
        _line("c6", image="img/8.png", question="Which pet?\nA. cat\nB. dog", answer="cat", family="multiple_choice"),
        _line("c7", image="img/8.png", question="Which pet?\nA. cat\nB. dog", answer="B", family="multiple_choice"),
        _line("c8", image="img/8.png", question="Pick one", answer="dog", family="multiple_choice",
              options=["cat", "dog"]),
        _line("c9", image="img/8.png", question="Pick two", answer="B", family="multiple_choice",
              options=["cat", "dog"]),
        _line("c10", image="img/8.png", question="Pick three", answer="cat", family="multiple_choice",
              options=["Cat", "cat."]),
        _line("c11", image="img/8.png", question="Pick four", answer="cat", family="multiple_choice",
              options=["cat", " "]),
        _line("c12", image="img/8.png", question="Which? A. red B. red", answer="red", family="multiple_choice"),
        _line("c13", image="img/8.png", question="Which colour? A: red B: blue C: green. Answer with the letter.",
              answer=["C", "green"], family="multiple_choice"),
        _line("c14", image="img/8.png", question="Which? (a) up (b) down", answer="down", family="multiple_choice"),
        _line("c15", image="img/8.png", question="Choose from: up; down; left", answer="C. left",
              family="multiple_choice"),
        _line("c16", image="img/8.png", question="Which? (A) one (B) two", answer=["A", "B"], family="multiple_choice"),
        _line("c17", image="img/8.png", question="Which shape?\nA) square\nB) circle", answer="B. circle",
              family="multiple_choice", options=["square", "circle"]),
        _line("c18", image="img/8.png", question="Which? Options:\n- north\n- south\n\nAnswer briefly.",
              answer="south", family="multiple_choice"),
        _line("c19", image="img/8.png", question="Which vowel (A) a (B) e", answer="B. i", family="multiple_choice"),
        _line("o1", image="img/9.png", question="What is 3 + 4?", answer="7", family="math"),
        _line("o2", image="img/9.png", question="Describe the chart.", answer="bars", family="chart_qa",
              source={"origin": "InfinityMM"}),
        _line("o3", image="img/9.png", question="How many bars?", answer="4", family="chart_qa", source=mixed),
        _line("o4", image="img/9.png", question="Summarise it", answer="x", family="generic", source=mixed),
    ]
    # A mixed collection that is mostly off-task for scene_text (over the threshold: its mixed
    # items are all dropped, its benchmark items kept), and one mostly on-task for doc_vqa.
    for i in range(12):
        q = "Describe this picture in detail." if i % 3 else "What word is written here?"
        lines.append(_line(f"mx{i}", image=f"img/{10 + i % 4}.png", question=q, answer=f"W{i}", source=mixed))
    for i in range(12):
        q = "Tell me about the page." if i == 5 else f"What is the title of page {i}?"
        lines.append(_line(f"dv{i}", image=f"img/{10 + i % 4}.png", question=q, answer=f"T{i}", family="doc_vqa",
                           source={"origin": "DocMix", "dataset": "dm", "split": "train", "id": str(i)}))
    lines.append(_line("mx-bench", image="img/12.png", question="Describe the sign.", answer="OPEN",
                       source={"origin": "benchmark"}))
    return lines


_KINDS = ("good", "good", "good", "repeat_id", "dup_key", "bad_utf8", "surrogate", "blank", "malformed",
          "bad_field", "unknown_family", "missing_image", "corrupt_image", "outside", "dup_qa", "mc_prose",
          "mc_bad", "mc_options", "off_task_mixed", "source_outside", "provenance")


def _random_lines(seed: int, n: int) -> list:
    """A seeded random mix of the line kinds above (ids and images drawn from small sets, so
    repeats and cache hits happen)."""
    rng = random.Random(seed)
    families = ("scene_text", "vqa", "doc_vqa", "chart_qa", "math", "multiple_choice", "generic")
    lines: list = []
    for k in range(n):
        kind = rng.choice(_KINDS)
        item_id = f"r{rng.randrange(n)}" if rng.random() < 0.3 else f"r-{seed}-{k}"
        image = f"img/{rng.randrange(16)}.png"
        family = rng.choice(families)
        question = rng.choice(["What is written?", "How many cars are there?", "What is 2 + 2?",
                               "Which one? (A) left (B) right", "Read the text.", "Describe the scene.",
                               "Who is shown?", "Is it red? A. yes B. no"])
        answer = rng.choice(["left", "B", "4", "STOP", ["yes", "Yes"], "A. left", "no"])
        origin = rng.choice(["benchmark", "InfinityMM", None])
        source = {"origin": origin} if origin else {}
        if kind == "repeat_id":
            item_id = f"r{rng.randrange(8)}"
        if kind == "dup_key":
            lines.append(f'{{"id": "{item_id}", "image": "{image}", "image": "{image}", "question": "Q?", '
                         f'"answer": "x", "family": "vqa"}}')
            continue
        if kind == "bad_utf8":
            lines.append(b'{"id": "' + item_id.encode() + b'", "image": "img/0.png", "question": "\xff\xfe?", '
                         b'"answer": "x", "family": "vqa"}')
            continue
        if kind == "surrogate":
            lines.append(f'{{"id": "{item_id}", "image": "{image}", "question": "Q \\udbff?", "answer": "x", '
                         f'"family": "vqa"}}')
            continue
        if kind == "blank":
            lines.append(rng.choice(["", " ", "\t"]))
            continue
        if kind == "malformed":
            lines.append(rng.choice(["{", '{"id": }', "[]", "true", '{"id": "x",}']))
            continue
        if kind == "bad_field":
            bad = _line(item_id, image=image, family=family)
            key, value = rng.choice([("answer", 1), ("question", ""), ("options", ["x"]), ("source", {"foo": "x"}),
                                     ("image", None), ("id", ["x"])])
            bad[key] = value
            lines.append(bad)
            continue
        if kind == "unknown_family":
            family = rng.choice(["poetry", "Scene_Text", "vqa "])
        if kind == "missing_image":
            image = f"img/missing{rng.randrange(3)}.png"
        if kind == "corrupt_image":
            image = "img/corrupt.png"
        if kind == "outside":
            image = rng.choice(["../outside/o.png", "img/link.png"])
        if kind == "dup_qa":
            image, question, answer = "img/7.png", "What is the word?", rng.choice(["CAT", ["CAT"]])
        if kind == "mc_prose":
            family = "multiple_choice"
            question, answer = rng.choice([("Which? (A) red (B) blue", "blue"), ("Which? A. x B. y", "C"),
                                           ("Select from: sun, moon", "moon"), ("Colour? (a) red (b) blue", "B")])
        if kind == "mc_bad":
            family, question, answer = "multiple_choice", "Which? (A) red (B) Red.", "red"
        if kind == "mc_options":
            line = _line(item_id, image=image, question="Which?", answer=rng.choice(["dog", "B", "cow"]),
                         family=rng.choice(["multiple_choice", "vqa"]), options=["cat", "dog"])
            lines.append(line)
            continue
        if kind == "off_task_mixed":
            family, question, source = "scene_text", "Describe this image in detail.", {"origin": "InfinityMM"}
        if kind == "source_outside":
            source = {"image": "../outside/o.png"}
        if kind == "provenance":
            source = rng.choice([{"image": image}, {"image": "img/0.png"}, {"image_sha256": "f" * 64},
                                 {"image": "img/missing9.png", "origin": "InfinityMM"}])
        lines.append(_line(item_id, image=image, question=question, answer=answer, family=family, source=source))
    return lines


def build_pool(root: Path) -> Path:
    """The hostile pool under ``root/pool`` (images beside it, one image outside); its path."""
    pool_dir, outside = root / "pool", root / "outside"
    (pool_dir / "img").mkdir(parents=True)
    outside.mkdir()
    (outside / "o.png").write_bytes(_png(999))
    images = {}
    for i in range(16):
        data = _png(i)
        (pool_dir / "img" / f"{i}.png").write_bytes(data)
        images[f"img/{i}.png"] = hashlib.sha256(data).hexdigest()
    (pool_dir / "img" / "6copy.png").write_bytes(_png(600))  # other bytes than 6.png
    (pool_dir / "img" / "7copy.png").write_bytes(_png(7))  # the same bytes as 7.png
    (pool_dir / "img" / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    (pool_dir / "img" / "empty.png").write_bytes(b"")
    (pool_dir / "img" / "link.png").symlink_to(outside / "o.png")
    lines = _fixed_lines(images) + _random_lines(27, 400)
    with open(pool_dir / "pool.jsonl", "wb") as fh:
        fh.write(b"\xef\xbb\xbf")  # a byte order mark, skipped
        for line in lines:
            if isinstance(line, dict):
                line = json.dumps(line, ensure_ascii=False)
            fh.write((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n")
        fh.write(b'{"id": "last", "image": "img/0.png", "question": "No newline at the end?", "answer": "x", '
                 b'"family": "vqa"}')
    return pool_dir / "pool.jsonl"


def _normalised(value, root: Path):
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    for prefix in sorted({str(root), str(root.resolve())}, key=len, reverse=True):
        text = text.replace(prefix, "<root>")
    return json.loads(text)


def _record(record) -> dict:
    from orandcar_builder.records import Admitted

    if isinstance(record, Admitted):
        item = record.item
        return {"admitted": {
            "order": record.order, "policy": record.policy, "actions": list(record.actions),
            "id": item.id, "image": [item.image.path, item.image.sha256, item.image.size],
            "question": item.question, "reference": item.reference if isinstance(item.reference, str)
            else {"tuple": list(item.reference)},
            "family": item.family, "options": None if item.options is None else list(item.options),
            "source": asdict(item.source), "where": item.where}}
    return {"dropped": record.to_dict()}


def outcomes(root: Path, pool: Path, workers: int = 1) -> dict:
    """Every case's records and report, ``clean_pool``'s files and report: normalised (``root`` -> <root>)."""
    from orandcar_builder import spill
    from orandcar_builder.clean.pool_file import clean_lines, clean_pool

    result: dict = {}
    default = spill.DEFAULT_THRESHOLD
    try:
        for limit, threshold in CASES:
            spill.DEFAULT_THRESHOLD = default if threshold is None else threshold
            scratch = root / f"spill-{limit}-{threshold}-{workers}"
            scratch.mkdir()
            report: dict = {}
            records = [_record(r) for r in clean_lines(pool, report, limit=limit, spill_dir=scratch, workers=workers)]
            result[f"limit={limit} threshold={threshold}"] = {"records": records, "report": report}
    finally:
        spill.DEFAULT_THRESHOLD = default
    out = root / "cleaned" / "clean.jsonl"
    report = clean_pool(pool, out, workers=workers)
    result["clean_pool"] = {"report": report, "out": out.read_text(encoding="utf-8").splitlines(),
                            "dropped": (out.parent / "dropped.jsonl").read_text(encoding="utf-8").splitlines()}
    return _normalised(result, root)


def test_records_equal_main_a838389(tmp_path):
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    pool = build_pool(tmp_path)
    got = outcomes(tmp_path, pool)
    assert got.keys() == golden.keys()
    for case in golden:
        if "records" in golden[case]:
            want, have = golden[case]["records"], got[case]["records"]
            for i, (w, h) in enumerate(zip(want, have)):
                assert h == w, f"{case}: record {i} differs"
            assert len(have) == len(want), case
            assert got[case]["report"] == golden[case]["report"], case
        else:
            assert got[case] == golden[case], case


def test_records_on_two_processes_equal_main_a838389(tmp_path):
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    pool = build_pool(tmp_path)
    assert outcomes(tmp_path, pool, workers=2) == golden


def test_the_golden_covers_every_kind_of_drop():
    """The golden is not trivial: the pool reaches every read and cleaning drop, and admits too."""
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    records = golden["limit=None threshold=None"]["records"]
    reasons = {r["dropped"]["reason"] for r in records if "dropped" in r}
    assert reasons >= {
        "duplicate_id", "duplicate_key", "not_utf8", "blank_line", "malformed_json", "malformed_line",
        "json_too_deep", "json_number_too_long", "missing_field", "bad_field", "empty_field", "unknown_family",
        "image_missing", "image_undecodable", "image_not_regular_file", "image_outside_pool",
        "source_image_outside_pool", "provenance_unresolved", "provenance_mismatch", "task_purity",
        "mc_unresolvable", "mc_bad_options", "duplicate_qa"}
    actions = {a for r in records if "admitted" in r for a in r["admitted"]["actions"]}
    assert actions == {"provenance_unchecked", "mc_normalised", "mc_reference_lettered"}
    assert sum("admitted" in r for r in records) > 100
    assert golden["limit=None threshold=None"]["report"]["purity"]["families"]["scene_text"]["over_threshold"]


if __name__ == "__main__":  # write the golden (see the module docstring: with the tree at a838389)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        found = outcomes(root, build_pool(root))
    Path(sys.argv[1]).write_text(json.dumps(found, ensure_ascii=False, indent=1, sort_keys=True) + "\n",
                                 encoding="utf-8")
