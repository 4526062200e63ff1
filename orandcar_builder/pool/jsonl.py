"""The native pool format: one JSON object per line.

``{"id", "image", "question", "answer", "family"}`` are required; ``options`` and ``source`` are
optional. ``image`` is a path relative to the pool file, inside the pool file's folder (as is
``source.image``) unless the reader allows outside paths. A bad line never stops the read: it is
yielded as a ``Dropped`` record naming file, line and reason, and the read goes on. A UTF-8 byte
order mark before the first line is skipped; an object that repeats a key is a bad line
(``duplicate_key``: which value was meant cannot be known), and so is one nested too deep or
holding too long a number (``files.JsonLimitError``: ``json_too_deep``, ``json_number_too_long``).

Reading is two steps: ``parsed_lines`` turns ``decode_json_lines``' values into checked fields
(``checked_fields``) or drops, and ``read_parsed`` does what depends on order and on the files
(repeated ids, paths, image checks). ``read_pool`` is the two in a row; ``clean.pool_file``
keeps the first step's lines from its purity pass and gives them to the second.

``import_jsonl`` is the ``jsonl`` importer: it checks a native pool line by line, reports bad
lines, and writes the good ones in canonical form with paths relative to the new pool file.
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import replace
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Union

from .. import families as code_families
from ..errors import UnknownNameError
from ..families import Families
from ..files import JsonLimitError, RealPaths, json_decoder
from ..images import ImageError, ImagePolicy, ImageRef, check_image
from ..records import Dropped, PoolItem, Source
from ..spill import SpillSet
from ..vocab import OPTION_LETTERS
from .seal import sealed_roots

IMAGE_CHECK_CACHE = 4096  # image files whose hash and decode check are remembered
REQUIRED_FIELDS = ("id", "image", "question", "answer", "family")
SOURCE_FIELDS = ("dataset", "split", "id", "origin", "image", "image_sha256")


class PoolLineError(ValueError):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _text(obj: dict, key: str, *, required: bool = True) -> Optional[str]:
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise PoolLineError("bad_field", f"field {key!r} must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise PoolLineError("empty_field", f"field {key!r} is empty")
    return value


def parse_pool_line(obj: object, families: Optional[Families] = None) -> dict:
    """Check one decoded line's shape and types; returns the normalised fields (no image I/O).
    Its family must be one of ``families`` (a build passes its registry, a recipe's included;
    None: the code's, ``families.DEFAULT_FAMILIES``)."""
    item_id, image, question, answer, family, options, source = checked_fields(obj, families)
    return {
        "id": item_id,
        "image": image,
        "question": question,
        "answer": answer,
        "family": family,
        "options": options,
        "source": Source(**source) if source else Source(),
    }


# What ``checked_fields`` returns, in order; ``source`` is a dict of the values it records (no None), or None.
FIELDS = ("id", "image", "question", "answer", "family", "options", "source")
_REQUIRED = frozenset(REQUIRED_FIELDS)
_SOURCE_KEYS = frozenset(SOURCE_FIELDS)


_PLAIN = frozenset((str,))  # the types of a decoded JSON string (an importer's str subclass takes the long way)
_PLAIN_OR_NONE = frozenset((str, type(None)))


def checked_fields(obj: object, families: Optional[Families] = None) -> tuple:
    """``parse_pool_line``'s check as a tuple in ``FIELDS`` order (its ``source`` a dict of the
    values recorded, None when none is): PoolLineError for a bad line.

    The common line (a dict of plain strs, nothing wrong) is decided by one pass of cheap tests;
    any other goes through ``_checked_fields``, the check spelled out rule by rule, which names
    the first problem. The first accepts only what the second accepts, with the same fields
    (a blank text is one that ``str.strip`` empties: empty, or all ``isspace``)."""
    registry = families if families is not None else code_families.DEFAULT_FAMILIES
    if type(obj) is dict and obj.keys() >= _REQUIRED:
        item_id, image, question, family = obj["id"], obj["image"], obj["question"], obj["family"]
        answer, options, source = obj["answer"], obj.get("options"), obj.get("source") or None
        if (type(item_id) is str and type(image) is str and type(question) is str and type(family) is str
                and item_id and image and question and family
                and not (item_id.isspace() or image.isspace() or question.isspace() or family.isspace())
                and (type(answer) is str and answer and not answer.isspace()
                     or type(answer) is list and answer and all(map(_PLAIN.__contains__, map(type, answer)))
                     and all(answer) and not any(map(str.isspace, answer)))
                and (options is None
                     or type(options) is list and 2 <= len(options) <= len(OPTION_LETTERS)
                     and all(map(_PLAIN.__contains__, map(type, options))))
                and (source is None
                     or type(source) is dict and source.keys() <= _SOURCE_KEYS
                     and all(map(_PLAIN_OR_NONE.__contains__, map(type, source.values()))))
                and family in registry):
            if source is not None:
                source = {k: v for k, v in source.items() if v is not None} or None
            return (item_id, image, question, answer if type(answer) is str else tuple(answer), family,
                    None if options is None else tuple(options), source)
    return _checked_fields(obj, registry)


def _checked_fields(obj: object, registry: Families) -> tuple:
    if not isinstance(obj, dict):
        raise PoolLineError("malformed_line", f"a pool line must be a JSON object, got {type(obj).__name__}")
    missing = [k for k in REQUIRED_FIELDS if k not in obj]
    if missing:
        raise PoolLineError("missing_field", f"missing required field(s): {', '.join(missing)}")
    item_id = _text(obj, "id")
    image = _text(obj, "image")
    question = _text(obj, "question")
    family = _text(obj, "family")
    answer = obj["answer"]
    if isinstance(answer, list):
        if not answer or not all(isinstance(a, str) for a in answer):
            raise PoolLineError("bad_field", "field 'answer' must be a string or a non-empty list of strings")
        if not all(a.strip() for a in answer):
            raise PoolLineError("empty_field", "field 'answer' holds an empty reference")
        answer = tuple(answer)
    elif isinstance(answer, str):
        if not answer.strip():
            raise PoolLineError("empty_field", "field 'answer' is empty")
    else:
        raise PoolLineError("bad_field", f"field 'answer' must be a string or a list of strings, got {type(answer).__name__}")
    options = obj.get("options")
    if options is not None:
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options) or len(options) < 2:
            raise PoolLineError("bad_field", "field 'options' must be null or a list of at least two strings")
        if len(options) > len(OPTION_LETTERS):
            raise PoolLineError("bad_field", f"field 'options' has {len(options)} options; at most {len(OPTION_LETTERS)} can be lettered")
        options = tuple(options)
    source = obj.get("source") or {}
    if not isinstance(source, dict):
        raise PoolLineError("bad_field", "field 'source' must be an object")
    unknown = sorted(set(source) - set(SOURCE_FIELDS))
    if unknown:
        raise PoolLineError("bad_field", f"unknown source field(s): {', '.join(unknown)}")
    for key, value in source.items():
        if value is not None and not isinstance(value, str):
            raise PoolLineError("bad_field", f"source.{key} must be a string or null")
    try:
        registry[family]
    except UnknownNameError as exc:
        raise PoolLineError("unknown_family", str(exc)) from None
    return item_id, image, question, answer, family, options, {k: v for k, v in source.items() if v is not None} or None


