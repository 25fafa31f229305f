"""The consumer: shards of one task, a handler per batch, per-shard checkpoints, groups.

Threads of one :class:`Consumer`:

* the *feed*: with ``decode="client"`` (default) one loop fetches raw records from the
  reader (``/v1/fetch``, format ``raw``) starting at the smallest checkpoint of the owned
  shards, decodes them here (``headwater.changes``, the source's FORMAT_DESCRIPTION and
  schema history from ``/v1/decoding``) and routes each change to its shard's queue by the
  documented hash (``headwater.server.sharding``), handing changes to the queues every
  ``HANDOFF_ROWS`` (:mod:`.rawfeed`); the next page is fetched meanwhile on a second connection
  (:class:`~headwater.client.transport.FetchAhead`), and a wait for a page ends as soon as
  a shard is assigned or the consumer stops; with ``decode="json"`` or
  ``decode="protobuf"`` one loop per owned shard fetches that shard's rows decoded by the
  server in that format (server-side sharding; :mod:`.decoded`). A feed that loses its
  reader retries (the next reader of the list, with back-off) until the consumer stops;
* one *worker* per owned shard: takes up to ``batch_size`` changes (waiting at most
  ``max_wait`` for a batch to fill), calls the handler, and acks or rolls back;
* the *flusher*: saves each shard's acked checkpoint every ``flush_interval`` seconds, at
  every ``flush_every``-th ack, and at a clean stop.

Invariants: a shard's changes reach the handler in log order (``sequence`` increases within
a shard; a rollback redelivers from the batch's first change); a shard's checkpoint
``next`` only moves past changes that were acked (or that are not the shard's), so after a
crash every change is delivered again or was acked: at least once. A change whose
``sequence`` is below its shard's checkpoint, or below its old shard's checkpoint in an
earlier generation (after a change of the shard count), is never delivered. In a group,
every ack first proves ownership at the shard's epoch (:class:`FencedError` otherwise) and
every checkpoint write is conditional on the epoch. :meth:`Consumer.stop` returns within
its ``timeout`` even when a handler or a reader hangs (what it could not save is
redelivered: at least once).

Failures: an exception that escapes any of these threads outside the handler (the feeds,
the flusher, a worker's own code, the group's loop) is a bug or a broken environment, not
something a retry mends (reader errors, ``HeadwaterError`` and ``OSError``, are retried
where they happen). It is logged with its traceback and kept as :attr:`Consumer.error`
(a :class:`ConsumerError` caused by it); from then on nothing is acked (a batch in a
handler at that moment is not acked when the handler returns, ``batch.ack()`` raises the
error), and the consumer stops in the background: it saves the checkpoints acked before
the failure, leaves the group (its shards move to the other members) and closes its
connections. :meth:`Consumer.wait` and :meth:`Consumer.stop` (so also leaving a ``with``
block) raise the error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from headwater.changes import ChangeRow
from headwater.changes.sequence import ROW_BITS, sequence_of
from headwater.client.decoded import answer_of
from headwater.client.hashing import ShardHasher
from headwater.client.rawfeed import RawFeed
from headwater.client.runs import Changes, Run, RunQueue
from headwater.client.transport import Readers
from headwater.coordination import FencedError
from headwater.coordination.checkpoints import CheckpointStore, GroupState, create_claiming
from headwater.coordination.sqlstore import SqlStore
from headwater.coordination.zk import DEFAULT_SESSION_TIMEOUT
from headwater.errors import (
    BinlogFormatError,
    ConfigError,
    CorruptRecordError,
    HeadwaterError,
    PositionNotRetainedError,
    SchemaError,
    TransientError,
)
from headwater.store import EARLIEST, AtSeq, Start

__all__ = ["Batch", "Consumer", "ConsumerError", "ConsumerOptions", "Handler"]

log = logging.getLogger(__name__)

#: Errors of a feed that retrying the same request cannot fix (see Consumer._retrying).
PERSISTENT = (BinlogFormatError, CorruptRecordError, SchemaError, PositionNotRetainedError,
              ConfigError)  # fmt: skip
#: How many times in a row the same persistent error is retried before it fails the
#: consumer (with the back-off, about 6 s).
GIVE_UP_AFTER = 5

DECODES = ("client", "json", "protobuf")
#: Seconds :meth:`Consumer.stop` waits past its timeout for the ZooKeeper session to close
#: when the stop itself is stuck.
STOP_GRACE = 1.0
#: Seconds the background stop after a thread's failure waits for what hangs (as
#: :meth:`Consumer.stop`'s ``timeout``).
FAILURE_STOP = 30.0


class ConsumerError(HeadwaterError):
    """A consumer thread failed unexpectedly (``thread``: its name); the failure is the
    ``__cause__``. The consumer stopped: nothing was acked after it."""

    def __init__(self, thread: str, error: BaseException) -> None:
        super().__init__(f"consumer thread {thread} failed: {error!r}")
        self.thread = thread


@dataclass(frozen=True)
class ConsumerOptions:
    """What to consume and how (see docs/consumer.md)."""

    task: str
    group: str
    readers: tuple[str, ...] = ()
    tables: tuple[str, ...] | None = None
    shards: int = 1
    keys: Mapping[str, Sequence[str]] = field(default_factory=dict)
    start: Start = EARLIEST
    batch_size: int = 500
    max_wait: float = 0.1
    flush_interval: float = 1.0
    flush_every: int = 10
    decode: str = "client"
    ddl: bool = True
    token: str | None = None
    zookeeper: str | None = None
    session_timeout: float = DEFAULT_SESSION_TIMEOUT
    fetch_records: int = 2000
    fetch_bytes: int = 8 << 20
    queue_rows: int = 20_000

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ConfigError(f"must be >= 1, got {self.shards}", field="shards")
        if self.batch_size < 1:
            raise ConfigError(f"must be >= 1, got {self.batch_size}", field="batch_size")
        if self.flush_every < 1:
            raise ConfigError(f"must be >= 1, got {self.flush_every}", field="flush_every")
        if self.decode not in DECODES:
            raise ConfigError(
                f"must be one of {', '.join(DECODES)}, got {self.decode!r}", field="decode"
            )


class Batch:
    """Changes of one shard in log order, handed to the handler.

    ``changes`` is a sequence of :class:`~headwater.changes.ChangeRow`
    (:class:`~headwater.client.runs.Changes`): iterating it makes each change as the loop
    reaches it; indexing or ``changes.list()`` make the list once. Returning from the
    handler acks the batch unless it called :meth:`ack` or :meth:`rollback`; raising
    rolls it back (redelivered after a back-off)."""

    def __init__(self, consumer: Consumer, shard: Shard, changes: Changes) -> None:
        self._consumer = consumer
        self._shard = shard
        self.shard = shard.number
        self.epoch = shard.epoch
        self.changes = changes
        self.state = "open"
        self.checkpoint_committed = False

    @property
    def next_sequence(self) -> int:
        """The checkpoint after this batch: the sequence after its last change."""
        return self.changes.next_sequence()

    def ack(self) -> None:
        """The batch is handled; raises :class:`FencedError` if this process no longer owns
        the shard (then nothing is acked)."""
        self._consumer._ack(self)

    def rollback(self) -> None:
        """Redeliver this batch from its first change."""
        self._consumer._rollback(self)

    def commit_checkpoint(self, cursor: Any) -> None:
        """Write this batch's checkpoint with ``cursor`` in the handler's own transaction
        (SQL checkpoint store only): the handler's writes and the checkpoint commit
        together, exactly once. Raises :class:`FencedError` for a deposed owner: the
        handler must roll its transaction back."""
        store = self._consumer.store
        if not isinstance(store, SqlStore):
            raise ConfigError("commit_checkpoint needs a SqlStore", field="checkpoints")
        SqlStore.save_in(
            cursor, self._consumer.options.group, self.shard, self.next_sequence, self.epoch
        )
        self.checkpoint_committed = True


Handler = Callable[[Batch], None]


class Shard:
    """One owned shard: its queue and positions, shared by the feed, its worker and the
    flusher (the queue under ``cond``)."""

    def __init__(self, number: int, epoch: int, nxt: int) -> None:
        self.number = number
        self.epoch = epoch
        self.cond = threading.Condition()
        self.queue = RunQueue()
        self.fed = nxt  # every change of this shard below it is queued or was handled
        self.acked = nxt
        self.saved = nxt
        self.saving = threading.Lock()  # held by a save of this shard (Consumer._save)
        self.acks = 0
        self.due = False  # its flush_every-th ack since the last save: save it now
        self.saved_at = time.monotonic()
        self.busy = False
        self.paused = False  # the raw feed skips it while its queue is full (feed thread only)
        # the feed has more for it at once (mid-page, or its last fetch was cut): a worker
        # waits up to max_wait for a batch to fill only then; a caught-up feed has nothing
        # coming, so a partial batch goes at once
        self.more = True
        self.taken = 0  # changes the worker took from the queue: progress, for the feed
        self.active = True
        self.thread: threading.Thread | None = None

    def feed(
        self,
        runs: Sequence[Run],
        upto: int,
        limit: int,
        grace: float | None = None,
        urgent: Callable[[], bool] | None = None,
        more: bool = True,
    ) -> bool:
        """Queue the changes of ``runs``; every change of this shard below ``upto`` is now
        queued or handled. With changes to add, first wait until the queue is no longer than
        ``limit``; if its worker takes nothing for ``grace`` seconds meanwhile (a stuck or
        very slow handler), or as soon as ``urgent()`` (a newly assigned shard waits for
        the feed), give up: False, nothing queued, ``fed`` unchanged. ``more``: whether
        the feed has more changes at once (see ``Shard.more``)."""
        with self.cond:
            seen, since = self.taken, time.monotonic()
            while self.active and runs and len(self.queue) > limit:
                if self.taken != seen:
                    seen, since = self.taken, time.monotonic()
                left = 0.5 if grace is None else since + grace - time.monotonic()
                if left <= 0 or (urgent is not None and urgent()):
                    return False
                self.cond.wait(min(left, 0.5))
            if not self.active:
                return True
            self.queue.extend(runs)
            if runs:
                self.fed = max(self.fed, runs[-1].next_sequence())
            self.fed = max(self.fed, upto)
            self.more = more
            self.cond.notify_all()
            return True


class Consumer:
    """Consume ``options.task`` with ``handler`` (see the module docstring).

    ``store`` keeps the checkpoints; with ``options.zookeeper`` the consumer joins the
    group ``options.group`` there and runs only the shards the group gives it."""

    def __init__(self, options: ConsumerOptions, handler: Handler, store: CheckpointStore) -> None:
        self.options = options
        self.handler = handler
        self.store = store
        self._urls = list(options.readers)
        if not self._urls and options.zookeeper is None:
            raise ConfigError("give reader URLs, or zookeeper to discover them", field="readers")
        self.readers: Readers | None = None
        self._shards: dict[int, Shard] = {}
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._wake_flush = threading.Event()
        self._threads: list[threading.Thread] = []
        self.state: GroupState | None = None
        self.zk: Any = None
        self.member: Any = None
        self.fenced: list[tuple[int, int]] = []  # (shard, epoch) refused, for callers/tests
        self._fde: Any = None
        self._schema: Any = None
        self._deadline = float("inf")  # set by stop(): joins give up then
        self._closed = False
        self._feed: RawFeed | None = None  # decode="client"
        self._assigned = threading.Event()  # a shard was assigned since the feed looked
        self._hash = ShardHasher(options.keys)
        #: The first unexpected failure of a consumer thread (module docstring), or None.
        self.error: ConsumerError | None = None
        self._failed = threading.Event()
        self._stopping = False  # stop() was called (under _lock)
        self._aborter: threading.Thread | None = None  # the stop after a failure

    # -- lifecycle

    def start(self) -> Consumer:
        """Subscribe, join the group (or take every shard) and start the threads. On an
        error nothing is left running."""
        try:
            return self._start()
        except BaseException:
            self._stop(timeout=5.0)
            raise

    def _start(self) -> Consumer:
        opts = self.options
        if opts.zookeeper is not None:
            from headwater.coordination.zk import connect, discover_readers

            self.zk = connect(opts.zookeeper, session_timeout=opts.session_timeout)
            if not self._urls:
                self._urls = discover_readers(self.zk, opts.task)
                log.info("task %s: readers %s (from ZooKeeper)", opts.task, self._urls)
        if not self._urls:
            raise ConfigError(
                f"no reader of task {opts.task} registered in ZooKeeper at {opts.zookeeper}",
                field="readers",
            )
        self.readers = readers = Readers(self._urls, opts.task, token=opts.token)
        if opts.decode == "client":
            self._fde, self._schema = readers.decoding()
        first = readers.subscribe(opts.start, format="raw", **self._filters())
        if opts.decode == "client":
            self._feed = RawFeed(self, (int(first["next"]["seq"]), first["checkpoint"]))
            self._feed.prefetch()
        begin = int(first["next"]["seq"]) << ROW_BITS
        claims: dict[int, tuple[int, int]] | None = None
        if opts.zookeeper is None:  # every shard is ours: created and claimed in one write
            state, claims = create_claiming(self.store, opts.group, opts.shards, begin)
        else:
            state = self.store.create(opts.group, opts.shards, begin)
        if state.count != opts.shards:
            raise ConfigError(
                f"group {opts.group} has {state.count} shards, not {opts.shards}: change the "
                "count with 'headwater consume reshard'",
                field="shards",
            )
        self.state = state
        self._running.set()
        self._spawn(self._flush_loop, "flusher")
        if claims is not None:
            for shard in range(opts.shards):
                self._assign(shard, None, claims[shard])
        else:
            from headwater.coordination.groups import GroupMember

            self.member = GroupMember(
                self.zk,
                opts.group,
                opts.shards,
                on_assign=self._assign,
                on_revoke=self._revoke,
                on_error=lambda e: self._fail(f"group-{opts.group}", e),
            )
            self.member.start()
        if opts.decode == "client":
            # after the assignment: a feed started first reads the log again for each shard
            # that arrives after its first fetch
            self._spawn(self._raw_feed, "feed")
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the batches in hand, save every checkpoint, leave the group.

        Returns after at most about ``timeout`` seconds, whatever hangs: the stop runs in
        a thread of its own and is abandoned then (a handler or a fetch still running, a
        checkpoint store waiting on a lock, a claim waiting on a checkpoint row). What it
        could not save is redelivered (at least once), and closing the ZooKeeper session
        releases the shards anyway. Raises :attr:`error` (:class:`ConsumerError`) after
        stopping if a consumer thread failed."""
        self._stop(timeout)
        if self.error is not None:
            raise self.error

    def wait(self, timeout: float | None = None) -> None:
        """Wait while the consumer runs: raise :class:`ConsumerError` as soon as one of its
        threads failed (the consumer has then stopped, or is stopping, by itself);
        return after ``timeout`` seconds (None: never) otherwise. ``stop()`` is still
        the way to end it."""
        if self._failed.wait(timeout):
            assert self.error is not None  # set before _failed
            raise self.error

    def _stop(self, timeout: float) -> None:
        """:meth:`stop` without raising :attr:`error`."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._stopping = True
            aborter = self._aborter
        if aborter is not None:  # a failure's stop runs already: wait for it
            stopper = aborter
        else:
            self._deadline = deadline
            stopper = threading.Thread(
                target=self._stop_until, args=(deadline,), name="consumer-stop", daemon=True
            )
            stopper.start()
        stopper.join(timeout)
        if stopper.is_alive():
            log.warning("consumer: stop gave up after %.1f s; closing the session", timeout)
            closer = threading.Thread(target=self._close, name="consumer-close", daemon=True)
            closer.start()
            closer.join(STOP_GRACE)

    def _stop_until(self, deadline: float) -> None:
        """The stop (see :meth:`stop`); every wait ends at ``deadline``."""
        if self.member is not None:
            # what is acked now is saved first: the group's loop may hang past the
            # deadline (a claim waiting on a checkpoint row), and its revokes with it
            with self._lock:
                owned = list(self._shards.values())
            for one in owned:
                self._save(one)
            # revokes (and flushes) every shard; a loop stuck beyond the deadline (in a
            # claim, say) is left behind, and the shards it still has are revoked below
            self.member.stop(timeout=max(0.0, deadline - time.monotonic()))
        for shard in list(self._shards):
            self._revoke(shard)
        self._running.clear()
        self._wake_flush.set()
        for t in list(self._threads):
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self._threads if t.is_alive()]
        if stuck:
            log.warning("consumer stopped with threads still running: %s", ", ".join(stuck))
        self._close()

    def _close(self) -> None:
        """Close the ZooKeeper session and the readers' connections (once)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception:
                log.warning("consumer: ZooKeeper session not closed cleanly", exc_info=True)
        if self.readers is not None:
            self.readers.close()
        if self._feed is not None:
            self._feed.fetches.close()  # a page fetched ahead by a start that failed

    def __enter__(self) -> Consumer:
        return self.start()

    def __exit__(self, exc_type: Any, *_exc: Any) -> None:
        if exc_type is None:
            self.stop()
        else:  # the block's own exception goes on (a thread's failure was logged)
            self._stop(30.0)

    def _fail(self, thread: str, error: BaseException) -> None:
        """A consumer thread failed (module docstring): log and keep the error, stop
        every shard at once (nothing is acked after this), and stop in the background
        unless a stop runs already."""
        log.error(
            "consumer: thread %s failed; the consumer stops (nothing acked after this)",
            thread,
            exc_info=error,
        )
        with self._lock:
            if self.error is not None:
                return
            self.error = ConsumerError(thread, error)
            self.error.__cause__ = error
            shards = list(self._shards.values())
        self._failed.set()
        for shard in shards:
            with shard.cond:
                shard.active = False
                shard.cond.notify_all()
        self._running.clear()
        self._wake_flush.set()
        self._assigned.set()  # a feed waiting on a page stops waiting
        with self._lock:  # started under the lock: a stop() joins it, or runs its own
            if not self._stopping:
                self._deadline = time.monotonic() + FAILURE_STOP
                self._aborter = threading.Thread(
                    target=self._stop_until,
                    args=(self._deadline,),
                    name="consumer-failure-stop",
                    daemon=True,
                )
                self._aborter.start()

    def owned(self) -> list[int]:
        with self._lock:
            return sorted(self._shards)

    def checkpoints(self) -> dict[int, int]:
        """Acked ``next`` sequence of each owned shard."""
        with self._lock:
            return {n: s.acked for n, s in self._shards.items()}

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
        t = self._thread(target, f"consumer-{name}", *args)
        t.start()
        self._threads.append(t)
        return t

    def _thread(self, target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
        """A daemon thread running ``target``; what escapes it fails the consumer."""

        def run() -> None:
            try:
                target(*args)
            except BaseException as e:
                self._fail(name, e)

        return threading.Thread(target=run, name=name, daemon=True)

    def _filters(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ddl": self.options.ddl}
        if self.options.tables is not None:
            out["tables"] = list(self.options.tables)
        return out

    # -- assignment

    def _assign(
        self, number: int, epoch: int | None, claimed: tuple[int, int] | None = None
    ) -> None:
        """Run shard ``number``: claim it at ``epoch`` (None: the stored one plus one),
        unless ``claimed`` already, as ``(epoch, next)``."""
        epoch, nxt = claimed or self.store.claim(self.options.group, number, epoch)
        if self._deadline != float("inf"):  # a claim that waited past a stop (or failure)
            raise HeadwaterError(f"shard {number} claimed while the consumer stops")
        shard = Shard(number, epoch, nxt)
        shard.thread = self._thread(self._work, f"consumer-shard-{number}", shard)
        with self._lock:
            self._shards[number] = shard
        self._assigned.set()
        shard.thread.start()
        if self.options.decode != "client":
            self._spawn(self._server_feed, f"feed-{number}", shard)
        log.info("group %s: shard %d from %d, epoch %d", self.options.group, number, nxt, epoch)

    def _revoke(self, number: int, *, flush: bool = True) -> None:
        with self._lock:
            shard = self._shards.pop(number, None)
        if shard is None:
            return
        with shard.cond:
            shard.active = False
            shard.cond.notify_all()
        if shard.thread is not None and shard.thread is not threading.current_thread():
            shard.thread.join(None if self._deadline == float("inf") else
                              max(0.0, self._deadline - time.monotonic()))  # fmt: skip
        if flush:
            self._save(shard)

    def _fence(self, shard: Shard, error: FencedError) -> None:
        log.warning("shard %d epoch %d: %s", shard.number, shard.epoch, error)
        self.fenced.append((shard.number, shard.epoch))
        with self._lock:
            if self._shards.get(shard.number) is shard:
                del self._shards[shard.number]
        with shard.cond:
            shard.active = False
            shard.cond.notify_all()
        if self.member is not None:
            self.member.fenced(shard.number, shard.epoch)  # the group takes it again

    # -- workers

    def _take(self, shard: Shard) -> Changes | None:
        """The next batch's changes (None: the shard is no longer ours); the change
        objects are made as the handler reads them, without the queue's lock."""
        size, wait = self.options.batch_size, self.options.max_wait
        with shard.cond:
            while shard.active and not shard.queue:
                shard.acked = max(shard.acked, shard.fed)  # idle: nothing of ours before fed
                shard.cond.wait(0.5)
            if not shard.active:
                return None
            deadline = time.monotonic() + wait
            while shard.active and len(shard.queue) < size and shard.more:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                shard.cond.wait(left)
            n = min(size, len(shard.queue))
            runs = shard.queue.take(n)
            shard.taken += n
            shard.cond.notify_all()
        return Changes(runs)

    def _work(self, shard: Shard) -> None:
        backoff = 0.1
        while True:
            changes = self._take(shard)
            if not changes:
                if not shard.active:
                    return
                continue
            batch = Batch(self, shard, changes)
            del changes  # the batch's changes go with it (no wait for the next _take)
            try:
                self.handler(batch)
                if self.error is not None:  # another thread failed: nothing more is acked
                    return
                if batch.state == "open":
                    self._ack(batch)
                backoff = 0.1
                del batch
            except FencedError as e:
                self._fence(shard, e)
                return
            except Exception:
                if self.error is not None:
                    return
                log.exception("shard %d: handler failed; batch rolled back", shard.number)
                if batch.state == "open":
                    self._rollback(batch)
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _ack(self, batch: Batch) -> None:
        if batch.state != "open":
            raise ConfigError(f"batch already {batch.state}", field="ack")
        if self.error is not None:
            raise self.error
        shard = batch._shard
        if self.member is not None:
            self.member.check(shard.number, shard.epoch)
        batch.state = "acked"
        shard.acked = batch.next_sequence
        if batch.checkpoint_committed:
            shard.saved = max(shard.saved, batch.next_sequence)
        shard.acks += 1
        if shard.acks % self.options.flush_every == 0:
            shard.due = True
            self._wake_flush.set()

    def _rollback(self, batch: Batch) -> None:
        if batch.state != "open":
            raise ConfigError(f"batch already {batch.state}", field="rollback")
        batch.state = "rolled back"
        shard = batch._shard
        with shard.cond:
            shard.queue.push_front(batch.changes.runs())
            shard.cond.notify_all()

    # -- checkpoints

    def _save(self, shard: Shard) -> None:
        # one save of a shard at a time (the flusher, a revoke and a stop may meet), so a
        # checkpoint written later is never an older one
        with shard.saving:
            acked = shard.acked
            if acked <= shard.saved:
                return
            try:
                self.store.save(self.options.group, shard.number, acked, shard.epoch)
                shard.saved = acked
            except FencedError as e:
                self._fence(shard, e)

    def _flush_loop(self) -> None:
        """Save each shard at its ``flush_every``-th ack and when its last save is
        ``flush_interval`` old (an ack of one shard does not save the others: a save can
        cost two fsyncs)."""
        interval = self.options.flush_interval
        wait = interval
        while self._running.is_set():
            self._wake_flush.wait(wait)
            self._wake_flush.clear()
            with self._lock:
                shards = list(self._shards.values())
            now = time.monotonic()
            wait = interval
            for shard in shards:
                if not shard.due and now - shard.saved_at < interval:
                    wait = min(wait, shard.saved_at + interval - now)  # its next save
                    continue
                shard.due, shard.saved_at = False, now
                try:
                    self._save(shard)
                except Exception:
                    log.exception("shard %d: checkpoint not saved; retrying", shard.number)

    # -- feeds

    def _wants(self, row: ChangeRow) -> tuple[int, bool]:
        """The row's shard and whether an earlier generation still wants it delivered."""
        h = self._hash(row)
        state = self.state
        fresh = state is None or not state.previous or state.wants(h, row.sequence)
        return h % self.options.shards, fresh

    def _retrying(self, loop: Callable[[], None], what: str, alive: Callable[[], bool]) -> None:
        """Run ``loop`` until ``alive()`` is false; a reader error restarts it after a
        back-off (the transport already moved to the next reader of the list).

        An error no retry can fix (a record that does not decode, a purged position, a
        refused subscription: :data:`PERSISTENT`) is retried while it may still be a
        passing state (a schema the reader is still recording); the same one
        :data:`GIVE_UP_AFTER` times in a row is raised, and fails the consumer
        (:class:`ConsumerError`) instead of stalling it with warnings for ever."""
        backoff = 0.2
        last: tuple[type, str] | None = None
        repeats = 0
        while alive():
            try:
                loop()
                return
            except (HeadwaterError, OSError) as e:
                if not alive():
                    return
                if isinstance(e, PERSISTENT) and not isinstance(e, TransientError):
                    same = (type(e), str(e))
                    repeats = repeats + 1 if same == last else 1
                    last = same
                    if repeats >= GIVE_UP_AFTER:
                        raise
                else:
                    last, repeats = None, 0
                log.warning("%s: %s; retrying in %.1f s", what, e, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _raw_feed(self) -> None:
        assert self._feed is not None  # made by _start
        self._feed.run()

    def _server_feed(self, shard: Shard) -> None:
        readers = Readers(self._urls, self.options.task, token=self.options.token)
        try:
            self._retrying(
                lambda: self._server_loop(shard, readers),
                f"shard {shard.number} feed",
                lambda: shard.active and self._running.is_set(),
            )
        finally:
            readers.close()

    def _server_loop(self, shard: Shard, readers: Readers) -> None:
        opts = self.options
        shards = {
            "count": opts.shards,
            "owned": [shard.number],
            "keys": {k: list(v) for k, v in opts.keys.items()},
        }
        token = readers.subscribe(
            AtSeq(shard.fed >> ROW_BITS), format=opts.decode, shards=shards, **self._filters()
        )["checkpoint"]
        while shard.active and self._running.is_set():
            answer = answer_of(
                readers.fetch(
                    token, max_rows=opts.fetch_records, max_bytes=opts.fetch_bytes, timeout_ms=1000
                )
            )
            rows = [r for r in answer.rows if r.sequence >= shard.fed and self._wants(r)[1]]
            runs = [Run.of(rows)] if rows else []
            upto = sequence_of(answer.next_seq, answer.next_row)
            shard.feed(runs, upto, opts.queue_rows, more=answer.more)
            token = answer.checkpoint
