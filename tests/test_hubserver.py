"""The local Hub-protocol server (tests/hubserver.py) against the real huggingface_hub client.

The client runs in-process with the server's URL passed as ``endpoint`` (HfApi, hf_hub_download,
HfFileSystem all take one) and Xet switched off for the test; raw requests check what the client
does not expose (headers, ranges, signatures, chunked bodies).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, HfFileSystem, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.hubserver import DEFAULT_GITATTRIBUTES, HubServer, git_blob_id, lfs_pointer

REPO = "org/demo"
READ_TOKEN = "hf_read_only_0123456789abcdef"
BINARY = bytes(range(256)) * 8  # has NUL bytes: the Hub stores it through LFS
CARD = b"---\nlicense: mit\n---\n# demo\n"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    with HubServer(tmp_path / "hub", read_tokens=[READ_TOKEN]) as server:
        yield server


@pytest.fixture
def api(hub) -> HfApi:
    return HfApi(endpoint=hub.url, token=hub.token)


def seeded(api: HfApi, files: dict[str, bytes]) -> str:
    """Create the dataset repo and commit ``files`` (path -> content); the commit id."""
    api.create_repo(REPO, repo_type="dataset")
    ops = [CommitOperationAdd(path, data) for path, data in files.items()]
    return api.create_commit(REPO, ops, commit_message="seed", repo_type="dataset").oid


def raw(hub: HubServer, method: str, path: str, *, token: str | None = "write", headers: dict | None = None,
        body: bytes | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of a request made without the client."""
    headers = dict(headers or {})
    if token is not None:
        headers["Authorization"] = f"Bearer {hub.token if token == 'write' else token}"
    request = urllib.request.Request(hub.url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


# -- repos and settings ---------------------------------------------------------------------------


def test_create_repo_starts_with_the_hubs_initial_commit(hub, api):
    url = api.create_repo(REPO, repo_type="dataset")
    assert url == f"{hub.url}/datasets/{REPO}" and url.repo_id == REPO and url.repo_type == "dataset"
    info = api.dataset_info(REPO)
    assert [s.rfilename for s in info.siblings] == [".gitattributes"] and len(info.sha) == 40
    assert hub.read(REPO, ".gitattributes") == DEFAULT_GITATTRIBUTES.encode()
    with pytest.raises(HfHubHTTPError) as info409:
        api.create_repo(REPO, repo_type="dataset")
    assert info409.value.response.status_code == 409
    assert api.create_repo(REPO, repo_type="dataset", exist_ok=True).repo_id == REPO
    with pytest.raises(RepositoryNotFoundError):
        api.dataset_info("org/missing")


def test_settings_change_gating_and_visibility(hub, api):
    api.create_repo(REPO, repo_type="dataset")
    assert api.dataset_info(REPO).gated is False
    api.update_repo_settings(REPO, gated="manual", repo_type="dataset")
    api.update_repo_settings(REPO, private=True, repo_type="dataset")
    info = api.dataset_info(REPO)
    assert info.gated == "manual" and info.private is True
    assert [r.summary for r in hub.calls("settings")] == [{"gated": "manual"}, {"visibility": "private"}]
    with pytest.raises(RepositoryNotFoundError):  # a private repo is invisible without a token
        HfApi(endpoint=hub.url, token=False).dataset_info(REPO)
    status, _, body = raw(hub, "PUT", f"/api/datasets/{REPO}/settings", body=json.dumps({"gated": "yes"}).encode(),
                          headers={"Content-Type": "application/json"})
    assert status == 400 and b"invalid gated value" in body


# -- uploads and listings ---------------------------------------------------------------------------


def test_commit_stores_regular_and_lfs_files(hub, api):
    head = seeded(api, {"README.md": CARD, "data/train.parquet": BINARY, "notes.txt": b"plain text\n"})
    assert hub.calls("preupload")[0].summary["modes"] == {
        "README.md": "regular", "data/train.parquet": "lfs", "notes.txt": "regular"}
    files = hub.files(REPO)
    assert files["data/train.parquet"].lfs and not files["README.md"].lfs and not files["notes.txt"].lfs
    assert [r.route for r in hub.log if r.route.startswith("lfs")] == ["lfs-batch", "lfs-upload", "lfs-verify"]
    tree = {f.path: f for f in api.list_repo_tree(REPO, recursive=True, repo_type="dataset")}
    assert set(tree) == {".gitattributes", "README.md", "notes.txt", "data", "data/train.parquet"}
    lfs_file = tree["data/train.parquet"]
    assert lfs_file.lfs.sha256 == hashlib.sha256(BINARY).hexdigest() and lfs_file.size == len(BINARY)
    assert lfs_file.blob_id == git_blob_id(lfs_pointer(lfs_file.lfs.sha256, len(BINARY)))
    assert lfs_file.lfs.pointer_size == len(lfs_pointer(lfs_file.lfs.sha256, len(BINARY)))
    assert tree["README.md"].blob_id == git_blob_id(CARD) and tree["README.md"].lfs is None
    top = [f.path for f in api.list_repo_tree(REPO, repo_type="dataset")]
    assert top == ["data", ".gitattributes", "README.md", "notes.txt"]  # folders first, one level only
    infos = api.get_paths_info(REPO, ["README.md", "data", "missing"], repo_type="dataset", revision=head)
    assert [type(i).__name__ for i in infos] == ["RepoFile", "RepoFolder"]
    assert api.list_repo_commits(REPO, repo_type="dataset")[0].title == "seed"


def test_unchanged_files_make_no_commit(hub, api):
    head = seeded(api, {"README.md": CARD, "data/train.parquet": BINARY})
    hub.clear_log()
    same = [CommitOperationAdd("README.md", CARD), CommitOperationAdd("data/train.parquet", BINARY)]
    again = api.create_commit(REPO, same, commit_message="again", repo_type="dataset")
    assert again.oid == head and hub.calls("commit") == []
    assert {r.route for r in hub.log} <= {"validate-yaml", "preupload", "lfs-batch", "repo-info"}
    # the object is already stored: the LFS batch answer has no upload action
    assert hub.calls("lfs-upload") == []


def test_delete_file_and_folder(hub, api):
    seeded(api, {"README.md": CARD, "a/x.txt": b"x", "a/y.txt": b"y", "b/z.txt": b"z"})
    api.delete_file("b/z.txt", REPO, repo_type="dataset")
    api.create_commit(REPO, [CommitOperationDelete("a/")], commit_message="drop a", repo_type="dataset")
    assert set(hub.files(REPO)) == {".gitattributes", "README.md"}
    with pytest.raises(EntryNotFoundError):
        api.delete_file("nope.txt", REPO, repo_type="dataset")


def test_stale_parent_commit_is_refused(hub, api):
    first = seeded(api, {"README.md": CARD})
    api.create_commit(REPO, [CommitOperationAdd("x.txt", b"1")], commit_message="one", repo_type="dataset")
    with pytest.raises(HfHubHTTPError) as info:
        api.create_commit(REPO, [CommitOperationAdd("y.txt", b"2")], commit_message="two", repo_type="dataset",
                          parent_commit=first)
    assert info.value.response.status_code == 412


def test_commit_of_an_lfs_object_never_uploaded_is_refused(hub, api):
    seeded(api, {"README.md": CARD})
    lines = [{"key": "header", "value": {"summary": "sneaky"}},
             {"key": "lfsFile", "value": {"path": "x.bin", "algo": "sha256", "oid": "0" * 64, "size": 3}}]
    status, _, body = raw(hub, "POST", f"/api/datasets/{REPO}/commit/main",
                          body=b"".join(json.dumps(line).encode() + b"\n" for line in lines),
                          headers={"Content-Type": "application/x-ndjson"})
    assert status == 400 and b"never uploaded" in body and "x.bin" not in hub.files(REPO)


def test_broken_card_yaml_is_refused_by_the_client(hub, api):
    api.create_repo(REPO, repo_type="dataset")
    with pytest.raises(ValueError, match="Invalid metadata in README.md"):
        api.create_commit(REPO, [CommitOperationAdd("README.md", b"---\nkey: [unclosed\n---\n")],
                          commit_message="bad card", repo_type="dataset")
    assert hub.calls("commit") == []


def test_tree_listing_is_paginated(hub, api):
    seeded(api, {f"d/f{i}.txt": str(i).encode() for i in range(7)})
    hub.state.tree_page_size = 3
    listed = [f.path for f in api.list_repo_tree(REPO, recursive=True, repo_type="dataset")]
    assert sorted(listed) == sorted([".gitattributes", "d"] + [f"d/f{i}.txt" for i in range(7)])
    assert [r.summary["cursor"] for r in hub.calls("tree")] == [0, 3, 6]
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(REPO, path_in_repo="nowhere", repo_type="dataset"))


