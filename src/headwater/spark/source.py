"""The ``headwater`` PySpark data source (Python Data Source API, pinned to pyspark 4.3).

::

    spark.dataSource.register(HeadwaterDataSource)     # or headwater.spark.register(spark)
    df = (spark.readStream.format("headwater")
          .option("server", "http://127.0.0.1:8080").option("task", "orders")  # or "path"
          .option("tables", "shop.*").option("maxRowsPerTrigger", "10000")
          .load())

Rows have the change schema of :mod:`headwater.changes.schema` (with the ``columns``
option, only the columns it names: a pipeline sets it to what its plan reads). Options
are in :mod:`headwater.spark.offsets` and docs/formats.md ("Spark source").

Contracts (pyspark's ``datasource.py``): the :class:`DataSource` and its readers are
pickled to Python workers; ``partitions``/``latestOffset`` run on the driver side,
``read`` on executors and opens its own log or HTTP connection (partitions.py). The stream
reader implements the 4.2+ ``latestOffset(start, limit)`` with admission control
(``getDefaultReadLimit``: ``ReadMaxRows`` from ``maxRowsPerTrigger`` else ``ReadMaxBytes``
from ``maxBytesPerTrigger``; whenever Spark passes a limit other than
``ReadAllAvailable`` both option limits apply) and ``SupportsTriggerAvailableNow``:
``prepareForTriggerAvailableNow`` fixes the log's end at that moment as the target, and
later batches never pass it. ``commit`` does nothing: Spark's checkpoint location owns
the consumer's progress (DESIGN.md decision 7) and the log's retention is the reader's.

Bursts. When new records appear after the stream was idle, ``latestOffset`` waits (up to
``burstWaitMs``, :class:`BurstGate`) for the log to stop growing for ``burstQuietMs`` (50)
before it cuts the micro-batch: a reader catching up lands thousands of transactions
within a few tens of milliseconds, and cutting at the first one made a micro-batch of one
transaction and a second of the rest, each paying the fixed cost of a batch (~0.3 s on two
cores). A stream that is not idle is never held back: the records that arrive while a
batch runs form the next one at once. Nor is a live workload's commit: the gate waits only
when at least ``BURST_RECORDS`` (64) new records are there at its first look (a catch-up
appends them by the hundred per group commit), or fewer that hold ``BURST_BYTES`` (32
KiB) of payload (a catch-up of large transactions shows one at its first look: in
bench/kafka.py's rounds of 1000-row transactions that record was a batch of its own,
paying a batch's fixed cost, 0.1-0.15 s, for 1000 rows); with fewer and smaller, the
batch is cut at once. (What it bought there, bench/kafka.py alternating with the code
before it, this session's bus-path changes included, load 2.4-5.3: one batch a round
instead of two or three, the JVM's CPU 0.05-0.09 s a round against 0.16-0.36, but no
shorter rounds, median 1.23 s against 1.15: the first small batch's fixed cost had run
while the rest landed, and the gate now waits the landing out idle.) At a
steady 50 commits a second, a pipeline whose batches end within 20 ms used to find the
stream idle before each batch and wait the whole ``burstWaitMs`` (the log never stays
still for ``burstQuietMs``): 200 ms of the commit-to-visible latency. A catch-up whose
first look sees a few records now makes one small batch first (applied in the driver by
a pipeline's SQL sinks: :mod:`headwater.pipeline.direct`). On a task directory the gate
sleeps on the store's watch of the head file, so the quiet period is timed from the last
growth itself (a 50 ms poll saw it up to 50 ms late), and with a byte limit the records
landed so far are planned while it waits (``scan_batch``'s ``resume``: record headers
only), so the cut needs no scan of its own: a catch-up of 15,000 one-row transactions
spent about 150 ms in the gate and 40-70 ms in the scan after it, now about 100 ms in
all (``bench/pipeline.py``'s single-row round, load 3-4). Until ``BURST_RECORDS`` records
of the burst have landed, the quiet period is ``EARLY_QUIET`` (3) times as long: a
restarted reader's first group commit holds one record, and its next landed 32-108 ms
later in bench/kafka.py's rounds at load 6-8 (a watch of the head file; the later gaps of
those catch-ups 0.1-45 ms, most under 25), so that two of five rounds were cut after one
to three records and paid a second batch's fixed cost. A catch-up's burst may take
``burstCatchUpMs`` (1000) to land instead of ``burstWaitMs``: on a task directory, when
the newest record at the gate's first look was committed :data:`CATCH_UP_LAG_S` (2 s) or
more before now (its header's ``ts_us``: the reader is restarting or behind, not a live
burst), since a live workload's latency is not at stake and one batch of the whole
catch-up pays one batch's fixed cost and collapses each key's writes once. A restarted
reader stored bench/pipeline.py's 800,000 changes in 0.15-0.22 s, or 0.30-0.62 s in 11
of 24 rounds, and the 200 ms cap cut those in two batches (2.3-3.5 s rounds against
about 1.6 s). A source server whose clock runs 2 s or more behind this host's makes
every burst after an idle moment wait up to ``burstCatchUpMs`` (still ending after
``burstQuietMs`` of quiet); ``burstCatchUpMs: 0`` turns this off.

Idle. With a ``tables`` option, new records that it filters out (the reader's heartbeats,
other tables' changes) are not new data: ``latestOffset`` answers ``start`` for them
(:class:`FilteredTail`), so they cost no micro-batch; each used to run an empty one
(about a third of a core for a heartbeat a second). The offset moves past them lazily:
with the next batch that has wanted rows (its range starts before them; planning skips
them), or by itself, in an empty micro-batch, once they have waited ``idleAdvanceMs``
(60 s), so that a checkpoint does not fall far behind the log's retention. The scan
remembers how far it got, so a poll reads only the records appended since the last one.
Trigger.AvailableNow reads to its fixed end as before.

An idle stream is also polled less: Spark asks ``latestOffset`` again 10 ms after each
"nothing new" (``spark.sql.streaming.pollingDelay``), each time a round trip from the JVM
to the source's Python process (about 1.5 ms of CPU in all on this machine, 100 times a
second). ``latestOffset`` waits for the log to grow before it says so, and returns as soon
as it does: on a task directory it sleeps on the store's inotify watch of the head file
(the writer's acknowledgements wake it), over HTTP it long-polls ``/v1/fetch`` from the
log's end (the server's writer wakes it; a server whose ``max_wait`` refuses the wait is
asked every 20 ms). New records wait no longer than before. The first wait after data is
``IDLE_WAIT_S`` (0.5 s); once the stream has had no new data for ``IDLE_LONG_AFTER_S`` (5
s), each wait is ``IDLE_WAIT_MAX_S`` (4 s), so an idle stream costs one round trip (about
3 ms of CPU with its ``reportLatestOffset``, JVM and Python, measured at load 5) every 4 s
instead of two a second (``bench/idle.py``). The short waits first keep
``processAllAvailable`` (which returns at the end of the first wait that finds nothing)
quick in tests and tools that call it right after a batch. ``reportLatestOffset`` reuses
the end ``latestOffset`` just saw. Stopping the query does not wait for an idle wait to
end: ``query.stop()`` interrupts the stream thread, and its read from the source's process
gives up (measured by ``tests/integration/test_spark_source_idle.py``); the pipeline
runner stops a query whose trigger is only getting offsets at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from headwater.changes.schema import change_schema
from headwater.gcpause import freeze_worker_heap
from headwater.position import Position
from headwater.spark.logaccess import HttpLog, LocalLog, open_log
from headwater.spark.offsets import LogOffset, SourceOptions, TableMatcher, parse_options
from headwater.spark.partitions import LogSlice, Scan, plan_slices, read_slice, scan_batch

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql.types import StructType

#: How long ``latestOffset`` of an idle stream looks for new records before it answers
#: that there are none, and how often it looks meanwhile (module docstring, "Idle").
IDLE_WAIT_S = 0.5
IDLE_CHECK_S = 0.02
#: The idle wait once the stream has had no new data for IDLE_LONG_AFTER_S.
IDLE_WAIT_MAX_S = 4.0
IDLE_LONG_AFTER_S = 5.0
#: New records after an idle stream that show a burst landing (module docstring,
#: "Bursts"); fewer are a live workload's commits, and the batch is cut at once, unless
#: they hold BURST_BYTES of payload or more.
BURST_RECORDS = 64
#: Payload bytes of fewer than BURST_RECORDS new records that show a burst all the same:
#: a catch-up of large transactions shows one record at the first look. 32 KiB is about
#: 600 rows of bench/kafka.py's table (its 1000-row INSERT is 57 KB of binlog events,
#: its UPDATE 110 KB), six 200-row commits of bench/latency.py's 10,000 rows/s phase.
BURST_BYTES = 32 << 10
#: How far behind the newest record of a burst's first look must be to make it a
#: catch-up's (module docstring, "Bursts"): binlog timestamps have whole seconds, and the
#: source server's clock may differ from this host's by a little.
CATCH_UP_LAG_S = 2.0
#: The quiet period's factor while a burst has fewer than BURST_RECORDS records (module
#: docstring, "Bursts"): a restarted reader's first group commits pause the longest.
EARLY_QUIET = 3

__all__ = [
    "BURST_BYTES",
    "BURST_RECORDS",
    "CATCH_UP_LAG_S",
    "EARLY_QUIET",
    "IDLE_LONG_AFTER_S",
    "IDLE_WAIT_MAX_S",
    "IDLE_WAIT_S",
    "BurstGate",
    "FilteredTail",
    "HeadwaterDataSource",
    "HeadwaterReader",
    "HeadwaterStreamReader",
]

log = logging.getLogger(__name__)


class HeadwaterDataSource(DataSource):
    """``format("headwater")``: batch and streaming reads of a reader task's change log."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = parse_options(options)  # bad options fail at load(), on the driver

    @classmethod
    def name(cls) -> str:
        return "headwater"

    def schema(self) -> StructType:
        # The ``columns`` option: only those (a pipeline's plan needs; Spark 4.3's Python
        # data sources get no column pruning from Spark: pushFilters is all they get).
        full = change_schema()
        wanted = self.parsed.columns
        if wanted is None:
            return full
        from pyspark.sql.types import StructType

        return StructType([f for f in full.fields if f.name in wanted])

    def reader(self, schema: StructType) -> HeadwaterReader:
        return HeadwaterReader(self.parsed)

    def streamReader(self, schema: StructType) -> HeadwaterStreamReader:
        return HeadwaterStreamReader(self.parsed)


