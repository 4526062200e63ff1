"""Where the running code came from: the git commit of the source tree the package was built or is
run from, when that is known, and whether the files that shape a build differed from it.

Looked for in this order:

1. ``ORANDCAR_SOURCE_COMMIT`` in the environment: a commit to name (for a tree git cannot see, an
   unpacked source archive), or ``none`` to name none (the tests set it, so that cards compare
   byte for byte whatever commit the checkout is at);
2. ``_build_info.json`` beside this module (``orandcar_builder/pipeline/``): what setup.py's build
   hook recorded when a wheel was built from a git checkout;
3. the git checkout this package is imported from (a checkout on ``PYTHONPATH``, an editable
   install): ``git rev-parse HEAD``, and ``git status`` of the paths in ``BUILD_PATHS``.

The result is ``{"commit": HEX, "modified": bool}`` or None. This module imports nothing of the
package: setup.py runs it from its file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Optional

SOURCE_COMMIT_ENV = "ORANDCAR_SOURCE_COMMIT"
NO_COMMIT = "none"  # the value of SOURCE_COMMIT_ENV that names no commit
BUILD_INFO = "_build_info.json"  # written into a built wheel's package by setup.py
# What shapes a build's output: the package, the folders it ships and the packaging files.
BUILD_PATHS = ("orandcar_builder", "dataset_card", "loading_script", "recipes", "pyproject.toml", "setup.py",
               "setup.cfg")
GIT_TIMEOUT_S = 10
_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
_HERE = Path(__file__).resolve().parent  # orandcar_builder/pipeline: where a wheel's BUILD_INFO lies
_CHECKOUT = _HERE.parents[1]  # the folder holding orandcar_builder/: a checkout's root, or site-packages


def _git(root: Path, *args: str) -> Optional[str]:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_source(root: Path) -> Optional[dict]:
    """The commit checked out at ``root`` (a git work tree's top folder) and whether BUILD_PATHS
    differ from it (changed, staged or new files); None when ``root`` is not one or git is missing."""
    root = Path(root)
    if not (root / ".git").exists():
        return None
    head = (_git(root, "rev-parse", "--verify", "HEAD") or "").strip().lower()
    if not _COMMIT.match(head):
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=normal", "--", *BUILD_PATHS)
    return {"commit": head, "modified": bool(status and status.strip())}


def _recorded() -> Optional[dict]:
    try:
        data = json.loads((_HERE / BUILD_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    commit = str(data.get("commit") or "").lower() if isinstance(data, dict) else ""
    return {"commit": commit, "modified": bool(data.get("modified"))} if _COMMIT.match(commit) else None


def source_info() -> Optional[dict]:
    """The commit the running package comes from, as described in the module docstring; a
    ValueError for a SOURCE_COMMIT_ENV that is neither a commit nor ``none``."""
    given = os.environ.get(SOURCE_COMMIT_ENV)
    if given is not None:
        given = given.strip().lower()
        if given == NO_COMMIT:
            return None
        if not _COMMIT.match(given):
            raise ValueError(f"{SOURCE_COMMIT_ENV}={given!r}: not a git commit (7 to 64 hex digits) nor "
                             f"{NO_COMMIT!r}")
        return {"commit": given, "modified": False}
    return _recorded() or git_source(_CHECKOUT)