def test_tree_expand_gives_last_commits(hub, api):
    first = seeded(api, {"a.txt": b"a", "d/b.txt": b"b"})
    second = api.create_commit(REPO, [CommitOperationAdd("d/b.txt", b"B")], commit_message="change b",
                               repo_type="dataset").oid
    entries = {e.path: e for e in api.list_repo_tree(REPO, recursive=True, expand=True, repo_type="dataset")}
    assert entries["a.txt"].last_commit.oid == first and entries["d/b.txt"].last_commit.oid == second
    assert entries["d"].last_commit.oid == second and entries["d"].last_commit.title == "change b"


# -- branches, tags, revisions ---------------------------------------------------------------------


def test_tags_are_immutable_snapshots(hub, api, tmp_path):
    v1 = seeded(api, {"README.md": CARD, "data/train.parquet": BINARY})
    api.create_tag(REPO, tag="v1.0", repo_type="dataset")
    api.create_commit(REPO, [CommitOperationAdd("data/train.parquet", BINARY[::-1])], commit_message="v2",
                      repo_type="dataset")

    def download(revision):
        return Path(hf_hub_download(REPO, "data/train.parquet", repo_type="dataset", revision=revision,
                                    endpoint=hub.url, token=hub.token, cache_dir=tmp_path / "cache")).read_bytes()

    assert download("v1.0") == BINARY and download("main") == BINARY[::-1] and download(v1[:7]) == BINARY
    refs = api.list_repo_refs(REPO, repo_type="dataset")
    assert [(t.name, t.target_commit) for t in refs.tags] == [("v1.0", v1)]
    assert [b.name for b in refs.branches] == ["main"] and refs.branches[0].target_commit != v1
    with pytest.raises(HfHubHTTPError) as info:
        api.create_tag(REPO, tag="v1.0", repo_type="dataset")
    assert info.value.response.status_code == 409
    api.create_tag(REPO, tag="v1.0", repo_type="dataset", exist_ok=True)
    with pytest.raises(RevisionNotFoundError):
        api.dataset_info(REPO, revision="v9")


