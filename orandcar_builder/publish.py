"""``orandcar push``: publish a built dataset folder to a gated dataset repo on the Hugging Face Hub.

A push validates the folder first and sends nothing when it fails. It then compares the local files
with the files of the target branch (content hashes: the LFS sha256 or the git blob id), creates the
repo when it is missing, turns gating on before any data arrives, uploads only what differs in one or
more commits (README.md last, so the card never announces shards that are not there yet), and tags
the resulting commit when asked. A rerun after an interruption resumes: files already committed
match and are skipped; with nothing different it makes no commit at all.

Only the dataset layout is published (``dataset/layout.py``): README.md, the example images and the
config shards. A folder holding anything else (``secrets.txt``, a ``work/`` dir, a stray temporary
file, a symbolic link) is refused with the list of those files before any request; the marker that
says the folder was built here stays local.

Every request has a time limit (``timeout``, seconds per connect, read or write): an endpoint that
accepts the connection and never answers ends the push with a message instead of hanging it.
Branch and tag names are checked before the first request.

The remote mirrors the folder inside the folders the folder has: a remote file under one of the
folder's top-level directories that the folder no longer holds (a shard of an older build) is
deleted in the last commit. Files at the top level that are not in the folder are left alone.

The token comes from the ``token`` argument, ``HF_TOKEN`` or the huggingface_hub login, and is
never printed, logged or put into an exception message. A dry run without any token is planned
offline: no request is made, and every file of the folder is listed as an upload (what a push to
a new repo sends); with a token, a dry run compares with the Hub as a push does.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import httpx2
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
from tqdm import tqdm

from .dataset.layout import HUB_FILES, expected_layout_text, scan
from .errors import OrandCarError
from .files import sha256_bytes, sha256_of_file, update_from_file, write_text_atomic
from .hubhttp import hub_timeout, redact  # noqa: F401 (re-exported: push's time limit and token-free errors)

REPO_TYPE = "dataset"
DEFAULT_BRANCH = "main"
GATED_MODES = ("auto", "manual")
COMMIT_MAX_FILES = 100  # files per commit: keeps each commit far below the Hub's per-commit limits
COMMIT_MAX_BYTES = 2 * 1024**3  # bytes per commit: an interrupted push loses at most this much work
README = "README.md"
KEPT_REMOTE_FILES = HUB_FILES  # the Hub's own files; never deleted by a push
DEFAULT_TIMEOUT_S = 60.0  # per connect, read or write of one request; a large upload keeps writing
# The Hub stores every file of this size or more through LFS (it refuses a regular file that large),
# so such a file matches by its LFS sha256 and its git blob id is never compared: it is not computed.
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
# Git ref names (git check-ref-format), kept to what the Hub accepts as a branch or tag name.
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


class PushError(OrandCarError):
    """A push that could not be done; nothing after the failing step was sent."""


def _listing(lines: Sequence[str], most: int) -> str:
    """Indented lines, the first ``most`` of them, and how many more there are."""
    shown = "\n".join(f"  {line}" for line in lines[:most])
    return shown + (f"\n  ... and {len(lines) - most} more" if len(lines) > most else "")


class InvalidFolderError(PushError):
    """The folder failed validation; ``problems`` holds one line per problem."""

    def __init__(self, folder: Path, problems: Sequence[str]):
        self.folder, self.problems = folder, list(problems)
        super().__init__(
            f"{folder}: refusing to push, validation found {len(self.problems)} problem(s):\n"
            f"{_listing(self.problems, 20)}\n"
            f"Fix them (run `orandcar validate {folder}`) and push again."
        )


class UnexpectedFilesError(PushError):
    """The folder holds files outside the dataset layout; ``files`` lists them."""

    def __init__(self, folder: Path, files: Sequence[str]):
        self.folder, self.files = folder, list(files)
        super().__init__(
            f"{folder}: refusing to push, {len(self.files)} file(s) are not part of the dataset layout "
            f"({expected_layout_text()}):\n{_listing(self.files, 50)}\nMove them out of the folder and push again."
        )


class HubTimeoutError(PushError):
    """The Hub did not answer within the time limit."""


class MissingTokenError(PushError):
    """No Hub token in the argument, HF_TOKEN or the huggingface_hub login."""


class HubPermissionError(PushError):
    """The Hub refused the token (HTTP 401 or 403)."""


class TagConflictError(PushError):
    """The tag exists already: a tag is never moved or overwritten."""


@dataclass(frozen=True)
class LocalFile:
    """A file of the folder, with the two hashes the Hub can report for it."""

    path: str  # posix path inside the repo
    source: Path
    size: int
    sha256: str
    git_oid: str | None  # git blob id of the content; None at LFS_SIZE_THRESHOLD bytes or more


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    blob_id: str
    lfs_sha256: str | None = None

    def matches(self, local: LocalFile) -> bool:
        """Same content: compare the LFS sha256 for LFS files, the git blob id otherwise."""
        if self.lfs_sha256 is not None:
            return self.lfs_sha256 == local.sha256
        return local.git_oid is not None and self.blob_id == local.git_oid  # no blob id: not a match, sent


@dataclass(frozen=True)
class FileChange:
    path: str
    size: int
    action: str  # "add", "update" or "delete"


@dataclass(frozen=True)
class RemoteState:
    """What the Hub holds before the push."""

    exists: bool
    branch_exists: bool
    head: str | None  # commit the push builds on (the branch, or main for a new branch)
    gated: str | bool
    private: bool
    files: dict = field(default_factory=dict)  # path -> RemoteFile at ``head``
    tags: dict = field(default_factory=dict)  # tag -> commit id


@dataclass(frozen=True)
class PushResult:
    """What a push did, or with ``dry_run`` what it would do."""

    repo_id: str
    revision: str
    url: str
    dry_run: bool
    created_repo: bool
    created_branch: bool
    gated: str | bool  # the gating mode after the push
    gating_changed: bool
    made_private: bool
    uploads: tuple[FileChange, ...]
    unchanged: tuple[str, ...]
    deletions: tuple[FileChange, ...]
    commits: tuple[str, ...]  # ids of the commits made, oldest first (none in a dry run)
    head: str | None  # commit the branch points at after the push (before it, in a dry run)
    problems: tuple[str, ...] | None = None  # what reads back wrong from the Hub at ``head`` (None: not checked)
    tag: str | None = None
    tag_created: bool = False
    versions_note: str | None = None  # what the push did to the card's Versions section, if anything
    offline: bool = False  # a dry run without a token: the Hub was not read, every file is an upload

    @property
    def changed(self) -> bool:
        """Whether the push changes (or would change) anything on the Hub."""
        return bool(self.created_repo or self.created_branch or self.gating_changed or self.made_private
                    or self.uploads or self.deletions or self.tag_created)

    @property
    def upload_bytes(self) -> int:
        return sum(change.size for change in self.uploads)


# -- pure parts ----------------------------------------------------------------------------------


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` if it is a full ``ORG/NAME`` Hub id; a clear error otherwise."""
    if not isinstance(repo_id, str) or not _REPO_ID.match(repo_id) or "--" in repo_id or ".." in repo_id:
        raise PushError(
            f"repo id {repo_id!r} is not ORG/NAME (letters, digits, '-', '_', '.'; no '--' or '..'); "
            "a bare name would resolve to a local folder when loading, so a namespace is required"
        )
    return repo_id