# A JSON escape of a UTF-16 surrogate; only such an escape can put a lone surrogate into a str
# decoded from UTF-8 text (valid pairs decode to one code point).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: object) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_BOM = b"\xef\xbb\xbf"
SOURCE_OUTSIDE_POOL = "source_image_outside_pool"


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _DuplicateKey(key)
    return obj


# One decoder: json.loads with any keyword builds a new decoder per call.
_DECODER = json_decoder(object_pairs_hook=_unique_keys)


def decode_json_lines(path: Path) -> Iterator[tuple[str, Union[object, Dropped]]]:
    """Yield ``(where, value)`` per line of a JSONL file: the decoded JSON value, or a ``Dropped``
    for a blank, non-UTF-8 or malformed line, one whose object repeats a key, or one past the JSON
    bounds (``files.MAX_JSON_DEPTH``, ``files.MAX_JSON_INT_DIGITS``). ``where`` is
    ``"name:line"``. A UTF-8 byte order mark at the start of the file is skipped."""
    name = path.name
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{name}:{lineno}"
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            if not raw or raw.isspace():  # ``not raw.strip()``: the same ASCII whitespace, no copy
                yield where, Dropped(where, "blank_line", "blank line")
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield where, Dropped(where, "not_utf8", f"line is not valid UTF-8 ({exc.reason} at byte {exc.start})")
                continue
            try:
                value = _DECODER.decode(text)
            except json.JSONDecodeError as exc:
                yield where, Dropped(where, "malformed_json", f"not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            except JsonLimitError as exc:
                yield where, Dropped(where, exc.reason, exc.detail)
                continue
            except _DuplicateKey as exc:
                yield where, Dropped(where, "duplicate_key", f"key {exc.args[0]!r} appears twice in one object; "
                                                             "which value was meant cannot be known")
                continue
            if "\\u" in text and _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
                yield where, Dropped(where, "not_utf8", "holds a lone surrogate escape (\\uD800-\\uDFFF without its "
                                                       "pair): not Unicode text, it cannot be stored")
                continue
            yield where, value


def _line_id(obj: object) -> Optional[str]:
    return obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None


# A parsed line (``parsed_lines``): a Dropped, or a tuple (where, *FIELDS) of a line whose fields
# passed ``checked_fields``.
ParsedLine = Union[Dropped, tuple]


def parsed_lines(lines: Iterable[tuple[str, object]], families: Optional[Families] = None) -> Iterator[ParsedLine]:
    """``decode_json_lines``' ``(where, value)`` pairs as parsed lines, in order: its Dropped as
    they are, a line that fails ``checked_fields`` as a Dropped (with the line's id when it has a
    str one), every other as the tuple ``(where, *FIELDS)``."""
    for where, obj in lines:
        if obj.__class__ is Dropped:
            yield obj
            continue
        try:
            yield (where, *checked_fields(obj, families))
        except PoolLineError as exc:
            yield Dropped(where, exc.reason, exc.detail, _line_id(obj))


def read_pool(path: Union[str, os.PathLike], *, limit: Optional[int] = None,
              spill_dir: Optional[Union[str, os.PathLike]] = None,
              images: Optional[ImagePolicy] = None, workers: int = 1,
              families: Optional[Families] = None,
              named: Optional[Callable[[str], None]] = None) -> Iterator[Union[PoolItem, Dropped]]:
    """Yield a PoolItem for each good line and a Dropped for each bad one, in file order. A line
    whose family is not one of ``families`` is dropped (``unknown_family``).

    ``images`` bounds the image files (size, read time) and, unless it allows outside paths,
    drops a line whose ``image`` or ``source.image`` lies outside the pool file's folder (links
    resolved): ``image_outside_pool``, ``source_image_outside_pool``. The folders the pool's
    import seal vouches for (``seal.sealed_roots``: a pool ``orandcar import`` wrote on this
    machine, unchanged since) count as inside.

    ``limit`` stops after that many lines have been read (good or bad). The ids already used are
    remembered in a SpillSet, so memory does not grow with the pool: past its threshold they go
    to a scratch file in a temporary folder under ``spill_dir`` (None: the system temp dir),
    removed when the read ends.

    ``workers`` > 1 reads, decodes and hashes the image files on that many worker processes
    (``prefetch.ImagePrefetch``) while this one keeps everything that depends on order; the
    records are exactly those of ``workers=1``.

    ``named(path)``, when given, is called with the absolute path of every file a line's
    ``source.image`` and ``image`` name, as the line reaches the check that reads or places it
    (lines dropped before that name nothing): the files the records depend on
    (``pipeline.reuse`` records their identity).
    """
    path = Path(path)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more, not {limit}")
    lines = parsed_lines(islice(decode_json_lines(path), limit), families)
    yield from read_parsed(path, lines, spill_dir=spill_dir, images=images, workers=workers, named=named)


def read_parsed(path: Union[str, os.PathLike], lines: Iterable[ParsedLine], *,
                spill_dir: Optional[Union[str, os.PathLike]] = None,
                images: Optional[ImagePolicy] = None, workers: int = 1,
                named: Optional[Callable[[str], None]] = None,
                unique_ids: bool = False) -> Iterator[Union[PoolItem, Dropped]]:
    """``read_pool``'s records from the pool file ``path``'s lines as ``parsed_lines`` gave them
    (e.g. kept from an earlier pass, so that no line is decoded twice): the repeated ids, the
    paths and the image checks. ``unique_ids``: the caller knows that no two of the parsed
    lines share an id, so none is remembered (the records are the same: every id is new)."""
    path = Path(path)
    base = os.path.abspath(path.parent)
    from .prefetch import check_workers

    workers = check_workers(workers)
    policy = _with_seal(images or ImagePolicy(), path)
    with nullcontext() if unique_ids else SpillSet(spill_dir) as seen_ids:  # None: no id to remember
        yield from _read_pool(lines, base, seen_ids, policy, workers, named)


def _with_seal(policy: ImagePolicy, pool: Path) -> ImagePolicy:
    roots = () if policy.allow_outside_paths else sealed_roots(pool)
    return replace(policy, roots=tuple(dict.fromkeys((*policy.roots, *roots)))) if roots else policy


def _read_pool(lines: Iterable[ParsedLine], base: str, seen_ids: Optional[SpillSet],
               policy: ImagePolicy, workers: int = 1,
               named: Optional[Callable[[str], None]] = None) -> Iterator[Union[PoolItem, Dropped]]:
    root = os.path.realpath(base)  # the folder the pool's paths must stay in, links resolved
    # One hash and decode check per image file while its QA items come close together; bounded, so
    # memory does not grow with the pool (an image seen again much later is checked again).
    # An OrderedDict LRU, not functools.lru_cache: the prefetcher asks whether a path is held
    # (``images.__contains__``) without checking it, to skip sending it to a worker, and the value
    # comes from a check that depends on the caller (inline here, a worker's result with the
    # prefetcher); lru_cache has neither a peek nor a per-call filler. cachetools.LRUCache would
    # serve, as a new dependency for these six lines; not worth it.
    images: OrderedDict[str, ImageRef | ImageError] = OrderedDict()
    real = RealPaths()  # each folder's links resolved once in this read
    here = lambda image_path: check_image(image_path, root, policy, real)  # noqa: E731
    path_of = image_paths(base)
    if workers == 1:
        yield from _read_lines(lines, base, root, seen_ids, policy, images, here, path_of, named, real)
        return
    from . import prefetch

    # The first lines are checked here: a small pool never waits for workers to start, and the
    # first items of a large one reach the engine while they start.
    lines = iter(lines)
    yield from _read_lines(islice(lines, prefetch.INLINE_FIRST), base, root, seen_ids, policy, images, here, path_of,
                           named, real)
    with prefetch.ImagePrefetch(workers, base, root, policy, images.__contains__, path_of=path_of) as ahead:
        yield from _read_lines(ahead.lines(lines), base, root, seen_ids, policy, images, ahead.result, path_of, named,
                               real)


def image_paths(base: str) -> Callable[[str], str]:
    """The absolute path of a recorded image path (relative to ``base``, or absolute), as the
    readers form it: no syscall, the pool's file name kept; the last IMAGE_CHECK_CACHE answers are
    remembered (a file's QA items usually come together)."""
    return lru_cache(maxsize=IMAGE_CHECK_CACHE)(lambda recorded: os.path.abspath(os.path.join(base, recorded)))


_NO_SOURCE = Source()  # frozen: one value serves every item whose source records nothing


def _read_lines(lines: Iterable[ParsedLine], base: str, root: str, seen_ids: Optional[SpillSet],
                policy: ImagePolicy, images: "OrderedDict[str, ImageRef | ImageError]",
                check: Callable[[str], "ImageRef | ImageError"], path_of: Callable[[str], str],
                named: Optional[Callable[[str], None]] = None,
                realpath: Callable[[str], str] = os.path.realpath) -> Iterator[Union[PoolItem, Dropped]]:
    """The records of the parsed ``lines`` in order; ``check(path)`` is an image file's admission
    check, ``path_of(recorded)`` its absolute path (``image_paths``); ``named(path)`` hears of
    each file a line names (``read_pool``); ``seen_ids`` None: the ids are known to be unique;
    ``realpath`` resolves a ``source.image``'s links (``files.RealPaths``)."""
    for line in lines:
        if line.__class__ is Dropped:
            yield line
            continue
        where, item_id, image, question, answer, family, options, source = line
        # The id is claimed here and given back if the item's image fails, so that one SpillSet
        # call decides the common case (an id counts as used once its item is yielded).
        if seen_ids is not None and not seen_ids.add(item_id):
            yield Dropped(where, "duplicate_id", f"id {item_id!r} already used earlier in the pool", item_id)
            continue
        source_image = source.get("image") if source is not None else None
        if source_image is not None:
            source_path = os.path.abspath(os.path.join(base, source_image))
            if named is not None:
                named(source_path)
            if not policy.allows(source_path, root, realpath):
                if seen_ids is not None:
                    seen_ids.discard(item_id)
                yield Dropped(where, SOURCE_OUTSIDE_POOL, f"source.image {source_image!r} lies outside the pool "
                                                          f"file's folder (allow it with --allow-outside-paths)", item_id)
                continue
        image_path = path_of(image)
        if named is not None:
            named(image_path)
        ref = images.get(image_path)
        if ref is not None:
            images.move_to_end(image_path)
        else:
            ref = images[image_path] = check(image_path)
            if len(images) > IMAGE_CHECK_CACHE:
                images.popitem(last=False)
        if isinstance(ref, ImageError):
            if seen_ids is not None:
                seen_ids.discard(item_id)
            yield Dropped(where, ref.reason, f"image {image!r}: {ref}", item_id)
            continue
        yield PoolItem(
            id=item_id,
            image=ref,
            question=question,
            reference=answer,
            family=family,
            options=options,
            source=Source(**source) if source is not None else _NO_SOURCE,
            where=where,
        )


def pool_line(fields: dict, extra: Optional[dict] = None) -> dict:
    """A native pool line as a dict in canonical key order, from ``parse_pool_line``-shaped fields;
    ``source`` keeps only the values it records; ``extra`` keys are appended as given."""
    line: dict = {
        "id": fields["id"],
        "image": fields["image"],
        "question": fields["question"],
        "answer": fields["answer"] if isinstance(fields["answer"], str) else list(fields["answer"]),
        "family": fields["family"],
    }
    if fields.get("options") is not None:
        line["options"] = list(fields["options"])
    source = fields.get("source") or {}
    get = (lambda k: getattr(source, k)) if isinstance(source, Source) else source.get
    source = {k: get(k) for k in SOURCE_FIELDS if get(k) not in (None, "")}
    if source:
        line["source"] = source
    line.update(extra or {})
    return line


def encode_pool_line(fields: dict, extra: Optional[dict] = None) -> str:
    """``pool_line`` as one line of JSON text (UTF-8 kept as is, no trailing newline)."""
    return json.dumps(pool_line(fields, extra), ensure_ascii=False)


def _rebase(path: str, old_base: Path, writer) -> str:
    """A path recorded relative to ``old_base`` (or absolute), rewritten relative to the new pool."""
    return writer.relative(old_base / path)


def import_jsonl(source: Path, writer) -> None:
    """The ``jsonl`` importer: check each native pool line, report bad ones, write the good ones
    in canonical form with ``image`` and ``source.image`` relative to the new pool file."""
    base = Path(source).parent
    writer.add_root(base)
    report = writer.report
    for where, obj in decode_json_lines(Path(source)):
        report.read += 1
        if isinstance(obj, Dropped):
            writer.problem(where, obj.reason, obj.detail)
            continue
        item_id = _line_id(obj)
        try:
            fields = parse_pool_line(obj)
        except PoolLineError as exc:
            writer.problem(where, exc.reason, exc.detail, item_id)
            continue
        if not writer.check_image(base / fields["image"], where, item_id):
            continue
        fields["image"] = _rebase(fields["image"], base, writer)
        src = fields["source"]
        if src.image is not None:
            fields["source"] = replace(src, image=_rebase(src.image, base, writer))
        writer.write(pool_line(fields), where)
