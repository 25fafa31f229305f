"""Micro-batches of bus sinks sent from the driver, without a Spark job (issue #20).

A pipeline whose sinks are all message buses (Kafka, NATS JetStream, Redis Streams) gains
nothing from Spark per micro-batch: with one writer task (``tasks: 1``, ``ordering:
global``, Kafka's default) :mod:`headwater.sinks.bus.spark` coalesces the batch into one
partition, so the source's decoding, the JVM's two Arrow crossings (Python worker -> rows
-> Arrow again), the sort and the writer all run as one task, after a Spark job's fixed
~0.2-0.3 s. :class:`BusDirect` does the same work inside ``foreachBatch``, in the driver,
for a batch of any size:

1. the batch's offsets come from Spark's offset log, as for the SQL sinks' driver path
   (:func:`headwater.pipeline.direct.offset_at`): batch 0 and missing or unreadable
   offset files take the Spark path;
2. the slice is decoded by :func:`headwater.spark.partitions.read_slice` (what an
   executor runs) batch by batch: never the whole micro-batch in memory. On a task
   directory its first records were read ahead (the SQL sinks' driver path's
   :class:`~headwater.pipeline.direct.Prefetch`, from the last batch's end once at least
   64 records wait there: a catch-up) while the source's burst gate let them land and
   Spark planned the batch, when the driver is idle (reading them was 15% of the
   decoding thread's GIL samples in bench/kafka.py). Each batch runs
   through the transforms' Python row operations
   (:class:`headwater.pipeline.direct.RowTransforms`) and loses ``commit_ts`` as
   :func:`~headwater.sinks.bus.spark.write_partitions` drops it;
3. each sink's rows go to the task index the Spark path gives them: 0 with one task or
   global order; with ``tasks > 1`` (order per table) ``pmod(hash(source, database,
   table), tasks)``, Spark's ``HashPartitioning`` of ``repartition`` (:func:`spark_task`:
   Spark's Murmur3 with seed 42, a test holds it equal to ``F.hash``), computed once per
   distinct table;
4. each (sink, index) has a writer thread running the sink's own ``write_partition``
   (the function the executor's task runs: :meth:`KafkaSink.writer` and its siblings),
   fed through a bounded queue with Arrow batches of exactly
   ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (the last one fewer), in
   sequence order: what the executor's ``mapInArrow`` function receives. Batch
   boundaries matter to the UMS format (a message is a run of one table's rows within a
   batch); the others are a message per row.

So the messages, keys, topics, message ids and task indexes are the Spark path's, and a
batch replayed after a crash may take either path: Kafka ``exactly_once`` keys its
transactional id and recorded position on the task index, NATS and Redis de-duplicate by
message id. One exception: once a row of a batch is over the Spark path's per-row Arrow
budget (:mod:`headwater.sinks.bus.spark`, "Arrow batches": 64 MiB / 10,000 rows by
default) Spark cuts its Arrow batches by bytes, which this path does not copy; with the
UMS format such a batch's messages may be grouped differently on the two paths.

Memory: at most :data:`QUEUE_BATCHES` Arrow batches queued per writer, one partial batch
held per writer, the decoder's current batch, and the records read ahead
(``driverApplyMaxRows`` records and 64 MiB of payload at most). A writer that fails stops the read
(nothing more is decoded for nothing); the first error, by sink order then task index, is
raised from ``foreachBatch`` as the Spark path's job failure would be, and the batch is
run again from its offsets at the next start.

Eligible: every sink is a bus sink, the ``headwater`` source, no ``snapshot`` signals,
no ``filter`` or computed column (Spark SQL), and ``driverApplyMaxRows`` not 0
(:func:`headwater.pipeline.direct.driver_unsupported`). Mixed bus and SQL sinks take the
Spark path: a batch is done by one path whole, never half. The driver's figures of a
batch (rows in and out per table, newest commit time) fill the progress reports Spark
leaves empty (:func:`headwater.pipeline.direct.patch_reports`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.errors import HeadwaterError
from headwater.pipeline.direct import (
    SPARK_SEED,
    DirectBatch,
    Prefetch,
    RowTransforms,
    driver_unsupported,
    offset_at,
    patch_reports,
)

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import SparkSession

    from headwater.pipeline.config import PipelineConfig
    from headwater.sinks.bus.spark import Writer
    from headwater.spark.logaccess import HttpLog, LocalLog
    from headwater.spark.offsets import LogOffset, SourceOptions
    from headwater.store import Record

__all__ = ["BusDirect", "bus_unsupported", "murmur3_hash", "spark_task"]

log = logging.getLogger(__name__)

_M32 = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593
#: Arrow batches queued per writer thread (module docstring, "Memory").
QUEUE_BATCHES = 2
#: How long a blocked put or get waits at most between looks at the other side's state.
WAIT_S = 0.5
_MAX_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k: int) -> int:
    return (_rotl32((k * _C1) & _M32, 15) * _C2) & _M32


def _mix_h1(h: int, k: int) -> int:
    return (_rotl32(h ^ k, 13) * 5 + 0xE6546B64) & _M32


def _murmur3(data: bytes, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes(data, seed)``, unsigned: little-endian
    4-byte words, then the tail one *signed* byte at a time (not the reference
    algorithm's tail; Spark keeps it for compatibility, and ``Murmur3Hash`` hashes
    strings with it), then the final mix with the length."""
    n = len(data)
    aligned = n - n % 4
    h = seed & _M32
    for i in range(0, aligned, 4):
        h = _mix_h1(h, _mix_k1(int.from_bytes(data[i : i + 4], "little")))
    for b in data[aligned:]:
        h = _mix_h1(h, _mix_k1((b - 256 if b >= 128 else b) & _M32))
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def murmur3_hash(*values: str | None) -> int:
    """Spark SQL's ``hash(values...)`` of strings, a signed 32-bit int: each non-null
    value's UTF-8 bytes hashed with the previous hash as the seed (nulls leave it), from
    42."""
    h = SPARK_SEED
    for value in values:
        if value is not None:
            h = _murmur3(value.encode("utf-8", "surrogatepass"), h)
    return h - (1 << 32) if h >= 1 << 31 else h


