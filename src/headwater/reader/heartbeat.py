"""Heartbeat rows written on the source, and the end-to-end lag measured from them.

As in DBUS, a task writes one row into a table on the source at a fixed interval::

    INSERT INTO db.table (id, ts) VALUES (<reader server_id>, NOW(6))
        ON DUPLICATE KEY UPDATE ts = NOW(6)

in a session whose time zone is UTC, so ``ts`` is the UTC time of the write. When the row's
change arrives in the binlog stream the task decodes that one rows event (only the
heartbeat table is ever decoded) and the lag is ``now - ts``: everything between the
source's commit and the reader having the transaction in hand (server, network, reader).

The writer runs in its own thread with its own connection; its failures are logged and
counted and never stop the task.

Heartbeats also cut the stream into intervals, as DBUS counts rows per table between two
heartbeats: when a heartbeat's transaction is committed the task calls
:meth:`HeartbeatWriter.passed` with its time and the change log's next seq (every record
before it belongs to intervals that have ended). The last ``MARKS`` such marks are in the
task's status (``heartbeat_marks``: ``[ts_us, seq]`` pairs, oldest first); the HTTP server
counts the rows per table of each interval from the records' table lists
(``headwater.server.tablecounts``), so capture itself counts nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections import deque
from typing import Any

from headwater.binlog.constants import EVENT_HEADER
from headwater.binlog.events import DecodeContext, RowsEvent, parse_event
from headwater.binlog.framing import FormatDescription, RawEvent
from headwater.binlog.preflight import heartbeat_grant_problem
from headwater.config import HeartbeatConfig, HostConfig, SourceConfig
from headwater.reader.source import connect

__all__ = ["MARKS", "HeartbeatWriter", "heartbeat_times"]

log = logging.getLogger(__name__)

#: Heartbeat marks a task keeps (``MARKS - 1`` intervals between them).
MARKS = 13


def _raw(data: bytes) -> RawEvent:
    ts, tc, sid, _size, log_pos, flags = EVENT_HEADER.unpack_from(data)
    return RawEvent(None, ts, tc, sid, log_pos, flags, memoryview(data))


def heartbeat_times(
    pairs: list[tuple[bytes, bytes]], fde: FormatDescription | None, row_id: int
) -> list[int]:
    """The ``ts`` values (microseconds, UTC) of heartbeat row ``row_id`` in the given
    (TABLE_MAP, rows event) pairs; rows without the two columns are ignored."""
    ctx = DecodeContext(fde=fde)
    out: list[int] = []
    for table_map, rows_event in pairs:
        parse_event(_raw(table_map), ctx)
        ev = parse_event(_raw(rows_event), ctx)
        if not isinstance(ev, RowsEvent):
            continue
        rows: list[Any] = ev.rows
        for row in rows:
            image = row[1] if ev.kind == "update" else row
            # Columns by index: (id, ts) as the writer creates the table.
            values: dict[int, Any] = dict(zip(ev.columns_after, image, strict=False))
            ts = values.get(1)
            if values.get(0) != row_id or not isinstance(ts, dt.datetime):
                continue
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=dt.UTC)
            out.append(int(ts.timestamp() * 1_000_000))
    return out


class HeartbeatWriter:
    """Writes the heartbeat row every ``config.interval`` seconds until stopped."""

    def __init__(self, source: SourceConfig, config: HeartbeatConfig) -> None:
        self.source = source
        self.config = config
        self.row_id = source.server_id
        self.host: HostConfig = source.hosts[0]
        self.written = 0
        self.errors = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None
        self._checked: set[HostConfig] = set()
        self._warned: str | None = None  # the failure last logged (None: writes succeed)
        self._marks: deque[tuple[int, int]] = deque(maxlen=MARKS)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"headwater-heartbeat-{self.source.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _run(self) -> None:
        db, table = self.config.table.split(".", 1)
        sql = (
            f"INSERT INTO `{db}`.`{table}` (id, ts) VALUES (%s, NOW(6)) "
            "ON DUPLICATE KEY UPDATE ts = NOW(6)"
        )
        created = not self.config.create
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if self._conn is None:
                    self._conn = connect(self.source, self.host)
                    self._check_grants(self._conn)
                with self._conn.cursor() as cur:
                    if not created:
                        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
                        cur.execute(
                            f"CREATE TABLE IF NOT EXISTS `{db}`.`{table}` "
                            "(id INT UNSIGNED PRIMARY KEY, ts DATETIME(6) NOT NULL)"
                        )
                        created = True
                    cur.execute(sql, (self.row_id,))
                self.written += 1
                self._warned = None
            except Exception as e:  # never fatal: logged, counted, retried
                self.errors += 1
                error = f"{type(e).__name__}: {e}"
                if error != self._warned:  # once per distinct error, not every interval
                    log.warning("%s: heartbeat write failed: %s", self.source.name, error)
                self.last_error = self._warned = error
                self._close()
            self._stop.wait(max(0.0, self.config.interval - (time.monotonic() - started)))

    def _check_grants(self, conn: Any) -> None:
        """Warn once per host when the user may not write the heartbeat table."""
        if self.host in self._checked:
            return
        self._checked.add(self.host)
        try:
            problem = heartbeat_grant_problem(conn, self.config.table, create=self.config.create)
        except Exception as e:  # a check that fails must not stop the heartbeat
            log.debug("%s: heartbeat grants not checked: %s", self.source.name, e)
            return
        if problem is not None:
            log.warning("%s: %s", self.source.name, problem)

    def passed(self, ts_us: int, next_seq: int) -> None:
        """A heartbeat written at ``ts_us`` was committed; records from ``next_seq`` on
        come after it. (Called by the task's thread; read by the server's.)"""
        self._marks.append((ts_us, next_seq))

    def marks(self) -> list[list[int]]:
        """The last heartbeats passed, oldest first: ``[ts_us, next_seq]`` pairs."""
        return [[ts, seq] for ts, seq in list(self._marks)]

    def point_at(self, host: HostConfig) -> None:
        """Write to ``host`` from now on (the task failed over)."""
        if host != self.host:
            self.host = host
            self._close()
