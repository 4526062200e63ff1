"""The rule-source renderer: every rule the card shows, and final-answer extraction, as a
self-contained, runnable Python block rendered from the objects the running code uses (its
constants, its reference implementation and every helper it calls), so the card cannot disagree
with the code that decided the data."""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
import re
import sys
import textwrap
import threading
from types import ModuleType
from typing import Any, Optional

from .errors import CardError
from .markdown import code_span

PROJECT_PACKAGE = "orandcar_builder"
RULE_BLOCK_PREFIX = "# rule: "  # first line of every code block that defines a rule
CANDIDATES_BLOCK_PREFIX = "# candidates"  # first line of the block that defines the candidates


class _SourceBundle:
    """Collects what a set of functions needs to run on their own: imports, module-level values
    and helper functions, each rendered from the objects the running code uses."""

    def __init__(self) -> None:
        self.imports: list[str] = []
        self.values: dict[str, str] = {}
        self.functions: dict[str, str] = {}
        self._bound: dict[str, Any] = {}
        self.annotated = False

    def _bind(self, name: str, obj: Any) -> bool:
        """Record ``name`` as ``obj``; False when already recorded, CardError on a clash."""
        if name in self._bound:
            if self._bound[name] is not obj and self._bound[name] != obj:
                raise CardError(f"cannot render a self-contained block: {name!r} names two different objects")
            return False
        self._bound[name] = obj
        return True

    def add_import(self, line: str) -> None:
        if line not in self.imports:
            self.imports.append(line)

    def add_value(self, name: str, value: Any, namespace: Optional[dict] = None) -> None:
        if not self._bind(name, value):
            return
        if isinstance(value, re.Pattern):
            self.add_import("import re")
            flags = value.flags & ~re.UNICODE if isinstance(value.pattern, str) else value.flags
            args = _pattern_literal(value.pattern) + (f", {re.RegexFlag(flags)}" if flags else "")
            self.values[name] = f"{name} = re.compile({args})"
            return
        # Patterns inside a container are written as the module-level names that hold them.
        names = _pattern_names(value, namespace or {})
        for ref in names.values():
            self.add_name(ref, namespace or {})
        text = f"{name} = {_literal(value, names=names)}"
        try:
            scope: dict = {"__builtins__": {}, "frozenset": frozenset, "set": set,
                           **{ref: (namespace or {})[ref] for ref in names.values()}}
            exec(text, scope)  # noqa: S102 - our own rendering of our own constant, checked for equality
            same = scope[name] == value and type(scope[name]) is type(value)
        except Exception:
            same = False
        if not same:
            raise CardError(f"cannot render the value of {name!r} as Python source ({type(value).__name__})")
        self.values[name] = text

    def add_callable(self, name: str, obj: Any) -> None:
        if not self._bind(name, obj):
            return
        module = getattr(obj, "__module__", "") or ""
        if not (module == PROJECT_PACKAGE or module.startswith(PROJECT_PACKAGE + ".")):
            self._import_external(name, obj)
            return
        source = textwrap.dedent(inspect.getsource(obj))
        tree = parse(source)
        # Annotations name typing helpers the block does not define: postpone their evaluation.
        self.annotated = self.annotated or any(not hasattr(builtins, n) for n in _annotation_names(tree))
        self.functions[name] = source.rstrip() + "\n"
        namespace = vars(sys.modules[module]) if not hasattr(obj, "__globals__") else inspect.unwrap(obj).__globals__
        for free in _free_names(tree):
            self.add_name(free, namespace)

    def _import_external(self, name: str, obj: Any) -> None:
        module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        try:
            found = getattr(importlib.import_module(module), qualname) if module and qualname else None
        except (ImportError, AttributeError):
            found = None
        if found is not obj:
            raise CardError(f"cannot render an import for {name!r} ({obj!r})")
        self.add_import(f"from {module} import {qualname}" + (f" as {name}" if name != qualname else ""))

    def add_name(self, name: str, namespace: dict) -> None:
        if name not in namespace:
            if hasattr(builtins, name):
                return
            raise CardError(f"cannot render a self-contained block: {name!r} is not defined")
        value = namespace[name]
        if inspect.ismodule(value):
            self._bind(name, value)
            self.add_import(_import_line(name, value))
        elif inspect.isfunction(value) or inspect.isclass(value) or callable(value) and hasattr(value, "__wrapped__"):
            self.add_callable(name, value)
        else:
            self.add_value(name, value, namespace)

    def render(self, header: str, entries: list[str]) -> str:
        """The block: ``header`` comment, imports, values, helpers, then ``entries`` in order."""
        parts = [header.rstrip("\n")]
        if self.annotated:
            parts.append("from __future__ import annotations")
        if self.imports:
            parts.append("\n".join(sorted(self.imports, key=lambda line: (line.startswith("from "), line))))
        if self.values:
            parts.append("\n".join(self.values.values()))
        helpers = [src for name, src in self.functions.items() if name not in entries]
        body = helpers + [self.functions[name] for name in entries if name in self.functions]
        text = "\n\n".join(parts)
        for source in body:
            text += "\n\n\n" + source.rstrip("\n")
        return text + "\n"


