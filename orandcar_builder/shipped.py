"""Where the folders the package ships beside its code are: ``dataset_card/``, ``loading_script/``
and ``recipes/``.

In a checkout (and an editable install) they are the repository's top-level folders; a wheel
carries a copy inside the package (``orandcar_builder/_shipped/``, made by setup.py's build
hook). The installed copy is looked for first.
"""

from __future__ import annotations

from pathlib import Path

from .errors import UnknownNameError

SHIPPED_FOLDERS = ("dataset_card", "loading_script", "recipes")
_PACKAGE = Path(__file__).resolve().parent


def shipped_dir(name: str) -> Path:
    """The folder ``name`` as installed with the package, else the one of this checkout."""
    if name not in SHIPPED_FOLDERS:
        raise UnknownNameError("shipped folder", name, SHIPPED_FOLDERS)
    installed = _PACKAGE / "_shipped" / name
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name
