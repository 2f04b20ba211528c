"""The plain lane's types: which fields a plain record has, and which Parquet or Arrow column
types hold them as the plain lane reads them.

Validation has two lanes that give the same rows (warehouse.validation): the plain lane reads
records already typed (by pyarrow's strict JSON reader, or by a Parquet file's own columns), the
JSON lane reads any record and names what is wrong with it. These are the plain lane's rules;
the statements that apply them run in the warehouse.
"""

from __future__ import annotations

import pyarrow as pa

# The fields of a plain record as pyarrow's JSON reader types them. It refuses a value of another
# JSON type (an integer id included) and a field given twice; relevance_scores, a map, which it
# cannot type, is read by DuckDB (sql/stg_plain_trace_fields.sql).
PLAIN_FIELDS = pa.schema(
    [
        ("trace_id", pa.string()),
        ("query_id", pa.string()),
        ("timestamp", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("relevant_ids", pa.list_(pa.string())),
        ("segment", pa.string()),
        ("variant", pa.string()),
        ("label_source", pa.string()),
    ]
)
# The fields `warehouse.validation._typed_fields` reads from Parquet or Arrow columns.
TYPED_FIELD_NAMES = frozenset(PLAIN_FIELDS.names) | {"relevance_scores"}
# What sql/stg_plain_trace_fields.sql raises for a record that is not plainly valid.
NOT_PLAIN = "not a plain piece"


def other_types(rows: pa.Table) -> list[pa.DataType]:
    """The types of the columns that are not fields of the plain lane."""
    return [field.type for field in rows.schema if field.name not in TYPED_FIELD_NAMES]


def is_string_type(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    )


def is_plain_type(kind: pa.DataType, plain: pa.DataType) -> bool:
    """Whether a column of type `kind` holds what the plain lane reads as `plain`: a string, or a
    list of strings."""
    if pa.types.is_list(plain):
        return bool(
            (pa.types.is_list(kind) or pa.types.is_large_list(kind))
            and is_string_type(kind.value_type)
        )
    return is_string_type(kind)


def is_map_of_grades(kind: pa.DataType) -> bool:
    """A map of string keys to integers or 32- or 64-bit floats, which to_json writes as
    numbers."""
    return bool(
        pa.types.is_map(kind)
        and is_string_type(kind.key_type)
        and (
            pa.types.is_integer(kind.item_type)
            or pa.types.is_float32(kind.item_type)
            or pa.types.is_float64(kind.item_type)
        )
    )