def test_branches_take_commits_and_tags_do_not(hub, api):
    main = seeded(api, {"README.md": CARD})
    api.create_branch(REPO, branch="preview", repo_type="dataset")
    api.create_commit(REPO, [CommitOperationAdd("x.txt", b"x")], commit_message="p", repo_type="dataset",
                      revision="preview")
    assert "x.txt" in hub.files(REPO, "preview") and hub.repo(REPO).branches["main"] == main
    api.create_tag(REPO, tag="t1", repo_type="dataset")
    with pytest.raises(RevisionNotFoundError):
        api.create_commit(REPO, [CommitOperationAdd("y.txt", b"y")], commit_message="t", repo_type="dataset",
                          revision="t1")


# -- downloads ---------------------------------------------------------------------------------------


def test_resolve_head_get_and_ranges(hub, api):
    head = seeded(api, {"README.md": CARD, "data/train.parquet": BINARY})
    sha = hashlib.sha256(BINARY).hexdigest()
    base = f"/datasets/{REPO}/resolve/main"
    status, headers, body = raw(hub, "HEAD", f"{base}/data/train.parquet")
    assert status == 200 and body == b"" and headers["X-Repo-Commit"] == head
    assert headers["ETag"] == f'"{sha}"' and headers["X-Linked-Etag"] == f'"{sha}"'
    assert headers["X-Linked-Size"] == headers["Content-Length"] == str(len(BINARY))
    status, headers, _ = raw(hub, "HEAD", f"{base}/README.md")
    assert headers["ETag"] == f'"{git_blob_id(CARD)}"' and "X-Linked-Etag" not in headers
    status, headers, body = raw(hub, "GET", f"{base}/data/train.parquet", headers={"Range": "bytes=2-5"})
    assert status == 206 and body == BINARY[2:6] and headers["Content-Range"] == f"bytes 2-5/{len(BINARY)}"
    assert raw(hub, "GET", f"{base}/data/train.parquet", headers={"Range": "bytes=-4"})[2] == BINARY[-4:]
    assert raw(hub, "GET", f"{base}/data/train.parquet", headers={"Range": "bytes=2040-"})[2] == BINARY[2040:]
    status, headers, _ = raw(hub, "GET", f"{base}/data/train.parquet", headers={"Range": f"bytes={len(BINARY)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(BINARY)}"
    status, headers, _ = raw(hub, "HEAD", f"{base}/missing.txt")
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound" and headers["X-Repo-Commit"] == head
    assert raw(hub, "HEAD", f"/datasets/{REPO}/resolve/nobranch/README.md")[1]["X-Error-Code"] == "RevisionNotFound"
    assert raw(hub, "HEAD", "/datasets/org/none/resolve/main/README.md")[1]["X-Error-Code"] == "RepoNotFound"


def test_hf_file_system_reads_ranges(hub, api):
    seeded(api, {"data/train.parquet": BINARY})
    fs = HfFileSystem(endpoint=hub.url, token=hub.token, skip_instance_cache=True)
    assert fs.ls(f"datasets/{REPO}/data", detail=False) == [f"datasets/{REPO}/data/train.parquet"]
    with fs.open(f"datasets/{REPO}/data/train.parquet", "rb", block_size=64) as handle:
        handle.seek(1000)
        assert handle.read(10) == BINARY[1000:1010]
    assert any(r.route == "resolve" and r.summary["range"] for r in hub.log)


# -- authorisation --------------------------------------------------------------------------------


def test_writes_need_the_write_token(hub, api):
    anonymous = HfApi(endpoint=hub.url, token=False)
    with pytest.raises(HfHubHTTPError) as info:
        anonymous.create_repo(REPO, repo_type="dataset")
    assert info.value.response.status_code == 401
    wrong = HfApi(endpoint=hub.url, token="hf_wrong")
    with pytest.raises(HfHubHTTPError) as info:
        wrong.dataset_info("org/anything")
    assert info.value.response.status_code == 401 and not isinstance(info.value, RepositoryNotFoundError)
    reader = HfApi(endpoint=hub.url, token=READ_TOKEN)
    with pytest.raises(HfHubHTTPError) as info:
        reader.create_repo(REPO, repo_type="dataset")
    assert info.value.response.status_code == 403
    seeded(api, {"README.md": CARD})
    assert reader.dataset_info(REPO).id == REPO
    assert [r.auth for r in hub.log[:3]] == ["none", "invalid", "read"]
    assert hub.token not in repr(hub.log) and READ_TOKEN not in repr(hub.log)


def test_gated_repo_refuses_anonymous_downloads(hub, api, tmp_path):
    seeded(api, {"README.md": CARD})
    api.update_repo_settings(REPO, gated="auto", repo_type="dataset")
    with pytest.raises(GatedRepoError):
        hf_hub_download(REPO, "README.md", repo_type="dataset", endpoint=hub.url, token=False,
                        cache_dir=tmp_path / "cache")
    path = hf_hub_download(REPO, "README.md", repo_type="dataset", endpoint=hub.url, token=hub.token,
                           cache_dir=tmp_path / "cache")
    assert Path(path).read_bytes() == CARD


def test_lfs_upload_links_check_signature_and_content(hub, api):
    api.create_repo(REPO, repo_type="dataset")
    data = b"\0payload"
    oid = hashlib.sha256(data).hexdigest()
    batch = json.dumps({"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": len(data)}],
                        "hash_algo": "sha256"}).encode()
    status, _, body = raw(hub, "POST", f"/datasets/{REPO}.git/info/lfs/objects/batch", body=batch,
                          headers={"Content-Type": "application/vnd.git-lfs+json"})
    href = json.loads(body)["objects"][0]["actions"]["upload"]["href"]
    path = href[len(hub.url):]
    assert raw(hub, "PUT", path.replace("sig=", "sig=0"), token=None, body=data)[0] == 403
    assert raw(hub, "PUT", path, token=None, body=b"\0other!!")[0] == 400
    assert raw(hub, "PUT", path, token=None, body=data)[0] == 200
    status, _, body = raw(hub, "POST", f"/datasets/{REPO}.git/info/lfs/objects/batch", body=batch,
                          headers={"Content-Type": "application/vnd.git-lfs+json"})
    assert "actions" not in json.loads(body)["objects"][0]  # already stored: nothing to upload


