"""The seams between the build's stages, as figures (issue 25): not a timing, a count of the code.

- work-file name literals: string constants in ``orandcar_builder/`` that name a work-dir file
  (``"admitted.parquet"``, ``".lock"``, ...: ``WORK_FILE_NAMES``), a work-dir folder joined onto a
  path (``work / "cache"``, ``work / "ray"``) or the Ray asks' prefix (``f"asks-{n}.parquet"``).
  Arguments of ``str.startswith``/``str.endswith`` are left out (``publish.py``'s git ref rule
  ends with ``.lock`` and names no file); docstrings and help texts never equal a name, so they
  are not counted;
- figures-dict reads: ``x["key"]`` (read, not assigned) and ``x.get("key")`` with a key of work/report.json
  (``FIGURES_KEYS``: its top-level keys, the judge entry's and a family's yield) in the code that
  reads the figures (card/, review/, release.py, cli.py, pipeline/report.py's summary) and in the templates
  (``report.get("key")`` in dataset_card/ and review/templates/);
- the import levels: the ``levels`` block of docs/architecture.md.

    python benchmarks/seams.py            # the working tree
    python benchmarks/seams.py --rev 9bd4f34   # a commit, read with git show (nothing checked out)
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "orandcar_builder"

WORK_FILE_NAMES = frozenset({
    "admitted.parquet", "dropped.jsonl", "generations.sqlite", "cache/generations.sqlite",
    "decisions.parquet", "decisions.unsorted.parquet", "decisions.parquet.judged", ".judged",
    "report.json", "report.html", "manifest.json", "prompts.jsonl", "unsupported.jsonl", "failed.jsonl",
    "calibration.json", ".lock", "admission.json", "admission_images.parquet",
})
WORK_FOLDERS = frozenset({"cache", "ray"})  # counted where joined onto a path with ``/``
ASKS_PREFIX = "asks-"

# work/report.json's keys: its top level, and those of the judge's entry and of a family's yield
# (names no other entry uses; a config's summary, the generation settings and the reproduce entry
# share theirs, "rows", "model", "source", with much else, so they are not counted).
FIGURES_KEYS = frozenset({
    "pool", "limit", "items", "admitted", "dropped", "dropped_by_reason", "accepted", "rejected", "failed",
    "rejected_by_reason", "accepted_by_verifier", "families", "rules", "rules_by_family", "reject_kinds",
    "yield", "configs", "cleaning", "engine", "generation", "judge", "recipe", "reproduce", "build_failed",
    "timings_s", "cache", "validation_problems", "stages",
    "prompt_version", "judged", "verdicts", "unparseable", "promoted", "overturns_by_family", "calibration",
    "accepted_by_rule", "promoted_by_judge", "rejected_no_pick",
})
FIGURES_READERS = ("card/", "review/", "release.py", "cli.py", "pipeline/report.py")
# In these files only the named functions read the figures (the rest builds them).
READER_FUNCTIONS = {f"{PACKAGE}/pipeline/report.py": ("format_summary", "run_figures")}
TEMPLATES = ("dataset_card/", f"{PACKAGE}/review/templates/")
TEMPLATE_READ = re.compile(r"""\breport(?:\.get\(|\[)\s*["']([a-z_]+)["']""")


class Tree:
    """The files of the working tree, or of a git commit (``rev``)."""

    def __init__(self, rev: str | None):
        self.rev = rev

    def files(self, under: str) -> list[str]:
        if self.rev is None:
            base = ROOT / under
            return sorted(str(p.relative_to(ROOT)) for p in base.rglob("*") if p.is_file())
        out = subprocess.run(["git", "ls-tree", "-r", "--name-only", self.rev, "--", under], cwd=ROOT,
                             check=True, capture_output=True, text=True).stdout
        return sorted(out.split())

    def read(self, path: str) -> str:
        if self.rev is None:
            return (ROOT / path).read_text(encoding="utf-8")
        return subprocess.run(["git", "show", f"{self.rev}:{path}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout


def _string_method_args(tree: ast.AST) -> set[int]:
    """ids of the constants passed to ``.startswith``/``.endswith`` (patterns, not file names)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("startswith", "endswith")):
            for arg in node.args:
                skipped.update(id(n) for n in ast.walk(arg))
    return skipped


def work_file_literals(source: str) -> list[tuple[int, str]]:
    """(line, literal) of each work-file name spelled in ``source``."""
    tree = ast.parse(source)
    skipped = _string_method_args(tree)
    joined = {id(node.right) for node in ast.walk(tree)
              if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            if isinstance(first, ast.Constant) and str(first.value).startswith(ASKS_PREFIX):
                found.append((node.lineno, f"f{ASKS_PREFIX}..."))
                skipped.add(id(first))
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skipped:
            continue
        if node.value in WORK_FILE_NAMES or (node.value in WORK_FOLDERS and id(node) in joined):
            found.append((node.lineno, node.value))
    return sorted(found)


def figures_reads(source: str, functions: tuple[str, ...] = ()) -> list[tuple[int, str]]:
    """(line, key) of each ``x["key"]`` / ``x.get("key")`` with a key of work/report.json (only
    inside ``functions`` when some are named)."""
    found = []
    tree = ast.parse(source)
    roots = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in functions] if functions else [tree]
    for node in (n for root in roots for n in ast.walk(root)):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.ctx, ast.Load):
            key = node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant)):
            key = node.args[0].value
        if isinstance(key, str) and key in FIGURES_KEYS:
            found.append((node.lineno, key))
    return sorted(found)


def levels(text: str) -> list[str]:
    block = re.search(r"```levels\n(.*?)```", text, re.S)
    return [line.strip() for line in block.group(1).splitlines() if line.strip()] if block else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="a git commit to measure instead of the working tree")
    parser.add_argument("--list", action="store_true", help="print every literal and read found")
    args = parser.parse_args(argv)
    tree = Tree(args.rev)
    print(f"# seams of {args.rev or 'the working tree'}")

    sources = [p for p in tree.files(PACKAGE) if p.endswith(".py") and "/_shipped/" not in p]
    literals = {p: work_file_literals(tree.read(p)) for p in sources}
    literals = {p: found for p, found in literals.items() if found}
    total = sum(len(found) for found in literals.values())
    print(f"work-file name literals: {total} in {len(literals)} files")
    for path, found in sorted(literals.items()):
        print(f"  {path}: {len(found)}" + (f"  {', '.join(f'{n}:{v}' for n, v in found)}" if args.list else ""))

    readers = [p for p in sources if p[len(PACKAGE) + 1:].startswith(FIGURES_READERS)]
    reads = {p: figures_reads(tree.read(p), READER_FUNCTIONS.get(p, ())) for p in readers}
    for under in TEMPLATES:
        for path in tree.files(under):
            if path.endswith(".j2"):
                reads[path] = [(tree.read(path)[:m.start()].count("\n") + 1, m.group(1))
                               for m in TEMPLATE_READ.finditer(tree.read(path))]
    reads = {p: found for p, found in reads.items() if found}
    by_key = Counter(key for found in reads.values() for _, key in found)
    print(f"figures-dict reads by string key: {sum(by_key.values())} in {len(reads)} files")
    for path, found in sorted(reads.items()):
        print(f"  {path}: {len(found)}" + (f"  {', '.join(f'{n}:{k}' for n, k in found)}" if args.list else ""))

    shown = levels(tree.read("docs/architecture.md"))
    print(f"import levels: {len(shown)}, lowest first")
    for rank, line in enumerate(shown):
        print(f"  {rank:2d}  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
