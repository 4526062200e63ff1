"""File primitives every stage uses: a write that lands whole or not at all, file hashing, image
signatures, path containment, and the bounds on JSON read from outside. Imports nothing from the
package.

JSON that comes from outside (a pool line, a LLaVA record, a replay recording, a shard's metadata,
a command-line value) is decoded with ``json_decoder``: a value nested deeper than
``MAX_JSON_DEPTH`` or holding an integer longer than ``MAX_JSON_INT_DIGITS`` digits raises
``JsonLimitError`` (a ``ValueError`` with a ``reason``), never a RecursionError or Python's own
int-conversion ValueError; so each reader drops or reports that one value like any bad one.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]
HASH_CHUNK = 1 << 20
# Nesting levels a JSON value from outside may have. Ours need at most four (a LLaVA record: the
# record, its turns, a turn, a value); far below the interpreter's recursion limit, so no later
# walk of a value that passed (json.dumps, arrow conversion) can run out of stack either.
MAX_JSON_DEPTH = 64
# Digits an integer may have: no field we read holds a number past a 64-bit id (20 digits); Python
# refuses to convert more than 4,300 digits anyway (sys.int_info.default_max_str_digits).
MAX_JSON_INT_DIGITS = 100


def partial_path(path: PathLike, suffix: str = ".partial") -> Path:
    """The temporary name a file is written under before it is renamed into place."""
    path = Path(path)
    return path.with_name(path.name + suffix)


@contextmanager
def replaced_on_success(path: PathLike, suffix: str = ".partial") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without an exception the
    temporary file is renamed over ``path`` (atomic on one file system), otherwise it is removed
    and ``path`` is left as it was."""
    target = Path(path)
    tmp = partial_path(target, suffix)
    try:
        yield tmp
        os.replace(tmp, target)  # a failed rename leaves no temporary file either
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def naming(path: PathLike) -> Iterator[None]:
    """Give an OSError raised inside the block that names no file (pyarrow's writers raise such:
    "[errno 28] No space left on device") the name ``path``, so the message says where."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, os.strerror(exc.errno), str(path)) from exc


class StagedFile:
    """A file written over time under a temporary name beside ``path`` (``path`` + ``suffix``):
    ``commit`` closes it (after an fsync when ``fsync``) and renames it into place, ``abort``
    closes and removes it, leaving ``path`` as it was. As a context manager it commits when the
    block succeeds and aborts when it raises. Subclasses open their handle on ``self.tmp`` and
    close it in ``close``."""

    def __init__(self, path: PathLike, *, suffix: str = ".tmp", fsync: bool = False):
        self.path = Path(path)
        self.tmp = partial_path(self.path, suffix)
        self.fsync = fsync

    def close(self, *, sync: bool) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        self.close(sync=self.fsync)
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.close(sync=False)
        self.tmp.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        (self.abort if exc_type is not None else self.commit)()


# ``json.dumps(record, ensure_ascii=False)``'s encoder, made once (dumps makes one per call).
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False)
# The function that encoder writes a string with (the C one where the interpreter has it).
_STRING_ENCODER = json.encoder.encode_basestring


def _encoded(value: object) -> str:
    """``value`` as ``_LINE_ENCODER`` writes it inside a record."""
    return _STRING_ENCODER(value) if type(value) is str else _LINE_ENCODER.encode(value)


class JsonLinesFile(StagedFile):
    """One JSON object per line (UTF-8, ``\\n`` line ends), staged as ``StagedFile``."""

    def __init__(self, path: PathLike, *, suffix: str = ".tmp", fsync: bool = False):
        super().__init__(path, suffix=suffix, fsync=fsync)
        self.fh = open(self.tmp, "w", encoding="utf-8", newline="\n")
        self.lines = 0

    def write(self, record: dict) -> None:
        self.fh.write(_LINE_ENCODER.encode(record) + "\n")
        self.lines += 1

    def write_columns(self, columns: dict[str, list]) -> None:
        """One line per position of the equally long ``columns``: the bytes of ``write({name:
        column[i], ...})`` for each ``i``, each value encoded once by itself and the lines put
        together from one template (no dict per line)."""
        names = list(columns)
        if not names:
            return
        template = "{" + ", ".join(_STRING_ENCODER(name).replace("%", "%%") + ": %s" for name in names) + "}\n"
        encoded = [[_encoded(value) for value in values] for values in columns.values()]
        lines = [template % values for values in zip(*encoded, strict=True)]
        self.fh.write("".join(lines))
        self.lines += len(lines)

    def close(self, *, sync: bool) -> None:
        if sync:
            self.fh.flush()
            os.fsync(self.fh.fileno())
        self.fh.close()


def write_bytes_atomic(path: PathLike, data: bytes, suffix: str = ".partial") -> None:
    with replaced_on_success(path, suffix) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: PathLike, text: str, suffix: str = ".partial") -> None:
    with replaced_on_success(path, suffix) as tmp:
        tmp.write_text(text, encoding="utf-8")


# file_stat of a path where no file is.
ABSENT = (-1, -1, -1, -1, -1)


def file_stat(path: PathLike) -> Optional[tuple]:
    """A file's identity: (size, mtime_ns, ctime_ns, inode, device) of ``path`` (links followed);
    ABSENT when no file is there; None when it cannot be told (a permission error). A write to
    the file moves its ctime, which no tool can set back, and a file put in its place has
    another inode."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return ABSENT
    except (OSError, ValueError):
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def within(path: PathLike, root: str, realpath=os.path.realpath) -> bool:
    """Whether ``path`` lies inside the folder ``root`` (links resolved in ``root``
    by the caller: ``os.path.realpath``) once the links of ``path`` are resolved (by ``realpath``:
    ``os.path.realpath``, or a ``RealPaths`` for the many files of one read)."""
    return inside(realpath(path), root)


