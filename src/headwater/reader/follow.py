"""A follower's copy of its leader's change log: raw records over the HTTP API, same seqs.

The follower subscribes to the leader at its own next seq in the ``raw`` format and appends
each record it gets with ``append_many``; the store frames a record from its fields and its
seq, so equal fields at an equal seq are equal bytes (record.py), and the follower checks
that every record lands at the seq the leader gave it (else :class:`FollowError`). The
schema history and the FORMAT_DESCRIPTION come from ``/v1/decoding``; the history is written
where a task keeps it (``schema.jsonl``), so the follower decodes for its consumers
and, promoted, resumes with them.

Cutting a tail (:func:`divergence`, :func:`cut_log`): a deposed leader may hold records the
new leader does not have; the first seq where the two logs differ is found by bisection over
record comparisons (a log is a prefix-consistent sequence: once two logs differ they never
agree again) and the local log is rebuilt up to it.
"""

from __future__ import annotations

import base64
import http.client
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from headwater.binlog.framing import FormatDescription
from headwater.errors import HeadwaterError
from headwater.httpapi import ApiConnection, format_description_of, has_host, record_of
from headwater.store import AtSeq, ChangeLog, Record, StoreOptions
from headwater.store._fs import atomic_write

__all__ = ["FollowError", "LeaderLink", "cut_log", "divergence", "same_record"]

log = logging.getLogger(__name__)


class FollowError(HeadwaterError):
    """The leader's log and ours disagree, or the leader cannot be read (``refused``:
    nothing listens at its address, its process is most likely gone)."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


def same_record(a: Record, b: Record) -> bool:
    """Whether two records frame to the same bytes (every framed field is equal)."""
    return (
        a.seq == b.seq
        and a.position == b.position
        and a.payload == b.payload
        and a.ts_us == b.ts_us
        and a.gtid == b.gtid
        and tuple(a.tables) == tuple(b.tables)
        and a.schema_version == b.schema_version
        and a.flags == b.flags
        and a.chunk_no == b.chunk_no
    )


class LeaderLink:
    """One keep-alive HTTP connection to the leader's API for one task."""

    def __init__(self, url: str, task: str, *, token: str | None = None, timeout: float = 10.0):
        if not has_host(url):
            raise FollowError(f"no host in the leader's URL {url!r}")
        self.url = url
        self.task = task
        self._conn = ApiConnection(url, token=token, timeout=timeout)
        self.latest_seq = 0

    def call(self, path: str, body: Any) -> Any:
        try:
            answer = self._conn.send("POST", path, body)
        except (OSError, http.client.HTTPException) as e:
            refused = isinstance(e, ConnectionRefusedError)
            raise FollowError(f"leader {self.url}{path}: {e!r}", refused=refused) from None
        if answer.status != 200:
            raise FollowError(
                f"leader {self.url}{path}: HTTP {answer.status}: {answer.payload[:200]!r}"
            )
        return answer.json()

    def records(self, seq: int, *, max_rows: int = 2000, wait_ms: int = 500) -> list[Record]:
        """The leader's records from ``seq`` on (long-polls up to ``wait_ms``)."""
        sub = self.call(
            "/v1/subscribe", {"task": self.task, "start": {"seq": seq}, "format": "raw"}
        )
        if int(sub["next"]["seq"]) != seq:
            raise FollowError(
                f"leader {self.url} starts task {self.task} at seq {sub['next']['seq']}, not {seq}"
            )
        doc = self.call(
            "/v1/fetch",
            {
                "checkpoint": sub["checkpoint"],
                "max_rows": max_rows,
                "max_bytes": 8 << 20,
                "timeout_ms": wait_ms,
            },
        )
        self.latest_seq = int(doc.get("latest_seq") or 0)
        return [record_of(r) for r in doc["records"]]

    def end(self) -> int:
        """The leader's last acknowledged seq (0: an empty log)."""
        sub = self.call("/v1/subscribe", {"task": self.task, "start": "latest", "format": "raw"})
        return int(sub["next"]["seq"]) - 1

    def decoding(self, task_dir: Path) -> FormatDescription | None:
        """Write the leader's schema history into ``task_dir``; returns its
        FORMAT_DESCRIPTION (the task serves it until its own stream carries one)."""
        doc = self.call("/v1/decoding", {"task": self.task})
        history = doc.get("schema_history")
        if history is not None:
            data = base64.b64decode(history)
            path = task_dir / "schema.jsonl"
            if not path.exists() or path.read_bytes() != data:
                atomic_write(str(path), data)
        return format_description_of(doc)

    def close(self) -> None:
        self._conn.close()