def spark_task(source: str | None, database: str | None, table: str | None, tasks: int) -> int:
    """The partition ``repartition(tasks, source, database, table)`` puts a row in:
    ``pmod(hash(source, database, table), tasks)`` (Python's ``%`` is ``pmod``)."""
    return murmur3_hash(source, database, table) % tasks


def bus_unsupported(
    config: PipelineConfig, sinks: Sequence[Any], options: SourceOptions
) -> str | None:
    """Why ``config``'s batches cannot be sent from the driver (None: they can)."""
    from headwater.sinks.kafka.factory import KafkaSink
    from headwater.sinks.nats.factory import NatsSink
    from headwater.sinks.redis.factory import RedisSink

    why = driver_unsupported(config, options)
    if why is not None:
        return why
    if not sinks or not all(isinstance(s, KafkaSink | NatsSink | RedisSink) for s in sinks):
        return "a sink that is not a message bus"
    return None


class _Aborted(HeadwaterError):
    """The driver's read of the batch failed: a writer's rows end with this error."""


_END = object()


class _Feed:
    """One writer thread: ``write(index, batches)`` over the Arrow batches :meth:`put`
    hands it, re-cut to ``rows`` rows each (module docstring, step 4)."""

    def __init__(self, write: Writer, index: int, rows: int, name: str) -> None:
        self.index = index
        self.rows = rows
        self.sent = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_BATCHES)
        self._held: list[pyarrow.Table] = []
        self._held_rows = 0
        self._ended = threading.Event()
        self._aborted: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(write,), name=f"hw-bus-{name}-{index}", daemon=True
        )
        self._thread.start()

    @property
    def failed(self) -> bool:
        return self._ended.is_set() and self.error is not None

    def put(self, table: pyarrow.Table) -> None:
        """Rows for this writer, in sequence order after those given before."""
        import pyarrow as pa

        self._held.append(table)
        self._held_rows += table.num_rows
        if self._held_rows < self.rows:
            return
        whole = pa.concat_tables(self._held)
        at = 0
        while whole.num_rows - at >= self.rows:
            self._offer(whole.slice(at, self.rows))
            at += self.rows
        rest = whole.slice(at)
        self._held, self._held_rows = ([rest] if rest.num_rows else []), rest.num_rows

    def finish(self) -> None:
        """The last (partial) batch and the end; waits for the writer."""
        import pyarrow as pa

        if self._held_rows:
            self._offer(pa.concat_tables(self._held))
        self._held, self._held_rows = [], 0
        self._offer(_END)
        self._thread.join()

    def abort(self, error: BaseException) -> None:
        """End the writer with ``error`` (its iterator raises it) and wait for it."""
        self._aborted = _Aborted(f"the driver's read of the batch failed: {error!r}")
        self._held = []
        self._thread.join()

    def _offer(self, item: Any) -> None:
        """Queue ``item`` (a table: as one Arrow batch) unless the writer has ended (one
        that returns early, as Kafka's ``exactly_once`` does for a committed batch,
        reads no more)."""
        if item is not _END:
            item = item.combine_chunks().to_batches()[0]
        while not self._ended.is_set():
            try:
                self._queue.put(item, timeout=WAIT_S)
                return
            except queue.Full:
                continue

    def _batches(self) -> Iterator[pyarrow.RecordBatch]:
        while True:
            if self._aborted is not None:
                raise self._aborted
            try:
                item = self._queue.get(timeout=WAIT_S)
            except queue.Empty:
                continue
            if item is _END:
                return
            yield item

    def _run(self, write: Writer) -> None:
        try:
            self.sent = write(self.index, self._batches())
        except BaseException as exc:  # raised by the driver thread (finish)
            self.error = exc
        finally:
            self._ended.set()
            while not self._queue.empty():  # (what a writer that ended early left)
                self._queue.get_nowait()


