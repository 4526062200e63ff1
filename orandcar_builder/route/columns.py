"""The rows of a window of decisions made a column at a time: ``RowPlan.to_row``'s values, as Arrow.

``RoutePlan.rows_of`` makes a dict per decision and a RowPlan (lists of dicts) per image, and the
writer then turns those back into Arrow (``pa.Table.from_pylist``): at 200k QA that was 4.5 s of
CPU for RS_think, most of the write stage. Here the same values are made from the decisions'
columns by Arrow compute and ``from_arrays`` (1.05 s for RS_think, its image reads included): per config, a
table of every column of the row but the image's bytes (``image_sha256``, ``qa``, ``clean_meta``),
one row per image, in the RowPlans' order; the writer adds the image bytes it reads
(``ConfigWriter.write_columns``). The values are those ``rows.qa_entries`` / ``plan._QA_BUILDERS``
and ``RowPlan.add`` give, field for field (a test compares every row and every chunk's Arrow size
with the dict rows'):

- ``think``, ``answer`` (the accepted text), ``verifier`` and ``wrong_vlm``: a null is ""; the
  other QA values as they are (``reason`` may be null); ``org_answer``: the first reference;
- a source: the record's ``source`` fields, then ``family``, ``references`` and ``options`` (a
  null list is an empty one);
- the actions: each record's actions (a null list is none) as ``"<action>:<item id>"``.

Each row also carries the characters of its QA values (``len(str(value))``: a null counts 4, as
"None") and its QA count, which the writer's chunk and shard bounds need (``writer._row_bytes``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..parquetio import nested_arrays
from ..vocab import ACCEPTED, CONFIG_ROUTE

# What ``len(str(None))`` counts for a null QA value.
_NULL_CHARS = len(str(None))


@dataclass(frozen=True)
class ConfigRows:
    """One config's rows of a window but their image bytes: ``table`` (``image_sha256``, ``qa``,
    ``clean_meta``: the config's schema without ``image``), and per row the characters of its QA
    values (``text``) and its QA items (``qa``)."""

    config: str
    table: pa.Table
    text: list
    qa: list
    bitmaps: bool = True  # whether an array of ``table`` has a validity bitmap (a slice of it may keep one)


@dataclass(frozen=True)
class RowBatch:
    """The rows of a window of decisions, one per image: each image's file (``paths``, its sha256
    in ``shas``, its file name in ``names``) and each config's rows (``configs``, in the order
    asked)."""

    paths: list
    shas: list
    names: list
    configs: tuple

    def __len__(self) -> int:
        return len(self.paths)


def _filled(array: pa.Array) -> pa.Array:
    """``array`` with its nulls as "" (``value or ""``)."""
    return pc.fill_null(array, "") if array.null_count else array


def _listed(array: pa.Array) -> pa.Array:
    """A list array with its nulls as empty lists (``list(value or ())``)."""
    if not array.null_count:
        return array
    lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(array) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pc.list_flatten(array), type=array.type)


def _as(array: pa.Array, kind: pa.DataType) -> pa.Array:
    return array if array.type == kind else array.cast(kind)


def _chars(array: pa.Array) -> np.ndarray:
    """``len(str(value))`` of each value of a string array (a null: 4)."""
    lengths = pc.utf8_length(array)
    if lengths.null_count:
        lengths = pc.fill_null(lengths, _NULL_CHARS)
    return lengths.to_numpy(zero_copy_only=False).astype(np.int64)


def _qa_values(route_to: str, column, references: pa.Array) -> dict[str, pa.Array]:
    """The QA entry's values of each record of route ``route_to``, by field name."""
    firsts = references.value_lengths()
    if firsts.null_count or pc.any(pc.equal(firsts, 0)).as_py():
        ids = column("id").to_pylist()
        bad = next(i for i, n in enumerate(firsts.to_pylist()) if not n)
        raise ValueError(f"item {ids[bad]}: a decision without a reference cannot make a row")
    reference = pc.list_element(references, 0)
    if route_to == ACCEPTED:
        return {"question": column("question"), "think": _filled(column("think")),
                "answer": _filled(column("accepted_text")), "org_answer": reference,
                "verifier": _filled(column("verifier"))}
    return {"question": column("question"), "answer": reference, "wrong_vlm": _filled(column("wrong_vlm")),
            "reason": column("reason")}


def _policies(policy: pa.Array, starts: np.ndarray, image_of: np.ndarray, ids) -> pa.Array:
    """Each image's policy (its first record's); ValueError naming the first record whose policy
    differs from its image's (``RowPlan.add``'s check)."""
    first = policy.take(pa.array(starts))
    spread = first.take(pa.array(image_of))
    same = pc.equal(policy, spread)
    if same.null_count:  # a null policy equals only a null one
        same = pc.fill_null(same, pc.and_(pc.is_null(policy), pc.is_null(spread)))
    if not pc.all(same).as_py():
        bad = same.to_pylist().index(False)
        raise ValueError(f"item {ids()[bad]}: cleaning policy differs within one image row")
    return first


