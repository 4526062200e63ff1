"""Nothing lost, nothing leaked (issue 14): each case of the issue's list, reproduced and checked.

``test_issue_case`` walks the list, one parametrised case per item (1-9); the tests after it
check the parts of each case more closely. Builds here use the replay engine on a two-item pool,
so each takes a fraction of a second.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.dataset.layout import MARKER
from orandcar_builder.dataset.validate import validate_folder

from .conftest import write_png, write_pool

REPO = Path(__file__).resolve().parents[1]


# -- helpers -----------------------------------------------------------------------------------------


def small_pool(folder: Path, *, extra=()) -> tuple[Path, Path]:
    """A two-item pool with its images, and a replay file answering both."""
    write_png(folder / "images" / "a.png", (200, 30, 30))
    write_png(folder / "images" / "b.png", (30, 200, 30))
    lines = [
        {"id": "a", "image": "images/a.png", "question": "What is written?", "answer": "STOP", "family": "scene_text"},
        {"id": "b", "image": "images/b.png", "question": "What is written?", "answer": "EXIT", "family": "scene_text"},
        *extra,
    ]
    pool = write_pool(folder / "pool.jsonl", lines)
    replay = folder / "replay.jsonl"
    replay.write_text("".join(json.dumps({"id": line["id"], "text": "STOP", "finish_reason": "stop"}) + "\n"
                              for line in lines if isinstance(line, dict) and "id" in line))
    return pool, replay


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def build_args(pool: Path, replay: Path, out: Path, work: Path, *extra) -> list:
    return ["build", pool, "-o", out, "--work", work, "--engine", "replay", "--replay", replay, "--no-progress", *extra]


def snapshot(folder: Path) -> dict:
    """Every file under ``folder`` (links not followed) with its bytes."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = Path(root) / name
            out[str(path.relative_to(folder))] = os.readlink(path) if path.is_symlink() else path.read_bytes()
    return out


