"""The pool: QA items in the native JSONL format, and importers that produce it.

``import_source(fmt, source, out, **options)`` runs one importer and returns its report; each
importer streams its source and writes ``out`` through ``PoolWriter``, so every line it writes
reads back with ``read_pool`` and every record it cannot convert is a counted problem.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable

from .. import families as code_families
from ..errors import OrandCarError, UnknownNameError
from ..registry import Registry
from .jsonl import PoolLineError, encode_pool_line, parse_pool_line, pool_line, read_pool
from .report import ImportProblem, ImportReport, format_import_report
from .writer import PoolWriter


def _importer_contract(fmt: str, importer: object) -> list[str]:
    """An importer is a function ``(source, writer, **options)``: two positional parameters, its
    options keyword-only (what ``import_source`` checks the given options against)."""
    if not callable(importer):
        return [f"is {type(importer).__name__}, not a function"]
    try:
        parameters = list(inspect.signature(importer).parameters.values())
    except (TypeError, ValueError):
        return ["has no signature to read"]
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) != 2 or any(p.default is not p.empty for p in positional):
        return [f"takes {len(positional)} positional parameter(s); an importer takes (source, writer) and "
                "keyword-only options"]
    return []


# format name -> "module:function"; imported on use so `hf` pulls in `datasets` only when asked.
IMPORTERS = Registry("import format", {
    "llava": "orandcar_builder.pool.llava:import_llava",
    "folder": "orandcar_builder.pool.folder:import_folder",
    "hf": "orandcar_builder.pool.hf:import_hf",
    "jsonl": "orandcar_builder.pool.jsonl:import_jsonl",
}, check=_importer_contract)


def get_importer(fmt: str) -> Callable:
    """The importer function for ``fmt``; an unknown name says which one was meant."""
    return IMPORTERS.load(fmt)


def _check_options(fmt: str, importer: Callable, options: dict) -> None:
    accepted = [name for name, p in inspect.signature(importer).parameters.items() if p.kind is p.KEYWORD_ONLY]
    for name in options:
        if not accepted:
            raise OrandCarError(f"the {fmt} importer takes no options; got {name!r}")
        if name not in accepted:
            raise UnknownNameError(f"option for the {fmt} importer", name, accepted)
    families = [options.get("family")] + list((options.get("family_map") or {}).values())
    for family in families:
        if family is not None:
            code_families.DEFAULT_FAMILIES[family]  # fail once, up front, not once per line (an import knows no recipe)


def import_source(fmt: str, source: Path, out: Path, **options) -> ImportReport:
    """Convert ``source`` (format ``fmt``) to the native pool file ``out``.

    Returns the counts and problems; the full problem list also goes to ``<out stem>.problems.jsonl``
    beside ``out``. ``out`` is replaced only when the import finishes having written a line: an
    import whose every record is unusable leaves ``out`` as it was. Raises ``OrandCarError``
    (with a did-you-mean for names) for an unknown format or option, or a source that cannot be
    read at all; a bad record never raises.
    """
    importer = get_importer(fmt)
    # None means "not given": the importer's own default applies (CLI options arrive this way).
    options = {name: value for name, value in options.items() if value is not None}
    _check_options(fmt, importer, options)
    source, out = Path(source), Path(out)
    if not source.exists():
        raise OrandCarError(f"{source}: no such file or folder to import")
    report = ImportReport(format=fmt, source=str(source), out=str(out))
    try:
        with PoolWriter(out, report) as writer:
            importer(source, writer, **options)
            if not report.written:
                raise _NothingWritten  # an empty pool must not replace one
    except _NothingWritten:
        pass
    return report


class _NothingWritten(Exception):
    """Leaves a PoolWriter without replacing its file."""


__all__ = [
    "IMPORTERS",
    "ImportProblem",
    "ImportReport",
    "PoolLineError",
    "PoolWriter",
    "encode_pool_line",
    "format_import_report",
    "get_importer",
    "import_source",
    "parse_pool_line",
    "pool_line",
    "read_pool",
]
