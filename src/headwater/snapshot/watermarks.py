"""Low and high watermarks, and reconciling a chunk with the change log between them.

**Watermarks** (DBLog; Debezium's incremental snapshots). A chunk is read as::

    START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY
    low  = binlog_snapshot_file/position   (MariaDB: the binlog position of this snapshot)
           else SHOW MASTER STATUS read just before                     (MySQL)
    SELECT ... WHERE lo <= key < hi ORDER BY key                        (no lock)
    COMMIT
    high = SHOW MASTER STATUS

On MariaDB ``low`` is exact: every transaction whose binlog events start before ``low`` is
visible to the SELECT and none at or after it. On MySQL it is the position read just before
the snapshot, which misses a transaction whose binlog write finished before that read
but whose engine commit came after the snapshot was taken (a window of microseconds
inside group commit); that is a documented limitation. ``high`` is the binlog's end once
the SELECT has finished, so every transaction committed before the read started lies
before ``high``.

**Caught up to high** (:func:`caught_up`). The reader stores a transaction as records
whose ``position`` is the binlog coordinate of the transaction's first event, and the
task's ``state.json`` holds the start of the last transaction it *processed* (stored or
filtered out), saved once the store acknowledged every record before it (the HTTP API
serves it as the task status's ``saved_position``). Let ``P`` be the larger of the log's
last record position and that state position (``SnapshotLog.processed`` of
:mod:`headwater.snapshot.changelog`, from the directory or over HTTP). The reader has
stored everything before ``high`` when either ``P >= high`` (transactions are processed in
binlog order), or no transaction starts in ``(P, high)``
in the source's binlog: ``SHOW BINLOG EVENTS`` from ``P`` finds no GTID event (a
transaction's first event) before ``high``. :func:`wait_caught_up` polls this (bounded,
raising :class:`SnapshotTimeout` naming both positions).

**The window.** The records of the window are those with ``low <= position < high``:
seq ``first(low) .. last(high)`` where ``first(p)`` is the first record at or after ``p``
and ``last(high) = first(high) - 1`` is the last record before ``high``.

**Reconciliation** (:func:`reconcile`, pure). The chunk's rows as read, then every change
of the window for the chunk's table in sequence order: insert, update or read puts the
after image at its key if the key is in the chunk's range and removes it otherwise (a key
that moved out of the range); the old key of an update that changed the key is removed;
a delete removes its key. With full row images the result for a key is the effect of its
last change in the window, else the row as read, so replaying changes the SELECT already
saw is harmless: the window may start anywhere at or before the visibility point. The
result is the chunk as of ``high``.

**Sequence rule** (:func:`read_sequence`). A change's sequence is ``seq << 24 | row`` with
``row < 2**23`` (records are bounded in bytes; an 8 MiB record holds well under 4M row
images). Snapshot rows of a chunk whose window ends at record ``S = last(high)`` get
``S << 24 | 0x800000 | wave``: above every change of records ``<= S``, below every change
of record ``S + 1`` and later, and distinct per wave (``wave < 2**23``), so a later wave's
rows are never ``<=`` a sink shard's checkpoint left by an earlier wave at the same ``S``.
Their position fields are ``high`` (change id of the log, binlog file number, offset,
event index 0), so the sinks look the table definition up as of ``high``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from headwater.changes.schema import image_json
from headwater.changes.sequence import sequence_of
from headwater.errors import HeadwaterError
from headwater.position import binlog_file_number

__all__ = [
    "READ_MARK",
    "Coordinate",
    "SnapshotTimeout",
    "caught_up",
    "chunk_membership",
    "master_status",
    "read_sequence",
    "reconcile",
    "snapshot_position",
    "wait_caught_up",
]

#: Bit set in the row part of a snapshot row's sequence.
READ_MARK = 0x800000
_GTID_EVENTS = frozenset({"Gtid", "Anonymous_Gtid"})


class SnapshotTimeout(HeadwaterError):
    """The reader did not store the source's changes up to a chunk's high watermark in time."""


@dataclass(frozen=True, order=True, slots=True)
class Coordinate:
    """A binlog coordinate: file number, offset (and the file's name, not compared)."""

    file_num: int
    offset: int
    file: str = ""

    @classmethod
    def of(cls, file: str, offset: int) -> Coordinate:
        return cls(binlog_file_number(file), int(offset), file)

    def key(self) -> tuple[int, int]:
        return (self.file_num, self.offset)

    def file_name(self, num: int) -> str:
        prefix, _, digits = self.file.rpartition(".")
        return f"{prefix}.{num:0{len(digits)}d}"

    def __str__(self) -> str:
        return f"{self.file}:{self.offset}"


def read_sequence(last_seq: int, wave: int) -> int:
    """The sequence of snapshot rows reconciled up to record ``last_seq`` (module
    docstring)."""
    if not 0 <= wave < READ_MARK:
        raise ValueError(f"wave {wave} out of range")
    return sequence_of(last_seq, READ_MARK | wave)


def master_status(conn: Any) -> Coordinate:
    """``SHOW MASTER STATUS`` (``SHOW BINARY LOG STATUS`` on MySQL 8.4)."""
    with conn.cursor() as cur:
        try:
            cur.execute("SHOW MASTER STATUS")
        except Exception:
            cur.execute("SHOW BINARY LOG STATUS")
        row = cur.fetchone()
    if row is None:
        raise HeadwaterError("the source has no binary log (SHOW MASTER STATUS is empty)")
    return Coordinate.of(str(row[0]), int(row[1]))


def snapshot_position(conn: Any) -> Coordinate | None:
    """MariaDB's ``binlog_snapshot_file/position`` inside a consistent snapshot, else None."""
    with conn.cursor() as cur:
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        values = {str(k).lower(): v for k, v in cur.fetchall()}
    file = values.get("binlog_snapshot_file")
    pos = values.get("binlog_snapshot_position")
    if not file or pos is None:
        return None
    return Coordinate.of(str(file), int(pos))


def _transaction_starts_between(conn: Any, start: tuple[int, int], high: Coordinate) -> bool:
    """Whether a transaction (a GTID event) other than the one at ``start`` begins at or
    after ``start`` and before ``high``."""
    file_num, offset = start
    with conn.cursor() as cur:
        while (file_num, offset) < high.key():
            name = high.file_name(file_num)
            cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(offset)} LIMIT 200", (name,))
            rows = cur.fetchall()
            for row in rows:
                here = (file_num, int(row[1]))
                if here >= high.key():
                    return False
                if str(row[2]) in _GTID_EVENTS and here != start:
                    return True
            if len(rows) == 200:
                offset = int(rows[-1][4])  # End_log_pos of the last one: the next event
            else:
                file_num, offset = file_num + 1, 4
    return False


