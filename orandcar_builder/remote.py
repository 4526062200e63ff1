"""``orandcar validate ORG/NAME@REV``: a revision of a dataset repo on the Hub, checked as a folder is.

The revision (a tag, a branch, ``refs/pr/N`` or a commit; ``main`` when none is given) is resolved
to its commit once, and everything is read at that commit through huggingface_hub (``diff``'s
Hub side: ``diff.open_hub_side``), with the token of the environment or the login:

- the file listing: the dataset layout and nothing else (``layout.scan_repo``; the Hub's own
  ``.gitattributes`` is allowed), shard names numbered without gaps;
- README.md: the same card checks as a folder's (``validate.check_card_bytes``: YAML header,
  ``configs:``, the card as huggingface_hub and datasets read it), the Hub's own card check
  (``hubcard.hub_validation_problems``), and the example links against the listing;
- each shard's parquet footer, read with range requests (``FOOTER_BLOCK``): its arrow schema and
  features metadata, and its row count for the ``dataset_info`` check; the file sizes come from
  the listing. A footer is all that is read of a shard, so the rows themselves and the
  ``num_bytes`` the card states (their in-memory size) are measured only with ``exhaustive``;
  footers only, ``num_bytes`` must be a byte count equal to the config's ``dataset_size``;
- ``exhaustive``: every row is streamed through the same row checks as a folder's with
  ``--exhaustive`` (the JSON Schema on every row, image hashes, one row per image, families and
  verifiers), a row group at a time, and ``num_bytes`` is measured.

The problems are the lines a folder's validation prints, with the same wording. A failure to read
the Hub (no such repo or revision, no access, a timeout) is a ``HubReadError``, never a problem.

``validate_checkout`` reads a dataset folder in a git checkout the same way (``validate --tracked``,
the pre-commit hook): the listing is what git tracks there, the files are read from disk, and
every row is checked, so a clone of the Hub repo (with its ``.git`` and ``.gitattributes``) is
checked as the commit the Hub will receive.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

import pyarrow.parquet as pq

from .dataset.cardfile import header_families
from .dataset.info import dataset_info
from .dataset.layout import README, expected_layout_text, scan_repo
from .errors import OrandCarError
from .families import Families
from .parquetio import ShardTooLargeError, check_row_groups, row_group_nbytes
from .vocab import CONFIGS, SPLIT

if TYPE_CHECKING:
    from .dataset.validate import ImagesSeen

FOOTER_BLOCK = 64 * 1024  # bytes per ranged read while only footers are read (pyarrow reads 64 KiB tails)
ROWS_BLOCK = 8 * 1024 * 1024  # bytes per ranged read while rows are streamed
DEFAULT_TIMEOUT_S = 60.0
GIT_TIMEOUT_S = 60.0  # `git ls-files` of a checkout
MAX_CARD_BYTES = 16 * 1024 * 1024  # a README.md larger than this is reported, not read (cards are KBs)


class HubReadError(OrandCarError):
    """The revision could not be read (not found, no access, no answer in time)."""


class CheckoutError(OrandCarError):
    """The files git tracks in a folder could not be listed."""


@dataclass
class HubValidation:
    """What ``validate_hub`` found, and what it read."""

    spec: str
    repo_id: str
    commit: str
    exhaustive: bool
    problems: list[str] = field(default_factory=list)
    shards: int = 0
    shard_bytes: int = 0  # the shards' total size, from the listing
    files: dict = field(default_factory=dict, repr=False)  # path -> diff.HubFile of the commit's listing

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        return f"{self.spec} (commit {self.commit[:12]})"


@contextlib.contextmanager
def hub_read_errors(spec: str, repo_id: str, timeout: float, token: Optional[str]) -> Iterator[None]:
    """The client's failures while reading ``spec`` as HubReadErrors whose text holds no token."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    from .diff import _refused
    from .hubhttp import redact

    try:
        yield
    except httpx2.TimeoutException as exc:
        raise HubReadError(f"{spec}: the Hub did not answer within {timeout:g} s ({type(exc).__name__}); "
                           "check the endpoint and the network, or allow longer with --timeout") from None
    except HfHubHTTPError as exc:
        raise HubReadError(redact(_refused(spec, repo_id, exc), token)) from None
    except httpx2.HTTPError as exc:
        raise HubReadError(f"{spec}: could not reach the Hub ({redact(str(exc), token)})") from None


def validate_hub(spec: str, *, token: Optional[str] = None, exhaustive: bool = False,
                 timeout: float = DEFAULT_TIMEOUT_S) -> HubValidation:
    """Every problem of the Hub revision ``spec`` (``ORG/NAME[@REV]``), one line each, as
    ``validate_folder`` words them (see the module docstring for what is read)."""
    from huggingface_hub import get_token

    from .diff import hub_spec, open_hub_side
    from .hubhttp import hub_timeout

    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise HubReadError(f"timeout must be a positive number of seconds, not {timeout!r}")
    parsed = hub_spec(spec)
    repo_id = parsed[0] if parsed else spec
    token = token or get_token()
    with hub_timeout(timeout), hub_read_errors(spec, repo_id, timeout, token):
        side = open_hub_side(spec, token=token, strict=False)
        result = HubValidation(spec, repo_id, side.revision, exhaustive, files=side.files)
        result.problems = list(_problems(side, result, rows=exhaustive, exhaustive=exhaustive, online=True))
    return result


