"""``orandcar validate``: check a built dataset folder before anyone loads or pushes it.

Checks, one problem line each (naming config, shard, row and field):
- the folder holds the dataset layout (``layout``) and nothing else: README.md, the marker, the
  example images, the config shards; no symbolic link, no stray or half-written file;
- README.md's YAML ``configs:`` block equals the loading definition and matches the shards on disk;
  its ``dataset_info`` (configs, features, rows, bytes) is what the shards hold, as
  ``load_dataset`` and the Hub read it (a row count that differs makes ``load_dataset`` fail with
  NonMatchingSplitsSizesError); every image the card links to is in ``examples/`` and every file
  there is linked;
- shard names are ``train-XXXXX-of-YYYYY.parquet``, numbered without gaps;
- each shard's arrow schema and datasets features metadata equal the config's features, and no
  row group of it decodes to more than ``parquetio.MAX_ROW_GROUP_BYTES`` (known from the footer,
  before a row is read);
- every row satisfies the config's JSON Schema (dataset/schemas/<config>.json): the schema is
  evaluated column-wise over each batch (``columnar``) to find the rows that fail, and jsonschema
  reports on those rows; ``exhaustive=True`` runs jsonschema on every row instead;
- ``sha256(image.bytes) == image_sha256``, one row per image per config;
- ``qa`` and ``clean_meta.sources`` are aligned; families and verifiers are known names.
"""

from __future__ import annotations

import base64
import bisect
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Iterator, Optional

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..families import DEFAULT_FAMILIES, Families
from ..files import loads_bounded
from ..parquetio import ShardTooLargeError, check_row_groups, is_nested, nested_arrays, open_parquet, row_group_nbytes
from ..spill import Repeats, SpillMap
from ..verify import RULE_MODULES
from ..vocab import CONFIG_REJECTED, CONFIGS, JUDGE_VERIFIER, SHARD_NAME, SPLIT
from .cardfile import CardFormatError, header_families, split_card
from .columnar import Unsupported, any_item, compile_schema
from .features import configs_block, features
from .info import arrow_bytes, dataset_info
from .layout import EXAMPLES_DIR, README, expected_layout_text, scan

SCHEMA_DIR = Path(__file__).with_name("schemas")
# Links of the card body to files beside it: ![alt](target) or [text](target), and src="target".
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|\bsrc=[\"']([^\"']+)[\"']")
# Rows per batch: as many as fit BATCH_BYTES (uncompressed, by the shard's own figures), within bounds.
BATCH_BYTES = 32 * 1024 * 1024
MIN_BATCH_ROWS, MAX_BATCH_ROWS = 16, 4096
KNOWN_VERIFIERS = frozenset(RULE_MODULES) | {JUDGE_VERIFIER}


