"""A JSON Schema evaluated column by column over Arrow data: which rows would fail it.

``orandcar validate`` checks every row against its config's JSON Schema. Running jsonschema on
each row costs about 150 microseconds (the schema has some forty nodes), which made validation
the slowest stage of a build. This module compiles the same schema document into a function
that takes a batch of rows as Arrow arrays and returns a boolean mask of the rows jsonschema
would report, with pyarrow.compute kernels doing the work. ``validate`` then runs jsonschema
only on the masked rows, so every problem message still comes from jsonschema itself.

Only the keywords the dataset schemas use are compiled: ``type`` (object, array, string),
``properties``, ``required``, ``additionalProperties: false``, ``items``, ``minLength``,
``minItems``, ``pattern`` and ``enum`` of strings, plus annotations. A schema with anything else,
or whose shape does not fit the Arrow type, raises ``Unsupported`` and the caller checks every
row with jsonschema. The mask is exact, not merely a superset: tests compare it with jsonschema
row by row on random corruptions. The semantics it follows are those of jsonschema on the JSON
form of a row (``validate.row_as_json``):

- a null anywhere fails ``type`` (no schema here allows null);
- ``minLength`` counts code points (``pc.utf8_length``); a binary column with
  ``contentEncoding: base64`` is measured as its base64 text, 4 * ceil(len / 3) characters;
- ``pattern`` is Python's ``re.search``, applied to each distinct value, so the result is
  Python's regex semantics, not RE2's;
- ``enum`` compares strings for equality;
- ``required`` / ``additionalProperties``: a struct's fields are fixed by its Arrow type, so a
  required property missing from the type, or a field the schema does not allow, fails every
  non-null row.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Keywords that do not constrain a value.
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples",
                         "contentEncoding", "contentMediaType", "readOnly", "writeOnly", "deprecated"})
COMPILED = frozenset({"type", "properties", "required", "additionalProperties", "items", "minLength",
                      "minItems", "pattern", "enum"})

Mask = np.ndarray  # bool, one per row
Check = Callable[[pa.Array], Mask]


class Unsupported(ValueError):
    """The schema uses something this module does not compile; check rows with jsonschema."""


def compile_schema(schema: dict, arrow_type: pa.DataType) -> Check:
    """A function ``check(array) -> mask`` for arrays of ``arrow_type``: True where the JSON form of
    the value fails ``schema``. Raises Unsupported for schemas outside the compiled subset."""
    return _compile(schema, arrow_type, "#")


def _null_mask(array: pa.Array) -> Mask:
    if array.null_count == 0:
        return np.zeros(len(array), dtype=bool)
    return np.array(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def any_item(lists: pa.Array, check: Check) -> Mask:
    """Rows of ``lists`` with an item for which ``check`` (over ``pc.list_flatten(lists)``) is True.

    Items are mapped to rows with list_parent_indices, keeping only the parents of non-null
    lists: it also counts the values under a null list whose range is not empty (as
    ``pc.struct_field`` of a null struct leaves them), which list_flatten skips."""
    mask = np.zeros(len(lists), dtype=bool)
    values = pc.list_flatten(lists)
    if len(values):
        bad = check(values)
        if bad.any():
            parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
            if lists.null_count:
                parents = parents[~_null_mask(lists)[parents]]
            mask[parents[bad]] = True
    return mask


def _bool(array) -> Mask:
    """A pyarrow boolean result as numpy, null counted as True (the value is missing)."""
    return np.array(pc.fill_null(array, True).to_numpy(zero_copy_only=False), dtype=bool)


def _compile(schema: dict, arrow_type: pa.DataType, where: str) -> Check:
    if not isinstance(schema, dict):
        raise Unsupported(f"{where}: schema is not an object")
    unknown = set(schema) - ANNOTATIONS - COMPILED
    if unknown:
        raise Unsupported(f"{where}: keywords {sorted(unknown)} are not compiled")
    kind = schema.get("type")
    checks: list[Check] = []
    if kind == "object":
        checks.append(_object(schema, arrow_type, where))
    elif kind == "array":
        checks.append(_array(schema, arrow_type, where))
    elif kind == "string":
        checks.append(_string(schema, arrow_type, where))
    elif kind is not None:
        raise Unsupported(f"{where}: type {kind!r} is not compiled")
    else:
        misplaced = set(schema) & {"properties", "required", "additionalProperties", "items", "minLength",
                                   "minItems", "pattern"}
        if misplaced:
            raise Unsupported(f"{where}: {sorted(misplaced)} without a type are not compiled")
    if "enum" in schema:
        checks.append(_enum(schema["enum"], arrow_type, where))

    def check(array: pa.Array) -> Mask:
        mask = _null_mask(array)
        for sub in checks:
            mask |= sub(array)
        return mask

    return check


def _object(schema: dict, arrow_type: pa.DataType, where: str) -> Check:
    if not pa.types.is_struct(arrow_type):
        raise Unsupported(f"{where}: type object over arrow {arrow_type}")
    properties = schema.get("properties", {})
    names = [arrow_type.field(i).name for i in range(arrow_type.num_fields)]
    additional = schema.get("additionalProperties", True)
    if additional not in (True, False):
        raise Unsupported(f"{where}: additionalProperties other than true/false is not compiled")
    # Every non-null row has exactly the struct's fields, so these hold for all rows or for none.
    always_fails = (any(name not in names for name in schema.get("required", ()))
                    or (additional is False and any(name not in properties for name in names)))
    children = [(name, _compile(sub, arrow_type.field(name).type, f"{where}/properties/{name}"))
                for name, sub in properties.items() if name in names]

    def check(array: pa.Array) -> Mask:
        if always_fails:
            return ~_null_mask(array)
        mask = np.zeros(len(array), dtype=bool)
        for name, child in children:
            # struct_field gives null where the parent is null; those rows already fail ``type``.
            mask |= child(pc.struct_field(array, name))
        return mask

    return check


def _array(schema: dict, arrow_type: pa.DataType, where: str) -> Check:
    if not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        raise Unsupported(f"{where}: type array over arrow {arrow_type}")
    min_items = schema.get("minItems")
    # A non-object ``items`` (a tuple form) is refused by _compile as "not an object".
    items = _compile(schema["items"], arrow_type.value_type, f"{where}/items") if "items" in schema else None

    def check(array: pa.Array) -> Mask:
        mask = np.zeros(len(array), dtype=bool)
        if min_items is not None:
            mask |= _bool(pc.less(pc.list_value_length(array), min_items)) & ~_null_mask(array)
        if items is not None:
            mask |= any_item(array, items)
        return mask

    return check


def _string(schema: dict, arrow_type: pa.DataType, where: str) -> Check:
    base64 = schema.get("contentEncoding") == "base64"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        if base64:
            raise Unsupported(f"{where}: base64 over a string column is not compiled")
    elif pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        if not base64:
            raise Unsupported(f"{where}: type string over binary without contentEncoding base64")
        if "pattern" in schema:
            raise Unsupported(f"{where}: pattern over base64 text is not compiled")
    else:
        raise Unsupported(f"{where}: type string over arrow {arrow_type}")
    min_length = schema.get("minLength")
    pattern = re.compile(schema["pattern"]) if "pattern" in schema else None

    def check(array: pa.Array) -> Mask:
        mask = np.zeros(len(array), dtype=bool)
        present = ~_null_mask(array)
        if min_length is not None:
            if base64:
                size = pc.binary_length(array)
                length = pc.multiply(pc.divide(pc.add(size, 2), 3), 4)  # integer division
            else:
                length = pc.utf8_length(array)
            mask |= _bool(pc.less(length, min_length)) & present
        if pattern is not None:
            distinct = pc.unique(array).to_pylist()
            failing = [value for value in distinct if value is not None and not pattern.search(value)]
            if failing:
                mask |= _bool(pc.is_in(array, value_set=pa.array(failing, type=arrow_type))) & present
        return mask

    return check


def _enum(values: list, arrow_type: pa.DataType, where: str) -> Check:
    if not (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)):
        raise Unsupported(f"{where}: enum over arrow {arrow_type} is not compiled")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise Unsupported(f"{where}: only an enum of strings is compiled")
    value_set = pa.array(values, type=arrow_type)

    def check(array: pa.Array) -> Mask:
        return ~_bool(pc.is_in(array, value_set=value_set)) & ~_null_mask(array)

    return check
