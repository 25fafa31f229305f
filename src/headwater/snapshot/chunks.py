"""Reading one chunk: SELECT between watermarks, reconcile with the log, emit change rows.

:func:`run_chunk` is what a Spark task runs for one :class:`ChunkTask` (a small picklable
value): it opens its own source connection and its own view of the reader task's change
log (:mod:`headwater.snapshot.changelog`: the task directory read-only, or the reader's
HTTP API), reads the chunk as :mod:`headwater.snapshot.watermarks` describes (low, SELECT
with an unbuffered ``SSCursor``, high), waits until the reader has stored the binlog up to
high, reconciles the rows with the window's changes of the table, and yields
``("row", change-row tuple)`` for each row (op ``read``, columns of
:mod:`headwater.changes.schema`), then one ``("meta", dict)`` with the chunk's watermarks,
window and row count.

Values are normalized to what the binlog decoder gives for the same column
(docs/formats.md, "Decoded column values"), so a snapshot row and a streamed row of the
same state have the same JSON image: TIMESTAMP is read with the session in UTC and made
aware, FLOAT is rounded to its 4-byte value, BIT becomes an int and SET a tuple of names.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from headwater.changes import ChangeRow
from headwater.changes.schema import change_row_values
from headwater.connections import SourceConnection
from headwater.position import Position
from headwater.schema.model import TableDef
from headwater.snapshot.changelog import LogRef, SnapshotLog
from headwater.snapshot.chunking import range_predicate
from headwater.snapshot.keys import KeyOrder, decode_key
from headwater.snapshot.watermarks import (
    chunk_membership,
    kid,
    master_status,
    read_sequence,
    reconcile,
    snapshot_position,
    wait_caught_up,
)

__all__ = [
    "ChunkConnections",
    "ChunkTask",
    "connect_source",
    "run_chunk",
    "value_normalizer",
]

_F32 = struct.Struct("<f")


@dataclass(frozen=True, slots=True)
class ChunkTask:
    """One chunk to read (picklable). ``lo``/``hi`` are encoded keys (None: unbounded)."""

    chunk_id: str
    source: str
    #: where the change log is read: the task directory or the reader's API (token inside)
    log: LogRef
    connection: SourceConnection
    database: str
    table: str
    key: KeyOrder
    lo: list[Any] | None
    hi: list[Any] | None
    wave: int
    timeout_s: float = 60.0
    #: Bulk targets (:class:`headwater.sinks.base.BulkLoad`): when set, the chunk
    #: takes the bulk path of :mod:`headwater.snapshot.bulk`.
    bulk: tuple[Any, ...] = ()


def connect_source(options: SourceConnection, *, autocommit: bool = True) -> Any:
    """A PyMySQL connection to the source, session in UTC."""
    conn = options.connect_mysql(autocommit=autocommit)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    return conn


def value_normalizer(tdef: TableDef) -> list[Callable[[Any], Any] | None]:
    """Per column, a function from the PyMySQL value to the decoder's (None: as is)."""
    out: list[Callable[[Any], Any] | None] = []
    for col in tdef.columns:
        t = col.data_type
        if t == "timestamp":
            out.append(lambda v: v.replace(tzinfo=dt.UTC) if isinstance(v, dt.datetime) else v)
        elif t == "float":
            out.append(lambda v: _F32.unpack(_F32.pack(v))[0] if isinstance(v, float) else v)
        elif t == "bit":
            out.append(lambda v: int.from_bytes(v, "big") if isinstance(v, bytes) else v)
        elif t == "set":
            out.append(_set_normalizer(col.set_values or ()))
        else:
            out.append(None)
    return out


def _set_normalizer(names: tuple[str, ...]) -> Callable[[Any], Any]:
    order = {n: i for i, n in enumerate(names)}

    def norm(v: Any) -> Any:
        if isinstance(v, str):
            return tuple(v.split(",")) if v else ()
        if isinstance(v, (set, frozenset)):
            return tuple(sorted(v, key=lambda n: order.get(n, len(order))))
        return v

    return norm


class ChunkConnections:
    """Connections chunks reuse: a new PyMySQL connection costs tens of milliseconds of
    CPU (it builds an SSL context for TLS-if-offered), and a Python worker runs many
    chunks. One to the source (autocommit off), one per bulk target, taken from this
    process's idle ones; every chunk leaves them outside any transaction.
    :meth:`release` gives them back after success, :meth:`close` closes them (after a
    failure: a connection in an unknown state is not reused)."""

    def __init__(self) -> None:
        self._source: tuple[Any, Any] | None = None
        self._targets: dict[int, tuple[Any, Any]] = {}

    def source(self, options: SourceConnection) -> Any:
        if self._source is None:
            key = ("source", options)
            conn = _IDLE.take(key) or connect_source(options, autocommit=False)
            self._source = (key, conn)
        return self._source[1]

    def target(self, index: int, bulk: Any) -> Any:
        held = self._targets.get(index)
        if held is None:
            key = ("bulk", bulk.config.connection)
            held = self._targets[index] = (key, _IDLE.take(key) or bulk.connect())
        return held[1]

    def discard_target(self, index: int) -> None:
        held = self._targets.pop(index, None)
        if held is not None:
            _close_quietly(held[1])

    def _held(self) -> list[tuple[Any, Any]]:
        return [h for h in (self._source, *self._targets.values()) if h is not None]

    def release(self) -> None:
        for key, conn in self._held():
            _IDLE.give(key, conn)
        self._source, self._targets = None, {}

    def close(self) -> None:
        for _, conn in self._held():
            _close_quietly(conn)
        self._source, self._targets = None, {}