class _Route:
    """One sink's writers of a batch, by task index (module docstring, steps 3-4)."""

    def __init__(self, sink: Any, batch_id: int, rows: int, name: str) -> None:
        self.ordering, self.tasks, self.write = sink.writer(batch_id)
        self.single = self.ordering == "global" or self.tasks == 1
        self.rows = rows
        self.name = name
        self.feeds: dict[int, _Feed] = {}
        self._tasks: dict[tuple[str | None, str | None, str | None], int] = {}

    def put(self, table: pyarrow.Table) -> None:
        if self.single:
            self._feed(0).put(table)
            return
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        # Each row's (source, database, table) as one number from the columns' dictionary
        # codes; the task computed once per distinct triple (a Python lookup per row was
        # 0.07 CPU-s per 300,000 rows).
        combined = np.zeros(table.num_rows, dtype=np.int64)
        names = []
        for column in ("source", "database", "table"):
            encoded = pc.dictionary_encode(table.column(column), null_encoding="encode")
            encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
            words = encoded.dictionary.to_pylist()
            combined = combined * max(len(words), 1) + encoded.indices.to_numpy()
            names.append(words)
        distinct, inverse = np.unique(combined, return_inverse=True)
        tasks = []
        for code in distinct.tolist():
            triple = []
            for words in reversed(names):
                code, at = divmod(code, max(len(words), 1))
                triple.append(words[at])
            source, database, table_name = reversed(triple)
            tasks.append(self._task((source, database, table_name)))
        index = np.array(tasks, dtype=np.int64)[inverse]
        for task in np.unique(index).tolist():
            self._feed(task).put(table.filter(pa.array(index == task)))

    def _task(self, names: tuple[str | None, str | None, str | None]) -> int:
        task = self._tasks.get(names)
        if task is None:
            task = self._tasks[names] = spark_task(*names, self.tasks)
        return task

    def _feed(self, index: int) -> _Feed:
        feed = self.feeds.get(index)
        if feed is None:
            feed = self.feeds[index] = _Feed(self.write, index, self.rows, self.name)
        return feed


