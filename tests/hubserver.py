"""A local stand-in for the Hugging Face Hub HTTP API, for tests.

It speaks the part of the protocol that the real ``huggingface_hub`` client (HfApi, hf_hub_download,
HfFileSystem) and ``datasets.load_dataset`` use: repo creation and settings, repo info, refs,
branches and tags, preupload, the LFS batch API with its upload and verify links, the NDJSON commit
endpoint (also with ``create_pr=1``, which opens a pull request ``refs/pr/N``), tree and paths-info
listings (paginated), commit history, README YAML validation, and ``resolve`` with HEAD, GET and
Range.

Storage lives in a temporary directory: every object by its sha256 under ``objects/``, every commit
an immutable snapshot (path -> entry) with a 40-hex id, branches and tags pointing at commits, so a
tag reads exactly the version it was made on.

Every request is recorded (route name, method, decoded path, query, status, which kind of token it
carried, a summary of its body) so tests can assert on the calls a client made. The token itself is
never recorded. Writes need the server's write token: no or a wrong ``Authorization`` header gets 401,
a read-only token gets 403. Gated or private repos refuse anonymous downloads.

The client must see ``HF_ENDPOINT`` before ``huggingface_hub`` is imported; ``HubServer.client_env``
returns the environment for a subprocess that runs the client side, and ``forbid_network()`` makes
such a subprocess fail loudly on any connection that does not go to the loopback interface.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fnmatch
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterable
from urllib.parse import parse_qs, quote, unquote, urlsplit

import yaml

USER = "orandcar-tester"
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024  # the Hub stores anything this large through LFS
TREE_PAGE_SIZE = 1000  # the Hub's page size for tree listings
TREE_PAGE_SIZE_EXPANDED = 50
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"

# The patterns the Hub writes into the .gitattributes of a new repo (a representative subset).
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.gz", "*.h5", "*.joblib", "*.lz4",
        "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.parquet", "*.pickle", "*.pkl", "*.pt",
        "*.pth", "*.safetensors", "*.tar", "*.tflite", "*.zip", "*.zst",
        "*.png", "*.jpg", "*.jpeg", "*.webp", "*.gif", "*.bmp", "*.tif", "*.tiff",
        "*.mp3", "*.wav", "*.flac", "*.ogg", "*.mp4", "*.webm",
    )
)

_SPECIAL_REF = re.compile(r"^refs/(pr/\d+|convert/[^/]+)")
_HEX = re.compile(r"^[0-9a-f]{7,40}$")


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob with this content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Entry:
    """One file in a commit's tree."""

    path: str
    size: int
    sha256: str
    lfs: bool
    blob_id: str  # git id of the content, or of the LFS pointer for LFS files

    @classmethod
    def make(cls, path: str, sha256: str, size: int, lfs: bool, content: bytes | None = None) -> "Entry":
        if lfs:
            return cls(path, size, sha256, True, git_blob_id(lfs_pointer(sha256, size)))
        assert content is not None
        return cls(path, size, sha256, False, git_blob_id(content))

    def as_json(self) -> dict:
        out = {"type": "file", "oid": self.blob_id, "size": self.size, "path": self.path}
        if self.lfs:
            out["lfs"] = {"oid": self.sha256, "size": self.size,
                          "pointerSize": len(lfs_pointer(self.sha256, self.size))}
        return out


@dataclass(frozen=True)
class Commit:
    oid: str
    parent: str | None
    tree: dict  # path -> Entry; never mutated after creation
    title: str
    message: str
    date: str


@dataclass
class Repo:
    type: str
    repo_id: str
    private: bool
    gated: str | bool = False
    created_at: str = field(default_factory=_now)
    commits: dict = field(default_factory=dict)  # oid -> Commit
    branches: dict = field(default_factory=dict)  # name -> oid
    tags: dict = field(default_factory=dict)  # name -> oid
    pulls: dict = field(default_factory=dict)  # "refs/pr/N" -> oid of the pull request's head


@dataclass(frozen=True)
class RecordedRequest:
    """What the server saw of one request. ``auth`` is "none", "invalid", "read" or "write"."""

    route: str
    method: str
    path: str
    query: dict
    status: int
    auth: str
    summary: dict


