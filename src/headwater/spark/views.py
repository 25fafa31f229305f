"""Typed views of one table's changes: :func:`table_changes`.

Change rows carry row images as JSON text (schema.py) because one DataFrame holds many
tables. ``table_changes(df, "db.table", schema=...)`` keeps one table's row changes (DDL
dropped) and parses ``before``/``after`` into structs whose fields have the table's own
column types, from a :class:`~headwater.schema.model.TableDef` (the table's *current*
definition when given a schema history file or task directory).

Layout: ``source, database, table, op, ts_us, commit_ts, change_id, file_num, offset,
event_index, gtid, txn_id, sequence, schema_version, before, after``; ``before`` and
``after`` are structs with one field per column, in table order (null for the image an
operation lacks). Column types (:func:`spark_type`):

==================================== ===================================================
MySQL / MariaDB                      Spark
==================================== ===================================================
TINYINT, SMALLINT, MEDIUMINT, INT    int (INT UNSIGNED: bigint)
BIGINT                               bigint (BIGINT UNSIGNED: decimal(20,0))
DECIMAL(p,s)                         decimal(p,s) (p > 38: string, exact text)
FLOAT, DOUBLE                        double (FLOAT is the exact widened 4-byte value)
BIT(n)                               bigint (n = 64: decimal(20,0))
YEAR                                 int
DATE                                 date
DATETIME                             timestamp_ntz (fractions kept)
TIMESTAMP                            timestamp (an instant, UTC)
TIME                                 interval day to second (negative, over 24 h allowed)
CHAR, VARCHAR, TEXT, ENUM, JSON      string (JSON as its text)
SET                                  array<string>
BINARY, VARBINARY, BLOB, GEOMETRY,
INET4/6, UUID                        binary
VECTOR                               array<double>
==================================== ===================================================

Values that have no typed form become NULL in the view (the JSON column keeps them):
zero or partly zero dates (``0000-00-00``), and text holding bytes invalid in its charset
is the JSON text ``{"undecodable_text_base64": ...}``. With MINIMAL row images a column
the server did not log is NULL too; a column the definition lacks is not in the struct.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.errors import ConfigError
from headwater.schema.model import BINARY_TYPES, Column, TableDef, parse_column_type
from headwater.spark.logaccess import load_history

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn, DataFrame
    from pyspark.sql.types import DataType

__all__ = ["META_COLUMNS", "spark_type", "table_changes"]

#: The change-row columns a view keeps, before ``before`` and ``after``.
META_COLUMNS = (
    "source",
    "database",
    "table",
    "op",
    "ts_us",
    "commit_ts",
    "change_id",
    "file_num",
    "offset",
    "event_index",
    "gtid",
    "txn_id",
    "sequence",
    "schema_version",
)

_SMALL_INTS = frozenset({"tinyint", "smallint", "mediumint"})
_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "json"})
_BINARY = BINARY_TYPES | {"geometry", "point", "linestring", "polygon", "multipoint"}
_BINARY |= {"multilinestring", "multipolygon", "geometrycollection"}
# TIME text: [-]HH:MM:SS[.ffffff], hours may exceed 24.
_TIME = r"^(-?)(\d+):(\d\d):(\d\d(?:\.\d+)?)$"


def spark_type(column: Column) -> DataType:
    """The Spark type of ``column`` in a typed view (table in the module docstring)."""
    from pyspark.sql import types as T

    dt = column.data_type
    _base, args, _unsigned, _zerofill = parse_column_type(column.column_type)
    if dt in _SMALL_INTS or dt == "year":
        return T.IntegerType()
    if dt == "int":
        return T.LongType() if column.unsigned else T.IntegerType()
    if dt == "bigint":
        return T.DecimalType(20, 0) if column.unsigned else T.LongType()
    if dt == "decimal":
        precision, scale = int(args[0]), int(args[1])
        return T.DecimalType(precision, scale) if precision <= 38 else T.StringType()
    if dt in ("float", "double"):
        return T.DoubleType()
    if dt == "bit":
        return T.DecimalType(20, 0) if args and int(args[0]) > 63 else T.LongType()
    if dt == "date":
        return T.DateType()
    if dt == "datetime":
        return T.TimestampNTZType()
    if dt == "timestamp":
        return T.TimestampType()
    if dt == "time":
        return T.DayTimeIntervalType(T.DayTimeIntervalType.DAY, T.DayTimeIntervalType.SECOND)
    if dt == "set":
        return T.ArrayType(T.StringType())
    if dt == "vector":
        return T.ArrayType(T.DoubleType())
    if dt in _BINARY:
        return T.BinaryType()
    return T.StringType()


def _typed(value: SparkColumn, column: Column) -> SparkColumn:
    """``value`` (the column's JSON value as text) converted to :func:`spark_type`."""
    from pyspark.sql import functions as F, types as T

    kind = spark_type(column)
    dt = column.data_type
    if isinstance(kind, T.ArrayType):
        return F.from_json(value, kind)
    if isinstance(kind, T.BinaryType):
        return F.unbase64(F.get_json_object(value, "$.base64"))
    if isinstance(kind, T.DayTimeIntervalType):
        parts = [F.regexp_extract(value, _TIME, i) for i in (1, 2, 3, 4)]
        seconds = (
            parts[1].cast("decimal(18,6)") * 3600
            + parts[2].cast("decimal(18,6)") * 60
            + parts[3].cast("decimal(18,6)")
        ).cast("decimal(18,6)")
        interval = F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), seconds)
        matched = F.regexp_like(value, F.lit(_TIME))
        return F.when(matched & (parts[0] == "-"), -interval).when(matched, interval)
    if dt in ("date", "datetime", "timestamp"):
        return value.try_cast(kind)  # zero dates: NULL
    if isinstance(kind, T.StringType) and dt not in _TEXT:
        return value
    return value.cast(kind)


