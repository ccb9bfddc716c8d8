"""The driver's DataFrame helpers both Spark sub-plans share: the envelope's Spark schema, arrival watermarks.

The keyed stage (:mod:`spark_udf.api`) and the search rules' ``mapInArrow`` sub-plan
(:mod:`spark_udf.search`) build their output schema from the rule set's
:class:`~spark_udf.schema.Envelope` and, in a backfill, give each row the largest event time
of every earlier row. Driver side only: this module imports pyspark.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark_udf.core import (
    PRIOR_COL,
    SEQ_COL,
    TimeReading,
    annotate_arrival,
    arrival_plan,
    segment_maxima,
)
from spark_udf.schema import Envelope

__all__ = ["types_by_name", "envelope_schema", "arrival_watermarks"]


def types_by_name(schema: T.StructType) -> dict[str, T.DataType]:
    return {f.dataType.simpleString(): f.dataType for f in schema.fields}


_SIMPLE = {
    "bigint": T.LongType(), "int": T.IntegerType(), "smallint": T.ShortType(), "tinyint": T.ByteType(),
    "double": T.DoubleType(), "float": T.FloatType(), "string": T.StringType(), "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(), "timestamp_ntz": T.TimestampNTZType(), "date": T.DateType(),
    "binary": T.BinaryType(),
}


def _dtype(typ: str, by_name: dict[str, T.DataType]) -> T.DataType:
    if typ in _SIMPLE:
        return _SIMPLE[typ]
    if typ in by_name:
        return by_name[typ]
    if "<" in typ:  # a nested type of a rule's output (APPROX_TOP_K's pairs), in Spark's DDL
        return T.DataType.fromDDL(typ)
    return T.StringType()


def envelope_schema(env: Envelope, by_name: dict[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(c, _dtype(t, by_name), True) for c, t in env.columns.items()])


def arrival_watermarks(frame: DataFrame, time_col: str, key_sets: list[tuple[str, ...]],
                       seg_cols: tuple[str, ...], per_input: bool = False, reading: TimeReading = TimeReading()):
    """Add arrival order and each row's largest earlier event time, per partition-key set.

    Arrival order: input segments (file blocks, ordered by file path then offset, when
    ``seg_cols`` names them; else Spark partitions in order), rows in order within each.
    ``per_input``: the first segment column names the row's input (named input streams), and
    a row's earlier rows are those of its own input (see :func:`~spark_udf.core.arrival_plan`).
    Two passes keep the input's partitioning: the first collects every segment's largest valid
    event time, the second computes running maxima from there. ``reading`` reads the times as
    the rules do (unit, future guard, and one clock for both passes).
    """
    rows = frame.mapInPandas(
        lambda it: segment_maxima(it, time_col, key_sets, seg_cols, reading), "seg string, ks int, mx bigint"
    ).collect()
    plan = arrival_plan(((r.seg, r.ks, r.mx) for r in rows), len(key_sets), per_input)
    schema = T.StructType(
        frame.schema.fields
        + [T.StructField(SEQ_COL, T.LongType())]
        + [T.StructField(f"{PRIOR_COL}_{i}", T.LongType()) for i in range(len(key_sets))]
    )
    out = frame.mapInPandas(lambda it: annotate_arrival(it, time_col, key_sets, seg_cols, plan, reading), schema)
    return out, plan