def check_gated(gated) -> str | bool:
    """The gating mode: "auto", "manual", or False to leave the repo ungated."""
    if gated is False or gated in GATED_MODES:
        return gated
    raise PushError(f"gated must be one of {', '.join(GATED_MODES)} or False, not {gated!r}")


def check_ref_name(name: str | None, kind: str) -> None:
    """A PushError unless ``name`` is None or a usable branch or tag name (git's ref-name rules)."""
    if name is None:
        return
    if (not isinstance(name, str) or not name or len(name) > 255 or _REF_FORBIDDEN.search(name)
            or name.startswith(("-", "/", ".")) or name.endswith(("/", ".", ".lock")) or name == "@"
            or any(part.startswith(".") or part.endswith(".lock") for part in name.split("/"))
            or name.startswith("refs/")):
        raise PushError(
            f"{kind} name {name!r} is not a valid git ref name (no spaces, control characters, '..', '~', '^', "
            f"':', '?', '*', '[', '\\', '@{{', '//'; no leading '-', '/' or '.'; no trailing '/', '.' or "
            f"'.lock'; not under 'refs/')"
        )


def folder_files(folder: Path) -> list[str]:
    """The repo paths of the files a push uploads (the dataset layout), sorted."""
    return scan(Path(folder)).published


def hash_file(path: Path, *, git_oid: bool = True) -> tuple[str, str | None]:
    """(sha256, git blob id) of a file, read once in chunks; the blob id None without ``git_oid``."""
    if not git_oid:
        return sha256_of_file(path), None
    sha256 = hashlib.sha256()
    git = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    update_from_file(path, sha256, git)
    return sha256.hexdigest(), git.hexdigest()