def _definition(schema: TableDef | str | os.PathLike[str], database: str, table: str) -> TableDef:
    if isinstance(schema, TableDef):
        if (schema.database, schema.table) != (database, table):
            raise ConfigError(
                f"the definition is of {schema.database}.{schema.table}", field="schema"
            )
        return schema
    path = Path(schema)
    if path.is_dir():
        path = path / "schema.jsonl"
    history = load_history(path)
    if history is None:
        raise ConfigError(f"{path} does not exist", field="schema")
    definition = history.table(database, table)
    if definition is None:
        raise ConfigError(f"{path} has no table {database}.{table}", field="schema")
    return definition


def table_changes(
    df: DataFrame, table: str, *, schema: TableDef | str | os.PathLike[str]
) -> DataFrame:
    """One table's changes from a change-row DataFrame, with typed ``before``/``after``.

    ``table`` is ``db.table``; ``schema`` a :class:`TableDef`, a ``schema.jsonl`` path or
    a reader task directory (the table's current definition). Raises ConfigError (field
    ``table`` or ``schema``) when the table is unknown. Works on batch and streaming
    DataFrames alike (it only filters and projects).
    """
    from pyspark.sql import functions as F, types as T

    database, dot, name = table.partition(".")
    if not dot or not database or not name:
        raise ConfigError(f"expected 'db.table', got {table!r}", field="table")
    definition = _definition(schema, database, name)
    text = T.StructType([T.StructField(c.name, T.StringType()) for c in definition.columns])

    def image(which: str) -> Any:
        parsed = F.from_json(F.col(which), text)
        fields = [_typed(parsed.getField(c.name), c).alias(c.name) for c in definition.columns]
        return F.when(F.col(which).isNotNull(), F.struct(*fields)).alias(which)

    rows = df.filter(
        (F.col("database") == database) & (F.col("table") == name) & (F.col("op") != "ddl")
    )
    return rows.select(*[F.col(c) for c in META_COLUMNS], image("before"), image("after"))