class _Driver:
    """The driver side's open log (opened lazily, never pickled)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._log: LocalLog | HttpLog | None = None

    def log(self) -> LocalLog | HttpLog:
        if self._log is None:
            # The driver decodes only to count rows for a row limit (maxRowsPerTrigger).
            self._log = open_log(self.options)
        return self._log

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_log": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._log = None


class HeadwaterReader(_Driver, DataSourceReader):
    """Batch read of ``[startingPosition, endingPosition)`` (default: all retained, up to
    the log's end when the query is planned)."""

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        changelog = self.log()
        try:
            start = LogOffset(changelog.resolve(opts.starting))
            if opts.ending is None:
                target, _pos = changelog.end()
            else:
                target = changelog.resolve(opts.ending)
            scan = scan_batch(changelog, opts, start, target)
            return plan_slices(opts, start, scan.end, scan.sizes, opts.partitions)
        finally:
            self.close()

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        if not isinstance(partition, LogSlice):  # Spark reads one empty partition when
            return iter(())  # partitions() planned none
        return _read_and_settle(partition)


def _read_and_settle(partition: LogSlice) -> Iterator[pyarrow.RecordBatch]:
    """A slice's rows, then the worker's heap frozen (:func:`headwater.gcpause.
    freeze_worker_heap`: the daemon's full collection after every task, 20-45 ms)."""
    yield from read_slice(partition)
    freeze_worker_heap()


class BurstGate:
    """Where to cut a micro-batch that follows an idle stream (module docstring, "Bursts").

    :meth:`settle` is called by ``latestOffset`` when there is new data, with the log's
    end. After an idle stream (:meth:`nothing_new` was the last call) it polls the end
    every ``quiet_s`` until it stays where it is for one poll, or ``wait_s`` have passed,
    and returns the end it saw last; otherwise it returns ``end`` at once. It waits inside
    the call rather than answering "no new data": under a processing-time trigger that
    answer would postpone the batch by a whole trigger interval. ``wait_s == 0`` turns
    the gate off.
    """

    def __init__(
        self,
        wait_s: float,
        quiet_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        catch_up_s: float = 0.0,
    ) -> None:
        self.wait_s = wait_s
        self.quiet_s = quiet_s
        #: the wait of a catch-up's burst (``behind`` of :meth:`settle`), when longer
        self.catch_up_s = catch_up_s
        self.clock = clock
        self.sleep = sleep
        self.idle = True

    def nothing_new(self) -> None:
        """The stream has no new data: the next data after this starts a burst."""
        self.idle = True

    def settle(
        self,
        end: int,
        current_end: Callable[[], int],
        begin: int | None = None,
        wait: Callable[[int, float], None] | None = None,
        grown: Callable[[int], None] | None = None,
        size: Callable[[int, int], int] | None = None,
        behind: Callable[[int], bool] | None = None,
    ) -> int:
        """The end to cut at (class docstring). ``wait(end, timeout)``, when given,
        returns as soon as the log grows past ``end`` (the store's watch of its head
        file), so the quiet period is timed from the last growth itself rather than
        checked once per ``quiet_s`` poll (a poll saw it 0-``quiet_s`` late: 25 ms on
        average); ``grown(end)`` is called with each new end, inside the quiet period
        (the source plans the records landed so far meanwhile). With fewer than
        :data:`BURST_RECORDS` records past ``begin``, the batch is cut at once unless
        ``size(begin, end)`` (their payload bytes; it may stop counting at
        :data:`BURST_BYTES`) shows a burst's worth of work. When ``behind(end)`` says the
        records landed at the first look are a catch-up's (module docstring, "Bursts"),
        the burst may take ``catch_up_s`` to land instead of ``wait_s``."""
        if not self.idle or self.wait_s <= 0:
            self.idle = False
            return end
        if (
            begin is not None
            and end - begin < BURST_RECORDS
            and (size is None or size(begin, end) < BURST_BYTES)
        ):
            # A live workload's next commit, not a catch-up landing: cut now.
            self.idle = False
            return end
        limit = self.wait_s
        if self.catch_up_s > limit and behind is not None and behind(end):
            limit = self.catch_up_s
        if wait is not None:
            deadline = self.clock() + limit
            quiet_until = min(self.clock() + self._quiet(begin, end), deadline)
            if grown is not None:
                grown(end)
            while (left := quiet_until - self.clock()) > 0:
                wait(end, left)
                now_end = current_end()
                if now_end != end:
                    end = now_end
                    quiet_until = min(self.clock() + self._quiet(begin, end), deadline)
                    if grown is not None:
                        grown(end)
        else:
            deadline = self.clock() + limit
            while self.clock() < deadline:
                self.sleep(min(self.quiet_s, deadline - self.clock()))
                now_end = current_end()
                if now_end == end:
                    break
                end = now_end
        self.idle = False
        return end

    def _quiet(self, begin: int | None, end: int) -> float:
        """The quiet period after the log grew to ``end``: ``EARLY_QUIET`` times
        ``quiet_s`` while fewer than :data:`BURST_RECORDS` records of the burst have
        landed (module docstring, "Bursts")."""
        early = begin is not None and end - begin < BURST_RECORDS
        return self.quiet_s * EARLY_QUIET if early else self.quiet_s


def _payload(changelog: LocalLog) -> Callable[[int, int], int]:
    """The gate's ``size``: payload bytes of records ``[begin, end)`` from their headers,
    counted up to :data:`BURST_BYTES` (a task directory only: over HTTP the headers
    come with the whole records, fetched again by the batch)."""

    def size(begin: int, end: int) -> int:
        total = 0
        for head in changelog.heads(begin, end):
            total += head.size
            if total >= BURST_BYTES:
                break
        return total

    return size


def _behind(changelog: LocalLog) -> Callable[[int], bool]:
    """The gate's ``behind``: whether the newest record before ``end`` was committed
    :data:`CATCH_UP_LAG_S` or more before now (a task directory only: one record header
    read)."""

    def behind(end: int) -> bool:
        for head in changelog.heads(end - 1, end):
            return head.ts_us < (time.time() - CATCH_UP_LAG_S) * 1_000_000
        return False

    return behind


def _gate(options: SourceOptions) -> BurstGate:
    return BurstGate(
        options.burst_wait_ms / 1000,
        options.burst_quiet_ms / 1000,
        catch_up_s=options.burst_catch_up_ms / 1000 if options.burst_wait_ms else 0.0,
    )


class FilteredTail:
    """Whether the records after an offset hold any the ``tables`` option wants (module
    docstring, "Idle").

    :meth:`wanted` walks the record headers from the offset to the log's end, stopping at
    the first wanted record; it remembers that ``[offset, scanned)`` holds none, so the
    next call with the same offset reads only what was appended since. :meth:`due` says
    whether those unwanted records have waited ``advance_s`` since first seen.
    """

    def __init__(
        self, tables: TableMatcher, advance_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.tables = tables
        self.advance_s = advance_s
        self.clock = clock
        self._key: tuple[int, int] | None = None
        self._scanned = 0  # records [self._key's seq, self._scanned) are all unwanted
        self._since = 0.0

    def wanted(self, changelog: LocalLog | HttpLog, begin: LogOffset, end: int) -> bool:
        """Whether records ``[begin, end)`` hold a wanted one (or may: no filter, or a
        batch ended inside ``begin``'s record, whose rest is wanted rows)."""
        if self.tables.patterns is None or begin.row > 0:
            return True
        if self._key != begin.key():
            self._key, self._scanned, self._since = begin.key(), begin.seq, self.clock()
        for head in changelog.heads(self._scanned, end):
            if self.tables.record_wanted(head.tables):
                return True
            self._scanned = head.seq + 1
        self._scanned = max(self._scanned, end)  # (a server leaves filtered records out)
        return False

    def due(self) -> bool:
        return self.clock() - self._since >= self.advance_s


def _tail(options: SourceOptions) -> FilteredTail:
    return FilteredTail(options.tables, options.idle_advance_ms / 1000)


class HeadwaterStreamReader(_Driver, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of the change log; offsets are :class:`LogOffset` dicts."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._target: int | None = None  # Trigger.AvailableNow: the end fixed at its start
        self._scans: dict[tuple[tuple[int, int], tuple[int, int]], list[tuple[int, int]]] = {}
        self._gate = _gate(options)
        self._tail = _tail(options)
        self._end: tuple[int, Position | None] | None = None  # the log's end, last seen
        self._idle_since: float | None = None  # when "nothing new" began (docstring, "Idle")

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_log": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._target = None
        self._scans = {}
        self._gate = _gate(self.options)
        self._tail = _tail(self.options)
        self._end = None
        self._idle_since = None

    def initialOffset(self) -> dict[str, Any]:
        return LogOffset(self.log().resolve(self.options.starting)).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows is not None:
            return ReadMaxRows(self.options.max_rows)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target, _pos = self.log().end()
        log.info("availableNow: reading up to seq %d", self._target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        long = now - self._idle_since >= IDLE_LONG_AFTER_S
        deadline = now + (IDLE_WAIT_MAX_S if long else IDLE_WAIT_S)
        while True:
            answer = self._latest(start, limit)
            if answer is not None:
                self._idle_since = None
                return answer
            if self._target is not None:  # availableNow: nothing will come; end now
                return start
            # Nothing new (module docstring, "Idle"): wait for the log to grow for a
            # while before saying so; Spark asks again 10 ms after the answer.
            seen = self._end[0] if self._end is not None else None
            while True:
                remaining = deadline - time.monotonic()
                if remaining < IDLE_CHECK_S:
                    return start
                changelog = self.log()
                if seen is not None:  # woken by the writer's acknowledgement (docstring)
                    changelog.wait_past(seen, remaining)
                else:
                    time.sleep(IDLE_CHECK_S)
                if changelog.end()[0] != seen:
                    break

    def _latest(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any] | None:
        """The end of the next batch from ``start``, or None when there is nothing new."""
        begin = LogOffset.from_dict(start)
        changelog = self.log()
        log_end, last = self._end = changelog.end()
        target = log_end if self._target is None else min(log_end, self._target)
        if begin.seq >= target:
            self._gate.nothing_new()
            return None
        if self._target is None and not self._tail.wanted(changelog, begin, log_end):
            # Only records the tables option filters out (module docstring, "Idle").
            self._gate.nothing_new()
            if not self._tail.due():
                return None
            log.debug("moving past unwanted records %d..%d", begin.seq, log_end - 1)
            return LogOffset(log_end, 0, last).to_dict()
        max_rows = max_bytes = None
        if not isinstance(limit, ReadAllAvailable):
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_rows
            max_bytes = (
                limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.options.max_bytes
            )
        planned: Scan | None = None  # the records landed so far, planned during the gate
        if self._target is None:  # (availableNow's end is fixed already)

            def grown(end: int) -> None:
                nonlocal planned
                planned = scan_batch(
                    changelog, self.options, begin, end, max_bytes=max_bytes, resume=planned
                )

            # Let a burst land before cutting the batch (module docstring).
            landed = self._gate.settle(
                log_end,
                lambda: changelog.end()[0],
                begin.seq,
                wait=changelog.wait_past if isinstance(changelog, LocalLog) else None,
                grown=grown if max_rows is None and max_bytes is not None else None,
                size=_payload(changelog) if isinstance(changelog, LocalLog) else None,
                behind=_behind(changelog) if isinstance(changelog, LocalLog) else None,
            )
            if landed != log_end:
                log_end, last = self._end = changelog.end()
                target = log_end
        if isinstance(limit, ReadAllAvailable):
            if target == log_end:
                return LogOffset(target, 0, last).to_dict()
            # availableNow's target is behind the log's end: scan for its position
            return scan_batch(changelog, self.options, begin, target).end.to_dict()
        scan = scan_batch(
            changelog,
            self.options,
            begin,
            target,
            max_rows=max_rows,
            max_bytes=max_bytes,
            resume=planned if max_rows is None else None,
        )
        if scan.end.key() == begin.key():
            return None
        self._scans = {(begin.key(), scan.end.key()): scan.sizes}
        return scan.end.to_dict()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Spark asks right after latestOffset, whose look at the log's end is as new.
        end, self._end = self._end, None
        seq, last = end if end is not None else self.log().end()
        return LogOffset(seq, 0, last).to_dict()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = LogOffset.from_dict(start), LogOffset.from_dict(end)
        if begin.key() >= stop.key():
            return []
        sizes = self._scans.pop((begin.key(), stop.key()), None)
        if sizes is None:  # not planned by this process (a restart replays the batch)
            target = stop.seq + 1 if stop.row > 0 else stop.seq
            sizes = scan_batch(self.log(), self.options, begin, target).sizes
        return plan_slices(self.options, begin, stop, sizes, self.options.partitions)

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        if not isinstance(partition, LogSlice):  # Spark reads one empty partition when
            return iter(())  # partitions() planned none
        return _read_and_settle(partition)

    def commit(self, end: dict[str, Any]) -> None:
        LogOffset.from_dict(end)  # a malformed offset is a bug: fail loudly
        log.debug("committed %s", end)

    def stop(self) -> None:
        self.close()
