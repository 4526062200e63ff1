"""The ``llava`` importer: LLaVA-style conversation records, as a JSON array or as JSONL.

A record is ``{"id", "image", "conversations": [{"from": "human"|"gpt", "value": ...}, ...]}``,
with optional ``source`` (the dataset the sample came from), ``origin``, ``split`` and
``family``; ``fields`` renames any of these keys. Each human turn followed by a gpt turn becomes
one QA item on the record's image, id ``"<record id>#<pair index>"``; the ``<image>`` marker is
removed from the question. A gpt turn with no human turn before it, a human turn with no answer,
and every other defect are reported with file:line, and the read goes on.

Both layouts are read incrementally: a JSON array is decoded one record at a time, so memory
stays flat however large the file is. A record past the JSON bounds (``files.MAX_JSON_DEPTH``,
``files.MAX_JSON_INT_DIGITS``) is reported and skipped, in either layout, and the read goes on.
"""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import IO, Iterator, Mapping, Optional, Union

from ..errors import OrandCarError
from ..files import JsonLimitError, json_decoder
from ..records import Dropped
from .jsonl import decode_json_lines

IMAGE_MARKER = "<image>"
HUMAN_ROLES = ("human", "user")
MODEL_ROLES = ("gpt", "assistant")
IGNORED_ROLES = ("system",)  # a system prompt is not a QA turn
# Record keys, as LLaVA and InfinityMM name them; ``fields`` maps these names to others.
DEFAULT_FIELDS = {
    "id": "id",
    "image": "image",
    "conversations": "conversations",
    "dataset": "source",
    "origin": "origin",
    "split": "split",
    "family": "family",
}
READ_CHUNK = 1 << 20
# A single array element larger than this is treated as a malformed file, not buffered forever.
MAX_RECORD_CHARS = 64 << 20

_MARKER_RE = re.compile(r"\s*" + re.escape(IMAGE_MARKER) + r"\s*")


def strip_image_marker(text: str) -> str:
    """``text`` without ``<image>`` markers: a marker on its own line goes with its line break,
    one inside a sentence leaves a single space."""
    return _MARKER_RE.sub(lambda m: "\n" if "\n" in m.group(0) else " ", text).strip()


# --- reading records -------------------------------------------------------------------------


def _skip_ws(buf: str, pos: int) -> int:
    while pos < len(buf) and buf[pos] in " \t\r\n":
        pos += 1
    return pos


# A JSON string, a bracket or a comma: what finding the end of a value without decoding it needs. A
# quote that opens no complete string means the value goes on past the buffer.
_VALUE_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},"]')


def value_end(buf: str, pos: int) -> Optional[int]:
    """The index just past the JSON value that starts at ``buf[pos]`` (an array element), found by
    its brackets alone, so a value the decoder refuses (``JsonLimitError``) can be skipped; None
    when ``buf`` ends before it does. No recursion: any depth is fine."""
    depth = 0
    for match in _VALUE_TOKEN.finditer(buf, pos):
        token = match.group()
        if token == '"':
            return None  # an unterminated string: the value is cut by the buffer's end
        if token in "[{":
            depth += 1
        elif token in "]}":
            if depth == 0:
                return match.start()  # a scalar element ended by the array's close
            depth -= 1
            if depth == 0:
                return match.end()
        elif token == "," and depth == 0:
            return match.start()
    return None


