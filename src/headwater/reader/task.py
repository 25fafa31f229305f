"""One reader task: one source, read into its own change log, for as long as the process runs.

Directory of a task (``data_dir/<source name>/``)::

    changes/        the change log (headwater.store)
    schema.jsonl    the schema history (headwater.schema), beside the change log
    state.json      ReaderState: resume point, GTID set, change id history (atomic writes)
    status.json     what ``headwater reader status`` shows: state, error, counters (atomic)
    fde.bin         the source's latest FORMAT_DESCRIPTION event (needed to decode records)

Resume without loss or duplicates. Positions are taken only at transaction boundaries.
``ReaderState.position`` is the start of the last transaction *processed* (stored, or
dropped whole by the filters) and ``gtid_set`` covers every processed transaction; the state
is written only after the store has acknowledged every record up to ``ReaderState.seq``, so
it may lag the store (after a crash); it may also lead it when the log lost its tail
(``durability: none`` and a power cut). On start the task reconciles the two in both
directions, the log being the truth, and then decides where to read from; both steps are
pure functions of reader/start.py (their rules are there), the task only feeds them and
applies the result. In short:

* same server as before (identity: MySQL server_uuid, MariaDB server_id + domain): dump
  from the file and offset of the last processed transaction and skip that transaction
  (and anything at or before it) when it arrives again;
* another server (failover): dump from the GTID set, bump ``change_id`` and record a
  :class:`~headwater.store.ChangeIdInfo`; transactions whose GTID the set holds are skipped;
* first start: the configured start (earliest, latest, file, GTID set, timestamp).

Reading: the socket is read by a :class:`~headwater.binlog.framing.DumpSplitter`, which
offers the received bytes, at transaction boundaries, to the compiled scanner
(``Grouper.native_scan``, checked against the resume position and GTID set like any
transaction) and hands the rest to the event framer and ``Grouper.feed``; a run of
transactions the scanner stored is reported as one :class:`Committed`.

Errors: transient ones (lost connection, server restart, refused connection) reconnect
with capped exponential back-off with jitter, trying the source's hosts in order; the
others (wrong password, missing privilege, STATEMENT format, purged position, server_id
conflict) stop the task in state ``failed`` with the error, leaving its store readable.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headwater.binlog.client import BinlogClient, ClientOptions
from headwater.binlog.constants import CHECKSUM_ALG_CRC32, EventType
from headwater.binlog.events import QueryEvent
from headwater.binlog.framing import DumpSplitter, FormatDescription
from headwater.binlog.preflight import SourceInfo, StartPosition
from headwater.config import HostConfig, SourceConfig
from headwater.errors import (
    AuthenticationError,
    ConfigError,
    HeadwaterError,
    PositionPurgedError,
    PrivilegeError,
    ServerIdConflictError,
    SourceConfigError,
    StoreError,
)
from headwater.position import (
    GtidSet,
    MariadbGtid,
    MariadbGtidPos,
    MysqlGtid,
    MysqlGtidSet,
    Position,
    parse_gtid_set,
)
from headwater.reader.committed import Committed
from headwater.reader.filters import TableFilter
from headwater.reader.grouping import Grouper
from headwater.reader.heartbeat import HeartbeatWriter, heartbeat_times
from headwater.reader.schema_link import SchemaLink
from headwater.reader.source import backoff_delays, file_at_time, probe, tls_options
from headwater.reader.start import LostRange, choose_start, layout_of, read_log_end, reconcile
from headwater.reader.status import (
    FDE_FILE,
    STATE_FILE,
    STATUS_FILE,
    read_task_status,
    task_status,
    write_status_file,
)
from headwater.store import ChangeIdInfo, ChangeLog, Durability, ReaderState, StoreOptions
from headwater.store._fs import atomic_write

__all__ = ["FATAL_ERRORS", "ReaderTask", "read_task_status"]

log = logging.getLogger(__name__)

#: Errors that stop a task: retrying cannot help until someone changes something.
FATAL_ERRORS: tuple[type[Exception], ...] = (
    AuthenticationError,
    PrivilegeError,
    SourceConfigError,
    PositionPurgedError,
    ServerIdConflictError,
    ConfigError,
)
_HEARTBEATS = frozenset((EventType.HEARTBEAT, EventType.HEARTBEAT_V2))


class ReaderTask:
    """Reads one source into ``task_dir`` (see the module docstring). ``run`` blocks."""

    def __init__(self, source: SourceConfig, task_dir: Path) -> None:
        self.source = source
        self.name = source.name
        self.dir = Path(task_dir)
        self.replica_host = f"headwater-{source.name}"[:60]
        self.filter = TableFilter(source.filters)
        self.state = "created"
        self.error: str | None = None
        self.store: ChangeLog | None = None
        self.schema: SchemaLink | None = None
        self._stop = False
        self._wake = threading.Event()
        self._client: BinlogClient | None = None
        self.host: HostConfig | None = None
        self.identity: str | None = None
        # resume state
        self.position: Position | None = None
        self.gtid_set: GtidSet | None = None
        self.ts_us = 0
        self.seq = 0
        self.change_ids: list[ChangeIdInfo] = []
        self._ts_floor: int | None = None
        self._lost: LostRange | None = None  # what the log lost and has not read again
        # counters
        self.events_in = 0
        self.bytes_in = 0
        self.transactions_stored = 0
        self.transactions_filtered = 0
        self.transactions_skipped = 0
        self.records_stored = 0
        self.reconnects = 0
        self.lag_s: float | None = None
        self.heartbeat: HeartbeatWriter | None = None
        self.started_at = time.time()
        self._last_save = 0.0
        self._fde_bytes = b""
        self._last_domain = -1  # domain of the last MariaDB GTID processed
        # high availability (reader/cluster.py): a leader appends only while ``fence()``
        # holds and hands each saved state to ``on_save``; a follower serves ``follow_fde``
        self.fence: Callable[[], bool] | None = None
        self.on_save: Callable[[ReaderState], None] | None = None
        self.follow_fde: FormatDescription | None = None
        self.cluster: dict[str, Any] = {}  # role, epoch, leader, lag_records for status()

    # -- opening: store, state, reconciliation ---------------------------------------------

    def open(self) -> None:
        """Open the change log and the schema history, load and reconcile the state."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.store = self._open_store()
        self.schema = SchemaLink(self.dir / "schema.jsonl")
        saved = ReaderState.load(str(self.dir / STATE_FILE)) or ReaderState()
        state, lost = reconcile(saved, read_log_end(self.store, saved))
        self._apply(state)
        if lost is not None:
            log.error(
                "%s: the change log lost %s; reading them again from the source",
                self.name,
                lost,
            )
        elif self._lost is not None and state.seq < self._lost.last_seq:
            lost = self._lost  # reopened while a lost range is still being read again
        elif state != saved:
            log.info("%s: state reconciled with the change log up to seq %d", self.name, self.seq)
        self._lost = lost
        self._write_status()

    def _open_store(self) -> ChangeLog:
        sc = self.source.store
        options = StoreOptions(
            durability=Durability(sc.durability),
            segment_bytes=sc.segment_bytes,
            retention_age_s=sc.retention_age_s,
            retention_bytes=sc.retention_bytes,
            max_record_bytes=max(16 * 1024 * 1024, self.source.chunk_bytes * 2),
        )
        return ChangeLog.open(str(self.dir / "changes"), options)

    def resume_state(self) -> ReaderState:
        """The resume state as one value (what ``state.json`` holds)."""
        return ReaderState(
            self.position,
            "" if self.gtid_set is None else str(self.gtid_set),
            self.ts_us,
            self.seq,
            tuple(self.change_ids),
            layout_of(self.source.filters, self.source.chunk_bytes),
        )

    def _apply(self, state: ReaderState) -> None:
        """Run with ``state`` (the task keeps it as attributes: the hot path updates them)."""
        self.position = state.position
        self.gtid_set = parse_gtid_set(state.gtid_set) if state.gtid_set else None
        self.ts_us, self.seq = state.ts_us, state.seq
        self.change_ids = list(state.change_ids)

    def _add_gtid(self, one: GtidSet | MariadbGtid | MysqlGtid) -> None:
        if isinstance(one, MariadbGtidPos):
            for g in one.gtids():
                self._add_gtid(g)
            return
        if isinstance(one, MysqlGtidSet):
            self.gtid_set = one if self.gtid_set is None else one.union(self.gtid_set)  # type: ignore[arg-type]
            return
        if isinstance(one, MariadbGtid):
            if not isinstance(self.gtid_set, MariadbGtidPos):
                self.gtid_set = MariadbGtidPos()
            self.gtid_set.add(one)
        else:
            if not isinstance(self.gtid_set, MysqlGtidSet):
                self.gtid_set = MysqlGtidSet()
            self.gtid_set.add(one)

    @property
    def change_id(self) -> int:
        return self.change_ids[-1].change_id if self.change_ids else 0

    # -- running ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask ``run`` to return soon (at the next event or heartbeat of the source)."""
        self._stop = True
        self._wake.set()

    def run(self) -> None:
        """Read until stopped or failed; never raises for source errors (see ``state``)."""
        try:
            if self.store is None:
                self.open()
            if self.source.heartbeat is not None:
                self.heartbeat = HeartbeatWriter(self.source, self.source.heartbeat)
                self.heartbeat.start()
            self._loop()
        except FATAL_ERRORS as e:
            self._fail(e)
        except HeadwaterError as e:
            self._fail(e)
        except Exception as e:
            log.exception("%s: unexpected error", self.name)
            self._fail(e)
        finally:
            if self.heartbeat is not None:
                self.heartbeat.stop()
            self._finish()

    def _fail(self, e: BaseException) -> None:
        self.state = "failed"
        self.error = f"{type(e).__name__}: {e}"
        log.error("%s: task stopped: %s", self.name, self.error)

    def _loop(self) -> None:
        delays = backoff_delays(self.source.reconnect)
        attempts = 0
        while not self._stop:
            progressed = False
            last_error: Exception | None = None
            for host in self.source.hosts:
                if self._stop:
                    break
                try:
                    if self.store is None:  # a reopen after a local failure failed too
                        self._reopen()
                    progressed = self._session(host)
                    last_error = None
                    break
                except FATAL_ERRORS:
                    raise
                except (HeadwaterError, OSError) as e:
                    last_error = e
                    log.warning("%s: %s: %s", self.name, host, e)
                    try:
                        self._after_break(e)
                    except (StoreError, OSError) as again:  # retried at the next round
                        log.warning("%s: cannot reopen the change log: %s", self.name, again)
            if self._stop:
                break
            self.reconnects += 1
            if progressed:
                delays = backoff_delays(self.source.reconnect)
                attempts = 0
            attempts += 1
            limit = self.source.reconnect.max_attempts
            if limit and attempts > limit and last_error is not None:
                raise last_error
            delay = next(delays)
            self.state = "backoff"
            self.error = (
                None if last_error is None else f"{type(last_error).__name__}: {last_error}"
            )
            self._write_status()
            log.info("%s: reconnecting in %.2f s", self.name, delay)
            self._wake.wait(delay)
            self._wake.clear()

    def _after_break(self, error: BaseException | None = None) -> None:
        """The stream broke: forget the transaction under way; if chunks of it were
        appended, reopen the store so that recovery drops the unfinished chunk group.
        After a local resource error (disk full, no file descriptors: ``error`` is a
        StoreError or such an OSError) the store and state are reopened as at start."""
        if self.store is None or _is_local_failure(error):
            self._reopen()
            return
        grouper = getattr(self, "_grouper", None)
        if grouper is not None and grouper.pending and self.store is not None:
            self._flush()  # whole transactions, already counted as processed
        if grouper is not None and grouper.in_transaction:
            open_chunks = grouper.open_chunks
            grouper.abort()
            if open_chunks and self.store is not None:
                self.store.close()
                self.store = self._open_store()

    def _reopen(self) -> None:
        """Close the change log and schema history and open them again (``open``):
        recovery drops a torn tail and the state is reconciled with the log's intact end,
        so what an append lost to a full disk is read from the source again. Raises
        (StoreError, OSError) while the condition lasts; the loop retries with back-off."""
        grouper = getattr(self, "_grouper", None)
        if grouper is not None:
            grouper.abort()
            del self._grouper
        for part in (self.store, self.schema):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.close()
        self.store = None
        self.schema = None
        self.open()
        log.info("%s: change log reopened at seq %d", self.name, self.seq)

    # -- one connection --------------------------------------------------------------------

    def _session(self, host: HostConfig) -> bool:
        """Connect to ``host`` and stream until stopped or broken; True if anything was
        processed. Raises on errors."""
        self.state = "connecting"
        self.host = host
        info = probe(self.source, host, self.replica_host)
        start, first_position = self._decide_start(host, info)
        options = ClientOptions(
            host=host.host,
            port=host.port,
            user=self.source.user,
            password=self.source.password,
            server_id=self.source.server_id,
            start=start,
            heartbeat_period=self.source.heartbeat_period,
            replica_host=self.replica_host,
            tls=tls_options(self.source),
        )
        client = self._client = BinlogClient(options)
        processed = False
        try:
            client.connect()
            assert self.store is not None and self.schema is not None
            self.schema.ensure_bootstrapped(
                self.source,
                host,
                self.filter,
                first_position,
                mariadb=info.is_mariadb,
            )
            if self.heartbeat is not None:
                self.heartbeat.point_at(host)
            grouper = self._grouper = Grouper(
                self.store,
                table_filter=self.filter,
                chunk_bytes=self.source.chunk_bytes,
                change_id=self.change_id,
                on_ddl=self._on_ddl,
                on_table_map=self.schema.observe,
                skip=self._skip,
                batch=True,
                watch=None
                if self.source.heartbeat is None
                else _split(self.source.heartbeat.table),
            )
            grouper.schema_version = self.schema.version
            self.state = "running"
            self.error = None
            self._write_status()
            log.info(
                "%s: reading %s from %s (change_id %d)", self.name, host, start, self.change_id
            )
            self._flush_before_reads(client, grouper)
            feed = grouper.feed
            committed = self._committed
            heartbeats = _HEARTBEATS
            events = 0
            for file, offset, next_file, next_offset, raw in client.events(include_heartbeats=True):
                events += 1
                if raw[2] in heartbeats:  # RawEvent.type_code
                    self._tick(events)
                    events = 0
                    if self._stop:
                        break
                    continue
                done = feed(file, offset, next_file, next_offset, raw)
                if done is not None:
                    processed = True
                    committed(done)
                    if done.is_ddl or events >= 4096:
                        self._tick(events)
                        events = 0
                    if self._stop:
                        break
                elif events >= 4096:  # inside a large transaction
                    self._tick(events)
                    events = 0
                    if self._stop:
                        break
            self._tick(events)
        finally:
            self.bytes_in += client.bytes_received
            client.close()
            self._client = None
        return processed

    def _decide_start(self, host: HostConfig, info: SourceInfo) -> tuple[StartPosition, Position]:
        """Run :func:`choose_start` on this task's state and apply the decision."""
        cfg = self.source.start
        lost = self._lost
        if lost is not None and self.seq >= lost.last_seq:
            lost = self._lost = None  # read again: the seqs are the transactions' own again
        at_time = None
        if self.position is None and not self.change_ids and cfg.kind == "timestamp":
            assert cfg.ts_us is not None
            at_time = file_at_time(self.source, host, info, cfg.ts_us, self.replica_host)
        decision = choose_start(
            cfg,
            self.resume_state(),
            info,
            lost=lost,
            at_time=at_time,
            now_us=_now_us(),
            host=str(host),
            layout=layout_of(self.source.filters, self.source.chunk_bytes),
        )
        self.identity = info.identity
        self._apply(decision.state)
        if decision.ts_floor is not None:
            self._ts_floor = decision.ts_floor
        if decision.note:  # a new change id is worth a warning, a first start is not
            log.log(
                logging.WARNING if decision.save else logging.INFO,
                "%s: %s",
                self.name,
                decision.note,
            )
        if decision.save:
            self._save_state()
        return decision.start, decision.first_position

    def _flush_before_reads(self, client: BinlogClient, grouper: Grouper) -> None:
        """Wire the socket reads: the grouper's pending records are appended before every
        socket read (records are batched per read, one ``append_many``, and none waits
        while the stream is idle), and a :class:`DumpSplitter` lets the compiled scanner
        take the common transactions off the received bytes (:meth:`_native_consume`)
        before the framer sees the rest. Without the framer's read hook, records are
        appended one by one."""
        framer = getattr(client, "_framer", None)
        read = getattr(framer, "_recv_into", None)
        if framer is None or read is None:
            grouper.batch = False
            return
        if grouper.native is None:
            flush = self._flush

            def recv_into(view: memoryview) -> int:
                flush()
                return int(read(view))

            framer._recv_into = recv_into
            return

        def consume(buf: bytearray, start: int, end: int, seq: int) -> tuple[int, int, int]:
            return self._native_consume(framer, buf, start, end, seq)

        def abandon() -> None:
            assert grouper.native is not None
            grouper.native.reset()

        splitter = DumpSplitter(
            read,
            consume,
            ready=lambda: not grouper.in_transaction,
            abandon=abandon,
            before_read=self._flush,
        )
        framer._recv_into = splitter.recv_into

    def _native_consume(
        self, framer: Any, buf: bytearray, start: int, end: int, seq: int
    ) -> tuple[int, int, int]:
        """The splitter's consumer: the grouper's native scan with this task's resume
        checks as bounds, its run reported like any committed transaction."""
        grouper = self._grouper
        gtid_floor: tuple[int, int] | None = None
        gtids = self.gtid_set
        if self._fenced() or self._stop or self._ts_floor is not None:
            return 0, start, seq  # the event path's appends go through the fence
        if isinstance(gtids, MysqlGtidSet):
            return 0, start, seq  # SLOW: the event path checks the start time
        if isinstance(gtids, MariadbGtidPos) and gtids:
            known = {g.domain_id: g.seq_no for g in gtids.gtids()}
            domain = self._last_domain if self._last_domain in known else min(known)
            gtid_floor = (domain, known[domain])
        last = self.position
        after = (
            (last.file_num, last.offset)
            if last is not None and last.change_id == grouper.change_id
            else None
        )
        fde = framer.format_description
        alg = framer.checksum_alg if fde is None else fde.checksum_alg
        status, stop, seq, done, events = grouper.native_scan(
            buf,
            start,
            end,
            seq,
            file=framer.file,
            crc=alg == CHECKSUM_ALG_CRC32,
            verify=framer.verify,
            after=after,
            gtid_floor=gtid_floor,
        )
        framer.bytes_received += stop - start
        if done is not None:
            framer.position = done.next_offset
            self._committed(done)
            self._tick(events)
        return status, stop, seq

    def _fenced(self) -> bool:
        """True (and the task stops) once this leader may no longer append."""
        if self.fence is None or self.fence():
            return False
        if not self._stop:
            log.warning("%s: leadership lost: no more appends", self.name)
        self._stop = True
        return True

    def _flush(self) -> None:
        if self._fenced():
            return
        seq = self._grouper.flush()
        if seq is not None:
            self.seq = seq

    def _tick(self, events: int) -> None:
        self.events_in += events
        now = time.monotonic()
        if now - self._last_save >= self.source.state_interval:
            self._save_state()
            self._last_save = now
            g = self._grouper
            if g.fde is not None:
                self._save_fde(g)

    def _skip(
        self, pos: Position, gtid: str, gobj: MariadbGtid | MysqlGtid | None, ts_s: int
    ) -> bool:
        last = self.position
        if (
            last is not None
            and pos.change_id == last.change_id
            and (pos.file_num, pos.offset) <= (last.file_num, last.offset)
        ):
            return True
        if gobj is not None and self.gtid_set is not None and gobj in self.gtid_set:
            return True
        if self._ts_floor is not None:
            if ts_s * 1_000_000 < self._ts_floor:
                return True
            self._ts_floor = None
        return False

    def _on_ddl(self, query: QueryEvent, pos: Position) -> int:
        assert self.schema is not None
        return self.schema.apply_ddl(query.query, query.schema, pos)

    def _committed(self, done: Committed) -> None:
        if done.skipped:
            self.transactions_skipped += 1
            return
        self.position = done.position
        if done.gtid_obj is not None:
            self._add_gtid(done.gtid_obj)
        self.ts_us = done.ts_us
        if isinstance(done.gtid_obj, MariadbGtid):
            self._last_domain = done.gtid_obj.domain_id
        if done.stored:
            self.transactions_stored += done.transactions
            self.records_stored += done.records
            if done.last_seq:  # 0 when batched: the seq is known at the flush
                self.seq = done.last_seq
        else:
            self.transactions_filtered += 1
        if done.watched and self.heartbeat is not None:
            times = heartbeat_times(done.watched, self._grouper.fde, self.heartbeat.row_id)
            if times:
                self.lag_s = max(0.0, (_now_us() - times[-1]) / 1e6)
                if self.store is not None:  # rows per table between heartbeats (DBUS)
                    pending = len(self._grouper.pending)
                    self.heartbeat.passed(times[-1], self.store.next_seq + pending)

    # -- persistence -----------------------------------------------------------------------

    def _save_state(self) -> None:
        """Persist the resume point once the store has acknowledged what it covers."""
        if self.store is None or self.store.closed or self._fenced():
            return
        grouper = getattr(self, "_grouper", None)
        if grouper is not None:
            self._flush()  # the state covers only what the store was given
        self.store.flush()
        state = self.resume_state()
        state.save(str(self.dir / STATE_FILE))
        if self.on_save is not None:
            self.on_save(state)
        self._write_status()

    def _save_fde(self, grouper: Grouper) -> None:
        fde_raw = grouper.fde_raw
        if fde_raw and fde_raw != self._fde_bytes:
            atomic_write(str(self.dir / FDE_FILE), fde_raw)
            self._fde_bytes = fde_raw

    def _write_status(self) -> None:
        """Write status.json; never raises (a full disk or no file descriptors must not
        turn a retry into a failure: the live status still says what happens)."""
        try:
            write_status_file(self.dir, self.status())
        except OSError as e:
            log.warning("%s: cannot write %s: %s", self.name, STATUS_FILE, e)

    def _finish(self) -> None:
        try:
            grouper = getattr(self, "_grouper", None)
            if grouper is not None:
                grouper.abort()
                self._save_fde(grouper)
            self._save_state()
        except (StoreError, OSError) as e:
            log.error("%s: saving the state failed: %s", self.name, e)
        if self.state != "failed":
            self.state = "stopped"
        try:
            self._write_status()
        except OSError as e:
            log.error("%s: writing the status failed: %s", self.name, e)

    def close(self) -> None:
        """Release the store and the schema history (after ``run`` returned)."""
        if self.store is not None:
            self.store.close()
        if self.schema is not None:
            self.schema.close()

    def status(self) -> dict[str, Any]:
        """The task's status (documented in docs/configuration.md, "Reader status")."""
        return task_status(self)

    def format_description(self) -> FormatDescription | None:
        """The FORMAT_DESCRIPTION of the stream being read (None before the first one)."""
        grouper = getattr(self, "_grouper", None)
        fde = None if grouper is None else grouper.fde
        return self.follow_fde if fde is None else fde


#: Local resource errors a task waits out (errno): disk full, quota, too many open files.
_RESOURCE_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.EIO))


def _is_local_failure(error: BaseException | None) -> bool:
    """Whether ``error`` left the store unusable until it is reopened."""
    if isinstance(error, StoreError):
        return True
    return isinstance(error, OSError) and error.errno in _RESOURCE_ERRNOS


def _split(table: str) -> tuple[str, str]:
    db, _, name = table.partition(".")
    return db, name


def _now_us() -> int:
    return time.time_ns() // 1000