def assert_user_error(run, *fragments: str) -> None:
    """Exit 2, one ``error:`` line, no traceback."""
    assert run.exit_code == 2, (run.exit_code, run.output, run.exception)
    assert run.exception is None or isinstance(run.exception, SystemExit), run.exception
    errors = [line for line in run.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.output
    assert "Traceback" not in run.output
    for fragment in fragments:
        assert fragment in run.output, run.output


@contextmanager
def time_limit(seconds: int):
    """Fail instead of hanging (the FIFO case hung the build forever before)."""
    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def built(tmp_path):
    """A finished small build: (pool, replay, out, work)."""
    pool, replay = small_pool(tmp_path / "pool")
    out, work = tmp_path / "OrandCar", tmp_path / "work"
    run = cli(*build_args(pool, replay, out, work))
    assert run.exit_code == 0, run.output
    return pool, replay, out, work


# -- the issue's list, one case each ---------------------------------------------------------------


def case_1_validate_refuses_what_load_dataset_refuses(tmp_path, sample_copy, **_):
    shard = sample_copy / "rejected" / "train-00000-of-00001.parquet"
    pq.write_table(pq.read_table(shard).slice(1), shard)
    problems = validate_folder(sample_copy)
    assert any("dataset_info of rejected: num_examples 13, the shards hold 12 rows" in p for p in problems), problems
    assert cli("validate", sample_copy).exit_code == 1


def case_2_build_never_empties_a_foreign_folder(tmp_path, **_):
    pool, replay = small_pool(tmp_path / "pool")
    out = tmp_path / "mine"
    for name in ("README.md", "examples/important.py", "rejected/notes.txt"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(name)
    before = snapshot(out)
    assert_user_error(cli(*build_args(pool, replay, out, tmp_path / "work")), "not an earlier OrandCar build")
    assert snapshot(out) == before


def case_3_failed_rebuild_keeps_the_previous_dataset(tmp_path, built, monkeypatch, **_):
    pool, replay, out, work = built
    before = snapshot(out)

    def read_only(*args, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system", str(out))

    monkeypatch.setattr("orandcar_builder.pipeline.stages.write.write_configs", read_only)
    assert_user_error(cli(*build_args(pool, replay, out, work)), "cannot write there", "was left as it was")
    assert snapshot(out) == before and validate_folder(out) == []


def case_4_fifo_image_is_refused_without_hanging(tmp_path, **_):
    fifo = tmp_path / "pool" / "images" / "fifo.png"
    pool, replay = small_pool(tmp_path / "pool", extra=[
        {"id": "f", "image": "images/fifo.png", "question": "Q?", "answer": "A", "family": "scene_text"}])
    os.mkfifo(fifo)
    with time_limit(60):
        run = cli(*build_args(pool, replay, tmp_path / "out", tmp_path / "work"))
    assert run.exit_code == 0, run.output
    assert "image_not_regular_file" in run.output


def case_5_push_uploads_the_layout_only(tmp_path, built, **_):
    from orandcar_builder.publish import UnexpectedFilesError, push

    _, _, out, _ = built
    (out / "secrets.txt").write_text("hf_do_not_publish")
    with pytest.raises(UnexpectedFilesError, match="secrets.txt"):
        push(out, "org/name", token="hf_x", progress=False)
    pool, replay = small_pool(tmp_path / "pool2")
    assert_user_error(cli(*build_args(pool, replay, tmp_path / "ds", tmp_path / "ds" / "work")), "inside the dataset folder")


def case_6_push_to_a_silent_endpoint_times_out(tmp_path, built, monkeypatch, **_):
    import socket

    import huggingface_hub.constants as constants

    from orandcar_builder.publish import HubTimeoutError, push

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    try:
        with time_limit(60), pytest.raises(HubTimeoutError, match="did not answer within 0.3 s"):
            push(built[2], "org/name", token="hf_x", progress=False, timeout=0.3)
    finally:
        listener.close()
        for conn in held:
            conn.close()


def case_7_card_bounds_and_escapes_values(tmp_path, sample_copy, sample_build, **_):
    from orandcar_builder.card import BLOCK_VALUE_MAX_CHARS, render_card

    shard = sample_copy / "RS_think" / "train-00000-of-00001.parquet"
    table = pq.read_table(shard)
    rows = table.to_pylist()
    huge = "Why? " * 200_000  # 1 MB
    rows[0]["qa"][0]["question"] = huge
    rows[0]["image"]["path"] = "x.png\n<img src=x onerror=alert(1)>\n# heading"
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    text = render_card(sample_copy, sample_build[0].report)
    assert len(text) < 200_000
    assert f"{len(huge):,} characters" in text and f"the first {BLOCK_VALUE_MAX_CHARS:,}" in text
    assert not any(line.startswith(("<img", "# heading")) for line in text.splitlines())
    assert "x.png\\n<img src=x onerror=alert(1)>\\n# heading" in text  # inside a code span, escaped


def case_8_repeated_or_blank_options_are_dropped(tmp_path, **_):
    pool, replay = small_pool(tmp_path / "pool", extra=[
        {"id": "mc1", "image": "images/a.png", "question": "Where?", "answer": "C", "family": "multiple_choice",
         "options": ["market", "garden", "garden", "river"]},
        {"id": "mc2", "image": "images/b.png", "question": "Where?", "answer": "A", "family": "multiple_choice",
         "options": ["market", "", "river"]}])
    run = cli(*build_args(pool, replay, tmp_path / "out", tmp_path / "work"))
    assert run.exit_code == 0, run.output
    drops = [json.loads(line) for line in (tmp_path / "work" / "dropped.jsonl").read_text().splitlines()]
    assert {(d["id"], d["reason"]) for d in drops} == {("mc1", "mc_bad_options"), ("mc2", "mc_bad_options")}


def case_9_user_failures_exit_2_with_one_error_line(tmp_path, built, **_):
    pool, replay, out, work = built
    (work / "cache" / "generations.sqlite").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4096)
    for name in ("generations.sqlite-wal", "generations.sqlite-shm"):
        (work / "cache" / name).unlink(missing_ok=True)
    assert_user_error(cli(*build_args(pool, replay, out, work)), "generations.sqlite")
    assert validate_folder(out) == []


CASES = [case_1_validate_refuses_what_load_dataset_refuses, case_2_build_never_empties_a_foreign_folder,
         case_3_failed_rebuild_keeps_the_previous_dataset, case_4_fifo_image_is_refused_without_hanging,
         case_5_push_uploads_the_layout_only, case_6_push_to_a_silent_endpoint_times_out,
         case_7_card_bounds_and_escapes_values, case_8_repeated_or_blank_options_are_dropped,
         case_9_user_failures_exit_2_with_one_error_line]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__.split("_", 2)[1] for c in CASES])
