"""The bulk path of a chunk: the source formats the rows, the target loads them, Python
moves bytes; only the chunk's window changes go through the sinks as change rows.

Used for a table when every sink of the snapshot has the bulk-load capability
(:func:`bulk_target`: a :class:`~headwater.sinks.base.BulkLoad`; today MySQL/MariaDB
sinks keeping zero dates, behind transforms that only rename databases and tables), every
column type of the table has a text form (``BulkLoad.line_sql``), and each target
accepts bulk loads (``LOAD DATA LOCAL``). Anything that edits row values (masks,
filters, computed columns, rules) keeps the general path of
:mod:`headwater.snapshot.chunks`.

A bulk chunk (:func:`run_bulk_chunk`), with the watermarks of
:mod:`headwater.snapshot.watermarks`::

    low   START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY
          SELECT COUNT(*), GROUP_CONCAT(<line> SEPARATOR LF) ... WHERE lo <= key < hi
          (a result the server truncated -- a count that does not match the lines -- is
          read again row by row, in the same transaction)
    high  COMMIT; SHOW MASTER STATUS
          wait until the reader stored the binlog up to high; the window's changes
    load  per target: DELETE the key range, LOAD DATA the lines, COMMIT (the range as of
          low; replaying it is harmless)
    emit  the window's changes *of keys in the chunk* (:func:`chunk_events`) as change
          rows, and the chunk's metadata

The driver writes the emitted changes, with the wave's catch-up, through the sinks
(:mod:`headwater.snapshot.runner`), after every load of the wave. Why the result equals
the general path's: the general path writes, per key of the chunk, the row as read with
the effect of the window's changes applied in sequence order (reconciliation). Here the
row as read is in the target after the load; the window's changes of the key follow in
sequence order through the sink, whose merge applies them the same way (full row images:
each change's image replaces the row; a replayed change the SELECT already saw rewrites
the same values). Changes are cut to the chunk's keys (an update moving a key out of the
range becomes a delete of the old key, one moving a key in becomes an insert of the new
one) because the loads are not ordered by sequence: a change applied to another chunk's
key could land before that chunk's load and be undone, or after it and undo it.

Sequences: window changes keep their log sequences, records in ``[first(low),
last(high)]``. A wave's chunks start after the previous wave has written, so
``first(low)`` is above every record the previous waves wrote and no shard checkpoint
skips them; the catch-up of the chunk's keys starts after ``last(high)``.

Costs: the source builds each chunk's text in memory (at most ``max_allowed_packet``
bytes, beyond which the chunk is read row by row), and all chunks of a wave run at once
(:mod:`headwater.snapshot.runner`), so ``wave_chunks`` bounds both the source's extra
memory and the concurrent loads on each target. The text passes through a temporary file
of the Spark task's machine (``LOAD DATA LOCAL`` sends a named file).

Difference from the general path: the rows of the load never pass through the sinks'
checkpoint table (loads are idempotent range replacements instead), and the snapshot's
``read`` rows do not exist as change rows, so nothing of a bulk chunk is seen by a
transform or a rule (the reason only renames qualify).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from headwater.changes import ChangeRow
from headwater.changes.schema import change_row_values
from headwater.schema.model import TableDef
from headwater.sinks.base import BulkLoad, Renames, bulk_load_of
from headwater.snapshot.chunking import range_predicate
from headwater.snapshot.keys import decode_key
from headwater.snapshot.watermarks import (
    chunk_membership,
    kid,
    master_status,
    snapshot_position,
    wait_caught_up,
)

__all__ = ["bulk_renames", "bulk_target", "chunk_events", "read_lines", "run_bulk_chunk"]

_LF = b"\n"


def bulk_renames(transforms: Iterable[Any]) -> Renames | None:
    """``transforms`` as the renames a bulk load applies, or None when one does more than
    rename databases and tables (values must then go through the transforms)."""
    from headwater.spark.transforms import RenameDatabaseSpec, RenameTableSpec

    renames: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    for spec in transforms:
        if isinstance(spec, RenameDatabaseSpec):
            kind = "database"
        elif isinstance(spec, RenameTableSpec):
            kind = "table"
        else:
            return None
        renames.append((kind, tuple((str(k), str(v)) for k, v in spec.mapping.items())))
    return tuple(renames)


def bulk_target(sink: Any, transforms: Iterable[Any]) -> BulkLoad | None:
    """The bulk-load capability of ``sink`` behind ``transforms``, or None when rows must
    take the general path (the sink has none, or a transform edits values)."""
    renames = bulk_renames(transforms)
    return None if renames is None else bulk_load_of(sink, renames)


def chunk_events(
    window: Iterable[ChangeRow],
    key_columns: tuple[str, ...],
    in_chunk: Callable[[dict[str, Any]], bool],
) -> list[ChangeRow]:
    """The window's changes cut to the chunk's keys, in sequence order (module docstring).

    A delete is kept when its key is in the chunk; an insert, update or read when its new
    key is, an update whose old key is outside becoming an insert; an update moving a key
    out of the chunk becomes a delete of the old key; the rest is dropped."""
    out: list[ChangeRow] = []
    for c in sorted(window, key=lambda c: c.sequence):
        old = _key(c.before, key_columns)
        if c.op == "delete":
            if old is not None and in_chunk(old):
                out.append(c)
            continue
        if c.op not in ("insert", "update", "read") or c.after is None:
            continue
        new = {k: c.after.get(k) for k in key_columns}
        moved = c.op == "update" and old is not None and kid(old) != kid(new)
        if in_chunk(new):
            if moved and old is not None and not in_chunk(old):
                out.append(_retyped(c, "insert", new, None, c.after))
            else:
                out.append(c)
        elif moved and old is not None and in_chunk(old):
            out.append(_retyped(c, "delete", old, c.before, None))
    return out


def _key(image: dict[str, Any] | None, key_columns: tuple[str, ...]) -> dict[str, Any] | None:
    if image is None or not all(k in image for k in key_columns):
        return None
    return {k: image[k] for k in key_columns}


def _retyped(
    c: ChangeRow,
    op: str,
    key: dict[str, Any],
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> ChangeRow:
    return ChangeRow(
        c.source, c.database, c.table, op, c.ts_us, c.position, c.gtid, c.txn_id, c.sequence,
        key, before, after, c.schema_version,
    )  # fmt: skip


def read_lines(
    conn: Any,
    line: str,
    ref: str,
    where: str,
    params: list[Any],
    out: Any,
    limit: int | None = None,
) -> int:
    """Write the chunk's lines to ``out`` (a binary file); the number of rows (module
    docstring). ``limit``: ``group_concat_max_len`` (default: ``max_allowed_packet``)."""
    import pymysql.cursors

    with conn.cursor() as cur:
        if limit is None:
            cur.execute("SET SESSION group_concat_max_len = @@max_allowed_packet")
        else:
            cur.execute("SET SESSION group_concat_max_len = %s", (int(limit),))
        cur.execute(
            f"SELECT COUNT(*), GROUP_CONCAT({line} SEPARATOR '\n') FROM {ref} WHERE {where}",
            params,
        )
        count, blob = cur.fetchone()
    count = int(count)
    if count == 0:
        return 0
    if blob is not None and blob.count(_LF) + 1 == count:
        out.write(blob)
        out.write(_LF)
        return count
    rows = 0
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(f"SELECT {line} FROM {ref} WHERE {where}", params)
        for (text,) in cur.fetchall_unbuffered():
            out.write(text)
            out.write(_LF)
            rows += 1
    return rows


def run_bulk_chunk(
    task: Any, tlog: Any, conn: Any, tdef: TableDef, line: str, conns: Any
) -> Iterator[tuple[str, Any]]:
    """One chunk on the bulk path (module docstring): loads it into every target of
    ``task.bulk``, yields ``("row", change-row tuple)`` per window change of its keys,
    then ``("meta", dict)``. ``conn`` is a source connection with autocommit off;
    ``conns`` (:class:`~headwater.snapshot.chunks.ChunkConnections`) lends target
    connections."""
    key_cols = tuple(c.name for c in task.key.columns)
    lo, hi = decode_key(task.lo), decode_key(task.hi)
    where, params = range_predicate(key_cols, lo, hi)
    target_where = range_predicate(
        key_cols, lo, hi, literals=[c.literal() for c in task.key.columns]
    )
    ref = f"`{task.database.replace('`', '``')}`.`{task.table.replace('`', '``')}`"
    started = time.monotonic()
    fd, path = tempfile.mkstemp(prefix="hw-chunk-", suffix=".tsv")
    try:
        before = master_status(conn)
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        low = snapshot_position(conn) or before
        with os.fdopen(fd, "wb") as out:
            rows = read_lines(conn, line, ref, where, params, out)
        conn.commit()
        high = master_status(conn)
        read_s = time.monotonic() - started
        wait_caught_up(tlog, conn, high, task.timeout_s)
        change_id = tlog.change_id()
        first = tlog.first_seq_at(change_id, low)
        last = tlog.first_seq_at(change_id, high) - 1
        window = list(tlog.changes(first, last, {(task.database, task.table)}, task.source))
        images = (im for ch in window for im in (ch.before, ch.after))
        in_chunk = chunk_membership(
            task.key,
            conn,
            (k for im in images if (k := _key(im, key_cols)) is not None),
            lo,
            hi,
        )
        events = chunk_events(window, key_cols, in_chunk)
        conn.commit()
        loaded = time.monotonic()
        for i, target in enumerate(task.bulk):
            try:
                target.load(
                    path, task.database, task.table, tdef, target_where, conns.target(i, target)
                )
            except BaseException:
                conns.discard_target(i)
                raise
        load_s = time.monotonic() - loaded
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    for change in events:
        yield "row", change_row_values(change)
    yield (
        "meta",
        {
            "chunk_id": task.chunk_id,
            "path": "bulk",
            "low": str(low),
            "high": str(high),
            "high_key": [high.file_num, high.offset],
            "first_seq": first,
            "last_seq": last,
            "window_changes": len(window),
            "emitted": len(events),
            "rows_read": rows,
            "rows": rows,
            "seconds": round(time.monotonic() - started, 3),
            "read_seconds": round(read_s, 3),
            "load_seconds": round(load_s, 3),
        },
    )