def copy_some(link: LeaderLink, store: ChangeLog, *, wait_ms: int = 500) -> int:
    """Append the leader's next records to ``store``; returns how many (0: none yet)."""
    nxt = store.next_seq
    records = link.records(nxt, wait_ms=wait_ms)
    if not records:
        return 0
    for i, rec in enumerate(records):
        if rec.seq != nxt + i:
            raise FollowError(f"leader sent seq {rec.seq} where {nxt + i} was expected")
    # A chunked transaction is appended only whole (the store acknowledges at its last
    # chunk; a torn one is dropped at recovery, and its chunks come again).
    while records and not records[-1].last_chunk:
        records.pop()
    if not records:
        return 0
    for rec in records:
        rec.seq = 0
    last = store.append_many(records)
    if last != nxt + len(records) - 1:
        raise FollowError(f"records landed at seqs up to {last}, the leader's end at that point")
    store.wait_acked(last, 30.0)
    return len(records)


def _local(store: ChangeLog, seq: int) -> Record | None:
    with store.reader(AtSeq(seq)) as r:
        rec = r.next(0)
    return rec if rec is not None and rec.seq == seq else None


def divergence(link: LeaderLink, store: ChangeLog) -> int | None:
    """The first seq where ``store`` differs from the leader's log (None: ours is a prefix
    of the leader's). Bisection: logs that differ at a seq differ at every later one."""
    end = store.acked_seq
    if end == 0:
        return None
    theirs_end = link.end()

    def agree(seq: int) -> bool:
        # The leader refuses a fetch past its end + 1, and has no record there: a seq
        # beyond its end disagrees without asking (a deposed leader's log is often
        # longer than the new leader's: asking failed every time, and it never rejoined).
        if seq > theirs_end:
            return False
        theirs = link.records(seq, max_rows=1, wait_ms=0)
        mine = _local(store, seq)
        return bool(theirs) and mine is not None and same_record(theirs[0], mine)

    if agree(end):
        return None
    first = store.earliest()
    lo, hi = (first.seq if first else 1), end  # invariant: the logs differ at hi
    if not agree(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if agree(mid):
            lo = mid
        else:
            hi = mid
    return hi


def cut_log(directory: Path, keep_to: int, options: StoreOptions) -> None:
    """Rebuild the log in ``directory`` with its records up to seq ``keep_to`` only. The
    rebuilt log numbers from 1, so the old one must begin at seq 1 (else FollowError)."""
    directory = Path(directory)
    fresh = directory.with_name(directory.name + ".cut")
    shutil.rmtree(fresh, ignore_errors=True)
    with ChangeLog.open(str(directory), options) as old, ChangeLog.open(str(fresh), options) as new:
        first = old.earliest()
        if first is not None and first.seq != 1 and keep_to >= first.seq:
            raise FollowError(f"{directory}: cannot cut a log that begins at seq {first.seq}")
        batch: list[Record] = []
        with old.reader(AtSeq(1)) as r:
            while (rec := r.next(0)) is not None and rec.seq <= keep_to:
                rec.seq = 0
                batch.append(rec)
                if len(batch) >= 1000:
                    new.append_many(batch)
                    batch = []
        if batch:
            new.append_many(batch)
        new.flush()
    aside = directory.with_name(f"{directory.name}.old-{int(time.time())}")
    os.rename(directory, aside)
    os.rename(fresh, directory)
    shutil.rmtree(aside, ignore_errors=True)
    log.warning("%s: cut after seq %d (records the leader does not have)", directory, keep_to)
