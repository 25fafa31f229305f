"""Checkpoints in a SQL table (MySQL/MariaDB or PostgreSQL), for exactly-once handlers.

A handler that writes into the same database commits the checkpoint in its own
transaction (:meth:`SqlStore.save_in` on its cursor): its writes and the checkpoint of the
batch become visible together, so after any crash the shard resumes exactly after the last
committed batch. Tables (created if missing)::

    headwater_consumer_groups (group_name PK, shard_count, previous)   previous: JSON text
    headwater_consumer_shards (group_name, shard PK, next_sequence, epoch, version)

Fencing is a conditional write: a new owner's claim sets ``epoch`` only where the stored
one is smaller; a checkpoint updates the row only ``WHERE epoch = <its epoch>``, so a
deposed owner's write matches no row and raises :class:`FencedError` (its transaction must
roll back). ``version`` grows at every write so the row always changes: MySQL counts a row
whose values stay the same as not affected.

Connections come from a factory (DB-API 2.0, ``%s`` parameters: pymysql and psycopg). Each
operation takes an idle connection (or opens one) and gives it back: no lock is held while a
statement runs. A claim may wait on a checkpoint row lock for as long as another transaction
holds it (the previous owner's handler, stopped before its commit: that wait is what keeps
its batch from being applied twice), and the saves of the other shards, and the final saves
of a stop, must not queue behind it on one connection. At most :data:`MAX_IDLE`
connections are kept idle; one given back beyond that is closed, so a burst of
concurrent operations (a rebalance claiming every shard while each shard saves) does not
leave as many connections open on the database for the process's lifetime.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from headwater.coordination import CoordinationError, FencedError
from headwater.coordination.checkpoints import GroupState, parse_meta, reshard_state
from headwater.coordination.zk import group_path

__all__ = ["SqlStore"]

GROUPS = "headwater_consumer_groups"
SHARDS = "headwater_consumer_shards"
#: Idle connections kept for reuse (module docstring); more are closed when given back.
MAX_IDLE = 4


class SqlStore:
    """Checkpoints in ``headwater_consumer_*`` tables of the database ``connect()`` opens."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._lock = threading.Lock()  # guards _idle and _closed only
        self._idle: list[Any] = []
        self._closed = False
        with self._tx() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {GROUPS} (group_name VARCHAR(200) NOT NULL "
                "PRIMARY KEY, shard_count INT NOT NULL, previous TEXT NOT NULL)"
            )
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {SHARDS} (group_name VARCHAR(200) NOT NULL, "
                "shard INT NOT NULL, next_sequence BIGINT NOT NULL, epoch BIGINT NOT NULL, "
                "version BIGINT NOT NULL, PRIMARY KEY (group_name, shard))"
            )

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        """A cursor in a transaction of a connection of its own, committed at the end
        (rolled back on an error; a connection whose commit or rollback failed is closed,
        not reused)."""
        with self._lock:
            if self._closed:
                raise CoordinationError("SQL checkpoint store is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
        reusable = False
        try:
            cur = conn.cursor()
            try:
                yield cur
            except BaseException:
                with contextlib.suppress(Exception):  # the error raised is the block's
                    cur.close()
                    conn.rollback()
                    reusable = True
                raise
            cur.close()
            conn.commit()
            reusable = True
        finally:
            with self._lock:
                keep = reusable and not self._closed and len(self._idle) < MAX_IDLE
                if keep:
                    self._idle.append(conn)
            if not keep:
                with contextlib.suppress(Exception):
                    conn.close()

    def _state(self, cur: Any, group: str) -> GroupState | None:
        cur.execute(f"SELECT shard_count, previous FROM {GROUPS} WHERE group_name = %s", (group,))
        row = cur.fetchone()
        if row is None:
            return None
        count, previous = parse_meta(
            {"count": row[0], "previous": orjson.loads(row[1])}, f"SQL group {group}"
        )
        state = GroupState(count, {}, {}, previous)
        cur.execute(
            f"SELECT shard, next_sequence, epoch FROM {SHARDS} WHERE group_name = %s", (group,)
        )
        for shard, nxt, epoch in cur.fetchall():
            if shard < count:
                state.next[int(shard)] = int(nxt)
                state.epochs[int(shard)] = int(epoch)
        return state

    def load(self, group: str) -> GroupState | None:
        group_path(group)
        with self._tx() as cur:
            return self._state(cur, group)

    def _write(self, cur: Any, group: str, state: GroupState, *, create: bool) -> None:
        previous = orjson.dumps(state.meta()["previous"]).decode()
        if create:
            cur.execute(
                f"INSERT INTO {GROUPS} (group_name, shard_count, previous) VALUES (%s, %s, %s)",
                (group, state.count, previous),
            )
        else:
            cur.execute(
                f"UPDATE {GROUPS} SET shard_count = %s, previous = %s WHERE group_name = %s",
                (state.count, previous, group),
            )
        for shard in range(state.count):
            cur.execute(
                f"UPDATE {SHARDS} SET next_sequence = %s, version = version + 1 "
                "WHERE group_name = %s AND shard = %s",
                (state.next[shard], group, shard),
            )
            if cur.rowcount == 0:
                cur.execute(
                    f"INSERT INTO {SHARDS} (group_name, shard, next_sequence, epoch, version) "
                    "VALUES (%s, %s, %s, 0, 0)",
                    (group, shard, state.next[shard]),
                )

    def create(self, group: str, count: int, start: int) -> GroupState:
        group_path(group)
        try:
            with self._tx() as cur:
                if self._state(cur, group) is None:
                    self._write(
                        cur,
                        group,
                        GroupState(count, dict.fromkeys(range(count), start)),
                        create=True,
                    )
        except Exception:  # another member inserted the group first: read theirs
            pass
        state = self.load(group)
        if state is None:
            raise CoordinationError(f"SQL group {group}: could not be created")
        return state

    def claim(self, group: str, shard: int, epoch: int | None) -> tuple[int, int]:
        with self._tx() as cur:
            if epoch is None:
                cur.execute(
                    f"UPDATE {SHARDS} SET epoch = epoch + 1, version = version + 1 "
                    "WHERE group_name = %s AND shard = %s",
                    (group, shard),
                )
            else:
                cur.execute(
                    f"UPDATE {SHARDS} SET epoch = %s, version = version + 1 "
                    "WHERE group_name = %s AND shard = %s AND epoch < %s",
                    (epoch, group, shard, epoch),
                )
            if cur.rowcount != 1:
                raise FencedError(f"SQL group {group} shard {shard}: epoch {epoch} is not newer")
            cur.execute(
                f"SELECT epoch, next_sequence FROM {SHARDS} WHERE group_name = %s AND shard = %s",
                (group, shard),
            )
            row = cur.fetchone()
            return int(row[0]), int(row[1])

    def claim_many(self, group: str, shards: Iterable[int]) -> dict[int, tuple[int, int]]:
        """``claim(group, shard, None)`` of every shard in one transaction (one UPDATE, one
        SELECT, one commit): a consumer without a group claims all its shards at start."""
        wanted = sorted(set(shards))
        if not wanted:
            return {}
        marks = ", ".join(["%s"] * len(wanted))
        with self._tx() as cur:
            cur.execute(
                f"UPDATE {SHARDS} SET epoch = epoch + 1, version = version + 1 "
                f"WHERE group_name = %s AND shard IN ({marks})",
                (group, *wanted),
            )
            if cur.rowcount != len(wanted):
                raise CoordinationError(
                    f"SQL group {group}: {len(wanted) - cur.rowcount} of shards {wanted} "
                    "have no checkpoint row"
                )
            cur.execute(
                f"SELECT shard, epoch, next_sequence FROM {SHARDS} "
                f"WHERE group_name = %s AND shard IN ({marks})",
                (group, *wanted),
            )
            return {int(s): (int(e), int(n)) for s, e, n in cur.fetchall()}

    @staticmethod
    def save_in(cur: Any, group: str, shard: int, next_sequence: int, epoch: int) -> None:
        """The checkpoint write on the caller's cursor, inside the caller's transaction.

        The checkpoint never moves back (``GREATEST``, in MySQL, MariaDB and PostgreSQL):
        an owner has two writers of it, the handler's transactions
        (``Batch.commit_checkpoint``) and the consumer's flusher, whose save of an ack
        it read before a handler's commit may reach the row after that commit; written
        as given, it moved the checkpoint back under the committed batch, and the
        shard's next owner applied that batch again (the group test, once under load)."""
        cur.execute(
            f"UPDATE {SHARDS} SET next_sequence = GREATEST(next_sequence, %s), "
            "version = version + 1 WHERE group_name = %s AND shard = %s AND epoch = %s",
            (next_sequence, group, shard, epoch),
        )
        if cur.rowcount != 1:
            raise FencedError(
                f"SQL group {group} shard {shard}: checkpoint of epoch {epoch} refused "
                "(another owner claimed the shard)"
            )

    def save(self, group: str, shard: int, next_sequence: int, epoch: int) -> None:
        with self._tx() as cur:
            self.save_in(cur, group, shard, next_sequence, epoch)

    def reshard(self, group: str, count: int) -> GroupState:
        with self._tx() as cur:
            state = self._state(cur, group)
            if state is None:
                raise CoordinationError(f"SQL group {group} has no checkpoints")
            new = reshard_state(state, count)
            self._write(cur, group, new, create=False)
        return new

    def close(self) -> None:
        """Close the idle connections; one still running a statement (a claim waiting on a
        row lock, after a stop that gave up) is closed when that statement ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()