def plan_changes(local: Sequence[LocalFile], remote: dict) -> tuple[list[FileChange], list[str], list[FileChange]]:
    """(uploads, unchanged paths, deletions) that make the remote match the folder.

    A remote file is deleted only when it sits under a top-level directory the folder has and the
    folder no longer holds it; top-level remote files outside the folder are kept.
    """
    uploads, unchanged = [], []
    for item in local:
        existing = remote.get(item.path)
        if existing is None:
            uploads.append(FileChange(item.path, item.size, "add"))
        elif existing.matches(item):
            unchanged.append(item.path)
        else:
            uploads.append(FileChange(item.path, item.size, "update"))
    local_paths = {item.path for item in local}
    local_dirs = {item.path.split("/", 1)[0] for item in local if "/" in item.path}
    deletions = [
        FileChange(path, remote[path].size, "delete")
        for path in sorted(remote)
        if path not in local_paths and path not in KEPT_REMOTE_FILES
        and "/" in path and path.split("/", 1)[0] in local_dirs
    ]
    return uploads, unchanged, deletions


def plan_commits(uploads: Sequence[FileChange], max_files: int, max_bytes: int) -> list[list[FileChange]]:
    """Uploads grouped into commits of at most ``max_files`` files and ``max_bytes`` bytes.

    Data files go first in path order and README.md last, so the card lands with (or after) the
    shards it declares. A single file larger than ``max_bytes`` gets a commit of its own.
    """
    ordered = sorted(uploads, key=lambda change: (change.path == README, change.path))
    batches: list[list[FileChange]] = []
    current: list[FileChange] = []
    current_bytes = 0
    for change in ordered:
        if current and (len(current) >= max_files or current_bytes + change.size > max_bytes):
            batches.append(current)
            current, current_bytes = [], 0
        current.append(change)
        current_bytes += change.size
    if current:
        batches.append(current)
    return batches


def _human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def format_push_result(result: PushResult) -> str:
    """A few lines a maintainer reads after ``orandcar push``: what changed (or would), where, and the tag."""
    would = "would " if result.dry_run else ""
    if result.offline:
        return _format_offline_plan(result)
    lines = [f"{'dry run: ' if result.dry_run else ''}{result.repo_id} @ {result.revision} ({result.url})"]
    if result.created_repo:
        lines.append(f"  {would}create the dataset repo{' (private)' if result.made_private else ''}")
    elif result.made_private:
        lines.append(f"  {would}make the repo private")
    if result.created_branch:
        lines.append(f"  {would}create branch {result.revision} from {DEFAULT_BRANCH}")
    if result.gating_changed:
        lines.append(f"  {would}set gating to {result.gated!r}")
    else:
        lines.append(f"  gating: {result.gated!r} (unchanged)")
    for change in result.uploads:
        lines.append(f"  {would}{change.action} {change.path} ({_human_size(change.size)})")
    for change in result.deletions:
        lines.append(f"  {would}delete {change.path}")
    if result.uploads or result.deletions:
        count = "" if result.dry_run else f" in {len(result.commits)} commit(s)"
        lines.append(
            f"  {len(result.uploads)} file(s), {_human_size(result.upload_bytes)} {would}uploaded{count}; "
            f"{len(result.deletions)} {would}deleted; {len(result.unchanged)} unchanged"
        )
    else:
        lines.append(f"  nothing to upload: all {len(result.unchanged)} file(s) match the Hub; no commit")
    if result.tag:
        if result.tag_created:
            target = f" at {result.head[:12]}" if result.head and not result.dry_run else ""
            lines.append(f"  {would}tag {result.tag}{target}")
        else:
            lines.append(f"  tag {result.tag} already points at {result.head[:12] if result.head else '?'}")
    if result.versions_note:
        lines.append(f"  card's {result.versions_note}{' (dry run: not written)' if result.dry_run else ''}")
    if not result.dry_run and result.head:
        lines.append(f"  head: {result.head}")
    if result.problems == ():
        lines.append("  verified on the Hub: the card, the shards' footers and every file's hash read back as pushed")
    elif result.problems:
        lines.append(f"  read back from the Hub at {result.head[:12] if result.head else '?'}: "
                     f"{len(result.problems)} problem(s), the push is not to be trusted:")
    return "\n".join(lines)


