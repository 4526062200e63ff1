"""``orandcar push`` against the local Hub-protocol server (tests/hubserver.py) with the real client.

Two ways of pointing the real huggingface_hub client at the test server:
- in-process (``hub`` fixture): huggingface_hub's module constants are patched for the test
  (ENDPOINT, HF_HUB_DISABLE_XET, the token file path) and HF_TOKEN is set. That covers everything
  ``push`` calls, since HfApi reads ``constants.ENDPOINT`` when it is created, and the download URL
  template (a tagged push reads the previous tag's card and shards).
- in a subprocess (``end_to_end`` fixture): HF_ENDPOINT and friends are set in the environment
  before anything is imported, exactly as a user would, and the subprocess pushes, tags, pushes
  again, and reads back with ``load_dataset`` and ``hf_hub_download``. Its sockets may reach only
  the loopback interface.

Every push runs the real validator. The end-to-end run pushes the sample build (``built_sample``);
the other tests build small folders here with ``datasets`` and the project's features, so they can
vary shards, rows and files.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import yaml
from PIL import Image as PILImage

from orandcar_builder.dataset.features import configs_block, features, qa_fields
from orandcar_builder.errors import OrandCarError
from orandcar_builder.publish import (
    FileChange,
    HubPermissionError,
    HubTimeoutError,
    InvalidFolderError,
    LocalFile,
    MissingTokenError,
    PushError,
    PushResult,
    RemoteFile,
    TagConflictError,
    UnexpectedFilesError,
    check_gated,
    check_repo_id,
    folder_files,
    format_push_result,
    hash_file,
    plan_changes,
    plan_commits,
    push,
    redact,
)
from orandcar_builder.vocab import CONFIGS
from tests.hubserver import HubServer, git_blob_id, silent_endpoint

TESTS = Path(__file__).resolve().parent
REPO = "orandcar-org/OrandCar-test"
READ_TOKEN = "hf_read_only_test_token_0123456789"


# -- a dataset folder in the Hub layout ---------------------------------------------------------


def png(seed: int) -> bytes:
    image = PILImage.new("RGB", (6, 4), ((seed * 37) % 256, (seed * 91) % 256, (seed * 53) % 256))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def config_rows(config: str, count: int, variant: str) -> list[dict]:
    rows = []
    for i in range(count):
        data = png(CONFIGS.index(config) * 100 + i)
        values = {"question": f"What word is shown? ({config} {i})", "think": "letters, one by one",
                  "answer": f"WORD{i}{variant}", "org_answer": f"WORD{i}", "verifier": "alnum",
                  "wrong_vlm": f"W0RD{i}{variant}", "reason": "wrong_answer"}
        source = {"dataset": "sample", "split": "test", "id": f"{config}-{i}", "origin": "benchmark",
                  "family": "scene_text", "references": [f"WORD{i}"], "options": []}
        rows.append({
            "image": {"bytes": data, "path": f"img{i}.png"},
            "image_sha256": hashlib.sha256(data).hexdigest(),
            "qa": [{name: values[name] for name in qa_fields(config)}],
            "clean_meta": {"policy": "test-policy", "sources": [source], "actions": []},
        })
    return rows


def card_text(title: str, folder: Path | None = None, links: tuple[str, ...] = ()) -> str:
    """A card whose ``dataset_info`` describes the shards in ``folder`` (as the builder's card does)
    and whose body links ``links``."""
    data = {"license": "cc-by-4.0", "configs": configs_block()}
    if folder is not None:
        from orandcar_builder.card import config_sizes, dataset_info

        data["dataset_info"] = dataset_info(config_sizes(folder, {}))
    header = yaml.safe_dump(data, sort_keys=False)
    body = "".join(f"![example]({link})\n" for link in links)
    return f"---\n{header}---\n# {title}\n{body}"


def write_dataset_folder(folder: Path, *, rows: int = 3, shards: int = 1, variant: str = "",
                         example: bool = True) -> Path:
    """A dataset folder as the builder writes it: README.md with ``configs:``, parquet shards, an example image."""
    from datasets import Dataset

    folder.mkdir(parents=True, exist_ok=True)
    for config in CONFIGS:
        (folder / config).mkdir(exist_ok=True)
        for old in (folder / config).glob("train-*.parquet"):
            old.unlink()
        all_rows = config_rows(config, rows, variant)
        for k in range(shards):
            part = all_rows[k::shards]
            columns = {name: [row[name] for row in part] for name in ("image", "image_sha256", "qa", "clean_meta")}
            Dataset.from_dict(columns, features=features(config)).to_parquet(
                str(folder / config / f"train-{k:05d}-of-{shards:05d}.parquet"))
    if example:
        (folder / "examples").mkdir(exist_ok=True)
        (folder / "examples" / "rejected-0.png").write_bytes(png(200))
    links = ("examples/rejected-0.png",) if example else ()
    (folder / "README.md").write_text(card_text(f"test dataset {variant or 'v1'}", folder, links), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def folder_v1(tmp_path_factory) -> Path:
    return write_dataset_folder(tmp_path_factory.mktemp("v1") / "OrandCar")


@pytest.fixture(scope="module")
def folder_v2(tmp_path_factory) -> Path:
    return write_dataset_folder(tmp_path_factory.mktemp("v2") / "OrandCar", variant="-v2")


# -- in-process fixtures ------------------------------------------------------------------------


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The test hub, with the in-process huggingface_hub client pointed at it and HF_TOKEN set."""
    import huggingface_hub.constants as constants

    with HubServer(tmp_path / "hub", read_tokens=[READ_TOKEN]) as server:
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        # downloads (the card of a previous tag, the shards `orandcar diff` reads) build their URLs
        # from this template, which the client computes from HF_ENDPOINT when it is imported
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
        monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
        for name in ("HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HF_TOKEN", server.token)
        yield server


def quiet_push(folder, **kwargs) -> PushResult:
    return push(folder, kwargs.pop("repo_id", REPO), progress=False, **kwargs)


def writes(server: HubServer) -> list:
    return [r for r in server.log if r.method in ("POST", "PUT", "DELETE")
            and r.route not in ("paths-info", "validate-yaml")]


# -- pure parts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("repo_id", ["org/name", "ORG-1/Orand.Car_v2", "a/b"])
def test_check_repo_id_accepts_full_ids(repo_id):
    assert check_repo_id(repo_id) == repo_id


@pytest.mark.parametrize("repo_id", ["OrandCar", "org/", "/name", "org/na/me", "org/na--me", "org/na..me",
                                     "org/-name", "org/na me", ""])
def test_check_repo_id_refuses_bare_or_malformed_ids(repo_id):
    with pytest.raises(PushError, match="ORG/NAME"):
        check_repo_id(repo_id)


@pytest.mark.parametrize("gated", ["auto", "manual", False])
def test_check_gated_accepts_hub_modes(gated):
    assert check_gated(gated) == gated


@pytest.mark.parametrize("gated", ["yes", True, None, "Auto"])
def test_check_gated_refuses_other_values(gated):
    with pytest.raises(PushError, match="gated must be one of auto, manual"):
        check_gated(gated)


def test_hash_file_gives_sha256_and_git_blob_id(tmp_path):
    path = tmp_path / "hello.txt"
    path.write_bytes(b"hello\n")
    # `git hash-object` of "hello\n" is ce0136...
    assert hash_file(path) == (hashlib.sha256(b"hello\n").hexdigest(), "ce013625030ba8dba906f756967f9e9ca394464a")


def test_a_file_the_hub_keeps_in_lfs_is_hashed_once_without_its_git_blob_id(tmp_path):
    """At LFS_SIZE_THRESHOLD bytes and more the Hub matches a file by its LFS sha256: the blob id is
    not computed (benchmarks/README.md: the unchanged 2 GB re-push decision), and a remote regular
    file can never match such a file (it is sent again, never skipped unseen)."""
    from orandcar_builder.publish import LFS_SIZE_THRESHOLD, _local_files

    for name, size in (("below.bin", LFS_SIZE_THRESHOLD - 1), ("at.bin", LFS_SIZE_THRESHOLD)):
        (tmp_path / name).write_bytes(b"\x01" * size)
    below, at = _local_files(tmp_path, ["below.bin", "at.bin"], progress=False)
    assert below.git_oid == git_blob_id((tmp_path / "below.bin").read_bytes()) and at.git_oid is None
    assert at.sha256 == hashlib.sha256((tmp_path / "at.bin").read_bytes()).hexdigest()
    as_regular = RemoteFile("at.bin", at.size, blob_id=git_blob_id((tmp_path / "at.bin").read_bytes()))
    as_lfs = RemoteFile("at.bin", at.size, blob_id="0" * 40, lfs_sha256=at.sha256)
    assert not as_regular.matches(at) and as_lfs.matches(at)
    assert plan_changes([at], {"at.bin": as_regular})[0] == [FileChange("at.bin", at.size, "update")]


def test_folder_files_are_the_dataset_layout_only(tmp_path):
    for name in ("README.md", "rejected/train-00000-of-00001.parquet", ".cache/huggingface/x", ".DS_Store",
                 "examples/.hidden.png", "examples/rejected-1.png", ".orandcar-dataset", "secrets.txt",
                 "work/manifest.json", "RS_think/notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    assert folder_files(tmp_path) == ["README.md", "examples/rejected-1.png", "rejected/train-00000-of-00001.parquet"]


def local(path: str, content: bytes) -> LocalFile:
    return LocalFile(path, Path(path), len(content), hashlib.sha256(content).hexdigest(), git_blob_id(content))


def test_plan_changes_compares_lfs_sha256_and_git_blob_ids():
    files = [local("README.md", b"card"), local("rejected/train-00000-of-00001.parquet", b"shard"),
             local("RS_think/train-00000-of-00001.parquet", b"new shard"), local("examples/a.png", b"png")]
    remote = {
        ".gitattributes": RemoteFile(".gitattributes", 10, "x"),
        "README.md": RemoteFile("README.md", 9, git_blob_id(b"old card")),
        "rejected/train-00000-of-00001.parquet": RemoteFile(
            "rejected/train-00000-of-00001.parquet", 5, "pointer-id", hashlib.sha256(b"shard").hexdigest()),
        "examples/a.png": RemoteFile("examples/a.png", 3, git_blob_id(b"png")),
        "rejected/train-00001-of-00002.parquet": RemoteFile("rejected/train-00001-of-00002.parquet", 7, "y", "z"),
        "LICENSE": RemoteFile("LICENSE", 4, "w"),
        "other/file.txt": RemoteFile("other/file.txt", 4, "v"),
    }
    uploads, unchanged, deletions = plan_changes(files, remote)
    assert uploads == [FileChange("README.md", 4, "update"),
                       FileChange("RS_think/train-00000-of-00001.parquet", 9, "add")]
    assert unchanged == ["rejected/train-00000-of-00001.parquet", "examples/a.png"]
    # a stale shard in a folder the build owns goes; top-level files and foreign folders stay
    assert deletions == [FileChange("rejected/train-00001-of-00002.parquet", 7, "delete")]


def test_plan_commits_bounds_files_and_bytes_and_puts_readme_last():
    uploads = [FileChange("README.md", 1, "add")] + [FileChange(f"c/f{i}", 10, "add") for i in range(5)]
    assert [[c.path for c in batch] for batch in plan_commits(uploads, max_files=2, max_bytes=10**6)] == [
        ["c/f0", "c/f1"], ["c/f2", "c/f3"], ["c/f4", "README.md"]]
    assert [[c.path for c in batch] for batch in plan_commits(uploads, max_files=100, max_bytes=25)] == [
        ["c/f0", "c/f1"], ["c/f2", "c/f3"], ["c/f4", "README.md"]]
    big = [FileChange("a/big", 100, "add"), FileChange("a/small", 1, "add")]
    assert [[c.path for c in batch] for batch in plan_commits(big, max_files=10, max_bytes=50)] == [
        ["a/big"], ["a/small"]]
    assert plan_commits([], 10, 10) == []


def test_redact_replaces_every_occurrence():
    assert redact("a SECRET b SECRET", "SECRET") == "a <token> b <token>"
    assert redact("nothing", None) == "nothing"


def result(**overrides) -> PushResult:
    fields = dict(repo_id=REPO, revision="main", url="http://hub/datasets/" + REPO, dry_run=False,
                  created_repo=True, created_branch=False, gated="auto", gating_changed=True, made_private=False,
                  uploads=(FileChange("rejected/train-00000-of-00001.parquet", 12345, "add"),
                           FileChange("README.md", 800, "add")),
                  unchanged=(), deletions=(), commits=("a" * 40,), head="a" * 40, tag="v1.0", tag_created=True)
    fields.update(overrides)
    return PushResult(**fields)


def test_format_push_result_for_a_first_push():
    assert format_push_result(result()) == textwrap.dedent(f"""\
        {REPO} @ main (http://hub/datasets/{REPO})
          create the dataset repo
          set gating to 'auto'
          add rejected/train-00000-of-00001.parquet (12.3 kB)
          add README.md (800 B)
          2 file(s), 13.1 kB uploaded in 1 commit(s); 0 deleted; 0 unchanged
          tag v1.0 at aaaaaaaaaaaa
          head: {"a" * 40}""")


def test_format_push_result_for_a_dry_run_and_a_no_op():
    dry = result(dry_run=True, commits=(), head=None)
    text = format_push_result(dry)
    assert text.startswith(f"dry run: {REPO} @ main")
    assert "  would create the dataset repo" in text and "  would tag v1.0" in text and "head:" not in text
    noop = result(created_repo=False, gating_changed=False, uploads=(), unchanged=("README.md", "x/y"),
                  commits=(), tag=None, tag_created=False)
    assert format_push_result(noop).splitlines()[1:] == [
        "  gating: 'auto' (unchanged)", "  nothing to upload: all 2 file(s) match the Hub; no commit",
        f"  head: {'a' * 40}"]
    assert not noop.changed and result().changed


# -- refusals before any request -------------------------------------------------------------------


def test_invalid_folder_is_refused_before_any_request(hub, tmp_path):
    folder = write_dataset_folder(tmp_path / "ds")
    (folder / "rejected" / "train-00000-of-00001.parquet").rename(folder / "rejected" / "train-00003-of-00001.parquet")
    with pytest.raises(InvalidFolderError) as info:
        quiet_push(folder)
    assert any(line.startswith("rejected/train-00003-of-00001.parquet") for line in info.value.problems)
    assert "refusing to push" in str(info.value) and "orandcar validate" in str(info.value)
    assert isinstance(info.value, OrandCarError)
    assert hub.log == []


@pytest.mark.parametrize("extra", ["secrets.txt", "work/manifest.json", "work/cache/generations.sqlite",
                                   "README.md.tmp", "rejected/.train-00000.parquet.partial", ".env"])
def test_files_outside_the_layout_are_refused_with_their_list(hub, tmp_path, extra):
    folder = write_dataset_folder(tmp_path / "ds")
    (folder / extra).parent.mkdir(parents=True, exist_ok=True)
    (folder / extra).write_text("hf_secret_value")
    with pytest.raises(UnexpectedFilesError) as info:
        quiet_push(folder)
    top = extra.split("/")[0] + "/" if extra.startswith("work/") else extra
    assert info.value.files == [top] and top in str(info.value)
    assert hub.log == []


def test_symlink_in_the_folder_is_refused_and_not_followed(hub, tmp_path):
    folder = write_dataset_folder(tmp_path / "ds")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private.txt").write_text("x")
    (folder / "more").symlink_to(elsewhere)
    with pytest.raises(UnexpectedFilesError, match=r"more \(symbolic link\)"):
        quiet_push(folder)
    assert hub.log == []


def test_marker_file_stays_local(hub, tmp_path):
    from orandcar_builder.dataset.layout import MARKER, write_marker

    folder = write_dataset_folder(tmp_path / "ds")
    write_marker(folder)
    quiet_push(folder)
    assert MARKER not in hub.files(REPO)


@pytest.mark.parametrize("option,name", [("tag", "v1 .0"), ("tag", "v1..0"), ("tag", "-v1"), ("tag", "v1.lock"),
                                         ("tag", "a~b"), ("revision", "feat:x"), ("revision", "br/"),
                                         ("revision", "refs/heads/x"), ("tag", ""), ("revision", "a\nb")])
def test_bad_tag_or_branch_names_are_refused_before_any_request(hub, folder_v1, option, name):
    with pytest.raises(PushError, match="not a valid git ref name"):
        quiet_push(folder_v1, **{option: name})
    assert hub.log == []


def test_silent_endpoint_times_out_with_a_clear_message(tmp_path, monkeypatch, folder_v1):
    """An endpoint that accepts connections and never answers: the push ends, naming the limit."""
    import time

    start = time.monotonic()
    with silent_endpoint(monkeypatch, "hf_timeout_test_token") as accepted:
        with pytest.raises(HubTimeoutError, match=r"did not answer within 0.5 s"):
            quiet_push(folder_v1, timeout=0.5)
    assert accepted and time.monotonic() - start < 30


@pytest.mark.parametrize("route", ["repo-info", "commit"])
def test_a_request_that_outlives_the_timeout_ends_the_push(hub, folder_v1, route):
    """The Hub stops answering mid-push (reading the repo, committing; requests the client sends
    once): the push ends within a few multiples of ``timeout``, naming the limit, and the shared
    client is left without the limit afterwards."""
    import time

    from huggingface_hub import get_session

    hooks_before = list(get_session().event_hooks["request"])
    skip = 1 if route == "repo-info" else 0  # the first repo-info is the 404 of a new repo
    hub.stall_next(route, 20, skip=skip)
    start = time.monotonic()
    with pytest.raises(HubTimeoutError, match=r"did not answer within 0.5 s"):
        quiet_push(folder_v1, timeout=0.5)
    assert time.monotonic() - start < 10
    assert not hub.state.failures[route]  # the stall was reached
    assert get_session().event_hooks["request"] == hooks_before


def test_a_stalled_request_the_client_retries_is_cut_and_sent_again(hub, folder_v1):
    """huggingface_hub retries preupload and the LFS requests on a timeout: the stalled attempt is
    cut after ``timeout`` and the push completes on the next one, in seconds rather than the 20 s
    the Hub holds the first attempt."""
    import time

    for route in ("preupload", "lfs-upload", "resolve"):  # resolve: the read-back after the commit
        hub.stall_next(route, 20)
    start = time.monotonic()
    assert quiet_push(folder_v1, timeout=0.5).commits
    assert time.monotonic() - start < 15
    assert not any(hub.state.failures[route] for route in ("preupload", "lfs-upload", "resolve"))  # all stalled
    assert all(hub.calls(route) for route in ("preupload", "lfs-upload", "resolve"))  # and answered later


def test_a_slow_answer_within_the_timeout_is_waited_for(hub, folder_v1):
    hub.stall_next("commit", 0.3)
    assert quiet_push(folder_v1, timeout=5).commits


def test_nested_time_limits_keep_the_shortest_and_restore_the_outer(hub):
    import httpx2
    from huggingface_hub import HfApi, get_session

    from orandcar_builder.publish import hub_timeout

    hub.stall_next("whoami", 2)
    with hub_timeout(30):
        with hub_timeout(0.3), pytest.raises(httpx2.TimeoutException):
            HfApi().whoami()
        assert len(get_session().event_hooks["request"]) >= 1
        hub.stall_next("whoami", 0.6)
        assert HfApi().whoami()["name"]


def test_missing_folder_is_refused(hub, tmp_path):
    with pytest.raises(PushError, match="not a folder"):
        quiet_push(tmp_path / "nowhere")
    assert hub.log == []


def test_missing_token_is_a_clear_error_before_any_request(hub, monkeypatch, folder_v1):
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(MissingTokenError, match="HF_TOKEN"):
        quiet_push(folder_v1)
    assert hub.log == []


def test_a_dry_run_without_a_token_lists_the_uploads_offline(hub, monkeypatch, folder_v1):
    """No HF_TOKEN, no login: the dry run reads nothing from the Hub (not even the test hub, nor
    any other address) and lists every file the folder would send; the CLI exits 0."""
    from click.testing import CliRunner

    import orandcar_builder.publish as publish
    from orandcar_builder.cli import main

    monkeypatch.delenv("HF_TOKEN")

    def no_network(*args, **kwargs):
        raise AssertionError("a dry run without a token made a Hub client")

    monkeypatch.setattr(publish, "HfApi", no_network)
    dry = quiet_push(folder_v1, dry_run=True, tag="v1.0")
    assert dry.offline and dry.dry_run and dry.commits == () and dry.tag == "v1.0"
    assert [c.path for c in dry.uploads] == folder_files(folder_v1) and {c.action for c in dry.uploads} == {"add"}
    assert dry.upload_bytes == sum((folder_v1 / path).stat().st_size for path in folder_files(folder_v1))
    run = CliRunner().invoke(main, ["push", str(folder_v1), "--repo", REPO, "--dry-run", "--no-progress"])
    assert run.exit_code == 0, run.output
    assert run.output.startswith(f"dry run, offline: {REPO} @ main") and "no Hugging Face token" in run.output
    for path in folder_files(folder_v1):
        assert f"would upload {path} (" in run.output
    assert hub.log == []
    with pytest.raises(MissingTokenError):  # a real push still needs one
        quiet_push(folder_v1)


# -- pushes through the server -------------------------------------------------------------------


def test_first_push_creates_gates_uploads_and_tags(hub, folder_v1):
    res = quiet_push(folder_v1, tag="v1.0")
    assert res.created_repo and res.gating_changed and res.tag_created and not res.dry_run
    assert [r.summary for r in hub.calls("settings")] == [{"gated": "auto"}]
    routes = [r.route for r in writes(hub)]
    # the repo is gated before any data arrives, and tagged after the last commit
    assert routes.index("settings") < routes.index("commit") and routes[-1] == "create-tag"
    assert hub.repo(REPO).gated == "auto" and not hub.repo(REPO).private
    expected = folder_files(folder_v1)
    assert sorted(p for p in hub.files(REPO) if p != ".gitattributes") == expected
    for path in expected:
        assert hub.read(REPO, path, revision="v1.0") == (folder_v1 / path).read_bytes()
    assert hub.repo(REPO).tags == {"v1.0": res.head} and res.commits == (res.head,)
    # parquet shards and images travel through LFS, the card as a regular file
    assert hub.files(REPO)["rejected/train-00000-of-00001.parquet"].lfs
    assert hub.files(REPO)["examples/rejected-0.png"].lfs and not hub.files(REPO)["README.md"].lfs


def test_second_push_of_the_same_folder_makes_no_commit(hub, folder_v1):
    first = quiet_push(folder_v1)
    hub.clear_log()
    again = quiet_push(folder_v1)
    assert again.commits == () and again.uploads == () and again.head == first.head and not again.changed
    assert writes(hub) == []
    assert sorted(again.unchanged) == folder_files(folder_v1)


def test_dry_run_lists_the_plan_and_writes_nothing(hub, folder_v1, folder_v2):
    dry = quiet_push(folder_v1, dry_run=True, tag="v1.0")
    assert dry.dry_run and dry.created_repo and dry.gating_changed and dry.tag_created
    assert sorted(c.path for c in dry.uploads) == folder_files(folder_v1)
    assert writes(hub) == [] and hub.state.repos == {}
    quiet_push(folder_v1)
    hub.clear_log()
    dry = quiet_push(folder_v2, dry_run=True)
    assert not dry.created_repo and not dry.gating_changed
    assert {c.path for c in dry.uploads} == {f"{c}/train-00000-of-00001.parquet" for c in CONFIGS} | {"README.md"}
    assert all(c.action == "update" for c in dry.uploads) and dry.unchanged == ("examples/rejected-0.png",)
    assert writes(hub) == [] and {r.method for r in hub.log} == {"GET"}
    assert "would update README.md" in format_push_result(dry)


def test_large_push_is_split_into_commits_with_the_card_last(hub, tmp_path):
    folder = write_dataset_folder(tmp_path / "big", rows=4, shards=2)
    res = quiet_push(folder, commit_max_files=3)
    assert len(res.commits) == 3  # 6 shards + 1 example + README.md, three per commit
    history = hub.history(REPO)
    assert [c.title for c in history[:3]] == [f"Upload dataset (part {i} of 3)" for i in (3, 2, 1)]
    last_ops = hub.calls("commit")[-1].summary["ops"]
    assert ("file", "README.md") in last_ops and len(last_ops) == 2
    assert [r.summary["parentCommit"] for r in hub.calls("commit")] == [c.oid for c in reversed(history[1:4])]


def test_interrupted_push_resumes_without_uploading_committed_files(hub, tmp_path):
    folder = write_dataset_folder(tmp_path / "big", rows=4, shards=2)
    hub.fail_next("commit", status=503, message="the Hub is restarting", skip=1)
    with pytest.raises(PushError, match="HTTP 503.*the Hub is restarting"):
        quiet_push(folder, commit_max_files=3)
    committed = {path for op, path in hub.calls("commit")[0].summary["ops"]}
    assert len(committed) == 3 and len(hub.history(REPO)) == 2  # initial commit + part 1
    hub.clear_log()
    res = quiet_push(folder, commit_max_files=3)
    assert committed.isdisjoint(c.path for c in res.uploads) and set(res.unchanged) == committed
    assert len(res.commits) == 2
    uploaded = {oid for r in hub.calls("lfs-batch") for oid in r.summary["oids"]}
    assert uploaded.isdisjoint(hash_file(folder / p)[0] for p in committed)
    assert sorted(p for p in hub.files(REPO) if p != ".gitattributes") == folder_files(folder)


def test_push_deletes_stale_shards_and_keeps_foreign_files(hub, tmp_path):
    folder = write_dataset_folder(tmp_path / "ds", rows=4, shards=2)
    quiet_push(folder)
    from huggingface_hub import HfApi

    HfApi().upload_file(path_or_fileobj=b"MIT", path_in_repo="LICENSE", repo_id=REPO, repo_type="dataset")
    write_dataset_folder(folder, rows=4, shards=1)
    res = quiet_push(folder)
    stale = {f"{c}/train-0000{k}-of-00002.parquet" for c in CONFIGS for k in (0, 1)}
    assert {c.path for c in res.deletions} == stale
    remote = set(hub.files(REPO))
    assert remote.isdisjoint(stale) and "LICENSE" in remote and ".gitattributes" in remote
    assert {p for p in remote if p not in ("LICENSE", ".gitattributes")} == set(folder_files(folder))


def test_existing_tag_is_never_moved(hub, folder_v1, folder_v2):
    first = quiet_push(folder_v1, tag="v1.0")
    hub.clear_log()
    # not onto another commit, and not again onto the same one: a published tag names one version for good
    for folder in (folder_v2, folder_v1):
        with pytest.raises(TagConflictError, match="tag v1.0 already exists at commit .* never moved or overwritten"):
            quiet_push(folder, tag="v1.0")
    assert writes(hub) == [] and hub.repo(REPO).tags == {"v1.0": first.head}


def test_push_to_a_new_branch_leaves_main_alone(hub, folder_v1, folder_v2):
    main = quiet_push(folder_v1)
    res = quiet_push(folder_v2, revision="v2-preview")
    assert res.created_branch and hub.repo(REPO).branches["main"] == main.head
    assert hub.read(REPO, "README.md", revision="v2-preview") == (folder_v2 / "README.md").read_bytes()
    assert [r.summary["revision"] for r in hub.calls("commit")][-1] == "v2-preview"


def test_private_push_creates_a_private_repo(hub, folder_v1):
    quiet_push(folder_v1, private=True, gated="manual")
    assert hub.repo(REPO).private and hub.repo(REPO).gated == "manual"
    assert hub.calls("create-repo")[0].summary["private"] is True


def test_ungated_push_makes_no_settings_call(hub, folder_v1):
    quiet_push(folder_v1, gated=False)
    assert hub.calls("settings") == [] and hub.repo(REPO).gated is False


def test_wrong_token_is_a_clear_error_without_the_token(hub, monkeypatch, folder_v1):
    secret = "hf_wrong_token_that_must_not_leak_42"
    monkeypatch.setenv("HF_TOKEN", secret)
    with pytest.raises(HubPermissionError) as info:
        quiet_push(folder_v1)
    text = str(info.value)
    assert "HTTP 401" in text and "HF_TOKEN" in text and secret not in text
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert {r.auth for r in hub.log} == {"invalid"} and writes(hub) == []


def test_read_only_token_is_refused_at_the_first_write(hub, folder_v1):
    with pytest.raises(HubPermissionError, match="HTTP 403") as info:
        quiet_push(folder_v1, token=READ_TOKEN)
    assert READ_TOKEN not in str(info.value)
    assert hub.state.repos == {} and [r.route for r in writes(hub)] == ["create-repo"]


def test_token_never_appears_in_output_or_logs(hub, folder_v1, capsys, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    res = push(folder_v1, REPO, tag="v1.0", progress=True)
    print(format_push_result(res))
    print(repr(res))
    captured = capsys.readouterr()
    assert "pushing" in captured.err or "hashing" in captured.err  # the progress display ran
    for text in (captured.out, captured.err, caplog.text, repr(hub.log)):
        assert hub.token not in text
    assert not any(hub.token.encode() in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_cli_push_prints_the_result_and_never_the_token(hub, folder_v1):
    from click.testing import CliRunner

    from orandcar_builder.cli import main

    run = CliRunner().invoke(main, ["push", str(folder_v1), "--repo", REPO, "--tag", "v1.0", "--no-progress"])
    assert run.exit_code == 0, run.output
    assert f"{REPO} @ main" in run.output and "set gating to 'auto'" in run.output and "tag v1.0 at" in run.output
    assert hub.token not in run.output and hub.repo(REPO).tags.keys() == {"v1.0"}
    dry = CliRunner().invoke(main, ["push", str(folder_v1), "--repo", REPO, "--dry-run", "--no-progress"])
    assert dry.exit_code == 0 and "nothing to upload" in dry.output and len(hub.calls("commit")) == 1


def test_cli_push_with_a_wrong_token_fails_cleanly(hub, monkeypatch, folder_v1):
    from click.testing import CliRunner

    from orandcar_builder.cli import main

    monkeypatch.setenv("HF_TOKEN", "hf_cli_wrong_token_987654321")
    run = CliRunner().invoke(main, ["push", str(folder_v1), "--repo", REPO, "--no-progress"])
    assert run.exit_code != 0 and "HTTP 401" in run.output and "hf_cli_wrong_token_987654321" not in run.output
    assert run.exception is None or isinstance(run.exception, SystemExit)


# -- end to end in a subprocess: the client configured by its environment, as a user runs it ----------

CLIENT = r'''
import hashlib, json, sys
from tests import hubserver
hubserver.forbid_network()

import datasets
datasets.config.USE_PARQUET_EXPORT = False
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import GatedRepoError
from orandcar_builder.publish import format_push_result, push

repo, folder, tampered = sys.argv[1:4]
SHARD = "rejected/train-00000-of-00001.parquet"

def report(step, **data):
    print(json.dumps({"step": step, **data}), flush=True)

def pushed(step, res):
    print(format_push_result(res), file=sys.stderr)
    report(step, commits=list(res.commits), head=res.head, tag_created=res.tag_created,
           uploads=[c.path for c in res.uploads], gating_changed=res.gating_changed)

def rows(config, revision, checks="basic_checks"):
    ds = datasets.load_dataset(repo, config, revision=revision, split="train", verification_mode=checks)
    ds = ds.cast_column("image", datasets.Image(decode=False))
    return [{"hash": hashlib.sha256(r["image"]["bytes"]).hexdigest(), "image_sha256": r["image_sha256"],
             "qa": r["qa"]} for r in ds]

pushed("push", push(folder, repo, tag="v1.0", progress=True))
pushed("push-again", push(folder, repo, progress=True))
HfApi().upload_file(path_or_fileobj=tampered, path_in_repo=SHARD, repo_id=repo, repo_type="dataset",
                    commit_message="change main behind the tag")
report("load-tag", rejected=rows("rejected", "v1.0"), think=rows("RS_think", "v1.0"))
report("load-main", rejected=rows("rejected", None, "no_checks"))  # the card still counts the old rows
pushed("push-restore", push(folder, repo, progress=False))
head = HfApi().dataset_info(repo).sha

def exact(ds):  # every column of every row, the image as its stored bytes and path
    ds = ds.cast_column("image", datasets.Image(decode=False))
    return [row_digest(r) for r in ds]

def row_digest(r):
    r = dict(r, image={"bytes": r["image"]["bytes"].hex(), "path": r["image"]["path"]})
    return hashlib.sha256(json.dumps(r, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

report("users", **{
    "rejected": exact(datasets.load_dataset(repo, "rejected", split="train")),
    "rejected@commit": exact(datasets.load_dataset(repo, "rejected", split="train", revision=head)),
    "RS_think/streaming": exact(datasets.load_dataset(repo, "RS_think", split="train", streaming=True)),
    "RS_think/streaming@v1.0": exact(datasets.load_dataset(repo, "RS_think", split="train", streaming=True,
                                                           revision="v1.0")),
    "RS_nothink@v1.0": exact(datasets.load_dataset(repo, "RS_nothink", split="train", revision="v1.0")),
    "features": {c: datasets.load_dataset(repo, c, split="train", streaming=True).features.to_dict()
                 for c in ("rejected", "RS_think", "RS_nothink")},
})
path = hf_hub_download(repo, SHARD, repo_type="dataset", revision="v1.0")
report("download", sha256=hashlib.sha256(open(path, "rb").read()).hexdigest())
try:
    hf_hub_download(repo, "README.md", repo_type="dataset", token=False, cache_dir="anonymous-cache")
    report("anonymous", error=None)
except GatedRepoError as err:
    report("anonymous", error=type(err).__name__)
'''


def parquet_rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return [{"hash": hashlib.sha256(r["image"]["bytes"]).hexdigest(), "image_sha256": r["image_sha256"],
             "qa": r["qa"]} for r in pq.read_table(path).to_pylist()]


@pytest.fixture(scope="module")
def end_to_end(tmp_path_factory, built_sample):
    """One client run: push the sample build tagged v1.0, push it again, change main behind the tag,
    read both back with load_dataset, push again (restores main), download the tagged shard."""
    import shutil

    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("e2e")
    folder = root / "OrandCar"  # a tagged push writes the Versions section into the folder's card
    shutil.copytree(built_sample, folder)
    shard = folder / "rejected" / "train-00000-of-00001.parquet"
    table = pq.read_table(shard)
    assert table.num_rows >= 1, "the sample build has no rejected rows to read back"
    tampered = root / "tampered.parquet"
    pq.write_table(table.slice(1), tampered)  # one row fewer; the features metadata stays
    with HubServer(root / "hub") as server:
        env = server.client_env(root / "hf-home")
        env["PYTHONPATH"] = str(TESTS.parent)
        proc = subprocess.run([sys.executable, "-c", CLIENT, REPO, str(folder), str(tampered)],
                              env=env, capture_output=True, text=True, timeout=300, cwd=root)
        steps = {}
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                item = json.loads(line)
                steps[item.pop("step")] = item
        yield types.SimpleNamespace(proc=proc, steps=steps, server=server, token=server.token,
                                    folder=folder, tampered=tampered, root=root)


@pytest.mark.slow
def test_end_to_end_client_run_succeeds(end_to_end):
    assert end_to_end.proc.returncode == 0, end_to_end.proc.stderr[-4000:]
    assert list(end_to_end.steps) == ["push", "push-again", "load-tag", "load-main", "push-restore", "users",
                                      "download", "anonymous"]


def exact_rows(path: Path) -> list[str]:
    """The digest of each row of a shard as the client's ``row_digest`` computes it."""
    import pyarrow.parquet as pq

    out = []
    for r in pq.read_table(path).to_pylist():
        r = dict(r, image={"bytes": r["image"]["bytes"].hex(), "path": r["image"]["path"]})
        out.append(hashlib.sha256(json.dumps(r, sort_keys=True, ensure_ascii=False).encode()).hexdigest())
    return out


@pytest.mark.slow
def test_end_to_end_users_load_every_row_byte_for_byte(end_to_end):
    """What a user's load_dataset returns after the push, plain, streaming and pinned to a tag or a
    commit: every column of every row as the shard holds it, in order, the image as its bytes."""
    users, folder = end_to_end.steps["users"], end_to_end.folder
    shard = {config: folder / config / "train-00000-of-00001.parquet" for config in CONFIGS}
    assert users["rejected"] == users["rejected@commit"] == exact_rows(shard["rejected"])
    assert users["RS_think/streaming"] == users["RS_think/streaming@v1.0"] == exact_rows(shard["RS_think"])
    assert users["RS_nothink@v1.0"] == exact_rows(shard["RS_nothink"])
    assert all(users[key] for key in ("rejected", "RS_think/streaming", "RS_nothink@v1.0"))
    assert users["features"] == {config: features(config).to_dict() for config in CONFIGS}


@pytest.mark.slow
def test_end_to_end_push_gates_and_tags(end_to_end):
    first = end_to_end.steps["push"]
    assert first["gating_changed"] and first["tag_created"] and len(first["commits"]) == 1
    assert sorted(first["uploads"]) == folder_files(end_to_end.folder)
    assert [r.summary for r in end_to_end.server.calls("settings")] == [{"gated": "auto"}]
    assert end_to_end.server.repo(REPO).tags == {"v1.0": first["head"]}


@pytest.mark.slow
def test_end_to_end_second_push_makes_no_commit(end_to_end):
    again = end_to_end.steps["push-again"]
    assert again["commits"] == [] and again["uploads"] == [] and again["head"] == end_to_end.steps["push"]["head"]
    pushes = [r for r in end_to_end.server.calls("commit") if r.summary["summary"].startswith("Upload dataset")]
    assert len(pushes) == 2  # the first push and the restoring one


@pytest.mark.slow
def test_end_to_end_tag_reads_exactly_that_version(end_to_end):
    folder, loaded = end_to_end.folder, end_to_end.steps["load-tag"]
    assert loaded["rejected"] == parquet_rows(folder / "rejected" / "train-00000-of-00001.parquet")
    assert loaded["think"] == parquet_rows(folder / "RS_think" / "train-00000-of-00001.parquet")
    assert loaded["rejected"] and all(r["hash"] == r["image_sha256"] for r in loaded["rejected"] + loaded["think"])
    assert end_to_end.steps["load-main"]["rejected"] == parquet_rows(end_to_end.tampered)
    assert len(end_to_end.steps["load-main"]["rejected"]) == len(loaded["rejected"]) - 1


@pytest.mark.slow
def test_end_to_end_rerun_uploads_only_what_differs(end_to_end):
    restore = end_to_end.steps["push-restore"]
    assert restore["uploads"] == ["rejected/train-00000-of-00001.parquet"] and len(restore["commits"]) == 1
    shard = end_to_end.folder / "rejected" / "train-00000-of-00001.parquet"
    assert end_to_end.server.read(REPO, "rejected/train-00000-of-00001.parquet") == shard.read_bytes()


@pytest.mark.slow
def test_end_to_end_hf_hub_download_returns_the_tagged_bytes(end_to_end):
    shard = end_to_end.folder / "rejected" / "train-00000-of-00001.parquet"
    assert end_to_end.steps["download"]["sha256"] == hashlib.sha256(shard.read_bytes()).hexdigest()


@pytest.mark.slow
def test_end_to_end_gated_repo_refuses_anonymous_downloads(end_to_end):
    assert end_to_end.steps["anonymous"]["error"] == "GatedRepoError"


@pytest.mark.slow
def test_end_to_end_token_never_in_output(end_to_end):
    output = end_to_end.proc.stdout + end_to_end.proc.stderr
    assert end_to_end.token not in output
    assert f"{REPO} @ main" in end_to_end.proc.stderr  # the formatted results were printed
    # Neither the dataset folder and its work dir nor the client's HF_HOME (caches, downloads)
    # holds the token.
    client_home = end_to_end.root / "hf-home"
    assert client_home.is_dir()
    for place in (end_to_end.folder.parent, client_home):
        assert not any(end_to_end.token.encode() in p.read_bytes() for p in place.rglob("*") if p.is_file())