def _pattern_literal(pattern: Any) -> str:
    """A regular expression as a raw string where that spells it exactly, else its ``repr``."""
    if (isinstance(pattern, str) and "\\" in pattern and "'" not in pattern and not pattern.endswith("\\")
            and pattern.isprintable()):
        return f"r'{pattern}'"
    return repr(pattern)


LITERAL_WIDTH = 96  # a constant's value is wrapped to lines of about this many characters


def inline_literal(value: Any, names: Optional[dict[int, str]] = None) -> str:
    """``repr`` with sets sorted, so a rendered value does not depend on the hash seed; an object
    whose ``id`` is in ``names`` is written as that name."""
    if names and id(value) in names:
        return names[id(value)]
    literal = functools.partial(inline_literal, names=names)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (set, frozenset)):
        inner = "{" + ", ".join(sorted(map(literal, value))) + "}" if value else "()"
        return inner if type(value) is set and value else f"{type(value).__name__}({inner if value else ''})"
    if isinstance(value, list):
        return "[" + ", ".join(map(literal, value)) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(literal, value)) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def _pattern_names(value: Any, namespace: dict) -> dict[int, str]:
    """{id: name}, in the order ``value`` holds them, of the compiled patterns inside the list,
    tuple or dict ``value`` that a module-level name of ``namespace`` holds (``STATEMENTS`` pairs
    names with the patterns ``ANSWER_IS``, ...)."""
    holders: dict[int, str] = {}
    for key, obj in namespace.items():
        if isinstance(obj, re.Pattern):
            holders.setdefault(id(obj), key)
    found: dict[int, str] = {}

    def walk(item: Any) -> None:
        if isinstance(item, re.Pattern) and id(item) in holders:
            found[id(item)] = holders[id(item)]
        elif isinstance(item, (list, tuple)):
            for inner in item:
                walk(inner)
        elif isinstance(item, dict):
            for inner in item.values():
                walk(inner)

    if isinstance(value, (list, tuple, dict)):
        walk(value)
    return found