@functools.lru_cache(maxsize=None)
def json_schema(config: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{config}.json").read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def _validator(config: str) -> jsonschema.protocols.Validator:
    schema = json_schema(config)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@functools.lru_cache(maxsize=None)
def _columnar(config: str):
    """The config's JSON Schema compiled over its arrow schema, or None when it cannot be."""
    try:
        return compile_schema(json_schema(config), pa.struct(list(features(config).arrow_schema)))
    except Unsupported:
        return None


def read_card_yaml(readme: Path) -> dict:
    """The YAML header of a dataset card (``cardfile.split_card``)."""
    return split_card(readme.read_text(encoding="utf-8"), source=readme.name)[0]


def row_as_json(row: dict) -> dict:
    """The JSON form of a row: image bytes as base64, as the JSON Schema describes them."""
    image = row.get("image")
    if isinstance(image, dict) and isinstance(image.get("bytes"), (bytes, bytearray)):
        image = {**image, "bytes": base64.b64encode(image["bytes"]).decode("ascii")}
    return {**row, "image": image}


def _check_layout(folder: Path) -> tuple[list[str], list[str]]:
    """(published paths, one problem per file outside the layout)."""
    layout = scan(folder)
    problems = [f"{path}: unexpected file, not part of the dataset layout ({expected_layout_text()})"
                for path in layout.unexpected]
    return layout.published, problems


def _check_readme(folder: Path) -> tuple[dict | None, str, list[str]]:
    """(the card's YAML header, its text, problems); the header is None (and the text empty) when
    it cannot be read. The card is read once: the link and family checks take the text and header."""
    readme = folder / README
    if readme.is_symlink() or not readme.is_file():
        return None, "", ["README.md: missing"]
    return check_card_bytes(readme.read_bytes())


def check_card_bytes(data: bytes) -> tuple[dict | None, str, list[str]]:
    """``_check_readme`` on the card's bytes, wherever they were read (a folder, a Hub revision):
    the YAML header and its ``configs:`` block, and the card as huggingface_hub reads it."""
    try:
        text = data.decode("utf-8")
        header = split_card(text, source=README)[0]
    except (CardFormatError, UnicodeDecodeError) as exc:
        return None, "", [str(exc) if isinstance(exc, CardFormatError) else f"README.md: {exc}"]
    from .hubcard import hub_card_problems

    problems = hub_card_problems(text, header)
    expected = configs_block()
    if header.get("configs") != expected:
        problems.append(f"README.md: configs block differs from loading_script/orandcar.yaml "
                        f"(found {_short(header.get('configs'))})")
    return header, text, problems


def _short(value, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} chars)"


def _check_links(text: str, published: list[str]) -> Iterator[str]:
    """Every relative link of the card (``text``) resolves to a published file, and every example
    image is linked."""
    linked = set()
    for match in _LINK.finditer(text):
        target = (match.group(1) or match.group(2) or "").split("#", 1)[0].split("?", 1)[0]
        if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("/"):
            continue  # an anchor, a URL or an absolute link: nothing in the folder
        linked.add(target)
    files = set(published)
    for target in sorted(linked - files):
        yield f"README.md: links to {target}, which the folder does not hold"
    for path in sorted(p for p in files - linked if p.startswith(f"{EXAMPLES_DIR}/")):
        yield f"{path}: example image the card does not link to (stale)"


def _expected_info(shards_by_config: dict[str, list[Path]], measured: dict[Path, tuple[int, int]]) -> list[dict] | None:
    """The ``dataset_info`` the card must carry for these shards (``info.dataset_info``, which the
    card writes), or None when a shard cannot be read (reported elsewhere). ``measured`` holds the
    rows and Arrow size of each shard the row check read; only the others are read here."""
    sizes = {}
    for config in CONFIGS:
        shards = shards_by_config.get(config, [])
        try:
            sizes[config] = {
                "rows": sum(measured[s][0] if s in measured else pq.read_metadata(s).num_rows for s in shards),
                "file_bytes": sum(s.stat().st_size for s in shards),
                "arrow_bytes": sum(measured[s][1] if s in measured else arrow_bytes([s]) for s in shards),
            }
        except Exception:
            return None
    return dataset_info(sizes)


def _check_dataset_info(header: dict, expected: list[dict]) -> Iterator[str]:
    """The card's ``dataset_info`` against what the shards hold: configs, features, rows, bytes."""
    found = header.get("dataset_info")
    if found == expected:
        return
    if not isinstance(found, list) or not all(isinstance(e, dict) for e in found):
        yield f"README.md: dataset_info is missing or not a list of configs (found {_short(found)})"
        return
    by_name = {entry.get("config_name"): entry for entry in found}
    names = [entry.get("config_name") for entry in found]
    if sorted(map(str, names)) != sorted(CONFIGS):
        yield f"README.md: dataset_info names configs {names}, the shards hold {list(CONFIGS)}"
    for want in expected:
        config = want["config_name"]
        got = by_name.get(config)
        if got is None:
            continue
        if got.get("features") != want["features"]:
            yield f"README.md: dataset_info of {config}: features differ from the {config} features"
        want_split = want["splits"][0]
        got_splits = got.get("splits") if isinstance(got.get("splits"), list) else []
        got_split = next((s for s in got_splits if isinstance(s, dict) and s.get("name") == SPLIT), None)
        if got_split is None or len(got_splits) != 1:
            yield f"README.md: dataset_info of {config}: splits {_short(got.get('splits'))}, expected one split {SPLIT!r}"
        else:
            if got_split.get("num_examples") != want_split["num_examples"]:
                yield (f"README.md: dataset_info of {config}: num_examples {got_split.get('num_examples')!r}, "
                       f"the shards hold {want_split['num_examples']} rows (load_dataset would fail)")
            if got_split.get("num_bytes") != want_split["num_bytes"]:
                yield (f"README.md: dataset_info of {config}: num_bytes {got_split.get('num_bytes')!r}, "
                       f"the shards hold {want_split['num_bytes']} bytes of rows")
        for key in ("download_size", "dataset_size"):
            if got.get(key) != want[key]:
                yield f"README.md: dataset_info of {config}: {key} {got.get(key)!r}, the shards give {want[key]}"
        extra = sorted(set(got) - set(want))
        if extra:
            yield f"README.md: dataset_info of {config}: unexpected key(s) {', '.join(map(str, extra))}"


