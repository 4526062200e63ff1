"""The dataset card (README.md of the dataset folder), rendered from the build report.

The YAML header's ``configs:`` block comes from ``loading_script/`` and its ``dataset_info``
from the features and the shards on disk; every figure in the body comes from the build report,
and every rule is shown with its constants and its reference implementation as they are in the
code, so the card cannot disagree with the data or the code it describes.

``render_card`` reads the folder and returns the text; ``write_card`` also writes README.md and
the example images (``examples/<config>-<k>.<ext>``, the original bytes) beside it. Neither
depends on the clock, the machine or absolute paths: the same build renders the same bytes.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import importlib
import inspect
import io
import json
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Iterator, Optional

import jinja2
import pyarrow.parquet as pq
import yaml

from .dataset import layout
from .dataset.features import CONFIGS, SPLIT, configs_block, features
from .errors import OrandCarError
from .parquetio import open_parquet
from .release import (BUILD_KEY, FINGERPRINT_KEYS_LEFT_OUT, build_settings, dump_header, reproduce_context,
                      versions_section)
from .shipped import shipped_dir

DEFAULT_REPO_ID = "ORG/OrandCar"
NOT_RECORDED = "not recorded"
EXAMPLES_DIR = layout.EXAMPLES_DIR  # beside README.md; holds the example images the card shows
EXAMPLES_PER_CONFIG = 3  # first, middle and last row of each config
# The acceptance-per-family chart the card shows (review/charts.py draws it; PNG, which the Hub renders).
ACCEPTANCE_CHART = f"{EXAMPLES_DIR}/{layout.ACCEPTANCE_CHART_NAME}"
TABLE_VALUE_MAX_CHARS = 120  # longer (or multi-line) values are shown in full below the table
SHORT_CONSTANT_CHARS = 80  # longer constant values are shown only in the code block
BLOCK_VALUE_MAX_CHARS = 4000  # a value shown below a table is cut here, with its full length stated
NAME_MAX_CHARS = 200  # a name or short text in a table cell (file name, model id) is cut here
QA_ITEMS_SHOWN = 10  # QA items of one example row shown in the card; the rest are counted
PROJECT_PACKAGE = "orandcar_builder"
RULE_BLOCK_PREFIX = "# rule: "  # first line of every code block that defines a rule
CANDIDATES_BLOCK_PREFIX = "# candidates"  # first line of the block that defines the candidates

_IMAGE_EXTENSIONS = {"PNG": "png", "JPEG": "jpg", "GIF": "gif", "WEBP": "webp", "BMP": "bmp", "TIFF": "tiff"}
_SAFE_EXTENSION = re.compile(r"^[a-z0-9]{1,5}$")


class CardError(OrandCarError):
    pass


# --- options ---------------------------------------------------------------------------------

DEFAULT_GATED_PROMPT = (
    "OrandCar pairs benchmark images and reference answers with text written by a vision-language "
    "model. The images and references keep the licenses of the datasets they come from (each row "
    "names its sources in clean_meta.sources). By requesting access you agree to respect those "
    "licenses, to use the data for research and model development, and not to present the model's "
    "answers as human annotations."
)
DEFAULT_GATED_FIELDS = (
    ("Name", "text"),
    ("Affiliation", "text"),
    ("Country", "country"),
    ("I agree to respect the licenses of the source datasets and the terms above", "checkbox"),
)


@dataclass(frozen=True)
class CardOptions:
    """What a maintainer chooses rather than measures: names, license, tags and the access form.

    ``gated_fields`` is a sequence of (label, type) pairs; a type is ``text``, ``checkbox``,
    ``date_picker``, ``country`` or a mapping ``{"type": "select", "options": [...]}``. With
    ``gated=False`` the access-form keys are left out of the header.
    """

    pretty_name: str = "OrandCar"
    license: str = "other"
    license_name: Optional[str] = "orandcar-source-licenses"
    license_link: Optional[str] = None
    language: tuple[str, ...] = ("en",)
    task_categories: tuple[str, ...] = ("visual-question-answering", "image-text-to-text")
    tags: tuple[str, ...] = ("rejection-sampling", "vision-language", "reasoning", "synthetic")
    gated: bool = True
    gated_heading: Optional[str] = None
    gated_prompt: str = DEFAULT_GATED_PROMPT
    gated_fields: tuple[tuple[str, Any], ...] = DEFAULT_GATED_FIELDS
    gated_button: str = "Agree and request access"

    @classmethod
    def from_mapping(cls, data: dict, *, source: str = "card options") -> "CardOptions":
        """Options from a mapping (such as a YAML file); unknown keys are an error naming ``source``."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CardError(f"{source}: unknown card option(s) {', '.join(unknown)} "
                            f"(known: {', '.join(sorted(names))})")
        values = dict(data)
        for key in ("language", "task_categories", "tags"):
            if key in values:
                values[key] = tuple(values[key] or ())
        if "gated_fields" in values:
            fields_ = values["gated_fields"] or {}
            pairs = fields_.items() if isinstance(fields_, dict) else fields_
            values["gated_fields"] = tuple((str(label), kind) for label, kind in pairs)
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: Path) -> "CardOptions":
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise CardError(f"{path}: cannot read card options ({exc})") from None
        if not isinstance(data, dict):
            raise CardError(f"{path}: card options must be a mapping of option names to values")
        return cls.from_mapping(data, source=str(path))


