"""Signal-table triggered re-snapshots (Debezium's ``debezium_signal``, headwater style).

A signal is a row inserted into a table on the source (default ``headwater.signal``)::

    CREATE TABLE headwater.signal (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL,
                                   data TEXT NULL);
    INSERT INTO headwater.signal VALUES ('resnap-1', 'snapshot', '{"tables": ["shop.orders"]}');

The reader captures it like any change (its filters must include the signal table). The
pipeline finds it in its change stream: :func:`watch_signals` takes a batch of change rows
(a DataFrame, or any iterable of change-row dicts / Spark Rows) and returns the snapshot
requests in it, in log order. Other signal types are ignored (logged). Acting on a
request in a pipeline that has already streamed is not exact yet (the sinks' per-shard
checkpoints would skip other tables' changes; docs/configuration.md, "Snapshots").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "SIGNAL_TABLE",
    "SIGNAL_TABLE_DDL",
    "SnapshotRequest",
    "signal_requests",
    "watch_signals",
]

log = logging.getLogger(__name__)

SIGNAL_TABLE = "headwater.signal"
SIGNAL_TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} (id VARCHAR(64) NOT NULL PRIMARY KEY,"
    " type VARCHAR(32) NOT NULL, data TEXT NULL)"
)


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """A ``snapshot`` signal: its id, the tables (``db.table``) and the change's sequence."""

    id: str
    tables: tuple[str, ...]
    sequence: int


def _get(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, dict) else getattr(row, name)


def signal_requests(rows: Iterable[Any], table: str = SIGNAL_TABLE) -> list[SnapshotRequest]:
    """The snapshot requests among change rows (inserts into ``table``), by sequence."""
    db, _, name = table.partition(".")
    out: list[SnapshotRequest] = []
    for row in rows:
        if _get(row, "database") != db or _get(row, "table") != name:
            continue
        if _get(row, "op") != "insert":
            continue
        after = _get(row, "after")
        image = orjson.loads(after) if isinstance(after, (str, bytes)) else dict(after or {})
        if image.get("type") != "snapshot":
            log.info("signal %s of type %r ignored", image.get("id"), image.get("type"))
            continue
        try:
            data = orjson.loads(image.get("data") or "{}")
            tables = tuple(str(t) for t in data["tables"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.warning('signal %s: data must be {"tables": ["db.table", ...]}', image.get("id"))
            continue
        out.append(SnapshotRequest(str(image.get("id")), tables, int(_get(row, "sequence"))))
    out.sort(key=lambda r: r.sequence)
    return out


def watch_signals(changes: Any, table: str = SIGNAL_TABLE) -> list[SnapshotRequest]:
    """The snapshot requests in a batch of change rows: a Spark DataFrame (filtered on
    the executors, only signal rows reach the driver) or an iterable of rows."""
    if hasattr(changes, "filter") and hasattr(changes, "collect"):
        from pyspark.sql import functions as F

        db, _, name = table.partition(".")
        changes = changes.filter(
            (F.col("database") == db) & (F.col("table") == name) & (F.col("op") == "insert")
        ).collect()
    return signal_requests(changes, table)
