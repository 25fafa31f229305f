"""Signal-table triggered re-snapshots (Debezium's ``debezium_signal``, headwater style).

A signal is a row inserted into a table on the source (default ``headwater.signal``)::

    CREATE TABLE headwater.signal (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL,
                                   data TEXT NULL);
    INSERT INTO headwater.signal VALUES ('resnap-1', 'snapshot', '{"tables": ["shop.orders"]}');

The reader captures it like any change (its filters must include the signal table). A
running pipeline with a ``snapshot`` section finds it in its change stream and runs the
re-snapshot (:mod:`headwater.pipeline.runner` says how, and why it is exact);
:func:`signal_requests` / :func:`watch_signals` pick the requests out of change rows, in
log order. Other signal types are ignored (logged). :func:`send_signal` writes one (what
``headwater snapshot --signal`` does).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from headwater.connections import SourceConnection

__all__ = [
    "SIGNAL_TABLE",
    "SIGNAL_TABLE_DDL",
    "SnapshotRequest",
    "send_signal",
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


def send_signal(
    connection: SourceConnection,
    tables: Sequence[str],
    *,
    table: str = SIGNAL_TABLE,
    signal_id: str | None = None,
) -> str:
    """Insert a ``snapshot`` signal for ``tables`` into ``table`` on the source behind
    ``connection`` (a :class:`~headwater.connections.SourceConnection`), creating the
    database and table when missing; returns the signal's id."""
    db, _, name = table.partition(".")
    ref = f"`{db.replace('`', '``')}`.`{name.replace('`', '``')}`"
    ident = signal_id or f"snapshot-{uuid.uuid4().hex[:12]}"
    # No default database: the signal's may not exist yet.
    conn = dataclasses.replace(connection, database=None).connect_mysql(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db.replace('`', '``')}`")
            cur.execute(SIGNAL_TABLE_DDL.format(table=ref))
            cur.execute(
                f"INSERT INTO {ref} (id, type, data) VALUES (%s, 'snapshot', %s)",
                (ident, orjson.dumps({"tables": list(tables)}).decode()),
            )
    finally:
        conn.close()
    return ident
