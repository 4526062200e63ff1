"""The import seal: why a pool that ``orandcar import`` wrote may name images outside its folder.

A build reads only images inside the pool file's folder (``images.ImagePolicy``), so that a pool
someone else wrote cannot embed any file the user can read. A pool imported on this machine is
different: its lines name images where the import found them (``../src/IMG/1.png``), in the
folder the user pointed the import at. So the importer writes a seal beside the pool,
``<stem>.seal.json``: the folders the import read (its roots), the pool file's sha256, and an
HMAC-SHA256 of both under a key that never leaves this machine (``import-seal.key`` in the
user's config folder, ``$ORANDCAR_CONFIG_DIR`` or click's app dir, ``~/.config/orandcar``;
made with mode 0600 on the first import). Reading a pool, a seal whose MAC checks and whose
hash is the pool file's adds its roots to the folders images may lie in; no flag is needed.

Why a MAC, not a plain list of roots: whoever hands out a pool can hand out a sidecar with it,
but nobody without this machine's key can make one that checks. A pool edited after its import,
or copied from another machine with its seal, falls back to the guard (``--allow-outside-paths``
stays the explicit way out). Without a writable config folder the import simply writes no seal.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Iterable, Optional

from ..files import sha256_of_file, write_text_atomic

CONFIG_DIR_ENV = "ORANDCAR_CONFIG_DIR"
KEY_FILE = "import-seal.key"
SEAL_SUFFIX = ".seal.json"
SEAL_VERSION = 1


def seal_path_for(pool: Path) -> Path:
    """Where the seal of ``pool`` goes: ``pool.jsonl`` -> ``pool.seal.json``."""
    pool = Path(pool)
    return pool.with_name(pool.stem + SEAL_SUFFIX)


def _key_path() -> Path:
    configured = os.environ.get(CONFIG_DIR_ENV)
    if configured:
        return Path(configured) / KEY_FILE
    import click

    return Path(click.get_app_dir("orandcar")) / KEY_FILE


def _read_key() -> Optional[bytes]:
    try:
        key = _key_path().read_bytes()
    except OSError:
        return None
    return key if len(key) >= 32 else None


def _key(create: bool) -> Optional[bytes]:
    """This machine's seal key; with ``create``, made (0600, never replaced) when missing. None
    when there is none and it cannot be made."""
    key = _read_key()
    if key is not None or not create:
        return key
    path = _key_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # two imports at once: one wins
    except FileExistsError:
        return _read_key()
    except OSError:
        return None
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(32))
    return _read_key()


def _mac(key: bytes, roots: list[str], pool_sha256: str) -> str:
    message = json.dumps({"version": SEAL_VERSION, "roots": roots, "pool_sha256": pool_sha256},
                         sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def write_seal(pool: Path, roots: Iterable[str], pool_sha256: str) -> Optional[Path]:
    """Seal ``pool`` (whose bytes hash to ``pool_sha256``) with the folders ``roots`` (links
    resolved); returns the seal's path, or None (and any older seal removed) when there are no
    roots or no key can be had."""
    path = seal_path_for(pool)
    roots = sorted({os.path.realpath(root) for root in roots})
    key = _key(create=True) if roots else None
    if key is None:
        path.unlink(missing_ok=True)
        return None
    seal = {"version": SEAL_VERSION, "roots": roots, "pool_sha256": pool_sha256,
            "mac": _mac(key, roots, pool_sha256)}
    write_text_atomic(path, json.dumps(seal, indent=2, ensure_ascii=False) + "\n")
    return path


def sealed_roots(pool: Path) -> tuple[str, ...]:
    """The folders the seal of ``pool`` vouches for: empty when there is no seal, it is not this
    machine's, it is damaged, or the pool changed since it was sealed."""
    try:
        seal = json.loads(seal_path_for(pool).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    if not isinstance(seal, dict) or seal.get("version") != SEAL_VERSION:
        return ()
    roots, digest, mac = seal.get("roots"), seal.get("pool_sha256"), seal.get("mac")
    if (not isinstance(roots, list) or not all(isinstance(r, str) and os.path.isabs(r) for r in roots)
            or not isinstance(digest, str) or not isinstance(mac, str)):
        return ()
    key = _key(create=False)
    if key is None or not hmac.compare_digest(_mac(key, roots, digest), mac):
        return ()
    try:
        if sha256_of_file(pool) != digest:
            return ()
    except OSError:
        return ()
    return tuple(roots)