def test_issue_case(case, request, tmp_path, monkeypatch):
    fixtures = {name: request.getfixturevalue(name) for name in ("built", "sample_copy", "sample_build")
                if name in case.__code__.co_varnames[:case.__code__.co_argcount]}
    case(tmp_path=tmp_path, monkeypatch=monkeypatch, **fixtures)


# -- 1: validate reads the folder as load_dataset and the Hub do ------------------------------------


def test_load_dataset_indeed_refuses_a_shard_with_a_row_removed(sample_copy):
    import datasets
    from datasets.exceptions import NonMatchingSplitsSizesError

    shard = sample_copy / "rejected" / "train-00000-of-00001.parquet"
    pq.write_table(pq.read_table(shard).slice(1), shard)
    with pytest.raises(NonMatchingSplitsSizesError):
        datasets.load_dataset(str(sample_copy), "rejected", split="train", download_mode="force_redownload")
    assert any("num_examples" in p for p in validate_folder(sample_copy))


def test_a_rebuild_that_stopped_at_the_card_is_not_ok(sample_copy):
    """New shards beside the old card: row counts, a dangling example link, a stray temp file."""
    (sample_copy / "README.md.tmp").write_text("half a card")
    (sample_copy / "examples" / "rejected-2.png").unlink()
    problems = validate_folder(sample_copy)
    assert any(p.startswith("README.md.tmp: unexpected file") for p in problems), problems
    assert "README.md: links to examples/rejected-2.png, which the folder does not hold" in problems


@pytest.mark.parametrize("change, expected", [
    (lambda f: (f / "examples" / "RS_think-9.png").write_bytes(b"x"), "examples/RS_think-9.png: example image the card does not link to"),
    (lambda f: (f / "work").mkdir(), "work/: unexpected file"),
    (lambda f: (f / "rejected" / "extra").symlink_to(f / "README.md"), "rejected/extra (symbolic link): unexpected file"),
    (lambda f: os.mkfifo(f / "pipe"), "pipe (not a regular file): unexpected file"),
])
def test_files_outside_the_layout_are_problems(sample_copy, change, expected):
    change(sample_copy)
    assert any(p.startswith(expected) for p in validate_folder(sample_copy)), validate_folder(sample_copy)


def test_a_card_whose_dataset_info_lies_about_bytes_is_a_problem(sample_copy):
    readme = sample_copy / "README.md"
    text = readme.read_text(encoding="utf-8")
    readme.write_text(text.replace("download_size: ", "download_size: 1", 1), encoding="utf-8")
    assert any("download_size" in p for p in validate_folder(sample_copy))


def test_the_marker_is_allowed_and_the_sample_build_is_clean(built_sample):
    assert (built_sample / MARKER).is_file() and validate_folder(built_sample) == []


# -- 2 and 5: what -o and --work may be ----------------------------------------------------------------


def test_a_symlink_in_an_earlier_build_is_refused_and_its_target_kept(tmp_path, built):
    pool, replay, out, work = built
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    for example in (out / "examples").iterdir():
        example.unlink()
    (out / "examples").rmdir()
    (out / "examples").symlink_to(elsewhere)
    assert_user_error(cli(*build_args(pool, replay, out, work)), "examples (symbolic link)")
    assert (elsewhere / "keep.txt").read_text() == "mine" and (out / "examples").is_symlink()


def test_files_added_to_an_earlier_build_stop_the_rebuild(built):
    pool, replay, out, work = built
    (out / "rejected" / "notes.txt").write_text("my notes")
    assert_user_error(cli(*build_args(pool, replay, out, work)), "rejected/notes.txt", "move them out")
    assert (out / "rejected" / "notes.txt").read_text() == "my notes"


def test_out_as_a_symlink_is_refused(tmp_path, built):
    pool, replay, out, work = built
    link = tmp_path / "link"
    link.symlink_to(out)
    assert_user_error(cli(*build_args(pool, replay, link, work)), "symbolic link")


@pytest.mark.parametrize("which", ["out", "work"])
def test_out_or_work_being_a_file_is_refused(tmp_path, which):
    pool, replay = small_pool(tmp_path / "pool")
    afile = tmp_path / "afile"
    afile.write_text("x")
    out, work = (afile, tmp_path / "work") if which == "out" else (tmp_path / "out", afile)
    assert_user_error(cli(*build_args(pool, replay, out, work)), "afile", "not a folder")
    assert afile.read_text() == "x"


