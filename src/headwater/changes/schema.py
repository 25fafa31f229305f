"""The change-row schema of the Spark pipeline, shared by the source, transforms and sinks.

One DataFrame carries the changes of many tables, so row images are JSON strings (object
of column name to value, rendered as everywhere in headwater: docs/formats.md, "binlog dump
output" values: DECIMAL as a string, bytes as ``{"base64": ...}``, dates ISO 8601, TIME as
``[-]HH:MM:SS[.ffffff]``). :func:`headwater.spark.views.table_changes` turns one table's
images back into typed columns.

=============== ========= =============================================================
column          type      meaning
=============== ========= =============================================================
source          string    the reader task (source) name
database        string    database of the changed table
table           string    table name (empty for database-level DDL)
op              string    insert, update, delete, read (snapshot) or ddl
ts_us           long      commit timestamp, microseconds since the epoch
commit_ts       timestamp the same instant as a timestamp
change_id       int       position: grows when the source server changes (failover)
file_num        int       position: binlog file number
offset          long      position: offset of the transaction's first event in the file
event_index     int       position: index of the event within the transaction
gtid            string    the transaction's GTID ("" when none)
txn_id          string    the GTID, or FILE_NUM:OFFSET of the transaction
sequence        long      orders all changes of a source: store record seq << 24 | row
key             string    JSON object of the primary key values (null: no known key)
before          string    JSON object: the row before (null for insert)
after           string    JSON object: the row after (null for delete)
schema_version  long      schema history version in force
sql             string    the statement, for ddl
before_key      string    JSON object of the primary key values in ``before`` when an
                          update changed them (null otherwise: the key is ``key``)
=============== ========= =============================================================

The Arrow schema (:data:`CHANGE_ARROW_SCHEMA`) and the Spark schema
(:data:`CHANGE_SCHEMA_DDL`, :func:`change_schema`) describe the same columns in the same
order; :func:`change_row_values` gives one :class:`~headwater.changes.ChangeRow` as a tuple
in that order.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import orjson

from headwater.binlog.dump import json_default
from headwater.changes import ChangeRow

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql.types import StructType

__all__ = [
    "CHANGE_COLUMNS",
    "CHANGE_SCHEMA_DDL",
    "before_key",
    "change_arrow_schema",
    "change_row_values",
    "change_schema",
    "image_json",
]

CHANGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("source", "string"),
    ("database", "string"),
    ("table", "string"),
    ("op", "string"),
    ("ts_us", "bigint"),
    ("commit_ts", "timestamp"),
    ("change_id", "int"),
    ("file_num", "int"),
    ("offset", "bigint"),
    ("event_index", "int"),
    ("gtid", "string"),
    ("txn_id", "string"),
    ("sequence", "bigint"),
    ("key", "string"),
    ("before", "string"),
    ("after", "string"),
    ("schema_version", "bigint"),
    ("sql", "string"),
    ("before_key", "string"),
)

#: The schema as a Spark DDL string (``DataSource.schema()`` may return it as is).
CHANGE_SCHEMA_DDL = ", ".join(f"`{name}` {kind}" for name, kind in CHANGE_COLUMNS)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def change_schema() -> StructType:
    """The Spark ``StructType`` of change rows (built without a running session)."""
    from pyspark.sql import types as T

    kinds = {
        "string": T.StringType(),
        "bigint": T.LongType(),
        "int": T.IntegerType(),
        "timestamp": T.TimestampType(),
    }
    return T.StructType([T.StructField(name, kinds[kind], True) for name, kind in CHANGE_COLUMNS])


def change_arrow_schema() -> pyarrow.Schema:
    """The Arrow schema of change rows (timestamps in microseconds, UTC)."""
    import pyarrow as pa

    kinds = {
        "string": pa.string(),
        "bigint": pa.int64(),
        "int": pa.int32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([(name, kinds[kind]) for name, kind in CHANGE_COLUMNS])


def image_json(image: dict[str, Any] | None) -> str | None:
    """A row image (or key) as the JSON text the pipeline carries."""
    if image is None:
        return None
    try:
        return orjson.dumps(image, default=json_default).decode()
    except TypeError:  # strings holding undecodable bytes (surrogate escapes)
        from headwater.binlog.dump import render_json

        return render_json(image).decode()[:-1]


def before_key(change: ChangeRow) -> dict[str, Any] | None:
    """The key values in ``before`` when an update changed them, else None."""
    key, before = change.key, change.before
    if change.op != "update" or not key or before is None or any(k not in before for k in key):
        return None
    old = {k: before[k] for k in key}
    return None if old == key else old


def change_row_values(change: ChangeRow) -> tuple[Any, ...]:
    """``change`` as a tuple in :data:`CHANGE_COLUMNS` order."""
    p = change.position
    return (
        change.source,
        change.database,
        change.table,
        change.op,
        change.ts_us,
        _EPOCH + dt.timedelta(microseconds=change.ts_us),
        p.change_id,
        p.file_num,
        p.offset,
        p.event_index,
        change.gtid,
        change.txn_id,
        change.sequence,
        image_json(change.key),
        image_json(change.before),
        image_json(change.after),
        change.schema_version,
        change.sql,
        image_json(before_key(change)),
    )