# --- the YAML header ---------------------------------------------------------------------------

def size_category(n: int) -> str:
    """The Hub's ``size_categories`` bucket for ``n`` examples."""
    if n < 1000:
        return "n<1K"
    bounds = [(10**4, "1K<n<10K"), (10**5, "10K<n<100K"), (10**6, "100K<n<1M"), (10**7, "1M<n<10M"),
              (10**8, "10M<n<100M"), (10**9, "100M<n<1B"), (10**10, "1B<n<10B")]
    return next((label for bound, label in bounds if n < bound), "n>1T")


def shard_paths(folder: Path, config: str) -> list[Path]:
    directory = Path(folder) / config
    return sorted(directory.glob(f"{SPLIT}-*.parquet")) if directory.is_dir() else []


def arrow_bytes(shards: Iterable[Path]) -> int:
    """In-memory (Arrow) size of the shards' rows, read one row group at a time; this is the
    ``num_bytes`` that ``datasets`` records for a split."""
    total = 0
    for shard in shards:
        parquet = open_parquet(shard)
        for group in range(parquet.num_row_groups):
            total += parquet.read_row_group(group).nbytes
    return total


def config_sizes(folder: Path, report: dict) -> dict[str, dict]:
    """Per config: rows, QA items, shard count, file bytes and Arrow bytes, measured on disk."""
    out = {}
    for config in CONFIGS:
        shards = shard_paths(folder, config)
        summary = (report.get("configs") or {}).get(config) or {}
        rows = sum(pq.ParquetFile(s).metadata.num_rows for s in shards)
        out[config] = {
            "rows": rows,
            "qa": summary.get("qa", NOT_RECORDED),
            "shards": len(shards),
            "file_bytes": sum(s.stat().st_size for s in shards),
            "arrow_bytes": arrow_bytes(shards),
        }
    return out


def dataset_info(sizes: dict[str, dict]) -> list[dict]:
    """The ``dataset_info`` header list, written by ``datasets`` itself from the features and sizes."""
    from datasets import DatasetInfo, SplitDict, SplitInfo
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCardData

    infos = DatasetInfosDict({
        config: DatasetInfo(
            config_name=config,
            features=features(config),
            splits=SplitDict({SPLIT: SplitInfo(name=SPLIT, num_bytes=s["arrow_bytes"], num_examples=s["rows"])}),
            download_size=s["file_bytes"],
            dataset_size=s["arrow_bytes"],
        )
        for config, s in sizes.items()
    })
    data = DatasetCardData()
    infos.to_dataset_card_data(data)
    by_name = {info["config_name"]: info for info in data["dataset_info"]}
    return [by_name[config] for config in CONFIGS]


def card_header(sizes: dict[str, dict], options: CardOptions) -> dict:
    header: dict[str, Any] = {"pretty_name": options.pretty_name, "license": options.license}
    if options.license_name:
        header["license_name"] = options.license_name
    if options.license_link:
        header["license_link"] = options.license_link
    header["language"] = list(options.language)
    header["task_categories"] = list(options.task_categories)
    header["tags"] = list(options.tags)
    header["size_categories"] = [size_category(sum(s["rows"] for s in sizes.values()))]
    if options.gated:
        if options.gated_heading:
            header["extra_gated_heading"] = options.gated_heading
        header["extra_gated_prompt"] = options.gated_prompt
        header["extra_gated_fields"] = {label: kind for label, kind in options.gated_fields}
        header["extra_gated_button_content"] = options.gated_button
    header["configs"] = configs_block()
    header["dataset_info"] = dataset_info(sizes)
    return header


# --- rendering code from the code --------------------------------------------------------------

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

    def add_value(self, name: str, value: Any) -> None:
        if not self._bind(name, value):
            return
        if isinstance(value, re.Pattern):
            self.add_import("import re")
            flags = value.flags & ~re.UNICODE if isinstance(value.pattern, str) else value.flags
            args = _pattern_literal(value.pattern) + (f", {re.RegexFlag(flags)}" if flags else "")
            self.values[name] = f"{name} = re.compile({args})"
            return
        text = f"{name} = {_literal(value)}"
        try:
            scope: dict = {"__builtins__": {}, "frozenset": frozenset, "set": set}
            exec(text, scope)  # noqa: S102 - our own rendering of our own constant, checked for equality
            same = scope[name] == value and type(scope[name]) is type(value)
        except Exception:
            same = False
        if not same:
            raise CardError(f"cannot render the value of {name!r} as Python source ({type(value).__name__})")
        self.values[name] = text

    def add_callable(self, name: str, obj: Any, *, entry: bool = False) -> None:
        if not self._bind(name, obj):
            return
        module = getattr(obj, "__module__", "") or ""
        if not (module == PROJECT_PACKAGE or module.startswith(PROJECT_PACKAGE + ".")):
            self._import_external(name, obj)
            return
        source = textwrap.dedent(inspect.getsource(obj))
        tree = ast.parse(source)
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
            self.add_value(name, value)

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