def inside(real: str, root: str) -> bool:
    """Whether the path ``real`` (links resolved) is the folder ``root`` or lies under it."""
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


class RealPaths:
    """``os.path.realpath`` of the many files one read of a pool names: each folder's links are
    resolved once (the last ``folders`` folders remembered), then a file's real path is its
    folder's joined with its name, after one ``lstat`` that finds the name is not itself a link
    (a link, a name that does not exist, ``.`` or ``..`` are resolved whole). For a file under
    three folders ``os.path.realpath`` makes four ``lstat`` and took 12-16 us here, this 4-5 us.
    Meant for one read: a folder replaced by a link meanwhile is not seen (the check was as racy
    before: a file can change between its check and its read)."""

    def __init__(self, folders: int = 4096):
        self._folders: dict[str, str] = {}
        self._limit = folders

    def __call__(self, path: PathLike) -> str:
        path = os.fspath(path)
        folder, name = os.path.split(path)
        if not folder or name in ("", ".", ".."):
            return os.path.realpath(path)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return os.path.realpath(path)
        except (OSError, ValueError):  # missing, unreadable folder, a NUL in the name: as realpath says
            return os.path.realpath(path)
        real = self._folders.get(folder)
        if real is None:
            if len(self._folders) >= self._limit:
                self._folders.clear()
            real = self._folders[folder] = os.path.realpath(folder)
        return os.path.join(real, name)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_of_file(path: PathLike, chunk: int = HASH_CHUNK) -> str:
    """sha256 of a whole file, read in chunks (for bounded reads of pool images see
    ``images.sha256_file``)."""
    digest = hashlib.sha256()
    update_from_file(path, digest, chunk=chunk)
    return digest.hexdigest()


def update_from_file(path: PathLike, *digests, chunk: int = HASH_CHUNK) -> None:
    """Feed the whole file at ``path``, read once in chunks, to each of ``digests`` (hashlib
    objects), e.g. a sha256 and a git blob id in one pass."""
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            for digest in digests:
                digest.update(block)


# Leading bytes of each image format the project names or sends -> (MIME type, file extension).
IMAGE_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png", ".png"),
    (b"\xff\xd8\xff", "image/jpeg", ".jpg"),
    (b"GIF87a", "image/gif", ".gif"),
    (b"GIF89a", "image/gif", ".gif"),
    (b"BM", "image/bmp", ".bmp"),
    (b"II*\x00", "image/tiff", ".tif"),
    (b"MM\x00*", "image/tiff", ".tif"),
)
PNG_SIGNATURE = IMAGE_SIGNATURES[0][0]


def image_format(data: bytes) -> Optional[tuple[str, str]]:
    """(MIME type, extension) of encoded image bytes from their leading bytes; None if unknown."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", ".webp"
    for magic, mime, ext in IMAGE_SIGNATURES:
        if data.startswith(magic):
            return mime, ext
    return None


# --- JSON from outside -----------------------------------------------------------------------------

JSON_TOO_DEEP = "json_too_deep"
JSON_NUMBER_TOO_LONG = "json_number_too_long"


class JsonLimitError(ValueError):
    """A JSON value past ``MAX_JSON_DEPTH`` or ``MAX_JSON_INT_DIGITS``; ``reason`` names which."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_JSON_INT_DIGITS:
        raise JsonLimitError(JSON_NUMBER_TOO_LONG, f"holds a number of {digits:,} digits "
                                                   f"(at most {MAX_JSON_INT_DIGITS} are read)")
    return int(text)


def _too_deep() -> JsonLimitError:
    return JsonLimitError(JSON_TOO_DEEP, f"nested deeper than {MAX_JSON_DEPTH} levels")


def deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` (decoded JSON) nests more than ``limit`` lists and objects; no recursion."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _checked_depth(value: object, text: str, start: int = 0, end: Optional[int] = None):
    # Counting brackets is a C loop; only a text with more of them than the limit can be too deep.
    end = len(text) if end is None else end
    if (isinstance(value, (dict, list)) and text.count("[", start, end) + text.count("{", start, end) > MAX_JSON_DEPTH
            and deeper_than(value, MAX_JSON_DEPTH)):
        raise _too_deep()
    return value


class BoundedJSONDecoder(json.JSONDecoder):
    """``json.JSONDecoder`` within ``MAX_JSON_DEPTH`` and ``MAX_JSON_INT_DIGITS``: ``decode`` and
    ``raw_decode`` raise ``JsonLimitError`` past them (and ``json.JSONDecodeError`` as before)."""

    def __init__(self, **kwargs):
        super().__init__(parse_int=_bounded_int, **kwargs)

    def raw_decode(self, s: str, idx: int = 0):
        try:
            value, end = super().raw_decode(s, idx)
        except RecursionError:
            raise _too_deep() from None
        return _checked_depth(value, s, idx, end), end


_JSON = BoundedJSONDecoder()


def json_decoder(**kwargs) -> BoundedJSONDecoder:
    """A decoder of JSON from outside (see the module docstring); ``kwargs`` as ``JSONDecoder``'s."""
    return BoundedJSONDecoder(**kwargs) if kwargs else _JSON


def loads_bounded(text: Union[str, bytes]) -> object:
    """``json.loads`` of JSON from outside: ``JsonLimitError`` past the bounds."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    return _JSON.decode(text)


def read_json_lines(path: Path) -> Iterator[Optional[dict]]:
    """The records of a JSONL file the build wrote (none when the file is missing); a line that
    is not a JSON object comes back as None so that the caller can count it."""
    try:
        fh = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            yield record if isinstance(record, dict) else None