def _format_offline_plan(result: PushResult) -> str:
    lines = [f"dry run, offline: {result.repo_id} @ {result.revision} ({result.url})",
             "  no Hugging Face token, so the Hub was not read: every file is listed as a push to a new repo "
             "would send it (with HF_TOKEN set, a dry run compares with what the Hub holds)"]
    lines += [f"  would upload {change.path} ({_human_size(change.size)})" for change in result.uploads]
    tag = f", then tag {result.tag}" if result.tag else ""
    lines.append(f"  {len(result.uploads)} file(s), {_human_size(result.upload_bytes)} at most; gating "
                 f"{result.gated!r}{tag}")
    return "\n".join(lines)


# -- steps that touch the folder or the Hub ------------------------------------------------------


def _check_folder(folder: Path) -> list[str]:
    """The repo paths the push uploads (``folder_files``), once the folder holds nothing else and
    validates. The card ``release_card`` rewrites stays a regular README.md: the list holds."""
    if folder.is_symlink() or not folder.is_dir():
        raise PushError(f"{folder}: not a folder (build the dataset first, then push its folder)")
    layout = scan(folder)
    if layout.unexpected:
        raise UnexpectedFilesError(folder, layout.unexpected)
    from .dataset.validate import validate_folder  # the validator reads the dataset schema; load it only when pushing

    problems = validate_folder(folder)
    if problems:
        raise InvalidFolderError(folder, problems)
    return layout.published


def _resolve_token(token: str | None) -> str:
    token = token or get_token()
    if not token:
        raise MissingTokenError(
            "no Hugging Face token: set HF_TOKEN or run `hf auth login` with a token that can write to the repo"
        )
    return token


def _local_text_file(item: LocalFile, text: str) -> LocalFile:
    """``item`` with the content ``text`` (hashes and size of its UTF-8 bytes)."""
    data = text.encode("utf-8")
    git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return LocalFile(item.path, item.source, len(data), sha256_bytes(data), git)


def _local_files(folder: Path, paths: list[str], progress: bool) -> list[LocalFile]:
    sizes = {path: (folder / path).stat().st_size for path in paths}
    out = []
    with tqdm(total=sum(sizes.values()), unit="B", unit_scale=True, desc="hashing", disable=not progress) as bar:
        for path in paths:
            source = folder / path
            sha256, git_oid = hash_file(source, git_oid=sizes[path] < LFS_SIZE_THRESHOLD)
            out.append(LocalFile(path, source, sizes[path], sha256, git_oid))
            bar.update(sizes[path])
    return out