def _check_shard_names(folder: Path, config: str, published: list[str]) -> tuple[list[Path], list[str]]:
    """The config's shards: its files the layout scan published (regular files named like a shard,
    in name order; others are reported by the layout check)."""
    problems = []
    directory = folder / config
    if directory.is_symlink() or not directory.is_dir():
        return [], [f"{config}: folder missing (README declares {config}/{SPLIT}-*)"]
    shards = [folder / path for path in published if path.startswith(f"{config}/")]
    problems.extend(shard_number_problems(config, [shard.name for shard in shards]))
    return shards, problems


def shard_number_problems(config: str, names: list[str]) -> list[str]:
    """The shard ``names`` of ``config`` (each matches ``SHARD_NAME``, in order) are numbered
    0..N-1 of N, without gap or duplicate."""
    problems = []
    if not names:
        problems.append(f"{config}: no shard matches {config}/{SPLIT}-*")
    totals = set()
    for index, name in enumerate(names):
        match = SHARD_NAME.match(name)
        if int(match.group(1)) != index:
            problems.append(f"{config}/{name}: shard index {int(match.group(1))}, expected {index} (gap or duplicate)")
        totals.add(int(match.group(2)))
    if totals and totals != {len(names)}:
        problems.append(f"{config}: shard names announce {sorted(totals)} shards, {len(names)} on disk")
    return problems


def _check_schema(config: str, schema: pa.Schema, label: str) -> list[str]:
    expected = features(config)
    problems = []
    if not schema.remove_metadata().equals(expected.arrow_schema.remove_metadata()):
        problems.append(f"{label}: arrow schema differs from the {config} features")
    metadata = (schema.metadata or {}).get(b"huggingface")
    if metadata is None:
        problems.append(f"{label}: no datasets features metadata (schema key 'huggingface')")
    else:
        try:
            found = loads_bounded(metadata)["info"]["features"]
        except (ValueError, KeyError, TypeError):
            problems.append(f"{label}: datasets features metadata is not readable")
        else:
            if found != expected.to_dict():
                problems.append(f"{label}: datasets features metadata differs from the {config} features")
    return problems