def _inline(value: Any) -> str:
    """``repr`` with sets sorted, so a rendered value does not depend on the hash seed."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_inline(k)}: {_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (set, frozenset)):
        inner = "{" + ", ".join(sorted(map(_inline, value))) + "}" if value else "()"
        return inner if type(value) is set and value else f"{type(value).__name__}({inner if value else ''})"
    if isinstance(value, list):
        return "[" + ", ".join(map(_inline, value)) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(_inline, value)) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def _literal(value: Any, indent: str = "    ") -> str:
    """A constant's value as Python source: on one line when it fits, else its items packed into
    indented lines."""
    text = _inline(value)
    if len(text) <= LITERAL_WIDTH or not isinstance(value, (dict, list, tuple, set, frozenset)) or not value:
        return text
    if isinstance(value, dict):
        items, (open_, close) = [f"{_inline(k)}: {_inline(v)}" for k, v in value.items()], ("{", "}")
    else:
        items = sorted(map(_inline, value)) if isinstance(value, (set, frozenset)) else list(map(_inline, value))
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
        bundle.add_callable(entry, getattr(rule, entry), entry=True)
    return bundle.render(f"{RULE_BLOCK_PREFIX}{name} (version {rule.VERSION})", entries)


def candidates_source() -> str:
    """The block that defines ``final_answer_candidates``: final-answer extraction (every pattern,
    as the module-level constants of verify/extract.py) and the candidates a rule is tried on."""
    candidates_module = importlib.import_module(f"{PROJECT_PACKAGE}.verify.candidates")
    extract_module = importlib.import_module(f"{PROJECT_PACKAGE}.verify.extract")

    bundle = _SourceBundle()
    bundle.add_name("EXTRACTION_VERSION", vars(extract_module))
    bundle.add_callable("final_answer_candidates", candidates_module.final_answer_candidates, entry=True)
    return bundle.render(f"{CANDIDATES_BLOCK_PREFIX}: final-answer extraction (version "
                         f"{extract_module.EXTRACTION_VERSION}) and the texts a rule is tried on",
                         ["final_answer_candidates"])


def extraction_section() -> dict:
    """What the card says about final-answer extraction: its version and one example per pattern."""
    from .verify import extract as extraction

    return {
        "version": extraction.EXTRACTION_VERSION,
        "examples": [(name, code_span(reply.replace("\n", "\\n")), code_span(span))
                     for name, reply, span in extraction.EXAMPLES],
    }


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    """Import name -> distribution names; walks every installed distribution's file list, so once."""
    from importlib.metadata import packages_distributions

    return packages_distributions()


def third_party_packages(source: str) -> list[str]:
    """Distribution names of the non-standard-library modules a block imports."""
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    roots -= set(sys.stdlib_module_names) | {"__future__"}
    mapping = _packages_distributions()
    return sorted({(mapping.get(root) or [root])[0] for root in roots})


# --- fenced code blocks ------------------------------------------------------------------------

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """Every fenced code block of ``markdown`` as (info string, content), in order; a block is
    closed only by a fence of its own character at least as long (CommonMark)."""
    blocks = []
    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match or (match.group(1)[0] == "`" and "`" in match.group(2)):
            i += 1
            continue
        fence, info = match.group(1), match.group(2).strip()
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body = []
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append((info, "\n".join(body) + ("\n" if body else "")))
        i += 1
    return blocks


def fence(text: str, info: str = "text") -> str:
    """``text`` in a fenced block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    marker = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{marker}{info}\n{body}{marker}"


# Characters that would end a table row or a line, or hide text, in a code span: shown escaped.
_LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def _escape_control(match: re.Match) -> str:
    char = match.group(0)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, f"\\x{ord(char):02x}" if ord(char) < 256
                                                      else f"\\u{ord(char):04x}")


def bounded(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters, and whether it was cut."""
    return (text, False) if len(text) <= limit else (text[:limit], True)


