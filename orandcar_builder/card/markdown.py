"""Markdown for the card: fenced blocks and code spans that no value can break out of, table
cells, lines of text and block quotes (a recipe's names and access prompt) that cannot open a
block or raw HTML, and the figures' spelling (numbers, sizes, percentages, tables of measured
figures)."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Optional

NOT_RECORDED = "not recorded"
NAME_MAX_CHARS = 200  # a name or short text in a table cell (file name, model id) is cut here

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


# A line that starts like a block of its own (a heading, a list item, a thematic break or setext
# underline, a fence): its first character is escaped, so text cannot open one.
_BLOCK_START = re.compile(r"^([#+=~_-]|\d+[.)])")


def line_text(text: Any) -> str:
    """One line of plain text made safe in a paragraph or heading: ``cell``'s escapes, and a
    first character that would start a block (``#``, ``-``, ``1.``, ...) escaped too."""
    return _BLOCK_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], cell(text))


def quoted(text: Any) -> str:
    """Free text (a recipe's access prompt) as the lines of a ``> `` block quote: each line made
    safe by ``line_text``, so no line of it becomes a heading, a list, HTML or the end of the quote."""
    return "\n> ".join(line_text(line) for line in str(text).replace("\r\n", "\n").split("\n"))


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