@dataclass(frozen=True)
class _TrackedFile:
    size: int


@dataclass
class _CheckoutSide:
    """A folder of a git checkout read as a Hub side: the files git tracks in it, opened on disk."""

    folder: Path
    files: dict

    def opener(self, name: str, block_size: int = 0):
        return open(self.folder / name, "rb")


def tracked_files(folder: Path) -> list[str]:
    """The paths (relative to ``folder``, posix) of the files git tracks in ``folder``, staged ones
    included: what a commit of the checkout holds and a push of it publishes."""
    import subprocess

    try:
        proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--", "."], cwd=folder, capture_output=True,
                              timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CheckoutError(f"{folder}: cannot list the files git tracks ({exc})") from None
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise CheckoutError(f"{folder}: not in a git checkout (--tracked checks the files git tracks: "
                           f"{message[0] if message else 'git ls-files failed'})")
    return sorted({name.decode("utf-8", "surrogateescape") for name in proc.stdout.split(b"\0") if name})


LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\n"
LFS_POINTER_MAX_BYTES = 1024  # a pointer file is about 130 bytes


def _is_lfs_pointer(path: Path) -> bool:
    """Whether ``path`` holds a Git LFS pointer (a clone made without fetching the LFS objects)."""
    if path.stat().st_size > LFS_POINTER_MAX_BYTES:
        return False
    with open(path, "rb") as handle:
        return handle.read(len(LFS_POINTER)) == LFS_POINTER


def validate_checkout(folder: Path, *, exhaustive: bool = False) -> list[str]:
    """The problems of dataset ``folder`` in a git checkout as it is committed, not as it lies on
    disk: the files git tracks (``tracked_files``), sorted into the layout by the Hub's rules
    (``.git`` and the Hub's ``.gitattributes`` are not the dataset's; an untracked file is not
    published), each shard and row read from disk and checked as ``validate_folder`` does.
    A tracked path that is a symbolic link or missing from the folder is a problem."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return [f"{folder}: not a folder"]
    files, problems = {}, []
    for path in tracked_files(folder):
        full = folder / path
        if full.is_symlink():
            problems.append(f"{path} (symbolic link): unexpected file, not part of the dataset layout "
                            f"({expected_layout_text()})")
        elif not full.is_file():
            problems.append(f"{path}: tracked by git, but not in the folder")
        elif _is_lfs_pointer(full):
            problems.append(f"{path}: a Git LFS pointer, not the file's content (run `git lfs pull`)")
        else:
            files[path] = _TrackedFile(full.stat().st_size)
    result = HubValidation(str(folder), "", "", exhaustive, files=files)
    side = _CheckoutSide(folder, files)
    return problems + list(_problems(side, result, rows=True, exhaustive=exhaustive, online=False))


def _problems(side, result: HubValidation, *, rows: bool, exhaustive: bool, online: bool) -> Iterator[str]:
    """The problems of ``side`` (its ``files`` listing, ``opener``): ``rows`` streams every row
    through the row checks (with jsonschema on every row when ``exhaustive``); ``online`` asks
    the Hub's own card check too."""
    from .dataset.hubcard import hub_validation_problems
    from .dataset.validate import ImagesSeen, _check_links, check_card_bytes, shard_number_problems

    layout = scan_repo(side.files)
    published = layout.published
    for path in layout.unexpected:
        yield f"{path}: unexpected file, not part of the dataset layout ({expected_layout_text()})"
    header, text = None, ""
    if README not in side.files:
        yield "README.md: missing"
    elif side.files[README].size > MAX_CARD_BYTES:
        yield f"README.md: {side.files[README].size:,} bytes, more than a card holds ({MAX_CARD_BYTES:,}); not read"
    else:
        with side.opener(README) as handle:
            header, text, card_problems = check_card_bytes(handle.read())
        yield from card_problems
        if header is not None:
            if online:
                yield from hub_validation_problems(text)
            yield from _check_links(text, published)
    shards_by_config, measured = {}, {}
    families = header_families(header)  # a family the build's recipe added is known (the card records the recipe)
    with ImagesSeen() as images:
        for config in CONFIGS:
            if not any(path.startswith(f"{config}/") for path in side.files):
                yield f"{config}: folder missing (README declares {config}/{SPLIT}-*)"
                shards_by_config[config] = []
                continue
            shards = [path for path in published if path.startswith(f"{config}/")]
            shards_by_config[config] = shards
            yield from shard_number_problems(config, [path.split("/", 1)[1] for path in shards])
            images.config_rows(config)
            for shard in shards:
                result.shards += 1
                result.shard_bytes += side.files[shard].size
                yield from _check_shard(side, config, shard, images, rows, exhaustive, measured, families)
            yield from images.config_done()
    if header is not None:
        from .dataset.validate import _check_dataset_info

        expected, info_problems = _expected_info(header, side, shards_by_config, measured)
        yield from info_problems
        if expected is not None:
            yield from _check_dataset_info(header, expected)