def _check_row(config: str, row: dict, where: str, families: Families = DEFAULT_FAMILIES) -> Iterator[str]:
    validator = _validator(config)
    for error in sorted(validator.iter_errors(row_as_json(row)), key=lambda e: list(e.absolute_path)):
        field = ".".join(str(p) for p in error.absolute_path) or "(row)"
        message = error.message if len(error.message) < 200 else error.message[:200] + "..."
        yield f"{where} field {field}: {message}"
    image = row.get("image") or {}
    data = image.get("bytes") if isinstance(image, dict) else None
    if isinstance(data, (bytes, bytearray)) and isinstance(row.get("image_sha256"), str):
        if hashlib.sha256(data).hexdigest() != row["image_sha256"]:
            yield f"{where} field image_sha256: does not match sha256(image.bytes)"
    qa = row.get("qa") or []
    meta = row.get("clean_meta") or {}
    sources = meta.get("sources") or [] if isinstance(meta, dict) else []
    if len(qa) != len(sources):
        yield f"{where} field clean_meta.sources: {len(sources)} sources for {len(qa)} qa items (must be aligned)"
    for i, source in enumerate(sources):
        family = source.get("family") if isinstance(source, dict) else None
        if family is not None and family not in families:
            yield f"{where} field clean_meta.sources.{i}.family: unknown family {family!r}"
    if config != CONFIG_REJECTED:
        for i, item in enumerate(qa):
            verifier = item.get("verifier") if isinstance(item, dict) else None
            if verifier is not None and verifier not in KNOWN_VERIFIERS:
                yield f"{where} field qa.{i}.verifier: unknown verifier {verifier!r}"


def _path(array: pa.Array, *names: str) -> pa.Array:
    for name in names:
        array = pc.struct_field(array, name)
    return array


def _unknown_names(lists: pa.Array, field: str, known: frozenset) -> np.ndarray:
    """Rows where some ``lists[i][j][field]`` is a string outside ``known``."""
    value_set = pa.array(sorted(known), pa.string())

    def unknown(items: pa.Array) -> np.ndarray:
        names = pc.struct_field(items, field)
        # is_in gives False for a null name: a missing name is not an unknown one.
        return pc.and_(pc.invert(pc.is_in(names, value_set=value_set)), pc.is_valid(names)).to_numpy(
            zero_copy_only=False)

    return any_item(lists, unknown)


def _suspect_rows(config: str, batch: pa.RecordBatch, families: Families = DEFAULT_FAMILIES) -> np.ndarray:
    """Rows of ``batch`` that ``_check_row`` would report on (exactly those, see columnar), with
    the same ``families``.

    All rows are suspects when the config's schema could not be compiled."""
    check = _columnar(config)
    if check is None:
        return np.ones(batch.num_rows, dtype=bool)
    rows = batch.to_struct_array()
    mask = check(rows)
    # sha256(image.bytes) == image_sha256, where both are present
    data = _path(rows, "image", "bytes").to_pylist()
    shas = batch.column("image_sha256").to_pylist()
    for i, (blob, sha) in enumerate(zip(data, shas)):
        if blob is not None and sha is not None and hashlib.sha256(blob).hexdigest() != sha:
            mask[i] = True
    # qa and clean_meta.sources aligned (a missing list counts as empty, as in _check_row)
    qa = batch.column("qa")
    sources = _path(rows, "clean_meta", "sources")
    lengths = [pc.fill_null(pc.list_value_length(a), 0) for a in (qa, sources)]
    mask |= np.array(pc.not_equal(*lengths).to_numpy(zero_copy_only=False), dtype=bool)
    mask |= _unknown_names(sources, "family", frozenset(families))
    if config != CONFIG_REJECTED:
        mask |= _unknown_names(qa, "verifier", KNOWN_VERIFIERS)
    return mask