class HubError(Exception):
    """An HTTP error answer, with the headers the client uses to pick an exception class."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None,
                 extra: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})  # more keys for the JSON body


class HubState:
    """Repos, objects and the request log, shared by the handler threads under one lock."""

    def __init__(self, root: Path, token: str, read_tokens: Iterable[str] = ()):
        self.root = root
        self.objects = root / "objects"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.token = token
        self.read_tokens = set(read_tokens)
        self.repos: dict[tuple[str, str], Repo] = {}
        self.log: list[RecordedRequest] = []
        self.lock = threading.RLock()
        self.secret = secrets.token_bytes(16)
        self.tree_page_size = TREE_PAGE_SIZE
        self.failures: dict[str, list] = {}  # route -> [None (serve it), (status, message) or ("stall", s)], in order
        self.stopped = threading.Event()  # set when the server stops: ends every stall at once
        self.tamper = None  # (path, bytes) -> bytes: what a commit stores for a file it adds (a faulty Hub)
        self._counter = 0

    # -- objects -----------------------------------------------------------------------------

    def has_object(self, sha256: str, size: int | None = None) -> bool:
        path = self.objects / sha256
        return path.is_file() and (size is None or path.stat().st_size == size)

    def put_object(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        path = self.objects / sha
        if not path.exists():
            tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return sha

    def object_path(self, sha256: str) -> Path:
        return self.objects / sha256

    def upload_signature(self, oid: str, size: int) -> str:
        return hmac.new(self.secret, f"{oid}:{size}".encode(), hashlib.sha256).hexdigest()

    # -- commits -------------------------------------------------------------------------------

    def new_commit(self, repo: Repo, parent: str | None, tree: dict, title: str, message: str = "") -> Commit:
        self._counter += 1
        digest = hashlib.sha1()
        for part in (parent or "", title, message, str(self._counter), repo.repo_id):
            digest.update(part.encode() + b"\0")
        for path in sorted(tree):
            digest.update(f"{path}\0{tree[path].blob_id}\0".encode())
        commit = Commit(digest.hexdigest(), parent, dict(tree), title, message, _now())
        repo.commits[commit.oid] = commit
        return commit

    def create_repo(self, repo_type: str, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_type, repo_id, private)
        data = DEFAULT_GITATTRIBUTES.encode()
        sha = self.put_object(data)
        tree = {".gitattributes": Entry.make(".gitattributes", sha, len(data), False, data)}
        first = self.new_commit(repo, None, tree, "initial commit")
        repo.branches["main"] = first.oid
        self.repos[(repo_type, repo_id)] = repo
        return repo

    @staticmethod
    def resolve(repo: Repo, revision: str) -> Commit | None:
        """A branch, a tag, a full commit id or a commit id prefix of at least 7 characters."""
        oid = repo.branches.get(revision) or repo.tags.get(revision) or repo.pulls.get(revision)
        if oid is None and revision in repo.commits:
            oid = revision
        if oid is None and _HEX.match(revision):
            found = [c for c in repo.commits if c.startswith(revision)]
            oid = found[0] if len(found) == 1 else None
        return repo.commits.get(oid) if oid else None


def is_lfs_path(path: str, gitattributes: str) -> bool:
    for line in gitattributes.splitlines():
        parts = line.split()
        if len(parts) >= 2 and "filter=lfs" in parts[1:]:
            pattern = parts[0]
            if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern):
                return True
    return False


def _directories(tree: dict) -> set[str]:
    dirs = set()
    for path in tree:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return dirs


def _tree_id(tree: dict, directory: str) -> str:
    prefix = directory + "/"
    digest = hashlib.sha1(directory.encode())
    for path in sorted(p for p in tree if p.startswith(prefix)):
        digest.update(f"{path}\0{tree[path].blob_id}\0".encode())
    return digest.hexdigest()


def _split_revision(raw_segments: list[str]) -> tuple[str, list[str]]:
    """The revision at the head of URL path segments (``refs/pr/1`` may come unquoted), and the rest."""
    first = unquote(raw_segments[0])
    if first == "refs" and len(raw_segments) >= 3:
        candidate = "/".join(unquote(s) for s in raw_segments[:3])
        if _SPECIAL_REF.match(candidate):
            return candidate, raw_segments[3:]
    return first, raw_segments[1:]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format, *args):  # noqa: A002 - the recorded log replaces stderr noise
        pass

    # -- plumbing ------------------------------------------------------------------------------

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    @property
    def state(self) -> HubState:
        return self.server.state

    @property
    def base_url(self) -> str:
        return self.server.url

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _auth(self) -> str:
        header = self.headers.get("Authorization")
        if not header:
            return "none"
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer":
            return "invalid"
        if hmac.compare_digest(value.strip(), self.state.token):
            return "write"
        if value.strip() in self.state.read_tokens:
            return "read"
        return "invalid"

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        raw_path = split.path
        query = {k: v if len(v) > 1 else v[0] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        auth = self._auth()
        body = self._read_body() if self.command in ("POST", "PUT", "DELETE") else b""
        route, summary = "unknown", {}
        try:
            if auth == "invalid":
                raise HubError(401, INVALID_CREDENTIALS, headers={"X-Error-Message": INVALID_CREDENTIALS})
            route, handler, args = self._route(raw_path)
            with self.state.lock:
                planned = self.state.failures.get(route)
                failure = planned.pop(0) if planned else None
            if failure is not None and failure[0] == "stall":  # accept the request, answer late
                self.state.stopped.wait(failure[1])
            elif failure is not None:
                raise HubError(failure[0], failure[1])
            status, headers, payload = handler(*args, query=query, body=body, auth=auth, summary=summary)
        except HubError as err:
            status, payload = err.status, json.dumps({"error": err.message, **err.extra}).encode()
            headers = {"Content-Type": "application/json", **err.headers}
            if err.code:
                headers["X-Error-Code"] = err.code
            headers.setdefault("X-Error-Message", err.message)
        except Exception as err:  # a bug in the server: answer 500 and keep the message for the test
            status, payload = 500, json.dumps({"error": f"test hub server error: {err!r}"}).encode()
            headers = {"Content-Type": "application/json"}
        with self.state.lock:
            self.state.log.append(
                RecordedRequest(route, self.command, unquote(raw_path), query, status, auth, summary)
            )
        self._send(status, headers, payload)

    def _send(self, status: int, headers: dict, payload: bytes) -> None:
        self.send_response(status)
        headers = dict(headers)
        headers.setdefault("Content-Length", str(len(payload)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD" and payload:
            self.wfile.write(payload)

    @staticmethod
    def _json(data, status: int = 200, headers: dict | None = None) -> tuple[int, dict, bytes]:
        return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(data).encode()

    def _route(self, raw_path: str):
        """(route name, handler, positional args) for a raw URL path."""
        if raw_path == "/api/whoami-v2":
            return "whoami", self._whoami, ()
        if raw_path == "/api/repos/create" and self.command == "POST":
            return "create-repo", self._create_repo, ()
        if raw_path == "/api/repos/delete" and self.command == "DELETE":
            return "delete-repo", self._delete_repo, ()
        if raw_path == "/api/validate-yaml" and self.command == "POST":
            return "validate-yaml", self._validate_yaml, ()
        match = re.match(r"^/_lfs/(upload|verify)/([0-9a-f]{64})$", raw_path)
        if match:
            return f"lfs-{match.group(1)}", getattr(self, f"_lfs_{match.group(1)}"), (match.group(2),)
        match = re.match(r"^/api/(models|datasets|spaces)/([^/]+)/([^/]+)(?:/(.*))?$", raw_path)
        if match:
            repo_type = REPO_TYPES[match.group(1)]
            repo_id = f"{unquote(match.group(2))}/{unquote(match.group(3))}"
            rest = match.group(4)
            return self._api_route(repo_type, repo_id, rest.split("/") if rest else [])
        match = re.match(r"^/(?:(datasets|spaces)/)?([^/]+)/([^/]+?)\.git/info/lfs/objects/batch$", raw_path)
        if match and self.command == "POST":
            repo_type = REPO_TYPES[match.group(1)] if match.group(1) else "model"
            return "lfs-batch", self._lfs_batch, (repo_type, f"{unquote(match.group(2))}/{unquote(match.group(3))}")
        match = re.match(r"^/(?:(datasets|spaces)/)?([^/]+)/([^/]+)/resolve/(.+)$", raw_path)
        if match and self.command in ("GET", "HEAD"):
            repo_type = REPO_TYPES[match.group(1)] if match.group(1) else "model"
            revision, rest = _split_revision(match.group(4).split("/"))
            filename = unquote("/".join(rest))
            return "resolve", self._resolve, (repo_type, f"{unquote(match.group(2))}/{unquote(match.group(3))}",
                                              revision, filename)
        raise HubError(404, f"no such endpoint on the test hub: {self.command} {raw_path}")

    def _api_route(self, repo_type: str, repo_id: str, segments: list[str]):
        method = self.command
        head = segments[0] if segments else ""
        args = (repo_type, repo_id)
        if not segments and method == "GET":
            return "repo-info", self._repo_info, (*args, "main", False)
        if head == "revision" and len(segments) >= 2 and method == "GET":
            revision, _ = _split_revision(segments[1:])
            return "repo-info", self._repo_info, (*args, revision, True)
        if head == "settings" and method == "PUT":
            return "settings", self._settings, args
        if head in ("preupload", "commit", "paths-info", "tag", "branch", "commits", "tree") and len(segments) >= 2:
            revision, rest = _split_revision(segments[1:])
            if head == "preupload" and method == "POST":
                return "preupload", self._preupload, (*args, revision)
            if head == "commit" and method == "POST":
                return "commit", self._commit, (*args, revision)
            if head == "paths-info" and method == "POST":
                return "paths-info", self._paths_info, (*args, revision)
            if head == "tag" and method == "POST":
                return "create-tag", self._create_tag, (*args, revision)
            if head == "tag" and method == "DELETE":
                return "delete-tag", self._delete_tag, (*args, revision)
            if head == "branch" and method == "POST":
                return "create-branch", self._create_branch, (*args, revision)
            if head == "branch" and method == "DELETE":
                return "delete-branch", self._delete_branch, (*args, revision)
            if head == "commits" and method == "GET":
                return "commits", self._commits, (*args, revision)
            if head == "tree" and method == "GET":
                return "tree", self._tree, (*args, revision, unquote("/".join(rest)).strip("/"))
        if head == "refs" and method == "GET":
            return "refs", self._refs, args
        raise HubError(404, f"no such endpoint on the test hub: {method} {repo_type} {repo_id} /{'/'.join(segments)}")

    # -- access checks ---------------------------------------------------------------------------

    def _repo(self, repo_type: str, repo_id: str, auth: str, *, write: bool = False) -> Repo:
        if write:
            self._require_write(auth)
        repo = self.state.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and auth == "none"):
            raise HubError(404, f"Repository not found: {repo_type} {repo_id}", "RepoNotFound")
        return repo

    @staticmethod
    def _require_write(auth: str) -> None:
        if auth == "none":
            raise HubError(401, "You must be authenticated to write to the Hub")
        if auth == "read":
            raise HubError(403, "You don't have the rights to write with this token (read-only token)")

    def _commit_at(self, repo: Repo, revision: str) -> Commit:
        commit = self.state.resolve(repo, revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    @staticmethod
    def _json_body(body: bytes) -> dict:
        try:
            data = json.loads(body or b"{}")
        except ValueError as exc:
            raise HubError(400, f"body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise HubError(400, "body is not a JSON object")
        return data

    # -- account, repos, settings -----------------------------------------------------------------

    def _whoami(self, *, query, body, auth, summary):
        if auth == "none":
            raise HubError(401, "Invalid username or password.")
        role = "write" if auth == "write" else "read"
        return self._json({"type": "user", "name": USER, "fullname": "OrandCar Tester", "orgs": [],
                           "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": role}}})

    def _create_repo(self, *, query, body, auth, summary):
        self._require_write(auth)
        data = self._json_body(body)
        repo_type = data.get("type") or "model"
        name, organization = data.get("name"), data.get("organization") or USER
        visibility = data.get("visibility")
        private = visibility == "private" if visibility is not None else bool(data.get("private"))
        summary.update(type=repo_type, name=name, organization=organization, private=private)
        if repo_type not in URL_PREFIX or not name or "/" in name:
            raise HubError(400, f"invalid repo type or name: {repo_type!r} {name!r}")
        repo_id = f"{organization}/{name}"
        url = f"{self.base_url}/{URL_PREFIX[repo_type]}{repo_id}"
        with self.state.lock:
            if (repo_type, repo_id) in self.state.repos:
                raise HubError(409, f"You already created this {repo_type} repo", extra={"url": url})
            self.state.create_repo(repo_type, repo_id, private)
        return self._json({"url": url, "name": repo_id, "id": repo_id})

    def _delete_repo(self, *, query, body, auth, summary):
        self._require_write(auth)
        data = self._json_body(body)
        repo_type = data.get("type") or "model"
        repo_id = f"{data.get('organization') or USER}/{data.get('name')}"
        summary.update(type=repo_type, repo_id=repo_id)
        with self.state.lock:
            if self.state.repos.pop((repo_type, repo_id), None) is None:
                raise HubError(404, f"Repository not found: {repo_id}", "RepoNotFound")
        return self._json({})

    def _settings(self, repo_type, repo_id, *, query, body, auth, summary):
        data = self._json_body(body)
        summary.update(data)
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth, write=True)
            if "gated" in data:
                if data["gated"] not in ("auto", "manual", False):
                    raise HubError(400, f"invalid gated value {data['gated']!r}")
                repo.gated = data["gated"]
            if "visibility" in data:
                repo.private = data["visibility"] == "private"
            elif "private" in data:
                repo.private = bool(data["private"])
        return self._json({})

    def _validate_yaml(self, *, query, body, auth, summary):
        data = self._json_body(body)
        content = data.get("content") or ""
        summary.update(repoType=data.get("repoType"), chars=len(content))
        if content.startswith("---"):
            end = content.find("\n---", 3)
            if end < 0:
                return self._json({"errors": [{"message": "YAML header is not closed"}], "warnings": []}, 400)
            try:
                header = yaml.safe_load(content[3:end])
            except yaml.YAMLError as exc:
                return self._json({"errors": [{"message": f"invalid YAML: {exc}"}], "warnings": []}, 400)
            if header is not None and not isinstance(header, dict):
                return self._json({"errors": [{"message": "YAML header is not a mapping"}], "warnings": []}, 400)
        return self._json({"errors": [], "warnings": []})

    def _repo_info(self, repo_type, repo_id, revision, explicit, *, query, body, auth, summary):
        summary.update(revision=revision)
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth)
            commit = self._commit_at(repo, revision)
        blobs = str(query.get("blobs", "")).lower() in ("1", "true")
        siblings = []
        for path in sorted(commit.tree):
            entry = commit.tree[path]
            sibling = {"rfilename": path}
            if blobs:
                sibling.update(size=entry.size, blobId=entry.blob_id)
                if entry.lfs:
                    sibling["lfs"] = {"size": entry.size, "sha256": entry.sha256,
                                      "pointerSize": len(lfs_pointer(entry.sha256, entry.size))}
            siblings.append(sibling)
        namespace = repo_id.split("/")[0]
        return self._json({
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id, "author": namespace,
            "sha": commit.oid, "lastModified": commit.date, "createdAt": repo.created_at,
            "private": repo.private, "gated": repo.gated, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "siblings": siblings, "usedStorage": sum(e.size for e in commit.tree.values()),
        })

    # -- refs, branches, tags, history ----------------------------------------------------------

    def _refs(self, repo_type, repo_id, *, query, body, auth, summary):
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth)
            branches = [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": o}
                        for n, o in sorted(repo.branches.items())]
            tags = [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": o} for n, o in sorted(repo.tags.items())]
            pulls = [{"name": n, "ref": n, "targetCommit": o} for n, o in sorted(repo.pulls.items())]
        include = str(query.get("include_prs", "")).lower() in ("1", "true")
        return self._json({"branches": branches, "converts": [], "tags": tags,
                           "pullRequests": pulls if include else []})

    def _create_tag(self, repo_type, repo_id, revision, *, query, body, auth, summary):
        data = self._json_body(body)
        tag = data.get("tag")
        summary.update(tag=tag, revision=revision)
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth, write=True)
            commit = self._commit_at(repo, revision)
            if not tag or not isinstance(tag, str):
                raise HubError(400, "tag name missing")
            if tag in repo.tags:
                raise HubError(409, f"Tag {tag} already exists")
            if tag in repo.branches:
                raise HubError(409, f"A branch named {tag} already exists")
            repo.tags[tag] = commit.oid
        return self._json({})

    def _delete_tag(self, repo_type, repo_id, tag, *, query, body, auth, summary):
        summary.update(tag=tag)
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth, write=True)
            if repo.tags.pop(tag, None) is None:
                raise HubError(404, f"Invalid rev id: {tag}", "RevisionNotFound")
        return self._json({})

    def _create_branch(self, repo_type, repo_id, branch, *, query, body, auth, summary):
        data = self._json_body(body)
        summary.update(branch=branch, startingPoint=data.get("startingPoint"))
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth, write=True)
            if branch in repo.branches or branch in repo.tags:
                raise HubError(409, f"Reference {branch} already exists")
            start = self._commit_at(repo, data.get("startingPoint") or "main")
            repo.branches[branch] = start.oid
        return self._json({})

    def _delete_branch(self, repo_type, repo_id, branch, *, query, body, auth, summary):
        summary.update(branch=branch)
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth, write=True)
            if branch == "main" or repo.branches.pop(branch, None) is None:
                raise HubError(400 if branch == "main" else 404, f"cannot delete branch {branch}")
        return self._json({})

    def _commits(self, repo_type, repo_id, revision, *, query, body, auth, summary):
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth)
            commit = self._commit_at(repo, revision)
            history = []
            while commit is not None:
                history.append({"id": commit.oid, "title": commit.title, "message": commit.message,
                                "authors": [{"user": USER, "avatar": ""}], "date": commit.date})
                commit = repo.commits.get(commit.parent) if commit.parent else None
        return self._json(history)

    # -- listings ---------------------------------------------------------------------------------

    def _last_commit(self, repo: Repo, commit: Commit, path: str, directory: bool) -> dict:
        def state(c: Commit):
            if directory:
                return tuple(sorted((p, e.blob_id) for p, e in c.tree.items() if p.startswith(path + "/")))
            entry = c.tree.get(path)
            return entry.blob_id if entry else None

        current = commit
        while current.parent and state(repo.commits[current.parent]) == state(current):
            current = repo.commits[current.parent]
        return {"id": current.oid, "title": current.title, "date": current.date}

    def _entries(self, repo: Repo, commit: Commit, paths: Iterable[str], expand: bool) -> list[dict]:
        dirs = _directories(commit.tree)
        out = []
        for path in paths:
            if path in commit.tree:
                item = commit.tree[path].as_json()
                if expand:
                    item["lastCommit"] = self._last_commit(repo, commit, path, False)
            elif path in dirs:
                item = {"type": "directory", "oid": _tree_id(commit.tree, path), "size": 0, "path": path}
                if expand:
                    item["lastCommit"] = self._last_commit(repo, commit, path, True)
            else:
                continue
            out.append(item)
        return out

    def _tree(self, repo_type, repo_id, revision, path, *, query, body, auth, summary):
        recursive = str(query.get("recursive", "")).lower() in ("1", "true")
        expand = str(query.get("expand", "")).lower() in ("1", "true")
        cursor = int(query.get("cursor") or 0)
        summary.update(revision=revision, path=path, recursive=recursive, cursor=cursor)
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth)
            commit = self._commit_at(repo, revision)
            dirs = _directories(commit.tree)
            if path and path not in dirs:
                raise HubError(404, f"Entry not found: {path}", "EntryNotFound",
                               headers={"X-Repo-Commit": commit.oid})
            prefix = path + "/" if path else ""
            names = [p for p in sorted(dirs | set(commit.tree)) if p.startswith(prefix)]
            if not recursive:
                names = [p for p in names if "/" not in p[len(prefix):]]
            # The Hub lists directories before files at each level.
            names.sort(key=lambda p: (p.count("/"), p not in dirs, p))
            page_size = TREE_PAGE_SIZE_EXPANDED if expand else self.state.tree_page_size
            page = names[cursor:cursor + page_size]
            entries = self._entries(repo, commit, page, expand)
        headers = {}
        if cursor + page_size < len(names):
            quoted_path = "/" + quote(path, safe="") if path else ""
            next_url = (f"{self.base_url}/api/{repo_type}s/{repo_id}/tree/{quote(revision, safe='')}{quoted_path}"
                        f"?recursive={str(recursive).lower()}&expand={str(expand).lower()}&cursor={cursor + page_size}")
            headers["Link"] = f'<{next_url}>; rel="next"'
        return self._json(entries, headers=headers)

    def _paths_info(self, repo_type, repo_id, revision, *, query, body, auth, summary):
        content_type = self.headers.get("Content-Type", "")
        if "json" in content_type:
            data = self._json_body(body)
            paths, expand = data.get("paths") or [], bool(data.get("expand"))
        else:
            form = parse_qs(body.decode(), keep_blank_values=True)
            paths = form.get("paths", [])
            expand = (form.get("expand") or ["false"])[0].lower() in ("1", "true")
        paths = [paths] if isinstance(paths, str) else paths
        summary.update(revision=revision, paths=list(paths))
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth)
            commit = self._commit_at(repo, revision)
            entries = self._entries(repo, commit, [p.strip("/") for p in paths], expand)
        return self._json(entries)

    # -- uploads ----------------------------------------------------------------------------------

    def _gitattributes(self, commit: Commit) -> str:
        entry = commit.tree.get(".gitattributes")
        if entry is None:
            return ""
        return self.state.object_path(entry.sha256).read_text(encoding="utf-8", errors="replace")

    def _preupload(self, repo_type, repo_id, revision, *, query, body, auth, summary):
        data = self._json_body(body)
        files = data.get("files") or []
        summary.update(revision=revision, paths=[f.get("path") for f in files])
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth, write=True)
            commit = self._commit_at(repo, revision)
            gitattributes = data.get("gitAttributes") or self._gitattributes(commit)
        answer = []
        summary["modes"] = {}
        for item in files:
            path, size = item.get("path"), item.get("size")
            if not isinstance(path, str) or not isinstance(size, int):
                raise HubError(400, f"preupload: malformed file item {item!r}")
            sample = base64.b64decode(item.get("sample") or "")
            lfs = size >= LFS_SIZE_THRESHOLD or b"\0" in sample or is_lfs_path(path, gitattributes)
            info = {"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False}
            summary["modes"][path] = info["uploadMode"]
            entry = commit.tree.get(path)
            if entry is not None:
                info["oid"] = entry.sha256 if entry.lfs else entry.blob_id
            answer.append(info)
        return self._json({"files": answer, "commitOid": commit.oid})

    def _lfs_batch(self, repo_type, repo_id, *, query, body, auth, summary):
        data = self._json_body(body)
        objects = data.get("objects") or []
        summary.update(operation=data.get("operation"), oids=[o.get("oid") for o in objects])
        with self.state.lock:
            self._repo(repo_type, repo_id, auth, write=True)
        if data.get("operation") != "upload":
            raise HubError(400, "only the upload operation is supported by the test hub")
        answer = []
        for obj in objects:
            oid, size = obj.get("oid"), obj.get("size")
            if not (isinstance(oid, str) and re.fullmatch(r"[0-9a-f]{64}", oid) and isinstance(size, int)):
                raise HubError(422, f"malformed LFS object {obj!r}")
            item = {"oid": oid, "size": size, "authenticated": True}
            if not self.state.has_object(oid, size):
                signature = self.state.upload_signature(oid, size)
                item["actions"] = {
                    "upload": {"href": f"{self.base_url}/_lfs/upload/{oid}?size={size}&sig={signature}"},
                    "verify": {"href": f"{self.base_url}/_lfs/verify/{oid}"},
                }
            answer.append(item)
        return self._json({"transfer": "basic", "objects": answer, "hash_algo": "sha256"},
                          headers={"Content-Type": "application/vnd.git-lfs+json"})

    def _lfs_upload(self, oid, *, query, body, auth, summary):
        """The pre-signed upload link: no Authorization, a signature over (oid, size) instead."""
        size = int(query.get("size") or -1)
        summary.update(oid=oid, bytes=len(body))
        if self.command != "PUT":
            raise HubError(405, "upload links take PUT")
        if not hmac.compare_digest(str(query.get("sig", "")), self.state.upload_signature(oid, size)):
            raise HubError(403, "upload link signature does not match")
        if len(body) != size or hashlib.sha256(body).hexdigest() != oid:
            raise HubError(400, f"uploaded content does not match oid {oid} and size {size}")
        self.state.put_object(body)
        return 200, {"ETag": f'"{oid}"'}, b""

    def _lfs_verify(self, oid, *, query, body, auth, summary):
        data = self._json_body(body)
        summary.update(oid=oid)
        if data.get("oid") != oid or not self.state.has_object(oid, data.get("size")):
            raise HubError(404, f"LFS object {oid} not found")
        return self._json({})

    def _commit(self, repo_type, repo_id, revision, *, query, body, auth, summary):
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "commit payload must start with a header line")
        header = lines[0]["value"]
        ops = lines[1:]
        summary.update(revision=revision, summary=header.get("summary"), parentCommit=header.get("parentCommit"),
                       ops=[(op.get("key"), (op.get("value") or {}).get("path")) for op in ops])
        create_pr = str(query.get("create_pr", "")).lower() in ("1", "true")
        url_prefix = URL_PREFIX[repo_type]
        pull_url = None
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth, write=True)
            refs = repo.pulls if revision in repo.pulls else repo.branches
            if revision not in refs:
                raise HubError(404, f"Invalid rev id: {revision} (commits go to a branch)", "RevisionNotFound")
            head = repo.commits[refs[revision]]
            parent = header.get("parentCommit")
            if create_pr:  # a new pull request from the parent commit (or the branch head)
                head = self._commit_at(repo, parent) if parent else head
                number = len(repo.pulls) + 1
                revision, refs = f"refs/pr/{number}", repo.pulls
                pull_url = f"{self.base_url}/{url_prefix}{repo_id}/discussions/{number}"
            elif parent and not head.oid.startswith(parent):
                raise HubError(412, f"A commit has happened since {parent}: the branch head is {head.oid}")
            tree = dict(head.tree)
            for op in ops:
                self._apply(tree, op.get("key"), op.get("value") or {})
            commit = self.state.new_commit(repo, head.oid, tree, header.get("summary") or "",
                                           header.get("description") or "")
            refs[revision] = commit.oid
        summary.update(pull_request=revision if create_pr else None)
        return self._json({"success": True, "commitOid": commit.oid, "hookOutput": "", "pullRequestUrl": pull_url,
                           "commitUrl": f"{self.base_url}/{url_prefix}{repo_id}/commit/{commit.oid}"})

    def _stored(self, path: str, sha256: str) -> tuple[str, int]:
        """(sha256, size) of what the server keeps for a file added as ``sha256``: the same object,
        or, with ``HubState.tamper`` set, the object of the bytes that function returns."""
        data_path = self.state.object_path(sha256)
        if self.state.tamper is None:
            return sha256, data_path.stat().st_size
        data = self.state.tamper(path, data_path.read_bytes())
        return self.state.put_object(data), len(data)

    def _apply(self, tree: dict, key: str, value: dict) -> None:
        path = str(value.get("path") or "").strip("/")
        if not path:
            raise HubError(400, f"commit operation {key!r} without a path")
        if key == "file":
            if value.get("encoding", "base64") != "base64":
                raise HubError(400, f"{path}: unsupported encoding {value.get('encoding')!r}")
            data = base64.b64decode(value.get("content") or "")
            if self.state.tamper is not None:
                data = self.state.tamper(path, data)
            tree[path] = Entry.make(path, self.state.put_object(data), len(data), False, data)
        elif key == "lfsFile":
            oid, size = value.get("oid"), value.get("size")
            if not self.state.has_object(oid):
                raise HubError(400, f"{path}: LFS object {oid} was never uploaded")
            actual = self.state.object_path(oid).stat().st_size
            if size is not None and size != actual:
                raise HubError(400, f"{path}: LFS object {oid} has {actual} bytes, commit says {size}")
            tree[path] = Entry.make(path, *self._stored(path, oid), True)
        elif key == "deletedFile":
            if tree.pop(path, None) is None:
                raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
        elif key == "deletedFolder":
            doomed = [p for p in tree if p.startswith(path + "/")]
            if not doomed:
                raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
            for p in doomed:
                del tree[p]
        else:
            raise HubError(400, f"unsupported commit operation {key!r}")

    # -- downloads --------------------------------------------------------------------------------

    def _resolve(self, repo_type, repo_id, revision, filename, *, query, body, auth, summary):
        summary.update(revision=revision, path=filename, range=self.headers.get("Range"))
        with self.state.lock:
            repo = self._repo(repo_type, repo_id, auth)
            if repo.gated and auth == "none":
                raise HubError(401, f"Access to {repo_id} is restricted: you must be authenticated", "GatedRepo")
            commit = self._commit_at(repo, revision)
            entry = commit.tree.get(filename)
        if entry is None:
            raise HubError(404, f"Entry not found: {filename}", "EntryNotFound", headers={"X-Repo-Commit": commit.oid})
        headers = {"X-Repo-Commit": commit.oid, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                   "ETag": f'"{entry.sha256 if entry.lfs else entry.blob_id}"'}
        if entry.lfs:
            headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
        start, end, status = 0, entry.size - 1, 200
        requested = self.headers.get("Range")
        if requested:
            start, end = self._parse_range(requested, entry.size)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        length = max(0, end - start + 1)
        headers["Content-Length"] = str(length)
        summary.update(bytes=0 if self.command == "HEAD" else length)
        if self.command == "HEAD":
            return status, headers, b""
        with open(self.state.object_path(entry.sha256), "rb") as handle:
            handle.seek(start)
            return status, headers, handle.read(length)

    @staticmethod
    def _parse_range(header: str, size: int) -> tuple[int, int]:
        match = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", header)
        unsatisfiable = HubError(416, f"Range {header} not satisfiable for {size} bytes",
                                 headers={"Content-Range": f"bytes */{size}"})
        if not match or (not match.group(1) and not match.group(2)):
            raise unsatisfiable
        if not match.group(1):  # suffix range: the last N bytes
            return max(0, size - int(match.group(2))), size - 1
        start = int(match.group(1))
        end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
        if start >= size or end < start:
            raise unsatisfiable
        return start, end


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, state: HubState):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class HubServer:
    """The test hub on 127.0.0.1 and a free port; a context manager that starts and stops it.

    ``token`` is the write token, ``read_tokens`` are accepted for reads and refused (403) for writes.
    """

    def __init__(self, root: str | Path | None = None, *, token: str | None = None,
                 read_tokens: Iterable[str] = ()):
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="hubserver-"))
        self.token = token or f"hf_test_{secrets.token_hex(12)}"
        self.state = HubState(self.root, self.token, read_tokens)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the test hub is not running (call start())")
        return self._server.url

    def start(self) -> "HubServer":
        self.state.stopped.clear()
        self._server = _Server(self.state)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="hubserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.state.stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what tests look at -------------------------------------------------------------------

    @property
    def log(self) -> list[RecordedRequest]:
        with self.state.lock:
            return list(self.state.log)

    def calls(self, route: str | None = None, method: str | None = None) -> list[RecordedRequest]:
        """Recorded requests, optionally only one route (e.g. "commit", "settings") or method."""
        return [r for r in self.log if (route is None or r.route == route) and (method is None or r.method == method)]

    def fail_next(self, route: str, status: int = 503, message: str = "injected failure", *,
                  times: int = 1, skip: int = 0) -> None:
        """Serve ``skip`` more requests of ``route``, then answer ``times`` of them with this error.

        The client retries 429 and 5xx on routes it sends through its backoff helper (preupload,
        lfs-batch, lfs-upload, tree, ...), with sleeps in between; fail those with a 4xx.
        ``commit`` is sent once, so a 5xx there fails at once.
        """
        with self.state.lock:
            self.state.failures.setdefault(route, []).extend([None] * skip + [(status, message)] * times)

    def stall_next(self, route: str, seconds: float, *, times: int = 1, skip: int = 0) -> None:
        """Serve ``skip`` more requests of ``route``, then hold ``times`` of them ``seconds`` before
        answering (the body read, no byte sent back): an endpoint that stops answering mid-push."""
        with self.state.lock:
            self.state.failures.setdefault(route, []).extend([None] * skip + [("stall", seconds)] * times)

    def tamper_with(self, change) -> None:
        """From now on every file a commit adds is stored as ``change(path, data)`` returns it (None:
        stored as sent): a Hub that accepts a commit and then serves other bytes."""
        with self.state.lock:
            self.state.tamper = change

    def clear_log(self) -> None:
        with self.state.lock:
            self.state.log.clear()

    def repo(self, repo_id: str, repo_type: str = "dataset") -> Repo:
        with self.state.lock:
            repo = self.state.repos.get((repo_type, repo_id))
        if repo is None:
            raise KeyError(f"no {repo_type} repo {repo_id} on the test hub")
        return repo

    def files(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> dict[str, Entry]:
        """The tree of a revision: path -> Entry."""
        repo = self.repo(repo_id, repo_type)
        with self.state.lock:
            commit = self.state.resolve(repo, revision)
        if commit is None:
            raise KeyError(f"no revision {revision} in {repo_id}")
        return dict(commit.tree)

    def read(self, repo_id: str, path: str, revision: str = "main", repo_type: str = "dataset") -> bytes:
        entry = self.files(repo_id, revision, repo_type)[path]
        return self.state.object_path(entry.sha256).read_bytes()

    def history(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> list[Commit]:
        """Commits reachable from a revision, newest first."""
        repo = self.repo(repo_id, repo_type)
        with self.state.lock:
            commit = self.state.resolve(repo, revision)
            out = []
            while commit is not None:
                out.append(commit)
                commit = repo.commits.get(commit.parent) if commit.parent else None
        return out

    def client_env(self, hf_home: str | Path, *, token: str | None = "default",
                   base: dict | None = None) -> dict[str, str]:
        """Environment for a client subprocess: this endpoint, no Xet, an isolated HF_HOME, no proxies.

        ``token="default"`` uses the server's write token, ``None`` leaves HF_TOKEN unset.
        """
        env = {k: v for k, v in (os.environ if base is None else base).items()
               if not (k.startswith(("HF_", "HUGGINGFACE_")) or k.lower().endswith("_proxy")
                       or k in ("TRANSFORMERS_OFFLINE",))}
        env.update({
            "HF_ENDPOINT": self.url,
            "HF_HOME": str(hf_home),
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_UPDATE_CHECK": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_UPDATE_DOWNLOAD_COUNTS": "0",  # datasets would otherwise ping S3 on every load
            "NO_PROXY": "127.0.0.1,localhost",
        })
        if token is not None:
            env["HF_TOKEN"] = self.token if token == "default" else token
        return env


def forbid_network() -> None:
    """Make every later connection to anything but the loopback interface raise (for client subprocesses)."""
    original_connect = socket.socket.connect
    original_getaddrinfo = socket.getaddrinfo

    def loopback(address) -> bool:
        host = address[0] if isinstance(address, tuple) else address
        return isinstance(host, str) and (host in ("localhost", "::1") or host.startswith("127."))

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not loopback(address):
            raise ConnectionRefusedError(f"network access outside the test hub: {address!r}")
        return original_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and not loopback((host if isinstance(host, str) else host.decode(),)):
            raise socket.gaierror(f"network access outside the test hub: {host!r}")
        return original_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect
    socket.getaddrinfo = getaddrinfo


@contextlib.contextmanager
def silent_endpoint(monkeypatch, token: str):
    """huggingface_hub pointed at a loopback socket that accepts connections and never answers
    (an endpoint that hangs); yields the list of accepted connections, closed on exit."""
    import huggingface_hub.constants as constants

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("HF_TOKEN", token)
    try:
        yield accepted
    finally:
        listener.close()
        for conn in accepted:
            conn.close()