def _actions(actions: pa.Array, item_ids: pa.Array, starts: np.ndarray, records: int) -> pa.Array:
    """Each image's actions: its records' actions, each as "<action>:<item id>", in order."""
    actions = _listed(actions)
    flat = pc.list_flatten(actions)
    owners = item_ids.take(pc.list_parent_indices(actions))
    if flat.null_count:
        flat = pc.fill_null(flat, str(None))
    if owners.null_count:
        owners = pc.fill_null(owners, str(None))
    joined = pc.binary_join_element_wise(flat, owners, ":")
    counts = np.zeros(records + 1, dtype=np.int64)
    np.cumsum(actions.value_lengths().to_numpy(zero_copy_only=False), out=counts[1:])
    offsets = counts[np.r_[starts, records]].astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), joined)


def row_batch(table: pa.Table, first: np.ndarray, schemas: dict) -> RowBatch:
    """The rows of the configs of ``schemas`` (config -> its Arrow schema, ``features(config)``'s;
    configs of one route) from ``table``, the decisions of a window in the rows' order
    (``RoutePlan.record_windows``: never empty), each with its image's ``first`` row; every
    image's decisions are in the window."""
    records = table.num_rows
    column = {name: table.column(name).combine_chunks() for name in table.column_names}.__getitem__
    starts = np.flatnonzero(np.r_[True, first[1:] != first[:-1]])
    per_image = np.diff(np.r_[starts, records])
    image_of = np.repeat(np.arange(len(starts)), per_image)
    offsets = pa.array(np.r_[starts, records].astype(np.int32))
    take_starts = pa.array(starts)
    item_ids = column("id")
    references = column("references")
    schema = next(iter(schemas.values()))
    meta_type = schema.field("clean_meta").type
    source_type = meta_type.field("sources").type.value_type
    source = column("source")
    if source.null_count:
        ids = item_ids.to_pylist()
        bad = source.is_null().to_pylist().index(True)
        raise ValueError(f"item {ids[bad]}: a decision without a source cannot make a row")
    # A row's source is the record's source, then its family, references and options over it.
    own = {field.name: source.field(field.name) for field in source.type}
    own.update(family=column("family"), references=references, options=_listed(column("options")))
    source_values = []
    for field in source_type:  # a field the decisions do not hold is null, as a dict without the key gives it
        values = own.get(field.name)
        source_values.append(pa.nulls(records, field.type) if values is None else _as(values, field.type))
    sources = pa.ListArray.from_arrays(offsets, pa.StructArray.from_arrays(source_values, fields=list(source_type)))
    policy = _policies(column("policy"), starts, image_of, item_ids.to_pylist)
    clean_meta = pa.StructArray.from_arrays(
        [policy, sources, _actions(column("actions"), item_ids, starts, records)], fields=list(meta_type))
    shas = column("image_sha256").take(take_starts)
    qa_counts = per_image.tolist()
    # The configs share a route, so their QA values (and each value's characters) are made once.
    by_name = _qa_values(CONFIG_ROUTE[next(iter(schemas))], column, references)
    chars_of: dict[str, np.ndarray] = {}
    rows = []
    for config, config_schema in schemas.items():
        qa_type = config_schema.field("qa").type
        unknown = [field.name for field in qa_type.value_type if field.name not in by_name]
        if unknown:
            raise ValueError(f"{config}: no decision column makes the QA field(s) {', '.join(unknown)}")
        names = [field.name for field in qa_type.value_type]
        qa = pa.ListArray.from_arrays(
            offsets, pa.StructArray.from_arrays([by_name[name] for name in names], fields=list(qa_type.value_type)),
            type=qa_type)
        for name in names:
            if name not in chars_of:
                chars_of[name] = _chars(by_name[name])
        text = np.add.reduceat(sum(chars_of[name] for name in names), starts).tolist()
        table = pa.Table.from_arrays([shas, qa, clean_meta], schema=_without_image(config_schema))
        rows.append(ConfigRows(config, table, text, qa_counts, _has_bitmap(table)))
    paths = column("image").take(take_starts).to_pylist()
    return RowBatch(paths=paths, shas=shas.to_pylist(), names=[os.path.basename(path) for path in paths],
                    configs=tuple(rows))


def _has_bitmap(table: pa.Table) -> bool:
    """Whether any array of ``table``, at any depth, has a validity bitmap."""
    return any(array.buffers()[0] is not None
               for column in table.columns for chunk in column.chunks for array in nested_arrays(chunk))


def _without_image(schema: pa.Schema) -> pa.Schema:
    return schema.remove(schema.get_field_index("image"))