def _check_shard(side, config: str, shard: str, images: "ImagesSeen", rows: bool, exhaustive: bool,
                 measured: dict, families: Families) -> Iterator[str]:
    """The shard's footer (schema, features metadata, rows); with ``rows`` its rows too (their
    families checked against ``families``, the card's).
    ``measured[shard]`` gets (rows, Arrow bytes or None) when the footer is readable."""
    from .dataset.validate import _check_schema, _check_shard_rows

    with side.opener(shard, block_size=ROWS_BLOCK if rows else FOOTER_BLOCK) as handle:
        try:
            parquet = pq.ParquetFile(handle, pre_buffer=False)
            schema = parquet.schema_arrow
        except Exception as exc:
            _reraise_if_transport(exc)
            yield f"{shard}: not a readable parquet file ({exc})"
            return
        schema_problems = _check_schema(config, schema, shard)
        yield from schema_problems
        if rows and not schema_problems:
            try:  # as a folder's shard is: refused from its footer before any row is read
                check_row_groups(handle, parquet)
            except ShardTooLargeError as exc:
                yield f"{shard}: {exc}; its rows are not read"
                return
        if not rows:
            measured[shard] = (parquet.metadata.num_rows, None)
        elif schema_problems:  # rows of another shape are not checked, but measured (as a folder's are)
            try:
                measured[shard] = (parquet.metadata.num_rows,
                                   sum(row_group_nbytes(parquet, i) for i in range(parquet.num_row_groups)))
            except Exception as exc:
                _reraise_if_transport(exc)
        else:
            yield from _check_shard_rows(config, parquet, shard, shard, images, exhaustive, measured, families)


def _reraise_if_transport(exc: BaseException) -> None:
    """A failed request while pyarrow reads is the Hub's failure, not the shard's: raise it."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, (HfHubHTTPError, httpx2.HTTPError)):
        raise exc


def _card_entry(header: dict, config: str) -> dict:
    """The card's ``dataset_info`` entry of ``config`` ({} when it has none)."""
    entries = header.get("dataset_info")
    return next((e for e in entries if isinstance(e, dict) and e.get("config_name") == config), {}) \
        if isinstance(entries, list) else {}


def _card_split(entry: dict) -> Optional[dict]:
    splits = entry.get("splits")
    return next((s for s in splits if isinstance(s, dict) and s.get("name") == SPLIT), None) \
        if isinstance(splits, list) else None


def _expected_info(header: dict, side, shards_by_config: dict, measured: dict) -> tuple[Optional[list], list[str]]:
    """(the ``dataset_info`` the card must carry, as ``validate._expected_info`` gives it, from the
    footers and the listing; problems). None when a shard's footer was unreadable (reported
    already). Where only footers were read, the rows' Arrow size is unknown: the card's own
    ``num_bytes`` stands for it, checked only to be a byte count equal to its ``dataset_size``
    (one split), in words of its own."""
    sizes, problems, unmeasured = {}, [], {}
    for config in CONFIGS:
        shards = shards_by_config.get(config, [])
        if any(shard not in measured for shard in shards):
            return None, problems
        arrow = [measured[shard][1] for shard in shards]
        if all(value is not None for value in arrow):
            arrow_bytes = sum(arrow)
        else:
            entry = _card_entry(header, config)
            split = _card_split(entry)
            arrow_bytes = split.get("num_bytes") if split is not None else entry.get("dataset_size")
            if split is not None:  # no split: _check_dataset_info reports it
                if isinstance(arrow_bytes, bool) or not isinstance(arrow_bytes, int) or arrow_bytes < 0:
                    problems.append(f"README.md: dataset_info of {config}: num_bytes {arrow_bytes!r} "
                                    "is not a byte count")
                elif entry.get("dataset_size") != arrow_bytes:
                    problems.append(f"README.md: dataset_info of {config}: dataset_size {entry.get('dataset_size')!r} "
                                    f"differs from the num_bytes {arrow_bytes} of its one split")
            unmeasured[config] = entry.get("dataset_size")
        sizes[config] = {"rows": sum(measured[shard][0] for shard in shards),
                         "file_bytes": sum(side.files[shard].size for shard in shards),
                         "arrow_bytes": arrow_bytes}
    expected = dataset_info(sizes)
    for entry in expected:  # an unmeasured dataset_size was checked above
        if entry["config_name"] in unmeasured:
            entry["dataset_size"] = unmeasured[entry["config_name"]]
    return expected, problems