def code_span(text: str, limit: Optional[int] = None) -> str:
    """``text`` as inline code, safe inside a table cell: pipes escaped, line breaks and other
    control characters shown as escapes (``\\n``), so no value can end the row or start raw
    Markdown or HTML; cut to ``limit`` characters with the full length stated."""
    text = str(text)
    total = len(text)
    text, cut = bounded(text, limit) if limit is not None else (text, False)
    text = _LINE_BREAKING.sub(_escape_control, text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    marker = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    span = f"{marker}{pad}{text.replace('|', chr(92) + '|')}{pad}{marker}"
    return f"{span} (first {len(text):,} of {total:,} chars)" if cut else span


def cell(text: Any) -> str:
    """Plain text made safe for a table cell: line breaks as spaces, Markdown and HTML
    punctuation escaped, so it shows as written."""
    text = " ".join(str(text).split())
    # "_" inside a word never makes emphasis in CommonMark, so names like scene_text stay as written.
    return re.sub(r"([\\`*\[\]<>|])", r"\\\1", text.replace("&", "&amp;"))


# --- figures -----------------------------------------------------------------------------------

def number(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return NOT_RECORDED if value is None else str(value)


def size(n: int) -> str:
    """Bytes in decimal units, as the Hub shows file sizes."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"


def percent(part: Any, whole: Any) -> str:
    if not isinstance(part, (int, float)) or not isinstance(whole, (int, float)) or not whole:
        return "–"
    return f"{100 * part / whole:.1f}%"


def _figure(key: Any, value: Any) -> str:
    """One measured figure: a share also as a percentage, a missing one as a dash."""
    if value is None:
        return "–"
    if isinstance(value, float) and not isinstance(value, bool) and str(key).endswith(("share", "rate", "fraction")):
        return f"{value:.4g} ({100 * value:.1f}%)"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False) if value else "none"
    return number(value)


def _label(key: Any) -> str:
    return str(key).replace("_", " ")


def figure_tables(data: dict, skip: Iterable[str] = (), title: str = "") -> list[dict]:
    """A measured-figures mapping as tables, whatever its keys: the scalars of each level in one
    table, a mapping of mappings as a matrix (one row per key), other mappings recursively."""
    scalars, tables = [], []
    for key, value in data.items():
        if key in skip:
            continue
        name = f"{title}: {_label(key)}" if title else _label(key)
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            columns = list(dict.fromkeys(k for v in value.values() for k in v))
            tables.append({"title": name, "columns": ["", *map(_label, columns)],
                           "rows": [[str(k), *(_figure(c, v.get(c)) for c in columns)] for k, v in value.items()]})
        elif isinstance(value, dict) and value:
            tables.extend(figure_tables(value, title=name))
        else:
            scalars.append([_label(key), _figure(key, value)])
    if scalars:
        tables.insert(0, {"title": title, "columns": ["figure", "value"], "rows": scalars})
    return tables


# --- the report, read defensively ---------------------------------------------------------------

def _get(mapping: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(mapping, dict) or key not in mapping:
            return None
        mapping = mapping[key]
    return mapping


def generation_facts(report: dict) -> list[tuple[str, str]]:
    """Model, revision, engine, temperature, reasoning and max tokens as (label, markdown): from
    ``report["generation"]`` where recorded, else from the unambiguous engine fingerprint fields,
    else "not recorded"."""
    gen = report.get("generation") or {}
    engine = report.get("engine") or {}

    def pick(key: str, *fallback: str) -> Any:
        if gen.get(key) is not None:
            return gen[key]
        return _get(engine, *fallback) if fallback else None

    reasoning = gen.get("reasoning")
    if reasoning is None:
        reasoning = _get(engine, "chat_template_kwargs", "enable_thinking")
    if reasoning is True:
        reasoning_text = "enabled (the model thinks before answering; its reasoning is kept in `think`)"
    elif reasoning is False:
        reasoning_text = "disabled"
    elif reasoning is None:
        reasoning_text = NOT_RECORDED
    elif reasoning == "n/a":
        reasoning_text = "not applicable (the engine does not reason)"
    else:
        reasoning_text = str(reasoning)
    def name(value: Any) -> str:
        return NOT_RECORDED if value is None else code_span(str(value), NAME_MAX_CHARS)

    def figure(value: Any) -> str:
        return NOT_RECORDED if value is None else number(value)

    return [
        ("model", name(pick("model", "model"))),
        ("model revision", name(pick("revision", "revision"))),
        ("engine", name(pick("engine", "kind"))),
        ("temperature", figure(pick("temperature", "sampling", "temperature"))),
        ("reasoning", reasoning_text),
        ("max new tokens", figure(pick("max_tokens", "sampling", "max_tokens"))),
    ]


def engine_fingerprint(report: dict) -> Optional[str]:
    engine = report.get("engine")
    if not isinstance(engine, dict):
        return None
    kept = {k: v for k, v in engine.items() if k not in FINGERPRINT_KEYS_LEFT_OUT}
    return json.dumps(kept, indent=2, ensure_ascii=False)


def family_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    families = report.get("families") or {}
    prefix = "rejected_"
    reasons = sorted({k[len(prefix):] for counts in families.values() for k in counts if k.startswith(prefix)})
    columns = ["family", "rule", "QA", "accepted", "rejected", *reasons, "accepted share"]
    rows = []
    for name, counts in families.items():
        rules = family_rules(report, name)
        rows.append([f"`{name}`", ", ".join(f"`{r}`" for r in rules) if rules else NOT_RECORDED,
                     number(counts.get("qa", 0)),
                     number(counts.get("accepted", 0)), number(counts.get("rejected", 0)),
                     *(number(counts.get(f"rejected_{r}", 0)) for r in reasons),
                     percent(counts.get("accepted", 0), counts.get("qa", 0))])
    return columns, rows


def family_rules(report: dict, family: str) -> list[str]:
    """The rules that decided a family's items: as the build recorded them (items with options are
    decided by ``choice``, see families.rule_for), else the family's own rule."""
    from .families import FAMILIES

    recorded = (report.get("rules_by_family") or {}).get(family)
    if recorded:
        return list(recorded)
    return [FAMILIES[family].rule] if family in FAMILIES else []


def rule_sections(report: dict) -> list[dict]:
    from .verify import get_rule

    used_families = set(report.get("families") or {})
    sections = []
    for name, version in (report.get("rules") or {}).items():
        rule = get_rule(name)
        if str(version) != str(rule.VERSION):
            raise CardError(f"the build used rule {name} version {version}, this code has version {rule.VERSION}: "
                            "rebuild, or render the card with the code that built the data")
        source = rule_source(name, rule)
        constants = []
        for constant in rule.CONSTANTS:
            value = getattr(rule, constant)
            text = _inline(value)
            entries = f"{len(value)} entries, " if isinstance(value, (dict, list, tuple, set, frozenset)) else ""
            constants.append({"name": constant, "value": code_span(text) if len(text) <= SHORT_CONSTANT_CHARS
                              else f"{entries}in full in the code below"})
        sections.append({
            "name": name,
            "version": rule.VERSION,
            "families": [f for f in sorted(used_families) if name in family_rules(report, f)],
            "doc": inspect.cleandoc(rule.__doc__ or ""),
            "constants": constants,
            "source": fence(source, "python"),
            "needs": third_party_packages(source),
            "decides_with": "reference_decide" if hasattr(rule, "reference_decide") else "reference_score",
        })
    return sections


def judge_section(report: dict) -> Optional[dict]:
    judge = report.get("judge")
    if not isinstance(judge, dict):
        return None
    from . import judge as judging

    recorded_version = judge.get("prompt_version")
    if recorded_version is not None and str(recorded_version) != judging.JUDGE_PROMPT_VERSION:
        raise CardError(f"the build judged with prompt version {recorded_version}, this code has version "
                        f"{judging.JUDGE_PROMPT_VERSION}: rebuild, or render the card with the code that built "
                        "the data")
    verdicts = judge.get("verdicts") or {}
    calibration = judge.get("calibration")
    disagreements = []
    if isinstance(calibration, dict) and calibration.get("n"):
        agreed, n = calibration.get("agreed"), calibration.get("n")
        calibration_text = (f"agreed with the string rule on {number(agreed)} of {number(n)} items the rule had "
                            f"accepted ({percent(agreed, n)})")
        calibration_tables = figure_tables({"by family": calibration.get("by_family") or {}})
        for row in calibration.get("disagreements") or []:
            if isinstance(row, dict):
                disagreements.append([code_span(str(row.get("id", "")), NAME_MAX_CHARS),
                                      code_span(str(row.get("family", "")), NAME_MAX_CHARS),
                                      code_span(json.dumps(row.get("references", []), ensure_ascii=False),
                                                NAME_MAX_CHARS),
                                      code_span(" ".join(str(row.get("candidate", "")).split()), NAME_MAX_CHARS),
                                      code_span(str(row.get("verdict", "")), NAME_MAX_CHARS)])
    else:
        calibration_text, calibration_tables = NOT_RECORDED, []
    judge_engine = judge.get("engine") if isinstance(judge.get("engine"), dict) else {}
    judge_models = ", ".join(_get(judge, "calibration", "judge_models") or [])
    total = judge.get("judged")
    if not isinstance(total, int):
        total = sum(v for v in verdicts.values() if isinstance(v, (int, float)))
    return {
        "model": judge_engine.get("model") or judge_models or NOT_RECORDED,
        "engine": judge_engine.get("kind") or NOT_RECORDED,
        "verdicts": [(label, number(verdicts.get(label, 0)), percent(verdicts.get(label, 0), total))
                     for label in judging.LABELS],
        "judged": number(total),
        "unparseable": number(judge.get("unparseable")),
        "promoted": number(judge.get("promoted")),
        "calibration": calibration_text,
        "calibration_tables": calibration_tables,
        "disagreements": disagreements,
        "overturns": figure_tables({"overturns by family": judge.get("overturns_by_family") or {}}),
        "prompt": fence(judging.JUDGE_PROMPT_TEMPLATE),
        "reference_block": fence(judging.REFERENCE_BLOCK),
        "prompt_version": judging.JUDGE_PROMPT_VERSION,
    }


def cleaning_section(report: dict) -> dict:
    cleaning = report.get("cleaning") if isinstance(report.get("cleaning"), dict) else {}
    return {
        "policy": cleaning.get("policy") or NOT_RECORDED,
        # The drops per reason are shown from the build report already.
        "tables": figure_tables(cleaning, skip=("policy",) + (
            ("dropped_by_reason",) if cleaning.get("dropped_by_reason") == report.get("dropped_by_reason") else ())),
        "dropped": report.get("dropped"),
        "dropped_by_reason": report.get("dropped_by_reason") or {},
    }


# --- schema --------------------------------------------------------------------------------------

FIELD_NOTES = {
    "image": "the original encoded image file, byte for byte (`bytes`, and `path`: its file name)",
    "image_sha256": "hex sha256 of the image bytes; one row per distinct image in each config",
    "qa": "the row's QA items, in pool order",
    "qa[].question": "the exact text the model received, appended instruction included",
    "qa[].think": "the model's reasoning before its final answer",
    "qa[].org_answer": "the reference answer from the source dataset",
    "qa[].verifier": "the rule that accepted the answer, or `judge`",
    "qa[].wrong_vlm": "what the model answered instead",
    "qa[].reason": "why it was rejected: `wrong_answer`, `unsure`, `truncated` or `no_answer`",
    "clean_meta": "provenance and the cleaning that admitted the row",
    "clean_meta.policy": "id of the cleaning policy",
    "clean_meta.sources": "one source per QA item, aligned with `qa`",
    "clean_meta.sources[].dataset": "the source dataset",
    "clean_meta.sources[].split": "its split",
    "clean_meta.sources[].id": "the item's id in the source",
    "clean_meta.sources[].origin": "`benchmark`, or the mixed pool the item came through",
    "clean_meta.sources[].family": "the task family, which chose the rule and the instruction",
    "clean_meta.sources[].references": "the reference answer(s) as admitted",
    "clean_meta.sources[].options": "the options of a multiple-choice item, in letter order (else empty)",
    "clean_meta.actions": "what cleaning changed in this row, if anything",
}
ANSWER_NOTES = {
    "RS_think": ("the model's own accepted answer, exactly as it wrote it: the span of its explicit final-answer "
                 "statement when it made one, else the part of its final answer that passed"),
    "RS_nothink": ("the model's own accepted answer, exactly as it wrote it: the span of its explicit final-answer "
                   "statement when it made one, else the part of its final answer that passed"),
    "rejected": "the reference answer (ground truth) from the source dataset",
}


def _type_name(feature: Any) -> str:
    from datasets import Image, LargeList, List, Value

    if isinstance(feature, Value):
        return feature.dtype
    if isinstance(feature, Image):
        return "image"
    if isinstance(feature, (List, LargeList)):
        return f"list of {_type_name(feature.feature)}"
    if isinstance(feature, dict):
        return "struct"
    return type(feature).__name__


def _schema_rows(config: str, fields_: dict, prefix: str = "") -> Iterator[list[str]]:
    from datasets import LargeList, List

    for name, feature in fields_.items():
        path = f"{prefix}{name}"
        note = ANSWER_NOTES[config] if path == "qa[].answer" else FIELD_NOTES.get(path, "")
        yield [f"`{path}`", _type_name(feature), note]
        inner = feature.feature if isinstance(feature, (List, LargeList)) else feature
        if isinstance(inner, dict):
            yield from _schema_rows(config, inner, f"{path}[]." if inner is not feature else f"{path}.")


def schema_tables() -> dict[str, list[list[str]]]:
    return {config: list(_schema_rows(config, features(config))) for config in CONFIGS}


# --- examples --------------------------------------------------------------------------------------

def example_indices(rows: int) -> list[int]:
    """First, middle and last row (fewer when the config has fewer rows)."""
    return list(dict.fromkeys(i for i in (0, rows // 2, rows - 1) if 0 <= i < rows))[:EXAMPLES_PER_CONFIG]


def read_row(shards: list[Path], index: int) -> dict:
    for shard in shards:
        parquet = pq.ParquetFile(shard)
        if index >= parquet.metadata.num_rows:
            index -= parquet.metadata.num_rows
            continue
        for group in range(parquet.num_row_groups):
            n = parquet.metadata.row_group(group).num_rows
            if index < n:
                return parquet.read_row_group(group).slice(index, 1).to_pylist()[0]
            index -= n
    raise IndexError(index)


def image_extension(data: bytes, path: Optional[str]) -> tuple[str, str]:
    """(extension, format name) of image bytes: from the bytes where Pillow knows the format,
    else from the stored file name."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            fmt = image.format or ""
    except Exception:
        fmt = ""
    if fmt in _IMAGE_EXTENSIONS:
        return _IMAGE_EXTENSIONS[fmt], fmt
    suffix = Path(path or "").suffix.lower().lstrip(".")
    return (suffix if _SAFE_EXTENSION.match(suffix) else "bin"), (fmt or suffix.upper() or "unknown")


def image_dimensions(data: bytes) -> Optional[str]:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return f"{image.width}×{image.height}"
    except Exception:
        return None


@dataclass
class Example:
    config: str
    number: int
    index: int
    rows: int
    image_file: Optional[str]
    image_bytes: Optional[bytes] = field(repr=False, default=None)
    cells: list[tuple[str, str]] = field(default_factory=list)
    blocks: list[dict] = field(default_factory=list)


def _value_cell(label: str, value: Any, blocks: list[dict], *, always_block: bool = False) -> tuple[str, str]:
    if value is None:
        return label, "*null*"
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    fits = (len(value) <= TABLE_VALUE_MAX_CHARS and value == value.strip() and "\n" not in value
            and "\r" not in value and "\t" not in value)
    if always_block or not fits:
        shown, cut = bounded(value, BLOCK_VALUE_MAX_CHARS)
        text = fence(shown) if value else None
        if cut:
            text += (f"\n\n*Cut here: the first {len(shown):,} of {len(value):,} characters are shown; "
                     f"the row holds the whole value.*")
        blocks.append({"label": label, "chars": len(value), "text": text})
        where = "the first " + f"{len(shown):,} below" if cut else "in full below"
        return label, f"{len(value):,} character{'' if len(value) == 1 else 's'}, {where}"
    return label, code_span(value) if value else "*empty*"


def example(folder: Path, config: str, number_: int, index: int, rows: int) -> Example:
    row = read_row(shard_paths(folder, config), index)
    image = row.get("image") or {}
    data = image.get("bytes") if isinstance(image, dict) else None
    ex = Example(config=config, number=number_, index=index, rows=rows, image_file=None)
    if isinstance(data, (bytes, bytearray)):
        ext, fmt = image_extension(bytes(data), image.get("path"))
        ex.image_file = f"{EXAMPLES_DIR}/{config}-{number_}.{ext}"
        ex.image_bytes = bytes(data)
        details = ", ".join(x for x in (fmt, image_dimensions(bytes(data)), f"{len(data):,} bytes") if x)
        ex.cells.append(("image", f"{code_span(image.get('path') or '', NAME_MAX_CHARS)} ({details}), shown above"))
    else:
        ex.cells.append(("image", "*no image bytes*"))
    ex.cells.append(_value_cell("image_sha256", row.get("image_sha256"), ex.blocks))
    qa = row.get("qa") or []
    for i, item in enumerate(qa[:QA_ITEMS_SHOWN]):
        prefix = f"qa[{i}]." if len(qa) > 1 else "qa."
        for key, value in item.items():
            ex.cells.append(_value_cell(prefix + key, value, ex.blocks, always_block=key == "wrong_vlm"))
    if len(qa) > QA_ITEMS_SHOWN:
        ex.cells.append((f"qa[{QA_ITEMS_SHOWN}:]", f"{len(qa) - QA_ITEMS_SHOWN:,} more QA items, not shown"))
    meta = row.get("clean_meta") or {}
    ex.cells.append(_value_cell("clean_meta.policy", meta.get("policy"), ex.blocks))
    sources = meta.get("sources") or []
    for i, source in enumerate(sources[:QA_ITEMS_SHOWN]):
        for key, value in (source.items() if isinstance(source, dict) else [("", source)]):
            ex.cells.append(_value_cell(f"clean_meta.sources[{i}].{key}".rstrip("."), value, ex.blocks))
    ex.cells.append(_value_cell("clean_meta.actions", meta.get("actions") or [], ex.blocks))
    return ex


def examples(folder: Path, sizes: dict[str, dict]) -> dict[str, list[Example]]:
    out = {}
    for config in CONFIGS:
        rows = sizes[config]["rows"]
        out[config] = [example(folder, config, k, index, rows)
                       for k, index in enumerate(example_indices(rows), start=1)]
    return out


# --- the acceptance chart ----------------------------------------------------------------------

def acceptance_chart_png(report: dict) -> Optional[bytes]:
    """The acceptance-per-family chart of the build ``report`` as PNG bytes (the same report
    gives the same bytes), or None when no family has a QA item."""
    from .review.charts import acceptance_chart, family_counts_from_report

    families = family_counts_from_report(report)
    if not any(f.total for f in families):
        return None
    return acceptance_chart(families, fmt="png")


# --- rendering ---------------------------------------------------------------------------------

def template_dir() -> Path:
    override = os.environ.get("ORANDCAR_CARD_TEMPLATES")
    return Path(override) if override else shipped_dir("dataset_card")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(number=number, size=size, cell=cell, code=code_span)
    env.globals.update(percent=percent, NOT_RECORDED=NOT_RECORDED)
    return env


def _context(folder: Path, report: dict, repo_id: str, options: CardOptions) -> tuple[dict, dict[str, list[Example]]]:
    sizes = config_sizes(folder, report)
    header_data = card_header(sizes, options)
    header_data[BUILD_KEY] = build_settings(report)  # read back by `orandcar diff`
    header = dump_header(header_data)
    family_columns, family_table = family_rows(report)
    shown = examples(folder, sizes)
    context = {
        "header": header,
        "options": options,
        "repo_id": repo_id,
        "report": report,
        "configs": CONFIGS,
        "sizes": sizes,
        "total_file_bytes": sum(s["file_bytes"] for s in sizes.values()),
        "total_arrow_bytes": sum(s["arrow_bytes"] for s in sizes.values()),
        "generation": generation_facts(report),
        "fingerprint": engine_fingerprint(report),
        "families": {"columns": family_columns, "rows": family_table},
        "candidates_source": fence(candidates_source(), "python"),
        "extraction": extraction_section(),
        "rules": rule_sections(report),
        "judge": judge_section(report),
        "cleaning": cleaning_section(report),
        "schema": schema_tables(),
        "examples": shown,
        "fence": fence,
        "versions_section": versions_section([]),  # filled by `orandcar push --tag`
        "reproduce": reproduce_context(report),
        "acceptance_chart": ACCEPTANCE_CHART if any(
            (c or {}).get("qa") for c in (report.get("families") or {}).values()) else None,
    }
    return context, shown


def render_card(folder: Path, report: dict, *, repo_id: str = DEFAULT_REPO_ID,
                options: Optional[CardOptions] = None) -> str:
    """The README.md text for the built dataset ``folder`` and its build ``report`` (writes nothing)."""
    context, _ = _context(Path(folder), report, repo_id, options or CardOptions())
    return _environment().get_template("README.md.j2").render(**context)


def write_card(folder: Path, report: dict, *, repo_id: str = DEFAULT_REPO_ID,
               options: Optional[CardOptions] = None) -> Path:
    """Write README.md and its example images into ``folder``; stale example files are removed."""
    folder = Path(folder)
    context, shown = _context(folder, report, repo_id, options or CardOptions())
    text = _environment().get_template("README.md.j2").render(**context)
    wanted = {ex.image_file: ex.image_bytes for exs in shown.values() for ex in exs if ex.image_file}
    if context["acceptance_chart"]:
        wanted[ACCEPTANCE_CHART] = acceptance_chart_png(report)
    directory = folder / EXAMPLES_DIR
    if wanted:
        directory.mkdir(exist_ok=True)
    if directory.is_dir():
        for stale in sorted(directory.iterdir()):
            if stale.is_file() and f"{EXAMPLES_DIR}/{stale.name}" not in wanted:
                stale.unlink()
    for relative, data in wanted.items():
        target = folder / relative
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
    path = folder / "README.md"
    tmp = path.with_name("README.md.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def rewrite_card(folder: Path, report_path: Path, *, repo_id: Optional[str] = None,
                 options_path: Optional[Path] = None) -> Path:
    """``orandcar card``: render the card of a built ``folder`` again from its build report
    (``work/report.json``), with card options from a YAML file when given."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CardError(f"{folder}: not a dataset folder (build it with `orandcar build` first)")
    report = load_report(report_path)
    # without --repo / --options, the repo and card options of the build's recipe
    recipe_dataset = _get(report, "recipe", "dataset") or {}
    if options_path is not None:
        options = CardOptions.from_yaml(options_path)
    else:
        options = CardOptions.from_mapping({k: v for k, v in recipe_dataset.items() if k != "repo"},
                                           source=f"{report_path}: recipe")
    repo_id = repo_id or recipe_dataset.get("repo") or DEFAULT_REPO_ID
    kept = _published_versions(folder / "README.md")
    path = write_card(folder, report, repo_id=repo_id, options=options)
    if kept:  # the Versions section a tagged push wrote stays (the build report does not know it)
        from .release import with_versions

        path.write_text(with_versions(path.read_text(encoding="utf-8"), kept), encoding="utf-8")
    return path


def _published_versions(readme: Path) -> list[dict]:
    from .release import CardFormatError, card_versions, split_card

    try:
        return card_versions(split_card(readme.read_text(encoding="utf-8"), source=str(readme))[0])
    except (OSError, UnicodeDecodeError, CardFormatError):
        return []


def load_report(path: Path) -> dict:
    """A build report (``work/report.json``) for re-rendering a card with ``orandcar card``."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CardError(f"{path}: cannot read the build report ({exc}); run `orandcar build` first") from None