@contextlib.contextmanager
def _hub_errors(repo_id: str, token: str, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Turn the client's errors into PushErrors whose text holds no token."""
    try:
        yield
    except httpx2.TimeoutException as err:
        raise HubTimeoutError(
            f"the Hub did not answer within {timeout:g} s for {repo_id} ({type(err).__name__}); "
            f"check the endpoint and the network, or allow longer with --timeout"
        ) from None
    except HfHubHTTPError as err:
        status = err.response.status_code if getattr(err, "response", None) is not None else None
        detail = redact(err.server_message or str(err).strip().splitlines()[0], token)
        if status in (401, 403):
            raise HubPermissionError(
                f"the Hub refused the token for {repo_id} (HTTP {status}: {detail}); pushing needs a token with "
                f"write access to {repo_id.split('/')[0]}: set HF_TOKEN or run `hf auth login`"
            ) from None
        if status == 412:
            raise PushError(
                f"{repo_id} changed while pushing (HTTP 412: {detail}); push again to continue from its new state"
            ) from None
        raise PushError(f"the Hub answered HTTP {status} for {repo_id}: {detail}") from None
    except httpx2.HTTPError as err:
        raise PushError(f"could not reach the Hub for {repo_id}: {redact(str(err), token)}") from None
    except ValueError as err:  # the client reports a README the Hub rejects as ValueError
        raise PushError(f"the Hub refused the push to {repo_id}: {redact(str(err), token)}") from None


def _remote_files(api: HfApi, repo_id: str, revision: str) -> dict:
    files = {}
    for item in api.list_repo_tree(repo_id, recursive=True, revision=revision, repo_type=REPO_TYPE):
        if hasattr(item, "blob_id"):  # RepoFile; folders have a tree_id instead
            lfs = item.lfs.sha256 if item.lfs is not None else None
            files[item.path] = RemoteFile(item.path, item.size, item.blob_id, lfs)
    return files


def _remote_state(api: HfApi, repo_id: str, branch: str, want_tags: bool) -> RemoteState:
    try:
        info = api.dataset_info(repo_id, revision=branch)
        branch_exists = True
    except RevisionNotFoundError:
        info = api.dataset_info(repo_id)
        branch_exists = False
    except RepositoryNotFoundError as err:
        if err.response is not None and err.response.status_code in (401, 403):
            raise
        return RemoteState(exists=False, branch_exists=False, head=None, gated=False, private=False)
    files = _remote_files(api, repo_id, info.sha)
    tags = {}
    if want_tags:
        tags = {ref.name: ref.target_commit for ref in api.list_repo_refs(repo_id, repo_type=REPO_TYPE).tags}
    return RemoteState(True, branch_exists, info.sha, info.gated or False, bool(info.private), files, tags)


def _check_tag(tag: str | None, remote: RemoteState) -> bool:
    """Whether a tag is to be created; a TagConflictError when it exists already (a published tag
    names one version for good, so it is never moved or overwritten, not even onto the same commit)."""
    if tag is None:
        return False
    target = remote.tags.get(tag)
    if target is not None:
        raise TagConflictError(
            f"tag {tag} already exists at commit {target[:12]}; "
            "a tag is never moved or overwritten: choose a new tag"
        )
    return True


def _read_remote_text(api: HfApi, repo_id: str, revision: str, path: str) -> str:
    from huggingface_hub import HfFileSystem

    fs = HfFileSystem(token=api.token, endpoint=api.endpoint)
    return fs.read_bytes(f"datasets/{repo_id}@{revision}/{path}").decode("utf-8")


def previous_tag(api: HfApi, repo_id: str, remote: RemoteState) -> str | None:
    """The tag of the newest tagged commit in the history of the commit the push builds on."""
    if not remote.exists or not remote.tags or remote.head is None:
        return None
    by_commit: dict[str, list[str]] = {}
    for name, commit in remote.tags.items():
        by_commit.setdefault(commit, []).append(name)
    for commit in api.list_repo_commits(repo_id, repo_type=REPO_TYPE, revision=remote.head):
        if commit.commit_id in by_commit:
            return sorted(by_commit[commit.commit_id])[-1]
    return None


def release_card(folder: Path, api: HfApi, repo_id: str, remote: RemoteState, tag: str | None) -> tuple[str | None, str | None]:
    """(the card text to publish when it differs from the folder's, a note saying what changed).

    With ``tag``: the versions recorded by the card of the previous tag (see ``previous_tag``),
    plus an entry for ``tag`` with the summary of ``orandcar diff`` between that tag and this
    folder. Without: the versions of the card the branch holds now are carried over, so an
    untagged push does not drop the history a rebuilt card does not know.
    """
    from .dataset.cardfile import card_versions, split_card
    from .diff import Side, diff_sides, open_side
    from .release import version_entry, with_versions

    readme = folder / README
    local_text = readme.read_text(encoding="utf-8")
    if tag is None:
        if not remote.exists or README not in remote.files:
            return None, None
        versions = card_versions(split_card(_read_remote_text(api, repo_id, remote.head, README),
                                            source=f"{repo_id}: {README}")[0])
        if not versions:
            return None, None
        note = f"Versions section carried over from {repo_id} ({len(versions)} tag(s))"
    else:
        previous = previous_tag(api, repo_id, remote)
        local = open_side(str(folder))
        if previous is None:
            versions = []
            empty = Side(spec="(nothing)", kind="none", revision=None, card="", shards={}, opener=open)
            summary = diff_sides(empty, local, keep=0).summary()
            summary["settings_changed"] = []
            note = f"Versions section: {tag}, the first tagged version"
        else:
            old = open_side(f"{repo_id}@{remote.tags[previous]}", token=api.token)
            old.spec = f"{repo_id}@{previous}"
            versions = card_versions(split_card(old.card, source=f"{repo_id}@{previous}: {README}")[0])
            if not any(entry.get("tag") == previous for entry in versions):
                versions.append({"tag": previous, "previous": None})
            summary = diff_sides(old, local, keep=0).summary()
            note = f"Versions section: {tag} against {previous}"
        versions.append(version_entry(tag, previous, summary))
    text = with_versions(local_text, versions, source=str(readme))
    return (text, note) if text != local_text else (None, None)


def _commit_message(index: int, total: int) -> str:
    return "Upload dataset" if total == 1 else f"Upload dataset (part {index} of {total})"


def _commit_all(api: HfApi, repo_id: str, branch: str, head: str, batches: list[list[FileChange]],
                deletions: list[FileChange], local: dict, progress: bool) -> tuple[list[str], str]:
    """Make the commits; each names its parent so a concurrent change fails instead of mixing."""
    if deletions and not batches:
        batches = [[]]
    commits: list[str] = []
    if not batches:
        return commits, head
    total_bytes = sum(change.size for batch in batches for change in batch)
    with tqdm(total=total_bytes, unit="B", unit_scale=True, desc=f"pushing {repo_id}", disable=not progress) as bar:
        for index, batch in enumerate(batches, start=1):
            operations: list = [CommitOperationAdd(path_in_repo=c.path, path_or_fileobj=str(local[c.path].source))
                                for c in batch]
            if index == len(batches):
                operations += [CommitOperationDelete(path_in_repo=c.path, is_folder=False) for c in deletions]
            info = api.create_commit(repo_id, operations, commit_message=_commit_message(index, len(batches)),
                                     repo_type=REPO_TYPE, revision=branch, parent_commit=head)
            if info.oid != head:  # the client skips a commit whose files all match already
                commits.append(info.oid)
                head = info.oid
            bar.update(sum(change.size for change in batch))
    return commits, head


@contextlib.contextmanager
def _hub_progress(enabled: bool) -> Iterator[None]:
    """Silence huggingface_hub's own progress bars for a quiet push, and restore them after."""
    was_disabled = are_progress_bars_disabled()
    if not enabled and not was_disabled:
        disable_progress_bars()
    try:
        yield
    finally:
        if not enabled and not was_disabled:
            enable_progress_bars()


def _offline_plan(folder: Path, paths: list[str], repo_id: str, branch: str, gated, tag: str | None) -> PushResult:
    """A dry run's plan made without the Hub: each file of ``paths`` an upload."""
    from huggingface_hub import constants

    uploads = tuple(FileChange(path, (folder / path).stat().st_size, "add") for path in paths)
    return PushResult(repo_id=repo_id, revision=branch, url=f"{constants.ENDPOINT}/datasets/{repo_id}", dry_run=True,
                      created_repo=False, created_branch=False, gated=gated, gating_changed=False,
                      made_private=False, uploads=uploads, unchanged=(), deletions=(), commits=(), head=None,
                      tag=tag, offline=True)


def push(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    revision: str | None = None,
    tag: str | None = None,
    gated: str | bool = "auto",
    private: bool = False,
    dry_run: bool = False,
    token: str | None = None,
    progress: bool = True,
    commit_max_files: int = COMMIT_MAX_FILES,
    commit_max_bytes: int = COMMIT_MAX_BYTES,
    timeout: float = DEFAULT_TIMEOUT_S,
    verify: bool = True,
) -> PushResult:
    """Publish ``folder`` to the dataset repo ``repo_id`` (``ORG/NAME``) and return what was done.
    After the commits, ``verify`` (not in a dry run) validates what the Hub serves at the final
    commit (``verify_push``): the result's ``problems`` lists what reads back differently.

    Validates the folder first (an InvalidFolderError before any request), then: creates the repo
    when missing (``private`` applies at creation and can make an existing repo private, never
    public), sets gating to ``gated`` ("auto", "manual" or False) when it differs, creates the branch
    ``revision`` from main when missing, uploads the files that differ in commits of at most
    ``commit_max_files`` files and ``commit_max_bytes`` bytes, deletes stale files (see the module
    docstring), and creates ``tag`` on the final commit. Nothing changed means no commit. A tag that
    exists already is a TagConflictError before anything is written. With ``tag``, the folder's card
    gets a Versions entry for it (``release_card``: the summary of its diff against the previous tag,
    written into the folder's README.md before the upload); without, the Versions the Hub's card has
    are carried over. ``dry_run`` reads the Hub and returns the plan without writing (not even the
    folder's card); without a token it makes no request at all (``_offline_plan``). Hub refusals are
    HubPermissionError / PushError; no error text contains the token. Each request may take
    ``timeout`` seconds per connect, read or write; past that the push ends with a HubTimeoutError.
    """
    folder = Path(folder)
    check_repo_id(repo_id)
    gated = check_gated(gated)
    check_ref_name(revision, "branch")
    check_ref_name(tag, "tag")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise PushError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if commit_max_files < 1 or commit_max_bytes < 1:
        raise PushError(f"commit bounds must be positive (files {commit_max_files}, bytes {commit_max_bytes})")
    branch = revision or DEFAULT_BRANCH
    paths = _check_folder(folder)
    if dry_run and not (token or get_token()):
        return _offline_plan(folder, paths, repo_id, branch, gated, tag)
    token = _resolve_token(token)
    api = HfApi(token=token, library_name="orandcar-builder")
    url = f"{api.endpoint}/datasets/{repo_id}"

    with hub_timeout(timeout), _hub_errors(repo_id, token, timeout), _hub_progress(progress):
        remote = _remote_state(api, repo_id, branch, want_tags=tag is not None)
        create_tag = _check_tag(tag, remote)
        card_text, versions_note = release_card(folder, api, repo_id, remote, tag)
        if card_text is not None and not dry_run:
            write_text_atomic(folder / README, card_text)
        local = _local_files(folder, paths, progress)
        if card_text is not None and dry_run:  # plan with the card the push would publish
            local = [_local_text_file(item, card_text) if item.path == README else item for item in local]
        uploads, unchanged, deletions = plan_changes(local, remote.files)
        gating_changed = remote.gated != gated
        made_private = private and not remote.private
        plan = dict(
            repo_id=repo_id, revision=branch, url=url, created_repo=not remote.exists,
            created_branch=not remote.branch_exists and branch != DEFAULT_BRANCH,
            gated=gated, gating_changed=gating_changed, made_private=made_private,
            uploads=tuple(uploads), unchanged=tuple(unchanged), deletions=tuple(deletions),
            tag=tag, tag_created=create_tag, versions_note=versions_note,
        )
        if dry_run:
            return PushResult(dry_run=True, commits=(), head=remote.head, **plan)

        head = remote.head
        if not remote.exists:
            api.create_repo(repo_id, repo_type=REPO_TYPE, private=private)
            head = api.dataset_info(repo_id).sha
        if gating_changed or (made_private and remote.exists):
            api.update_repo_settings(repo_id, gated=gated if gating_changed else None,
                                     private=True if made_private and remote.exists else None, repo_type=REPO_TYPE)
        if not remote.branch_exists and branch != DEFAULT_BRANCH:
            api.create_branch(repo_id, branch=branch, revision=head, repo_type=REPO_TYPE)
        batches = plan_commits(uploads, commit_max_files, commit_max_bytes)
        commits, head = _commit_all(api, repo_id, branch, head, batches, deletions,
                                    {item.path: item for item in local}, progress)
        if create_tag:
            api.create_tag(repo_id, tag=tag, revision=head, repo_type=REPO_TYPE, tag_message=f"OrandCar {tag}")
        problems = tuple(verify_push(repo_id, head, local, token=token, timeout=timeout)) if verify else None
    return PushResult(dry_run=False, commits=tuple(commits), head=head, problems=problems, **plan)


def verify_push(repo_id: str, commit: str, local: Sequence[LocalFile], *, token: str, timeout: float) -> list[str]:
    """What reads back differently from the Hub at ``commit`` after a push of ``local``: every
    problem of ``orandcar validate ORG/NAME@COMMIT`` (``remote``: the card as the Hub
    reads it, the layout, each shard's footer), and each pushed file the commit lacks or holds
    with another hash."""
    from .remote import validate_hub

    result = validate_hub(f"{repo_id}@{commit}", token=token, timeout=timeout)
    problems = list(result.problems)
    for item in local:
        entry = result.files.get(item.path)
        if entry is None:
            problems.append(f"{item.path}: pushed, but the Hub's commit {commit[:12]} does not hold it")
            continue
        remote = RemoteFile(item.path, entry.size, entry.blob_id, entry.lfs_sha256)
        if not remote.matches(item):
            problems.append(f"{item.path}: the Hub serves other bytes at {commit[:12]} than were pushed "
                            f"({entry.size:,} bytes, {item.size:,} sent)")
    return problems