class _Idle:
    """Idle connections of this process, by kind and options (thread-safe, bounded)."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.idle: dict[Any, list[Any]] = {}
        self.lock = threading.Lock()

    def take(self, key: Any) -> Any:
        with self.lock:
            conns = self.idle.get(key)
            return conns.pop() if conns else None

    def give(self, key: Any, conn: Any) -> None:
        with self.lock:
            conns = self.idle.setdefault(key, [])
            if len(conns) < self.size:
                conns.append(conn)
                return
        _close_quietly(conn)


_IDLE = _Idle()


def _close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):  # already closed, or the server went away
        conn.close()


def run_chunk(task: ChunkTask, conns: ChunkConnections | None = None) -> Iterator[tuple[str, Any]]:
    """Read, reconcile and emit one chunk (module docstring), with the connections of
    ``conns`` (default: its own, closed at the end)."""
    tlog = task.log.open()
    own = ChunkConnections() if conns is None else None
    pool = own or conns
    assert pool is not None
    try:
        yield from _run(task, tlog, pool.source(task.connection), pool)
    except BaseException:
        pool.close()
        raise
    else:
        if own is not None:
            own.release()
    finally:
        tlog.close()


def _run(
    task: ChunkTask, tlog: SnapshotLog, conn: Any, conns: ChunkConnections
) -> Iterator[tuple[str, Any]]:
    import pymysql.cursors

    tdef = tlog.table_def(task.database, task.table)
    if tdef is None:
        raise ValueError(f"{task.database}.{task.table} is not in the schema history")
    if task.bulk:
        from headwater.snapshot.bulk import run_bulk_chunk

        line = task.bulk[0].line_sql(tdef)
        if line is not None:
            yield from run_bulk_chunk(task, tlog, conn, tdef, line, conns)
            return
    key_cols = tuple(c.name for c in task.key.columns)
    names = tdef.column_names
    lo, hi = decode_key(task.lo), decode_key(task.hi)
    where, params = range_predicate(key_cols, lo, hi)
    cols = ", ".join("`" + n.replace("`", "``") + "`" for n in names)
    ref = f"`{task.database}`.`{task.table}`"
    norm = value_normalizer(tdef)
    started = time.monotonic()
    before = master_status(conn)
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
    low = snapshot_position(conn) or before
    rows: dict[str, dict[str, Any]] = {}
    key_index = [names.index(k) for k in key_cols]
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(f"SELECT {cols} FROM {ref} WHERE {where}", params)
        for raw in cur.fetchall_unbuffered():
            values = [v if f is None or v is None else f(v) for f, v in zip(norm, raw, strict=True)]
            rows[kid({k: values[i] for k, i in zip(key_cols, key_index, strict=True)})] = dict(
                zip(names, values, strict=True)
            )
    conn.commit()
    high = master_status(conn)
    read_rows = len(rows)
    wait_caught_up(tlog, conn, high, task.timeout_s)
    change_id = tlog.change_id()
    first = tlog.first_seq_at(change_id, low)
    last = tlog.first_seq_at(change_id, high) - 1
    window = list(tlog.changes(first, last, {(task.database, task.table)}, task.source))
    in_chunk = chunk_membership(
        task.key,
        conn,
        ({c: ch.after.get(c) for c in key_cols} for ch in window if ch.after is not None),
        lo,
        hi,
    )
    reconcile(rows, window, key_cols, in_chunk)
    conn.commit()
    position = Position(change_id, high.file_num, high.offset, 0)
    version = tlog.version_at(position)
    sequence = read_sequence(last, task.wave)
    ts_us = time.time_ns() // 1000
    txn = f"snapshot:{task.chunk_id}"
    for image in rows.values():
        key = {k: image.get(k) for k in key_cols}
        yield "row", change_row_values(
            ChangeRow(task.source, task.database, task.table, "read", ts_us, position, "", txn,
                      sequence, key, None, image, version)
        )  # fmt: skip
    yield (
        "meta",
        {
            "chunk_id": task.chunk_id,
            "path": "rows",
            "low": str(low),
            "high": str(high),
            "high_key": [high.file_num, high.offset],
            "first_seq": first,
            "last_seq": last,
            "window_changes": len(window),
            "rows_read": read_rows,
            "rows": len(rows),
            "emitted": len(rows),
            "seconds": round(time.monotonic() - started, 3),
        },
    )