class BusDirect:
    """The bus sinks' driver path of one pipeline (module docstring)."""

    def __init__(self, checkpoint: Path, options: SourceOptions, sinks: Sequence[Any],
                 transforms: Any) -> None:  # fmt: skip
        self.checkpoint = checkpoint
        self.options = options
        self.sinks = list(sinks)
        self.transforms = RowTransforms(transforms)
        #: batch id -> what the driver sent (the newest 1000 batches)
        self.batches: dict[int, DirectBatch] = {}
        #: batch id -> messages sent, all sinks together (the newest 1000 batches)
        self.sent: dict[int, int] = {}
        #: the next batch's records read ahead (module docstring, step 2; task
        #: directories only)
        self.prefetch = (
            Prefetch(options, options.direct_max_rows) if options.path is not None else None
        )

    @classmethod
    def of(cls, config: PipelineConfig, sinks: Sequence[Any]) -> BusDirect | None:
        """The bus sinks' driver path of ``config``, or None when it cannot take it
        (logged when its sinks are buses)."""
        from headwater.pipeline.columns import source_options
        from headwater.spark.offsets import parse_options

        if config.source.logs is not None:
            return None
        options = parse_options(source_options(config, sinks))
        why = bus_unsupported(config, sinks, options)
        if why is not None:
            if why != "a sink that is not a message bus":
                log.info("pipeline %s: bus batches run as Spark jobs (%s)", config.name, why)
            return None
        log.info("pipeline %s: bus batches after the first are sent from the driver",
                 config.name)  # fmt: skip
        return cls(config.checkpoint, options, sinks, config.transforms)

    def patch(self, reports: Iterable[Any]) -> list[Any]:
        """Spark's progress reports with the figures of the batches sent from here."""
        return patch_reports(self.batches, reports)

    def close(self) -> None:
        """End the prefetch (each batch opens its log and writers)."""
        if self.prefetch is not None:
            self.prefetch.close()

    def range_of(self, batch_id: int) -> tuple[LogOffset, LogOffset] | None:
        """Batch ``batch_id``'s offsets from Spark's offset log (None: the Spark path)."""
        begin, end = offset_at(self.checkpoint, batch_id - 1), offset_at(self.checkpoint, batch_id)
        if begin is None or end is None or end.key() < begin.key():
            return None
        return begin, end

    def apply(self, spark: SparkSession, batch_id: int) -> DirectBatch | None:
        """Send batch ``batch_id`` to every sink from the driver; None: it is the Spark
        job's (nothing sent)."""
        from headwater.spark.logaccess import open_log
        from headwater.spark.partitions import LogSlice, read_slice

        t0 = time.monotonic()
        span = self.range_of(batch_id)
        rows = _arrow_rows(spark) if span is not None else 0
        if span is None or rows <= 0:  # (no row limit: Spark hands the task one batch)
            if self.prefetch is not None:
                self.prefetch.pause()
            return None
        begin, end = span
        routes = [_Route(s, batch_id, rows, type(s).__name__) for s in self.sinks]
        out = DirectBatch()
        source = open_log(self.options)  # (as an executor's task opens one)
        try:
            stop = end.seq + 1 if end.row > 0 else end.seq
            held = [] if self.prefetch is None else self.prefetch.take_prefix(begin.seq, stop)
            last = None
            part = LogSlice(self.options, 0, begin.key(), end.key())
            for batch in read_slice(part, _Ahead(source, held)):
                last = self._put(batch, routes, out, last)
        except BaseException as exc:
            if self.prefetch is not None:
                self.prefetch.pause()
            for route in routes:
                for feed in route.feeds.values():
                    feed.abort(exc)
            raise
        finally:
            source.close()
        if self.prefetch is not None:
            self.prefetch.follow(end.seq)  # (the next batch starts in end's record)
        out.read_s = time.monotonic() - t0
        for route in routes:
            for feed in route.feeds.values():
                feed.finish()
        errors = [f.error for r in routes for _i, f in sorted(r.feeds.items()) if f.error]
        if errors:
            raise errors[0]
        sent = sum(f.sent for r in routes for f in r.feeds.values())
        out.seconds = time.monotonic() - t0
        out.apply_s = out.seconds - out.read_s
        self.batches[batch_id], self.sent[batch_id] = out, sent
        for gone in [b for b in self.batches if b < batch_id - 1000]:
            del self.batches[gone], self.sent[gone]
        log.info("batch %d sent from the driver: %d rows in, %d out, %d messages in %.3f s",
                 batch_id, out.rows_in, out.rows_out, sent, out.seconds)  # fmt: skip
        return out

    def _put(self, batch: pyarrow.RecordBatch, routes: list[_Route], out: DirectBatch,
             last: int | None) -> int | None:  # fmt: skip
        """One decoded batch through the transforms to every sink's writers; the last
        sequence given so far."""
        import pyarrow as pa
        import pyarrow.compute as pc

        for route in routes:
            for feed in route.feeds.values():
                if feed.failed:  # (module docstring, "Memory": the read stops)
                    raise feed.error  # type: ignore[misc]
        table = pa.Table.from_batches([batch])
        out.rows_in += table.num_rows
        tables = _tables(table)
        _add(out.tables_in, tables)
        if self.transforms.transforms:
            table = self.transforms.table(table)
            tables = _tables(table)
        if "commit_ts" in table.column_names:  # (as write_partitions drops it)
            table = table.drop_columns(["commit_ts"])
        if table.num_rows == 0:
            return last
        out.rows_out += table.num_rows
        _add(out.tables_out, tables)
        newest = pc.max(table.column("ts_us")).as_py()
        if newest is not None and (out.newest_ts_us is None or newest > out.newest_ts_us):
            out.newest_ts_us = newest
        sequence = table.column("sequence")
        first = sequence[0].as_py()
        if (last is not None and first <= last) or not _increasing(sequence):
            # read_slice yields the log's order; the writers must get it (Spark sorts)
            raise HeadwaterError(f"bus driver path: rows out of sequence order near {first}")
        for route in routes:
            route.put(table)
        return int(sequence[-1].as_py())