def _batch_rows(parquet: pq.ParquetFile) -> int:
    meta = parquet.metadata
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    per_row = size / meta.num_rows if meta.num_rows else 1
    return int(min(MAX_BATCH_ROWS, max(MIN_BATCH_ROWS, BATCH_BYTES // max(per_row, 1))))


def validate_folder(folder: Path, *, exhaustive: bool = False) -> list[str]:
    """Every problem found in a built dataset folder, one line each; empty when the folder is clean.

    ``exhaustive`` runs jsonschema on every row instead of only on the rows the column-wise
    evaluation of the schema finds failing; the problems are the same either way."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return [f"{folder}: not a folder"]
    published, problems = _check_layout(folder)
    header, text, readme_problems = _check_readme(folder)
    problems.extend(readme_problems)
    if header is not None:
        problems.extend(_check_links(text, published))
    shards_by_config, measured = {}, {}
    # Each config's images, its rows repeating one named once they are read (``ImagesSeen``).
    families = header_families(header)  # a family the build's recipe added is known (the card records the recipe)
    with ImagesSeen() as images:
        for config in CONFIGS:
            shards, name_problems = _check_shard_names(folder, config, published)
            shards_by_config[config] = shards
            problems.extend(name_problems)
            images.config_rows(config)
            problems.extend(_check_rows(config, shards, images, exhaustive, measured, families))
            problems.extend(images.config_done())
    if header is not None:
        expected = _expected_info(shards_by_config, measured)
        if expected is not None and header.get("dataset_info") != expected:
            # Said only from whole row groups read again: the sizes summed batch by batch are theirs
            # (``_batches``), and this is where a difference would show.
            expected = _expected_info(shards_by_config, {})
        if expected is not None:
            problems.extend(_check_dataset_info(header, expected))
    return problems


def _check_rows(config: str, shards: list[Path], images: "ImagesSeen", exhaustive: bool,
                measured: dict[Path, tuple[int, int]], families: Families) -> Iterator[str]:
    """Every problem in the rows of ``config``'s shards, in row order (but the rows repeating an
    image, which ``images.config_done()`` names after them). Each shard's footer is read
    once, for its schema and then its rows; rows are read one row group at a time, and each shard's
    row count and Arrow size (``info.arrow_bytes``) are put in ``measured`` on the way, so the
    ``dataset_info`` check does not read the shard again."""
    for shard in shards:
        label = f"{config}/{shard.name}"
        try:
            parquet = open_parquet(shard)
            schema = parquet.schema_arrow
        except Exception as exc:
            yield f"{label}: not a readable parquet file ({exc})"
            continue
        schema_problems = _check_schema(config, schema, label)
        yield from schema_problems
        if schema_problems:
            continue
        try:
            check_row_groups(shard, parquet)
        except ShardTooLargeError as exc:
            yield f"{label}: {exc}; its rows are not read"
            continue
        yield from _check_shard_rows(config, parquet, shard, label, images, exhaustive, measured, families)


# An image_sha256 of this many bytes (64 hex digits, or anything else that long) is checked for
# repeats in numpy (``spill.Repeats``); a null is not checked, any other value (malformed, which
# the row's own check names) through a SpillMap.
_SHA_BYTES = 64


class ImagesSeen:
    """The images of a folder's or a Hub revision's rows, for "one row per image in each config",
    a config at a time: ``config_rows(config)``, then each shard's rows (``_check_shard_rows``:
    ``shard`` places them, ``add`` records their images), then ``config_done()`` names each row
    that repeats an image of the config, with the image's first row, in row order. An image_sha256 of _SHA_BYTES is
    recorded in a ``spill.Repeats`` (numpy, at the end); any other non-null value is checked as
    its row comes (``first_seen``: a SpillMap of the folder). A context manager."""

    def __init__(self):
        self._odd = SpillMap()
        self._repeats: Optional[Repeats] = None
        self._config = ""
        self._starts: list[tuple[int, str]] = []  # (position of a shard's first row, its label)
        self._next = 0

    def config_rows(self, config: str) -> None:
        """The rows of ``config`` come next."""
        self._drop_repeats()
        self._config, self._starts, self._next = config, [], 0
        self._repeats = Repeats(_SHA_BYTES)

    def shard(self, label: str, rows: int) -> int:
        """The next shard's ``rows`` rows come (``label`` names them): the position of its first."""
        start = self._next
        self._starts.append((start, label))
        self._next += rows
        return start

    def add(self, keys: np.ndarray, positions: np.ndarray) -> None:
        self._repeats.add(keys, positions)

    def first_seen(self, sha: str, where: str) -> Optional[str]:
        """Where the image of a malformed ``sha`` had its row in this config, or None (first)."""
        return self._odd.first_seen(f"{self._config}/{sha}", where)

    def config_done(self) -> Iterator[str]:
        """The config's rows that repeat an image of it, in row order."""
        firsts = [start for start, _ in self._starts]

        def where(position: int) -> str:
            start, label = self._starts[bisect.bisect_right(firsts, position) - 1]
            return f"{label} row {position - start}"

        try:
            for position, first in self._repeats.repeats():
                yield f"{where(position)} field image_sha256: image already has a row ({where(first)})"
        finally:
            self._drop_repeats()

    def _drop_repeats(self) -> None:
        if self._repeats is not None:
            self._repeats.close()
            self._repeats = None

    def close(self) -> None:
        self._drop_repeats()
        self._odd.close()

    def __enter__(self) -> "ImagesSeen":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


def _batches(parquet: pq.ParquetFile, shard: Path, measured: dict[Path, tuple[int, int]]) -> Iterator[pa.RecordBatch]:
    """The shard's rows in batches, and its Arrow size (what the card counts: a reader's whole row
    groups) put in ``measured``.

    The size is the sum of the batches' sizes where no batch holds a validity bitmap (no null
    anywhere in the row group): ``nbytes`` counts the byte ranges an array refers to (offsets as
    one per value, data, fixed-width values), which add up over consecutive batches to the whole
    row group's, and a reader leaves out a bitmap where nothing is null. A bitmap's bytes do not
    add up (each batch rounds its own to a byte), so a row group with one is read again a column
    at a time (``row_group_nbytes``). Memory holds a batch, not a column of a row group (up to 43
    MB of the writer's 100 MB: the ``qa`` column of a 1M-QA build)."""
    batch_rows, total = _batch_rows(parquet), 0
    for group in range(parquet.num_row_groups):
        summed, exact = 0, True
        for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=[group]):
            if exact:
                exact = not any(_has_validity(column) for column in batch.columns)
                summed += batch.nbytes
            yield batch
        total += summed if exact else row_group_nbytes(parquet, group)
    measured[shard] = (parquet.metadata.num_rows, total)


