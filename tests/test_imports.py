"""Imports go one way: a module imports only modules of its own part or of a lower level.

The levels are the build's stages in the order data flows through them (docs/architecture.md,
"Who may import whom"). Late imports inside functions count too: a late import hides a cycle, it
does not remove it. A new module must be placed in ``LEVELS``; an unplaced one fails the test.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Optional

PACKAGE = "orandcar_builder"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# Lowest first. Each part may import itself and any part of a lower level, never a higher one
# and never another part of its own level.
LEVELS: list[tuple[str, ...]] = [
    ("__init__", "vocab", "files", "errors", "redact", "interrupts", "workdir", "heap", "childproc"),
    ("images", "parquetio", "spill", "shipped", "hubhttp", "diffstore", "registry"),
    ("records", "families", "figures"),
    ("prompts",),
    ("verify",),  # below engines: a rule never runs a model
    ("judge",),  # below engines and cache: the judge builds requests and reads verdicts, it runs nothing
    ("pool",),
    ("clean",),
    ("engines",),
    ("cache",),
    ("executors",),
    ("route",),
    ("dataset",),
    ("recipe",),
    ("release",),
    ("review",),
    ("card", "diff"),
    ("pipeline",),
    ("remote",),  # validate ORG/NAME@REV: reads through diff's Hub side; push verifies with it
    ("publish",),
    ("cli",),
]
LEVEL = {part: rank for rank, parts in enumerate(LEVELS) for part in parts}


def _part(module: str) -> str:
    """The part of the package a dotted module name belongs to ("orandcar_builder.verify.vqa" -> "verify")."""
    names = module.split(".")
    return names[1] if len(names) > 1 else "__init__"


def _module_name(path: Path, root: Optional[Path] = None) -> str:
    rel = path.relative_to((root or ROOT).parent).with_suffix("")
    names = list(rel.parts)
    if names[-1] == "__init__":
        names = names[:-1]
    return ".".join(names)


def _imports(path: Path, root: Optional[Path] = None) -> list[tuple[int, str]]:
    """(line, absolute module) of every package import in ``path``, late imports included."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            if node.module is None or target == PACKAGE:  # "from . import judge": the names are modules
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return found


def _sources(root: Optional[Path] = None) -> list[Path]:
    return sorted(p for p in (root or ROOT).rglob("*.py") if "_shipped" not in p.parts)


def _violations(root: Path) -> list[str]:
    """Every import in the package at ``root`` of its own level or a higher one, as "file:line: ..."."""
    wrong = []
    for path in _sources(root):
        source = _part(_module_name(path, root))
        for line, target in _imports(path, root):
            dest = _part(target)
            if dest == source or dest not in LEVEL:
                continue
            if LEVEL[dest] >= LEVEL[source]:
                wrong.append(f"{path.relative_to(root.parent)}:{line}: {source} imports {target}")
    return wrong


def test_every_part_has_a_level():
    parts = {_part(_module_name(p)) for p in _sources()}
    assert parts - set(LEVEL) == set(), "place the new part in LEVELS (tests/test_imports.py) and docs/architecture.md"


def test_imports_go_one_way():
    wrong = _violations(ROOT)
    assert not wrong, "imports against the flow:\n" + "\n".join(wrong)


def test_the_checker_sees_a_backward_import(tmp_path, monkeypatch):
    # The checker itself: a late, relative import of a higher level is found.
    pkg = tmp_path / PACKAGE
    (pkg / "verify").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "verify" / "__init__.py").write_text("def f():\n    from .. import judge\n    from ..card import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    found = _imports(pkg / "verify" / "__init__.py")
    assert [t for _, t in found] == [f"{PACKAGE}.judge", f"{PACKAGE}.card"]
    # ... and the level comparison reports both, but not a higher part importing a lower one.
    (pkg / "judge").mkdir()
    (pkg / "judge" / "__init__.py").write_text("from .. import verify\nfrom ..verify import f\n")
    assert _violations(pkg) == [f"{PACKAGE}/verify/__init__.py:2: verify imports {PACKAGE}.judge",
                                f"{PACKAGE}/verify/__init__.py:3: verify imports {PACKAGE}.card"]


def test_the_architecture_page_lists_the_same_levels():
    doc = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = doc.split("```levels\n", 1)[1].split("```", 1)[0]
    assert [tuple(line.split()) for line in block.splitlines() if line.strip()] == LEVELS


def test_the_registries_name_modules_of_their_own_part():
    """The lazily imported registries (module paths as strings, which the import walk does not
    see) point inside their own part: an engine lives in engines/, a rule in verify/, ..."""
    from orandcar_builder.engines import ENGINES
    from orandcar_builder.executors import EXECUTORS
    from orandcar_builder.pool import IMPORTERS
    from orandcar_builder.verify import RULE_MODULES

    for part, registry in (("engines", ENGINES), ("executors", EXECUTORS), ("pool", IMPORTERS),
                           ("verify", RULE_MODULES)):
        for name, target in registry.items():
            module = target.split(":")[0]
            assert _part(module) == part and module.startswith(f"{PACKAGE}.{part}."), (name, target)