def iter_json_array(fh: IO[bytes], name: str) -> Iterator[tuple[str, Union[object, Dropped]]]:
    """Yield ``(where, element)`` for each element of a top-level JSON array, decoding one element
    at a time. A defect that makes the rest unreadable (bad JSON, bad UTF-8, truncation) is
    yielded as one ``Dropped`` at its line, and reading stops there."""
    decoder = json_decoder()
    utf8 = codecs.getincrementaldecoder("utf-8-sig")()
    buf, pos, line, eof = "", 0, 1, False
    expect = "["  # then "value", then "," or "]"

    def more() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        data = fh.read(READ_CHUNK)
        eof = not data
        buf = buf[pos:] + utf8.decode(data, final=eof)
        pos = 0
        return bool(data)

    def stop(reason: str, detail: str) -> tuple[str, Dropped]:
        where = f"{name}:{line}"
        return where, Dropped(where, reason, detail)

    while True:
        try:
            start = _skip_ws(buf, pos)
            while start >= len(buf) and more():
                start = _skip_ws(buf, pos)
        except UnicodeDecodeError as exc:
            yield stop("not_utf8", f"file is not valid UTF-8 after this line ({exc.reason}); the rest is unread")
            return
        line += buf.count("\n", pos, start)
        pos = start
        if pos >= len(buf):
            if expect != "done":
                yield stop("malformed_json", "file ends before the JSON array is closed; the rest is unread")
            return
        char = buf[pos]
        if expect == "done":
            yield stop("malformed_json", "text after the end of the JSON array")
            return
        if expect == "[":
            if char != "[":
                yield stop("malformed_json", "expected a JSON array")
                return
            pos, expect = pos + 1, "first"
            continue
        if expect in (",", "first") and char == "]":
            pos, expect = pos + 1, "done"
            continue
        if expect == ",":
            if char != ",":
                yield stop("malformed_json", f"expected ',' or ']' between records, found {char!r}")
                return
            pos, expect = pos + 1, "value"
            continue
        try:
            value, end = decoder.raw_decode(buf, pos)
        except JsonLimitError as exc:
            end = value_end(buf, pos)
            if end is None:
                try:
                    grew = len(buf) - pos < MAX_RECORD_CHARS and more()
                except UnicodeDecodeError as uexc:
                    yield stop("not_utf8", f"file is not valid UTF-8 after this line ({uexc.reason}); the rest is unread")
                    return
                if grew:
                    continue
                yield stop("malformed_json", f"not valid JSON ({exc.detail}, and the record never ends); "
                                             "the rest of the file is unread")
                return
            where = f"{name}:{line}"
            line += buf.count("\n", pos, end)
            pos, expect = end, ","
            yield where, Dropped(where, exc.reason, exc.detail)
            continue
        except json.JSONDecodeError as exc:
            try:
                grew = len(buf) - pos < MAX_RECORD_CHARS and more()
            except UnicodeDecodeError as uexc:
                yield stop("not_utf8", f"file is not valid UTF-8 after this line ({uexc.reason}); the rest is unread")
                return
            if grew:
                continue  # the record may just be cut by the chunk boundary
            yield stop("malformed_json", f"not valid JSON ({exc.msg}); the rest of the file is unread")
            return
        where = f"{name}:{line}"
        line += buf.count("\n", pos, end)
        pos, expect = end, ","
        yield where, value


def iter_records(path: Path) -> Iterator[tuple[str, Union[object, Dropped]]]:
    """``(where, record)`` pairs of a LLaVA file: a JSON array when its first character is '[',
    JSON Lines otherwise."""
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip(codecs.BOM_UTF8).lstrip()
        if head[:1] == b"[":
            fh.seek(0)
            yield from iter_json_array(fh, path.name)
            return
    yield from decode_json_lines(path)


# --- turning a record into QA items ----------------------------------------------------------


def conversation_pairs(turns: object) -> tuple[list[tuple[int, str, str]], list[tuple[int, str, str]]]:
    """Pair human turns with the gpt turn that follows each.

    Returns ``(pairs, problems)``: pairs are ``(turn index of the question, question, answer)``;
    problems are ``(turn index, reason, detail)`` for turns that cannot be paired.
    """
    if not isinstance(turns, list):
        return [], [(0, "bad_conversations", "'conversations' must be a list of turns")]
    pairs: list[tuple[int, str, str]] = []
    problems: list[tuple[int, str, str]] = []
    pending: Optional[tuple[int, str]] = None
    for index, turn in enumerate(turns):
        role = turn.get("from", turn.get("role")) if isinstance(turn, dict) else None
        text = turn.get("value", turn.get("content")) if isinstance(turn, dict) else None
        if not isinstance(role, str) or not isinstance(text, str):
            problems.append((index, "bad_turn", "a turn must be an object with string 'from' and 'value'"))
            continue
        if role in IGNORED_ROLES:
            continue
        if role in HUMAN_ROLES:
            if pending is not None:
                problems.append((pending[0], "unanswered_turn", f"human turn {pending[0]} is followed by another human turn, not an answer"))
            pending = (index, text)
        elif role in MODEL_ROLES:
            if pending is None:
                problems.append((index, "turn_out_of_order", f"{role} turn {index} has no human turn before it"))
            else:
                pairs.append((pending[0], pending[1], text))
                pending = None
        else:
            problems.append((index, "unknown_role", f"turn {index} has role {role!r}; expected one of {', '.join(HUMAN_ROLES + MODEL_ROLES + IGNORED_ROLES)}"))
    if pending is not None:
        problems.append((pending[0], "unanswered_turn", f"human turn {pending[0]} has no answer"))
    return pairs, problems


