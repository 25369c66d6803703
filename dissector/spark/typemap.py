"""Spark and Arrow types of the pairs table, derived from the column contract.

``dissector.schema.COLUMNS`` is the only list of columns; this module maps each
column *kind* to a type, so a column added there appears in Spark unchanged.

Every Spark column is nullable: a capture that fails to decode yields a flagged row
whose connection fields are unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from dissector.schema import COLUMNS, Column, Kind
from dissector.schema import arrow_type as schema_arrow_type

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

INFO_COLUMN = "_capture_info"
"""Decode-stage only: set on the one trailer row per capture, null on pair rows."""

TABLE_COLUMN = "_table"
"""Decode-stage only: which table a row belongs to (``pairs``, ``captures`` or an
analytics table's name), when the rows themselves go to Spark."""

CAPTURES_TABLE = "captures"
PAIRS_TABLE = "pairs"

# Spark's TimestampType holds microseconds; Arrow batches handed to Spark must use
# the same unit, so the contract's nanosecond times are floored to microseconds.
ARROW_TIMESTAMP = pa.timestamp("us", tz="UTC")


CAPTURE_INFO: tuple[Column, ...] = (
    Column("files", "str_list", "the files read as this capture, in order (a capture set)"),
    Column("size_bytes", "int", "bytes of the capture's files"),
    Column("pairs", "int", "pair rows decoded from it"),
    Column("failed", "bool", "decoding stopped with an error"),
    Column("error", "str", "why, when failed"),
    Column("decode_seconds", "float", "wall time the task spent on it"),
    Column("counters", "counter_map", "the stages' counters (packets, gaps, ...)"),
)


def arrow_type(kind: str) -> pa.DataType:
    # A list's item is called "element", as in Parquet: the batches a task hands Spark
    # are then exactly the pairs Parquet file's (``dissector.table.frame.pairs_table``).
    return schema_arrow_type(kind, time_unit=ARROW_TIMESTAMP.unit, list_item="element")


def spark_type(kind: str) -> DataType:
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        DoubleType,
        LongType,
        MapType,
        StringType,
        TimestampType,
    )

    by_kind: dict[str, DataType] = {
        Kind.STR: StringType(),
        Kind.INT: LongType(),
        Kind.FLOAT: DoubleType(),
        Kind.TIMESTAMP: TimestampType(),
        Kind.STR_LIST: ArrayType(StringType(), containsNull=True),
        Kind.BOOL: BooleanType(),
        Kind.COUNTER_MAP: MapType(StringType(), LongType()),
    }
    try:
        return by_kind[kind]
    except KeyError:
        raise ValueError(f"column kind {kind!r} has no Spark type; add it here") from None


def pairs_arrow_schema(columns: tuple[Column, ...] = COLUMNS) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c.kind)) for c in columns])


def captures_arrow_schema() -> pa.Schema:
    """The captures table: ``capture`` then ``CAPTURE_INFO``, one row per capture file."""
    info = [pa.field(c.name, arrow_type(c.kind)) for c in CAPTURE_INFO]
    return pa.schema([pa.field("capture", pa.string()), *info])


def decoded_arrow_schema(extra: Sequence[pa.Field] = ()) -> pa.Schema:
    """The decode stage's rows when they go to Spark: ``TABLE_COLUMN``, the contract
    columns (set on pair rows, ``capture`` on every row), the trailer struct (set on
    the one ``captures`` row per capture file) and ``extra`` (one struct column per
    analytics table, set on that table's rows)."""
    info = pa.struct([pa.field(c.name, arrow_type(c.kind)) for c in CAPTURE_INFO])
    fields = [pa.field(TABLE_COLUMN, pa.string()), *pairs_arrow_schema()]
    return pa.schema([*fields, pa.field(INFO_COLUMN, info), *extra])


def pairs_spark_schema(columns: tuple[Column, ...] = COLUMNS) -> StructType:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(c.name, spark_type(c.kind), nullable=True) for c in columns])


def spark_schema(schema: pa.Schema) -> StructType:
    """An Arrow schema of this module as Spark's (every field nullable)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
