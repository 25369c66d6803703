"""Spark and Arrow types of the pairs table, derived from the column contract.

``dissector.schema.COLUMNS`` is the only list of columns; this module maps each
column *kind* to a type, so a column added there appears in Spark unchanged.

Every Spark column is nullable: a capture that fails to decode yields a flagged row
whose connection fields are unknown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from dissector.schema import COLUMNS, Column, Kind
from dissector.schema import arrow_type as schema_arrow_type

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

INFO_COLUMN = "_capture_info"
"""Decode-stage only: set on the one trailer row per capture, null on pair rows."""

# Spark's TimestampType holds microseconds; Arrow batches handed to Spark must use
# the same unit, so the contract's nanosecond times are floored to microseconds.
ARROW_TIMESTAMP = pa.timestamp("us", tz="UTC")


CAPTURE_INFO: tuple[Column, ...] = (
    Column("size_bytes", "int", "bytes of the capture file"),
    Column("pairs", "int", "pair rows decoded from it"),
    Column("failed", "bool", "decoding stopped with an error"),
    Column("error", "str", "why, when failed"),
    Column("decode_seconds", "float", "wall time the task spent on it"),
    Column("counters", "counter_map", "the stages' counters (packets, gaps, ...)"),
)


def arrow_type(kind: str) -> pa.DataType:
    return schema_arrow_type(kind, time_unit=ARROW_TIMESTAMP.unit)


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


def decoded_arrow_schema() -> pa.Schema:
    """The decode stage's output: the contract columns plus the trailer struct."""
    info = pa.struct([pa.field(c.name, arrow_type(c.kind)) for c in CAPTURE_INFO])
    return pairs_arrow_schema().append(pa.field(INFO_COLUMN, info))


def pairs_spark_schema(columns: tuple[Column, ...] = COLUMNS) -> StructType:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(c.name, spark_type(c.kind), nullable=True) for c in columns])


def decoded_spark_schema() -> StructType:
    from pyspark.sql.types import StructField

    info = pairs_spark_schema(CAPTURE_INFO)
    return pairs_spark_schema().add(StructField(INFO_COLUMN, info, nullable=True))