def caught_up(log: Any, conn: Any, high: Coordinate) -> bool:
    """Whether the reader has stored every transaction before ``high`` (module docstring);
    ``log``: a :class:`~headwater.snapshot.changelog.SnapshotLog`."""
    p = log.processed()
    if p is None:
        return False
    if p >= high.key():
        return True
    return not _transaction_starts_between(conn, p, high)


def wait_caught_up(log: Any, conn: Any, high: Coordinate, timeout: float = 60.0) -> None:
    """Poll :func:`caught_up` every 20 ms until true; :class:`SnapshotTimeout` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not caught_up(log, conn, high):
        if time.monotonic() > deadline:
            raise SnapshotTimeout(
                f"the reader of {log.ref.where()} did not store the source's binlog up to"
                f" {high} within {timeout:.0f} s (it has processed up to {log.processed()});"
                " is the reader running?"
            )
        time.sleep(delay)
        delay = min(0.02, delay * 2)


def kid(key: dict[str, Any]) -> str:
    """A key's identity: its JSON text in key-column order."""
    text = image_json(key)
    assert text is not None
    return text


def chunk_membership(
    key_order: Any,
    conn: Any,
    keys: Iterable[dict[str, Any]],
    lo: tuple[Any, ...] | None,
    hi: tuple[Any, ...] | None,
) -> Callable[[dict[str, Any]], bool]:
    """``in_chunk(key)`` for ``keys``: whether each lies in the chunk ``[lo, hi)``, all
    classified by the source server in one go (``key_order``: a
    :class:`~headwater.snapshot.keys.KeyOrder`)."""
    bounds = [b for b in (lo, hi) if b is not None]
    wanted = 1 if lo is not None else 0
    found = {kid(key): tuple(key.values()) for key in keys}
    ids = list(found)
    where = key_order.classify([found[i] for i in ids], bounds, conn)
    inside = {i for i, n in zip(ids, where, strict=True) if n == wanted}
    return lambda key: kid(key) in inside


def reconcile(
    rows: dict[str, dict[str, Any]],
    changes: Iterable[Any],
    key_columns: tuple[str, ...],
    in_chunk: Callable[[dict[str, Any]], bool],
) -> dict[str, dict[str, Any]]:
    """Apply ``changes`` (ChangeRow-like: ``op``, ``before``, ``after``, ``sequence``, one
    table, any order) to ``rows`` (key id -> row image) in sequence order, keeping only keys
    for which ``in_chunk(key)`` holds (module docstring). Mutates and returns ``rows``."""
    for change in sorted(changes, key=lambda c: c.sequence):
        op = change.op
        if op == "delete":
            if change.before is not None:
                rows.pop(kid({c: change.before.get(c) for c in key_columns}), None)
            continue
        if op not in ("insert", "update", "read") or change.after is None:
            continue
        new_key = {c: change.after.get(c) for c in key_columns}
        new_id = kid(new_key)
        if (
            op == "update"
            and change.before is not None
            and all(c in change.before for c in key_columns)
        ):
            old_id = kid({c: change.before[c] for c in key_columns})
            if old_id != new_id:
                rows.pop(old_id, None)
        if in_chunk(new_key):
            merged = dict(rows.get(new_id) or {}) if op == "update" else {}
            merged.update(change.after)
            rows[new_id] = merged
        else:
            rows.pop(new_id, None)
    return rows