def _literal(value: Any, indent: str = "    ", names: Optional[dict[int, str]] = None) -> str:
    """A constant's value as Python source: on one line when it fits, else its items packed into
    indented lines (objects whose ``id`` is in ``names`` written as those names)."""
    literal = functools.partial(inline_literal, names=names)
    text = literal(value)
    if len(text) <= LITERAL_WIDTH or not isinstance(value, (dict, list, tuple, set, frozenset)) or not value:
        return text
    if isinstance(value, dict):
        items, (open_, close) = [f"{literal(k)}: {literal(v)}" for k, v in value.items()], ("{", "}")
    else:
        items = (sorted(map(literal, value)) if isinstance(value, (set, frozenset))
                 else list(map(literal, value)))
        open_, close = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}")}.get(type(value), ("frozenset({", "})"))
    lines, line = [], ""
    for item in items:
        piece = item + ","
        if line and len(indent) + len(line) + 1 + len(piece) > LITERAL_WIDTH:
            lines.append(indent + line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    lines.append(indent + line)
    return open_ + "\n" + "\n".join(lines) + "\n" + close


def _import_line(name: str, module: ModuleType) -> str:
    full = module.__name__
    if full == name:
        return f"import {name}"
    parent, _, last = full.rpartition(".")
    if parent and last == name:
        return f"from {parent} import {name}"
    return f"import {full} as {name}"


def _annotation_nodes(tree: ast.AST) -> list[ast.AST]:
    nodes = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
            nodes.extend(a.annotation for a in every if a.annotation is not None)
            if node.returns is not None:
                nodes.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            nodes.append(node.annotation)
    return nodes


def _annotation_names(tree: ast.AST) -> set[str]:
    return {n.id for a in _annotation_nodes(tree) for n in ast.walk(a) if isinstance(n, ast.Name)}


def _free_names(tree: ast.AST) -> list[str]:
    """Names a definition reads but binds nowhere inside itself, in source order: the module-level
    names it needs (its own name included when it recurses). Annotations are left out: the block
    postpones their evaluation."""
    in_annotations = {id(n) for a in _annotation_nodes(tree) for n in ast.walk(a)}
    top = tree.body[0] if isinstance(tree, ast.Module) and tree.body else None
    bound: set[str] = set()
    loaded: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                if id(node) not in in_annotations:
                    position = (node.lineno, node.col_offset)
                    loaded[node.id] = min(loaded.get(node.id, position), position)
            else:
                bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not top:
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return [name for name in sorted(loaded, key=loaded.get) if name not in bound]


def rule_entries(rule: ModuleType) -> list[str]:
    """The functions a rule's card block defines: the reference implementation and the pass test."""
    names = ["reference_score"]
    if hasattr(rule, "reference_decide"):
        names.append("reference_decide")
    return names + ["passes"]


def rule_source(name: str, rule: ModuleType) -> str:
    """A self-contained, runnable block that defines ``rule``'s constants, its reference
    implementation (with every helper it calls) and its pass test, rendered from the code."""
    bundle = _SourceBundle()
    namespace = vars(rule)
    for constant in rule.CONSTANTS:
        bundle.add_name(constant, namespace)
    entries = rule_entries(rule)
    for entry in entries:
        bundle.add_callable(entry, getattr(rule, entry))
    return bundle.render(f"{RULE_BLOCK_PREFIX}{name} (version {rule.VERSION})", entries)


def candidates_source() -> str:
    """The block that defines ``final_answer_candidates``: final-answer extraction (every pattern,
    as the module-level constants of verify/extract.py) and the candidates a rule is tried on."""
    candidates_module = importlib.import_module(f"{PROJECT_PACKAGE}.verify.candidates")
    extract_module = importlib.import_module(f"{PROJECT_PACKAGE}.verify.extract")

    bundle = _SourceBundle()
    bundle.add_name("EXTRACTION_VERSION", vars(extract_module))
    bundle.add_callable("final_answer_candidates", candidates_module.final_answer_candidates)
    return bundle.render(f"{CANDIDATES_BLOCK_PREFIX}: final-answer extraction (version "
                         f"{extract_module.EXTRACTION_VERSION}) and the texts a rule is tried on",
                         ["final_answer_candidates"])


def extraction_section() -> dict:
    """What the card says about final-answer extraction: its version, one example per pattern and
    how many words make a sentence (``shape.SENTENCE_WORDS``, spelled as a word)."""
    from ..verify import extract as extraction
    from ..verify.shape import SENTENCE_WORDS

    words = extraction.NUMBER_WORDS
    return {
        "version": extraction.EXTRACTION_VERSION,
        "examples": [(name, code_span(reply), code_span(span)) for name, reply, span in extraction.EXAMPLES],
        "sentence_words": words[SENTENCE_WORDS] if SENTENCE_WORDS < len(words) else str(SENTENCE_WORDS),
    }


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    """Import name -> distribution names; walks every installed distribution's file list, so once."""
    from importlib.metadata import packages_distributions

    return packages_distributions()


# CPython 3.11 keeps the AST conversion's recursion depth in state every thread shares: two threads
# parsing at once (two builds of one process writing their cards) can fail with "SystemError: AST
# constructor recursion depth mismatch". One parse at a time.
_PARSE_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, one thread at a time."""
    with _PARSE_LOCK:
        return ast.parse(source)


def third_party_packages(source: str) -> list[str]:
    """Distribution names of the non-standard-library modules a block imports."""
    roots = set()
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    roots -= set(sys.stdlib_module_names) | {"__future__"}
    mapping = _packages_distributions()
    return sorted({(mapping.get(root) or [root])[0] for root in roots})