def test_a_rebuild_replaces_an_earlier_build_with_the_same_bytes(built):
    pool, replay, out, work = built
    before = snapshot(out)
    assert cli(*build_args(pool, replay, out, work)).exit_code == 0
    assert snapshot(out) == before
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".")) == []


def test_an_empty_out_folder_is_used(tmp_path):
    pool, replay = small_pool(tmp_path / "pool")
    (tmp_path / "out").mkdir()
    assert cli(*build_args(pool, replay, tmp_path / "out", tmp_path / "work")).exit_code == 0
    assert validate_folder(tmp_path / "out") == []


def test_second_build_on_one_work_dir_gets_a_clear_message(built):
    from orandcar_builder.dataset.output import WorkLock

    pool, replay, out, work = built
    with WorkLock(work):
        assert_user_error(cli(*build_args(pool, replay, out, work)), "in use by another build", f"pid {os.getpid()}")
    assert cli(*build_args(pool, replay, out, work)).exit_code == 0  # released


def test_an_invalid_rebuild_is_kept_aside_and_the_old_dataset_stays(built, monkeypatch):
    pool, replay, out, work = built
    before = snapshot(out)
    monkeypatch.setattr("orandcar_builder.pipeline.stages.validate.validate_folder",
                        lambda folder: ["RS_think: planted problem"])
    run = cli(*build_args(pool, replay, out, work))
    assert run.exit_code == 1 and f"was not swapped in ({out} is unchanged)" in run.output
    assert snapshot(out) == before
    staged = out.with_name(f".{out.name}.orandcar-new")
    assert (staged / MARKER).is_file()
    monkeypatch.undo()
    assert cli(*build_args(pool, replay, out, work)).exit_code == 0 and not staged.exists()


def test_a_swap_interrupted_between_its_renames_is_undone(built):
    from orandcar_builder.dataset.output import old_path

    pool, replay, out, work = built
    before = snapshot(out)
    out.rename(old_path(out))  # the old folder moved aside, the new one never arrived
    assert cli(*build_args(pool, replay, out, work)).exit_code == 0
    assert snapshot(out) == before and not old_path(out).exists()


# -- 3: a rebuild that fails leaves the previous dataset ---------------------------------------------


def test_disk_full_during_a_rebuild_keeps_the_previous_dataset(tmp_path):
    """``ulimit -f 96``: the work dir's files fit, a shard holding a 200 kB image does not."""
    from PIL import Image

    pool, replay = small_pool(tmp_path / "pool")
    Image.frombytes("RGB", (256, 256), os.urandom(256 * 256 * 3)).save(tmp_path / "pool" / "images" / "a.png")
    out, work = tmp_path / "OrandCar", tmp_path / "work"
    assert cli(*build_args(pool, replay, out, work)).exit_code == 0
    before = snapshot(out)
    command = " ".join(["ulimit -f 96;", sys.executable, "-m", "orandcar_builder.cli",
                        *map(str, build_args(pool, replay, out, work))])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("error:") == 1 and "Traceback" not in run.stderr, run.stderr
    assert "File too large" in run.stderr or "size limit" in run.stderr
    assert snapshot(out) == before and validate_folder(out) == []
    assert not out.with_name(f".{out.name}.orandcar-new").exists()


# -- 4: image files ----------------------------------------------------------------------------------


def _image_line(item_id, image, **extra):
    return {"id": item_id, "image": image, "question": "What is written?", "answer": "A", "family": "scene_text",
            **extra}


