"""ImageRef: the original encoded bytes of an image and their sha256.

Images are stored exactly as they came (never re-encoded) and decoded only to run a model.
Decoding keeps Pillow's decompression-bomb limit on and turns its warning into an error, so a
hostile or broken file is rejected with a reason instead of exhausting memory.

Reading is guarded too (``read_image_file``): only a regular file is read (a FIFO would block the
build forever, ``/dev/zero`` never ends), no more than ``ImagePolicy.max_bytes`` (a 3 GB sparse
file is refused from its size, before any byte is read), and in chunks with a deadline checked
between them (``read_timeout_s``: a slow or stalled network mount ends the read with a reason; a
single read call the kernel never returns from cannot be interrupted from Python). A pool's
images must lie inside the pool file's folder unless ``allow_outside_paths`` is set
(``within``), so a pool someone else wrote cannot embed any file the user can read.

Kept rather than a library (issue 26): the read deadline is a ``time.monotonic()`` check between
chunked ``read`` calls, no thread and no signal (``signal.alarm`` works only on a process's main
thread and one timer per process, and the check is a library function any caller's thread may
run; a stalled ``read`` call is not ended by a library either). ``exit_with_parent`` (a daemon thread
that polls ``os.getppid()``) ends a prefetch worker whose build was killed outright: neither
``concurrent.futures`` nor ``multiprocessing`` notices a parent killed with SIGKILL (their workers
block on the task queue for ever), ``prctl(PR_SET_PDEATHSIG)`` is Linux-only, needs ctypes and
fires when the forking *thread* ends rather than the process, and ``psutil`` (not a dependency)
would poll just the same.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import stat
import time
import warnings
from dataclasses import dataclass, field
from typing import Optional

from PIL import Image

from .files import inside, sha256_bytes, within  # noqa: F401  (within: importable from here too)
from .interrupts import ignore_sigint

# Pillow's own default (about 89 megapixels); kept as a named constant so the card can cite it.
MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS or 89_478_485
DEFAULT_MAX_IMAGE_BYTES = 64 * 1024 * 1024  # one image file; larger files are refused unread
DEFAULT_READ_TIMEOUT_S = 60.0  # one image file, checked between chunks
READ_CHUNK = 1 << 20

# Drop reasons of an image that cannot be used, by ImageError.reason.
IMAGE_MISSING = "image_missing"
IMAGE_UNDECODABLE = "image_undecodable"
IMAGE_NOT_REGULAR = "image_not_regular_file"
IMAGE_TOO_LARGE = "image_too_large"
IMAGE_READ_TIMEOUT = "image_read_timeout"
IMAGE_OUTSIDE_POOL = "image_outside_pool"


class ImageError(ValueError):
    """An image that cannot be read or decoded; the message names the file, ``reason`` says why
    in one word (a drop reason)."""

    def __init__(self, message: str, reason: str = IMAGE_UNDECODABLE):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ImagePolicy:
    """What image files a pool may use: at most ``max_bytes`` each, read within
    ``read_timeout_s``, inside the pool file's folder (or one of ``roots``, the folders an
    import seal vouches for: ``pool.seal``) unless ``allow_outside_paths``."""

    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    allow_outside_paths: bool = False
    roots: tuple = ()  # absolute folders, links resolved

    def allows(self, path: str, root: str, realpath=os.path.realpath) -> bool:
        """Whether ``path`` may be read by a pool whose folder is ``root`` (links resolved);
        ``realpath`` resolves ``path``'s links (``files.RealPaths`` for one read's many files)."""
        if self.allow_outside_paths:
            return True
        real = realpath(path)
        return any(inside(real, folder) for folder in (root, *self.roots))

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or self.max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive whole number of bytes, not {self.max_bytes!r}")
        if not isinstance(self.read_timeout_s, (int, float)) or not self.read_timeout_s > 0:
            raise ValueError(f"read_timeout_s must be a positive number of seconds, not {self.read_timeout_s!r}")


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _read_chunks(path: str, max_bytes: int, timeout_s: float):
    """Yield the blocks of the regular file ``path``; OSError for anything else or past a bound."""
    # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; it changes nothing
    # for a regular file, the only kind read here.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"is {_file_kind(info.st_mode)}, not a regular file", path)
        if info.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"{info.st_size:,} bytes, over the limit of {max_bytes:,} bytes per image", path)
        deadline = time.monotonic() + timeout_s
        total = 0
        while True:
            block = os.read(fd, int(min(READ_CHUNK, max_bytes + 1 - total)))
            if not block:
                return
            total += len(block)
            if total > max_bytes:
                raise OSError(errno.EFBIG, f"grew past the limit of {max_bytes:,} bytes per image while read", path)
            yield block
            if time.monotonic() > deadline:
                raise OSError(errno.ETIMEDOUT, f"reading took longer than {timeout_s:g} s", path)
    finally:
        os.close(fd)


def read_image_file(path: str | os.PathLike, *, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
                    timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> bytes:
    """The bytes of the regular file ``path``; ImageError (with its ``reason``) for a missing file,
    one that is not a regular file, one over ``max_bytes``, or a read past ``timeout_s``."""
    path = str(path)
    try:
        return b"".join(_read_chunks(path, max_bytes, timeout_s))
    except FileNotFoundError:
        raise ImageError(f"{path}: image file not found", IMAGE_MISSING) from None
    except OSError as exc:
        reason = {errno.EINVAL: IMAGE_NOT_REGULAR, errno.EFBIG: IMAGE_TOO_LARGE,
                  errno.ETIMEDOUT: IMAGE_READ_TIMEOUT}.get(exc.errno, IMAGE_UNDECODABLE)
        raise ImageError(f"{path}: cannot read image file ({exc.strerror or exc})", reason) from None


def sha256_file(path: str | os.PathLike, *, max_bytes: Optional[int] = None,
                timeout_s: Optional[float] = None) -> str:
    """sha256 of a regular file (of at most ``max_bytes``, read within ``timeout_s`` when given);
    OSError otherwise, as for a missing file."""
    digest = hashlib.sha256()
    for block in _read_chunks(str(path), max_bytes if max_bytes is not None else float("inf"),
                              timeout_s if timeout_s is not None else float("inf")):
        digest.update(block)
    return digest.hexdigest()


def sha256_image_file(path: str | os.PathLike) -> str:
    """sha256 of an image file named by a pool (``source.image``): within the default bounds."""
    return sha256_file(path, max_bytes=DEFAULT_MAX_IMAGE_BYTES, timeout_s=DEFAULT_READ_TIMEOUT_S)


@dataclass(frozen=True)
class ImageRef:
    """An image by its file and content hash; the bytes are read on demand.

    ``path`` is where the original file lives; ``sha256`` the hex digest of its bytes at the time
    it was admitted. ``read()`` re-checks the hash, so a file changed after admission is an error
    rather than a silently different dataset.
    """

    path: str
    sha256: str
    size: int = field(default=0, compare=False)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, check_decodes: bool = True,
                  policy: Optional[ImagePolicy] = None) -> "ImageRef":
        path = str(path)  # not a Path: pathlib's parsing costs more than the read
        policy = policy or ImagePolicy()
        data = read_image_file(path, max_bytes=policy.max_bytes, timeout_s=policy.read_timeout_s)
        if check_decodes:
            check_decodable(data, path)
        return cls(path=path, sha256=sha256_bytes(data), size=len(data))

    def read(self) -> bytes:
        # Bounded by the admitted size: a file that grew (or was swapped for a FIFO) has changed.
        try:
            data = read_image_file(self.path, max_bytes=self.size or DEFAULT_MAX_IMAGE_BYTES)
        except ImageError as exc:
            if exc.reason in (IMAGE_TOO_LARGE, IMAGE_NOT_REGULAR):
                raise ImageError(f"{self.path}: file changed since it was admitted ({exc})", exc.reason) from None
            raise
        if sha256_bytes(data) != self.sha256:
            raise ImageError(f"{self.path}: file changed since it was admitted (sha256 differs)")
        return data

    def open(self) -> Image.Image:
        """Decode for a model (RGB), with the decompression-bomb limit enforced."""
        return decode(self.read(), self.path)


def _open_checked(data: bytes, name: str) -> Image.Image:
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            img = Image.open(io.BytesIO(data))
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise ImageError(f"{name}: image exceeds the decompression-bomb limit ({exc})") from None
        except Exception as exc:  # Pillow raises several types for undecodable input
            raise ImageError(f"{name}: not a decodable image ({type(exc).__name__}: {_stable(exc)})") from None
    if img.width * img.height > MAX_IMAGE_PIXELS:
        raise ImageError(f"{name}: image has {img.width}x{img.height} pixels, over the limit")
    return img


def _stable(exc: BaseException) -> str:
    """An exception's text without object addresses (Pillow names the BytesIO it was handed:
    "<_io.BytesIO object at 0x7f...>"), so a drop reason reads the same in every run."""
    return re.sub(r"<([\w.]+) object at 0x[0-9a-fA-F]+>", r"<\1>", str(exc))


def check_decodable(data: bytes, name: str = "<bytes>") -> None:
    """Raise ImageError unless ``data`` fully decodes (truncated files included)."""
    img = _open_checked(data, name)
    try:
        img.load()
    except Exception as exc:
        raise ImageError(f"{name}: image data is truncated or corrupt ({type(exc).__name__}: {_stable(exc)})") from None


def decode(data: bytes, name: str = "<bytes>") -> Image.Image:
    img = _open_checked(data, name)
    try:
        img.load()
        return img.convert("RGB") if img.mode != "RGB" else img
    except Exception as exc:
        raise ImageError(f"{name}: image data is truncated or corrupt ({type(exc).__name__}: {_stable(exc)})") from None


def check_image(path: str, root: str, policy: ImagePolicy, realpath=os.path.realpath) -> "ImageRef | ImageError":
    """The admission check of one pool image (absolute ``path``, links unresolved): an ImageRef
    (read, decoded, hashed), or the ImageError that drops it, including a path outside ``root``
    (the pool file's folder, links resolved) unless the policy allows it (``realpath``: see
    ``ImagePolicy.allows``). Pure given the file: the same answer in any process
    (``pool.prefetch`` runs it on worker processes)."""
    try:
        if not policy.allows(path, root, realpath):
            raise ImageError("lies outside the pool file's folder (allow it with --allow-outside-paths)",
                             IMAGE_OUTSIDE_POOL)
        return ImageRef.from_file(path, policy=policy)
    except ImageError as exc:
        return exc


def check_images(paths: list[str], root: str, policy: ImagePolicy) -> "list[ImageRef | ImageError]":
    """``check_image`` of each path (``pool.prefetch`` runs it on worker processes: an ImageError
    pickles with its ``reason``, which an exception keeps in its ``__dict__``)."""
    return [check_image(path, root, policy) for path in paths]


def start_worker(parent: int) -> None:
    """A worker process's initializer (``pool.prefetch``): Ctrl-C is the parent's to handle
    (``interrupts``), and the worker ends once ``parent`` is gone (``exit_with_parent``)."""
    ignore_sigint()
    exit_with_parent(parent)


def exit_with_parent(parent: int, every_s: float = 0.5) -> None:
    """In a worker process (``pool.prefetch``'s initializer): end it once ``parent`` is gone. A
    build killed outright (SIGKILL, a lost machine) cannot stop its workers, and they would wait
    on their task queue for ever: the queue's write end lives on in each worker."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
