"""One fetch: read the log from a checkpoint and build a bounded batch.

Invariants:

* Memory: the batch holds at most ``max_rows`` items and ``max_bytes`` of encoded items
  (plus one item: the first item of a batch is always taken, so a row larger than
  ``max_bytes`` still moves forward), and the decoded changes of one record at a time. A
  large transaction is stored as bounded chunk records; it is delivered chunk by chunk,
  with checkpoints inside it, never gathered whole.
* Checkpoints: the returned ``(seq, row)`` is the first change not delivered; everything
  before it was delivered or filtered out (other tables, other shards, DDL when not
  wanted). Row indexes are positions in ``decode_record(record, want=tables)``, so they
  match the low 24 bits of ``ChangeRow.sequence``.
* Waiting: only while the batch is empty, until the request's timeout, woken by the
  store when the writer acknowledges a record (no polling). Once anything is in the
  batch, the fetch returns as soon as no further record is immediately available.
* Time: a fetch returns by its deadline (the request's ``timeout_ms``, or the deadline
  the caller gives), or :data:`MIN_WORK_S` after the request arrived (``started``) when
  that is later, whatever ``max_rows`` allows: a large ``max_rows`` never holds a client
  past its timeout. At least one record is always read, so a fetch that waited for a
  worker past its deadline still moves forward, and returns after that record.
* Scanning: at most about ``max_scan_bytes`` of record payloads per fetch, so a
  subscription whose filters skip a long stretch gets an advanced checkpoint and an empty
  batch rather than one request reading the whole log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from headwater.changes import decode_record
from headwater.server import TaskHandle
from headwater.server.encoding import Encoder
from headwater.server.requests import FetchRequest
from headwater.server.sharding import ShardFilter
from headwater.store import AtSeq, ChangeLog

__all__ = ["MIN_WORK_S", "Batch", "fetch_batch"]

#: The work a fetch may always do, even with ``timeout_ms`` 0 ("answer at once").
MIN_WORK_S = 0.2


@dataclass(slots=True)
class Batch:
    items: list[bytes]
    nbytes: int
    seq: int
    row: int
    more: bool


def fetch_batch(
    name: str,
    handle: TaskHandle,
    changelog: ChangeLog,
    req: FetchRequest,
    encoder: Encoder,
    max_scan_bytes: int,
    *,
    deadline: float | None = None,
    started: float | None = None,
) -> Batch:
    """Raises ``PositionNotRetainedError`` when the checkpoint is older than retention, and
    ``BinlogFormatError`` on a record that does not decode. ``deadline`` (a
    ``time.monotonic()`` value) replaces the request's own timeout; ``started`` is when
    the request arrived (default: now)."""
    sub = req.checkpoint.sub
    now = time.monotonic()
    if deadline is None:
        deadline = now + req.timeout_s
    stop_at = max(deadline, (now if started is None else started) + MIN_WORK_S)
    shard = ShardFilter(sub.shard_count, sub.shards, dict(sub.shard_keys))
    source = handle.source or name
    fde = None if sub.raw else handle.format_description()
    out = Batch([], 0, req.checkpoint.seq, req.checkpoint.row, False)
    scanned = 0
    with changelog.reader(AtSeq(out.seq)) as reader:
        while True:
            wait = 0.0 if out.items else max(0.0, deadline - time.monotonic())
            rec = reader.next(wait)
            if rec is None:
                return out
            scanned += len(rec.payload)
            if sub.raw:
                if sub.wants_record_tables(rec.tables):
                    data = encoder.record(rec)
                    if out.items and out.nbytes + len(data) > req.max_bytes:
                        out.more = True
                        return out
                    out.items.append(data)
                    out.nbytes += len(data)
                out.seq, out.row = rec.seq + 1, 0
                if len(out.items) >= req.max_rows:
                    out.more = True
                    return out
            elif not sub.wants_record_tables(rec.tables):
                # Rows of other tables, or DDL whose objects (its table list) are not
                # wanted -- a statement not about data never is (headwater.schema.ddlscope).
                out.seq, out.row = rec.seq + 1, 0
            else:
                changes = decode_record(
                    rec, source=source, fde=fde, schema=handle.schema, want=sub.wants_table
                )
                start = out.row if rec.seq == out.seq else 0
                for i in range(start, len(changes)):
                    change = changes[i]
                    if (change.op == "ddl" and not sub.ddl) or not shard.wants(change):
                        continue
                    data = encoder.row(change)
                    if out.items and out.nbytes + len(data) > req.max_bytes:
                        out.seq, out.row, out.more = rec.seq, i, True
                        return out
                    out.items.append(data)
                    out.nbytes += len(data)
                    if len(out.items) >= req.max_rows:
                        done = i + 1 == len(changes)
                        out.seq, out.row = (rec.seq + 1, 0) if done else (rec.seq, i + 1)
                        out.more = True
                        return out
                out.seq, out.row = rec.seq + 1, 0
            if scanned >= max_scan_bytes or time.monotonic() >= stop_at:
                out.more = True
                return out