def test_image_files_that_are_not_regular_or_too_large_or_outside_are_dropped(tmp_path):
    from orandcar_builder.images import ImagePolicy
    from orandcar_builder.pool import read_pool
    from orandcar_builder.records import Dropped

    folder = tmp_path / "pool"
    outside = write_png(tmp_path / "private" / "secret.png")
    write_png(folder / "ok.png")
    with open(folder / "sparse.png", "wb") as fh:
        fh.truncate(3 * 1024**3)  # 3 GB, no blocks on disk
    os.mkfifo(folder / "fifo.png")
    (folder / "link.png").symlink_to(outside)
    pool = write_pool(folder / "pool.jsonl", [
        _image_line("fifo", "fifo.png"),
        _image_line("zero", "/dev/zero"),
        _image_line("sparse", "sparse.png"),
        _image_line("dotdot", "../private/secret.png"),
        _image_line("absolute", str(outside)),
        _image_line("link", "link.png"),
        _image_line("source", "ok.png", source={"image": str(outside)}),
        _image_line("fine", "ok.png"),
    ])
    with time_limit(60):
        records = list(read_pool(pool))
    reasons = {r.id: r.reason for r in records if isinstance(r, Dropped)}
    assert reasons == {"fifo": "image_not_regular_file", "zero": "image_outside_pool",
                       "sparse": "image_too_large", "dotdot": "image_outside_pool",
                       "absolute": "image_outside_pool", "link": "image_outside_pool",
                       "source": "source_image_outside_pool"}
    with time_limit(60):
        allowed = list(read_pool(pool, images=ImagePolicy(allow_outside_paths=True)))
    assert {r.id for r in allowed if not isinstance(r, Dropped)} == {"dotdot", "absolute", "link", "source", "fine"}
    assert {r.id: r.reason for r in allowed if isinstance(r, Dropped)}["zero"] == "image_not_regular_file"
    small = {r.id: r.reason for r in read_pool(pool, images=ImagePolicy(max_bytes=10)) if isinstance(r, Dropped)}
    assert small["fine"] == "image_too_large"


def test_cli_allow_outside_paths_and_max_image_bytes(tmp_path):
    write_png(tmp_path / "shared" / "a.png")
    pool, replay = small_pool(tmp_path / "pool", extra=[_image_line("out", "../shared/a.png")])
    run = cli(*build_args(pool, replay, tmp_path / "o1", tmp_path / "w1"))
    assert run.exit_code == 0 and "image_outside_pool" in run.output
    run = cli(*build_args(pool, replay, tmp_path / "o2", tmp_path / "w2", "--allow-outside-paths"))
    assert run.exit_code == 0 and "image_outside_pool" not in run.output
    run = cli(*build_args(pool, replay, tmp_path / "o3", tmp_path / "w3", "--max-image-bytes", "10"))
    assert "image_too_large" in run.output


def test_an_image_read_past_its_deadline_is_dropped(tmp_path, monkeypatch):
    from orandcar_builder import images

    path = write_png(tmp_path / "a.png", size=(400, 400))
    monkeypatch.setattr(images, "READ_CHUNK", 16)
    clock = iter(range(0, 10**6, 10))
    monkeypatch.setattr(images.time, "monotonic", lambda: next(clock))
    with pytest.raises(images.ImageError, match="took longer than 5 s") as info:
        images.read_image_file(path, timeout_s=5)
    assert info.value.reason == images.IMAGE_READ_TIMEOUT


# -- 9: user-caused failures: one error line, exit 2 ----------------------------------------------------


@pytest.mark.parametrize("stored", ["{not json", "[1, 2]"])
def test_a_damaged_cache_row_is_a_clear_error(built, stored):
    pool, replay, out, work = built
    with sqlite3.connect(work / "cache" / "generations.sqlite") as db:
        db.execute("UPDATE generations SET generation = ?", (stored,))
    assert_user_error(cli(*build_args(pool, replay, out, work)), "generations.sqlite", "damaged")


def test_a_damaged_cache_page_is_a_clear_error(built):
    pool, replay, out, work = built
    db = work / "cache" / "generations.sqlite"
    for name in ("generations.sqlite-wal", "generations.sqlite-shm"):
        (db.parent / name).unlink(missing_ok=True)
    data = bytearray(db.read_bytes())
    data[4096:8192] = b"\xa5" * 4096  # the second page: a table's b-tree
    db.write_bytes(bytes(data))
    assert_user_error(cli(*build_args(pool, replay, out, work)), "generation cache is damaged", "left as it was")
    assert validate_folder(out) == []


def test_a_temp_file_removed_mid_build_is_a_clear_error(built, monkeypatch):
    from orandcar_builder.files import JsonLinesFile

    pool, replay, out, work = built
    before = snapshot(out)
    original = JsonLinesFile.commit

    def vanish(self):
        self.tmp.unlink()
        original(self)

    monkeypatch.setattr(JsonLinesFile, "commit", vanish)
    assert_user_error(cli(*build_args(pool, replay, out, work)), "No such file or directory", "left as it was")
    assert snapshot(out) == before