def _has_validity(array: pa.Array) -> bool:
    """Whether ``array`` or any array inside it has a validity bitmap (or is of a type whose
    batches are not known to add up, which counts as having one)."""
    return any(inner.buffers()[0] is not None or not (is_nested(inner.type) or _adds_up(inner.type))
               for inner in nested_arrays(array))


def _adds_up(kind: pa.DataType) -> bool:
    return (pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind)
            or pa.types.is_large_binary(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind))


def _check_shard_rows(config: str, parquet: pq.ParquetFile, shard: Path, label: str, images: ImagesSeen,
                      exhaustive: bool, measured: dict[Path, tuple[int, int]], families: Families) -> Iterator[str]:
    """The problems of one shard's rows; a row's family must be one of ``families`` (the card's).
    Each row's image is recorded in ``images`` (a malformed image_sha256 repeated is named here,
    after the row's other problems; a well-formed one by ``images.config_done()``)."""
    base = images.shard(label, parquet.metadata.num_rows)
    row_index = 0
    for batch in _batches(parquet, shard, measured):
        suspects = np.ones(batch.num_rows, dtype=bool) if exhaustive else _suspect_rows(config, batch, families)
        shas = batch.column("image_sha256")
        fixed = pc.fill_null(pc.equal(pc.binary_length(shas), _SHA_BYTES), False).to_numpy(zero_copy_only=False)
        odd = ~fixed & shas.is_valid().to_numpy(zero_copy_only=False)
        if fixed.any():
            chosen = (shas if fixed.all() else shas.filter(pa.array(fixed))).cast(pa.binary(_SHA_BYTES))
            keys = np.frombuffer(chosen.buffers()[1], dtype=f"S{_SHA_BYTES}")[chosen.offset:chosen.offset + len(chosen)]
            images.add(keys, base + row_index + np.flatnonzero(fixed))
        for i in np.flatnonzero(suspects | odd).tolist():
            where = f"{label} row {row_index + i}"
            if suspects[i]:
                yield from _check_row(config, batch.slice(i, 1).to_pylist()[0], where, families)
            if odd[i]:
                earlier = images.first_seen(shas[i].as_py(), where)
                if earlier is not None:
                    yield f"{where} field image_sha256: image already has a row ({earlier})"
        row_index += batch.num_rows