def _field(record: dict, fields: Mapping[str, str], key: str) -> Optional[str]:
    value = record.get(fields[key])
    if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "id":
        return str(value)
    return value if isinstance(value, str) and value.strip() else None


def _record_image(record: dict, fields: Mapping[str, str]) -> tuple[Optional[str], Optional[str]]:
    """The record's single image path, or ``(None, why not)``."""
    value = record.get(fields["image"])
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, list):
        return None, f"record has {len(value)} images; a pool item has exactly one"
    if not isinstance(value, str) or not value.strip():
        return None, f"record has no image path in field {fields['image']!r}"
    return value, None


def import_llava(
    source: Path,
    writer,
    *,
    family: Optional[str] = None,
    family_map: Optional[Mapping[str, str]] = None,
    dataset: Optional[str] = None,
    split: str = "train",
    origin: Optional[str] = None,
    image_root: Optional[Path] = None,
    fields: Optional[Mapping[str, str]] = None,
) -> None:
    """Write one pool line per human/gpt pair of every record of ``source``.

    The family of a record is its own ``family`` field, else ``family_map[its dataset]``, else
    ``family``. Its dataset is its ``source`` field, else ``dataset``, else the file's stem. Its
    origin is its ``origin`` field, else ``origin``, else the file's stem: a record is genuine
    benchmark QA only when it or the caller says ``"benchmark"``. Image paths are relative to
    ``image_root`` (default: the file's directory).
    """
    source = Path(source)
    keys = {**DEFAULT_FIELDS, **(fields or {})}
    unknown = sorted(set(fields or {}) - set(DEFAULT_FIELDS))
    if unknown:
        raise OrandCarError(f"llava import: unknown field mapping key(s) {', '.join(unknown)}; known: {', '.join(DEFAULT_FIELDS)}")
    root = Path(image_root) if image_root is not None else source.parent
    writer.add_root(root)
    report = writer.report
    for index, (where, record) in enumerate(iter_records(source)):
        report.read += 1
        if isinstance(record, Dropped):
            writer.problem(where, record.reason, record.detail)
            continue
        if not isinstance(record, dict):
            writer.problem(where, "malformed_record", f"a record must be a JSON object, got {type(record).__name__}")
            continue
        record_id = _field(record, keys, "id") or f"{source.stem}-{index}"
        image, why = _record_image(record, keys)
        if image is None:
            writer.problem(where, "no_image", why, record_id)
            continue
        record_dataset = _field(record, keys, "dataset") or dataset or source.stem
        record_family = _field(record, keys, "family") or (family_map or {}).get(record_dataset) or family
        if record_family is None:
            writer.problem(where, "no_family", f"no family for dataset {record_dataset!r}: give a family, a family map entry, or a {keys['family']!r} field", record_id)
            continue
        image_path = root / image
        if not writer.check_image(image_path, where, record_id):
            continue
        image_rel = writer.relative(image_path)
        item_source = {
            "dataset": record_dataset,
            "split": _field(record, keys, "split") or split,
            "id": record_id,
            "origin": _field(record, keys, "origin") or origin or source.stem,
            "image": image_rel,
        }
        pairs, problems = conversation_pairs(record.get(keys["conversations"]))
        for turn, reason, detail in problems:
            writer.problem(f"{where} turn {turn}", reason, detail, record_id)
        for pair_index, (turn, question, answer) in enumerate(pairs):
            item_id = f"{record_id}#{pair_index}"
            question = strip_image_marker(question)
            if not question:
                writer.problem(f"{where} turn {turn}", "empty_question", "question is empty once the <image> marker is removed", item_id)
                continue
            if not answer.strip():
                writer.problem(f"{where} turn {turn + 1}", "empty_answer", "answer is empty", item_id)
                continue
            line = {"id": item_id, "image": image_rel, "question": question, "answer": answer,
                    "family": record_family, "source": item_source}
            writer.write(line, f"{where} turn {turn}")