def test_an_image_changed_mid_build_is_a_clear_error(tmp_path, monkeypatch):
    from orandcar_builder.pipeline.stages import write as building

    pool, replay = small_pool(tmp_path / "pool")
    original = building.write_configs

    def change_then_write(*args, **kwargs):
        write_png(tmp_path / "pool" / "images" / "a.png", (1, 2, 3))
        return original(*args, **kwargs)

    monkeypatch.setattr(building, "write_configs", change_then_write)
    assert_user_error(cli(*build_args(pool, replay, tmp_path / "out", tmp_path / "work")),
                      "a.png", "changed since it was admitted")
    assert not (tmp_path / "out").exists()


def test_negative_limit_is_refused(tmp_path):
    pool, replay = small_pool(tmp_path / "pool")
    run = cli(*build_args(pool, replay, tmp_path / "out", tmp_path / "work", "--limit", "-5"))
    assert run.exit_code == 2 and "-5" in run.output and not (tmp_path / "work").exists()
    from orandcar_builder.pipeline import BuildError, build

    with pytest.raises(BuildError, match="limit must be"):
        build(pool, tmp_path / "out", work=tmp_path / "work", limit=-5, engine_name="replay",
              engine_options={"replay": replay}, progress=False)


def test_a_byte_order_mark_is_skipped_and_duplicate_keys_are_dropped(tmp_path):
    from orandcar_builder.pool import read_pool
    from orandcar_builder.records import PoolItem

    write_png(tmp_path / "a.png")
    first = json.dumps(_image_line("bom", "a.png")).encode()
    pool = write_pool(tmp_path / "pool.jsonl", [
        b"\xef\xbb\xbf" + first,
        '{"id": "dup", "image": "a.png", "question": "Q?", "answer": "A", "answer": "B", "family": "scene_text"}',
        '{"id": "nested", "image": "a.png", "question": "Q?", "answer": "A", "family": "scene_text", '
        '"source": {"id": "1", "id": "2"}}',
    ])
    records = list(read_pool(pool))
    assert isinstance(records[0], PoolItem) and records[0].id == "bom"
    assert [(r.where, r.reason) for r in records[1:]] == [("pool.jsonl:2", "duplicate_key"), ("pool.jsonl:3", "duplicate_key")]
    assert "'answer' appears twice" in records[1].detail


def test_drop_reasons_are_the_same_in_every_run(tmp_path):
    from orandcar_builder.pool import read_pool

    (tmp_path / "bad.png").write_bytes(b"not an image at all")
    pool = write_pool(tmp_path / "pool.jsonl", [_image_line("bad", "bad.png")])
    [drop] = list(read_pool(pool))
    assert drop.reason == "image_undecodable" and "0x" not in drop.detail and "<_io.BytesIO>" in drop.detail


@pytest.mark.parametrize("args, fragment", [
    (["push", "{out}", "--repo", "org/name", "--tag", "v 1"], "tag name 'v 1' is not a valid git ref name"),
    (["push", "{out}", "--repo", "org/name", "--revision", "a..b"], "branch name 'a..b' is not a valid git ref name"),
    (["push", "{out}", "--repo", "org/name", "--timeout", "0"], "'--timeout': 0.0 is not in the range x>0"),
    (["validate", "{missing}"], "not a folder"),
])
def test_cli_refusals_before_any_upload(built, tmp_path, monkeypatch, args, fragment):
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no request may be needed
    run = cli(*[a.format(out=built[2], missing=tmp_path / "missing") for a in args])
    assert run.exit_code == 2 and fragment in run.output, run.output


def test_an_image_under_a_folder_link_out_of_the_pool_is_dropped(tmp_path):
    from orandcar_builder.pool import read_pool
    from orandcar_builder.records import Dropped

    folder = tmp_path / "pool"
    write_png(tmp_path / "private" / "secret.png")
    write_png(folder / "img" / "ok.png")
    (folder / "shared").symlink_to(tmp_path / "private")  # a folder, not a file, links out
    (folder / "inside").symlink_to(folder / "img")  # a folder link that stays in
    pool = write_pool(folder / "pool.jsonl", [
        _image_line("ok", "img/ok.png"), _image_line("out", "shared/secret.png"),
        _image_line("in", "inside/ok.png"), _image_line("out2", "shared/secret.png"),
        _image_line("source", "img/ok.png", source={"image": "shared/secret.png"}),
    ])
    records = list(read_pool(pool))
    assert {r.id: r.reason for r in records if isinstance(r, Dropped)} == {
        "out": "image_outside_pool", "out2": "image_outside_pool", "source": "source_image_outside_pool"}