def test_chunked_request_bodies_are_read(hub, api):
    api.create_repo(REPO, repo_type="dataset")
    host, port = hub.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port))
    body = json.dumps({"gated": "auto"}).encode()
    connection.request("PUT", f"/api/datasets/{REPO}/settings", body=iter([body[:5], body[5:]]),
                       headers={"Authorization": f"Bearer {hub.token}", "Content-Type": "application/json"},
                       encode_chunked=True)
    assert connection.getresponse().status == 200
    connection.close()
    assert hub.repo(REPO).gated == "auto"


def test_injected_failures_answer_in_order(hub, api):
    api.create_repo(REPO, repo_type="dataset")
    hub.fail_next("commit", status=503, message="down for a moment", skip=1)
    api.create_commit(REPO, [CommitOperationAdd("a.txt", b"a")], commit_message="ok", repo_type="dataset")
    with pytest.raises(HfHubHTTPError, match="down for a moment"):
        api.create_commit(REPO, [CommitOperationAdd("b.txt", b"b")], commit_message="fails", repo_type="dataset")
    api.create_commit(REPO, [CommitOperationAdd("b.txt", b"b")], commit_message="ok again", repo_type="dataset")
    assert [r.status for r in hub.calls("commit")] == [200, 503, 200]


def test_client_subprocess_cannot_reach_the_network(hub, tmp_path):
    script = (
        "import socket, urllib.request, os\n"
        "from tests import hubserver\n"
        "hubserver.forbid_network()\n"
        "for attempt in [lambda: socket.socket().connect(('10.255.255.1', 80)),\n"
        "                lambda: socket.create_connection(('example.com', 443), timeout=1)]:\n"
        "    try:\n"
        "        attempt()\n"
        "        print('reached')\n"
        "    except OSError as err:\n"
        "        print('refused', type(err).__name__)\n"
        "print(urllib.request.urlopen(os.environ['HF_ENDPOINT'] + '/api/whoami-v2').status)\n"
    )
    env = hub.client_env(tmp_path / "home", token=None)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split("\n")[:2] == ["refused ConnectionRefusedError", "refused gaierror"], proc.stderr
    assert "401" in proc.stderr  # the loopback server was reached (and refused the anonymous whoami)
    assert env["HF_HUB_DISABLE_XET"] == "1" and "HF_TOKEN" not in env and env["HF_ENDPOINT"] == hub.url