class _Ahead:
    """A batch's log for the decoder: the records the prefetch read ahead (a run from
    the batch's first seq, maybe empty), then the log for the rest."""

    def __init__(self, log: LocalLog | HttpLog, held: list[Record]) -> None:
        self.fde, self.schema = log.fde, log.schema
        self._log, self._held = log, held

    def records(self, first: int, end: int) -> Iterator[Record]:
        after = first
        for rec in self._held:
            if first <= rec.seq < end:
                yield rec
                after = rec.seq + 1
        if after < end:
            yield from self._log.records(after, end)

    def close(self) -> None:
        """(The batch closes the log.)"""


def _increasing(column: Any) -> bool:
    import numpy as np

    values = column.to_numpy()
    return bool((np.diff(values) > 0).all())


def _tables(table: pyarrow.Table) -> dict[str, int]:
    """Rows per ``database.table`` of ``table``, in the order of each one's first row
    (Arrow's group-by: a Python list of names and a Counter per batch cost 15% of the
    driver thread's samples on bench/kafka.py)."""
    from headwater.sinks.bus.arrow import constant

    if table.num_rows:
        database, table_name = constant(table.column("database")), constant(table.column("table"))
        if database[0] and table_name[0]:  # one table (most batches): no group-by
            return {f"{database[1]}.{table_name[1]}": table.num_rows}
    names = ["database", "table"]
    grouped = table.select(names).group_by(names, use_threads=False).aggregate([([], "count_all")])
    return {
        f"{d}.{t}": n
        for d, t, n in zip(*(grouped.column(i).to_pylist() for i in range(3)), strict=True)
    }


def _add(counts: dict[str, int], more: dict[str, int]) -> None:
    for key, n in more.items():
        counts[key] = counts.get(key, 0) + n


def _arrow_rows(spark: SparkSession) -> int:
    """Rows per Arrow batch that Spark hands a Python task of this thread's jobs."""
    local = spark.sparkContext.getLocalProperty(_MAX_ROWS)
    if local:
        return int(local)
    return int(spark._jsparkSession.sessionState().conf().arrowMaxRecordsPerBatch())
