"""Small micro-batches applied in the driver, without a Spark job (issue #17, latency).

A micro-batch costs Spark a fixed ~0.2-0.3 s on two cores whatever its size (a job, its
stage, a task in a Python worker that opens the log and a target connection), which is
most of the commit-to-visible latency of a pipeline at a steady 1,000 rows/s. The
:class:`DirectApply` path takes a micro-batch whose offset range holds at most
``driverApplyMaxRows`` change rows (a source option, 25,000 by default, ``0``: off) and,
inside ``foreachBatch``, does in the driver what the Spark job would do on an executor:

1. the batch's offsets come from Spark's own write-ahead log: ``<checkpoint>/offsets/<N>``
   is written before ``foreachBatch(df, N)`` runs, and its start is ``offsets/<N-1>``
   (Spark's ``MicroBatchExecution``: ``offsetLog.add`` before ``runBatch``; the start of
   batch ``N`` is the committed end of batch ``N - 1``). Batch 0 (its start is the
   source's initial offset, which no file holds) and any batch whose files are missing or
   unreadable take the Spark path;
2. the row count is read from the record headers (no decoding); over the limit: the
   Spark path (large batches keep Spark's parallel decoding and apply);
3. the slice is decoded by :func:`headwater.spark.partitions.read_slice`, the very
   function an executor runs, into the same Arrow rows;
4. the transforms run as their Python row operations
   (:func:`headwater.spark.transforms.row_op`: the functions the executors' ``mapInArrow``
   pass runs; renames, include/exclude, masks, rules). A pipeline with a ``filter`` or a
   computed column (Spark SQL expressions) always takes the Spark path;
5. each row copy is routed to the shard the Spark glue picks
   (``pmod(xxhash64(database, table, key text), shards)``, Spark's seed 42: :func:`xxhash64`
   here is Spark's ``XXH64`` and a test holds the two equal on random keys), and the
   shards are applied through :meth:`SqlSink.apply_columns` and the DDL through
   :meth:`SqlSink.apply_ddl`, in the glue's order: the changes before a batch's first DDL,
   the DDL, then the rest. The exactly-once protocol is the sink's own (its checkpoint
   row per shard is updated in the shard's transaction; a replayed batch is skipped by
   sequence), so a batch replayed after a crash may take either path.

On a task directory the records after the last driver batch are read ahead by a thread
(:class:`Prefetch`) while the source cuts the next batch and Spark plans it; a batch
takes what it holds of its range from there (step 3 reads no record itself) and reads
only the rest, the thread paused meanwhile. Reading is done with the cyclic GC paused:
15,000 records held a full collection of the driver's heap (tens of milliseconds).

Only SQL sinks (every sink of the pipeline) and the ``headwater`` source take this path,
and not with ``snapshot`` signals (counted by Spark's observed metrics). The driver's
statistics of such a batch (rows in and out, per table, newest commit time) replace the
observed metrics that Spark reports empty for a batch it did not read
(:meth:`DirectApply.patch`).
"""

from __future__ import annotations

import contextvars
import logging
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from headwater.changes import ChangeRow
from headwater.errors import ConfigError, SinkError
from headwater.gcpause import gc_paused
from headwater.sinks.base import ApplyResult, as_change, pinned_schemas
from headwater.sinks.failfast import is_terminal
from headwater.sinks.merge import ROLE_KEY, ROLE_NEW, ROLE_OLD, ChangeColumns
from headwater.sinks.sql import SqlSink

if TYPE_CHECKING:
    import pyarrow

    from headwater.pipeline.config import PipelineConfig
    from headwater.spark.logaccess import HttpLog, LocalLog
    from headwater.spark.offsets import LogOffset, SourceOptions
    from headwater.spark.transforms import TransformSpec
    from headwater.store import Record

__all__ = [
    "DirectApply",
    "DirectBatch",
    "Prefetch",
    "RowTransforms",
    "driver_unsupported",
    "offset_at",
    "patch_reports",
    "spark_shard",
    "xxhash64",
]

log = logging.getLogger(__name__)

_M64 = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
#: Spark's seed of ``xxhash64`` (``XxHash64`` in catalyst's ``hash.scala``).
SPARK_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M64, 31) * _P1) & _M64


def _xxh64(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` (the reference algorithm, which Spark's
    ``org.apache.spark.sql.catalyst.expressions.XXH64.hashUnsafeBytes`` implements with
    little-endian reads), unsigned."""
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed, (seed - _P1) & _M64
        while i <= n - 32:
            v1 = _round(v1, int.from_bytes(data[i : i + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[i + 8 : i + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[i + 16 : i + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[i + 24 : i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = ((h ^ _round(0, v)) * _P1 + _P4) & _M64
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i <= n - 8:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i <= n - 4:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


def xxhash64(*values: str | None) -> int:
    """Spark SQL's ``xxhash64(values...)`` of strings, as a signed 64-bit int: each
    non-null value's UTF-8 bytes hashed with the previous hash as the seed (nulls leave
    it as it is), starting from 42."""
    h = SPARK_SEED
    for value in values:
        if value is not None:
            h = _xxh64(value.encode("utf-8", "surrogatepass"), h)
    return h - (1 << 64) if h >= 1 << 63 else h


def xxhash64_column(keys: Any, seeds: Any) -> Any:
    """``xxh64(key, seed)`` of every value of a string Arrow array ``keys`` with its own
    seed (``seeds``: numpy uint64, one per value), as numpy uint64; a null key leaves its
    seed as it is (Spark's ``xxhash64`` skips nulls). :func:`_xxh64` in numpy, a few
    array operations per distinct key length rather than a Python loop per byte (a test
    holds the two equal on keys of every length round the 4-, 8- and 32-byte steps)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    n = len(keys)
    out = np.array(seeds, dtype=np.uint64, copy=True)
    if n == 0:
        return out
    large = pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type)
    _validity, offsets_buf, data_buf = keys.buffers()[:3]
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if large else np.int32)
    offsets = offsets[keys.offset : keys.offset + n + 1].astype(np.int64)
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    lengths = np.diff(offsets)
    valid = keys.is_valid().to_numpy(zero_copy_only=False)
    with np.errstate(over="ignore"):
        for length in np.unique(lengths[valid]).tolist():
            rows = np.flatnonzero(valid & (lengths == length))
            if length:
                grid = data[offsets[rows][:, None] + np.arange(length, dtype=np.int64)]
            else:
                grid = np.zeros((len(rows), 0), dtype=np.uint8)
            out[rows] = _xxh64_grid(grid, out[rows])
    return out


def _xxh64_grid(grid: Any, seed: Any) -> Any:
    """:func:`_xxh64` of each row of a uint8 matrix (rows of one length), numpy uint64
    arithmetic (wrapping as ``& _M64`` does)."""
    import numpy as np

    p1, p2, p3, p4, p5 = (np.uint64(p) for p in (_P1, _P2, _P3, _P4, _P5))

    def rotl(x: Any, r: int) -> Any:
        return (x << np.uint64(r)) | (x >> np.uint64(64 - r))

    def lane(i: int, width: int) -> Any:
        dtype = "<u8" if width == 8 else "<u4"
        return np.ascontiguousarray(grid[:, i : i + width]).view(dtype)[:, 0].astype(np.uint64)

    def rnd(acc: Any, value: Any) -> Any:
        return rotl(acc + value * p2, 31) * p1

    n = grid.shape[1]
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = seed + p1 + p2, seed + p2, seed.copy(), seed - p1
        while i <= n - 32:
            v1 = rnd(v1, lane(i, 8))
            v2 = rnd(v2, lane(i + 8, 8))
            v3 = rnd(v3, lane(i + 16, 8))
            v4 = rnd(v4, lane(i + 24, 8))
            i += 32
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)
        for v in (v1, v2, v3, v4):
            h = (h ^ rnd(np.zeros_like(v), v)) * p1 + p4
    else:
        h = seed + p5
    h = h + np.uint64(n)
    while i <= n - 8:
        h = h ^ rnd(np.zeros_like(h), lane(i, 8))
        h = rotl(h, 27) * p1 + p4
        i += 8
    if i <= n - 4:
        h = h ^ (lane(i, 4) * p1)
        h = rotl(h, 23) * p2 + p3
        i += 4
    while i < n:
        h = h ^ (grid[:, i].astype(np.uint64) * p5)
        h = rotl(h, 11) * p1
        i += 1
    h = h ^ (h >> np.uint64(33))
    h = h * p2
    h = h ^ (h >> np.uint64(29))
    h = h * p3
    return h ^ (h >> np.uint64(32))


def spark_shard(database: str, table: str, key: str | None, shards: int) -> int:
    """The shard the SQL sinks' Spark glue routes a row copy to:
    ``pmod(xxhash64(database, table, key), shards)`` (Python's ``%`` is ``pmod``)."""
    return xxhash64(database, table, key) % shards


def offset_at(checkpoint: Path, batch_id: int) -> LogOffset | None:
    """The headwater source's end offset of batch ``batch_id`` as Spark's offset log
    holds it (``offsets/<id>``: a version line, the batch's metadata, one line per
    source), or None when the file is missing or not one source's ``v1`` entry."""
    from headwater.spark.offsets import LogOffset

    if batch_id < 0:
        return None
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text("utf-8").splitlines()
        if len(lines) != 3 or lines[0] != "v1":
            return None
        return LogOffset.from_dict(orjson.loads(lines[2]))
    except (OSError, ValueError, ConfigError):
        return None


@dataclass(slots=True)
class DirectBatch:
    """What the driver applied for one batch: rows read and written (in all, per table),
    the newest commit time and how long it took."""

    rows_in: int = 0
    rows_out: int = 0
    tables_in: dict[str, int] = field(default_factory=dict)
    tables_out: dict[str, int] = field(default_factory=dict)
    newest_ts_us: int | None = None
    seconds: float = 0.0
    #: of which: reading and decoding the slice, and the sinks' transactions
    read_s: float = 0.0
    apply_s: float = 0.0


#: Payload bytes of a batch's records kept in memory between counting their rows and
#: decoding them (past it they are read twice).
KEEP_BYTES = 64 << 20


#: How long the prefetch thread sleeps at most between looks at its stop flag.
WAIT_S = 0.5


class Prefetch:
    """The records after the last batch, read by a thread while Spark plans the next one
    (a task directory only).

    A catch-up's micro-batch is cut by the source only once its records have landed
    (the burst gate), and Spark then spends tens of milliseconds on its offset log and
    planning before ``foreachBatch`` runs: the driver, idle meanwhile, reads those
    records as the store acknowledges them (its watch of the head file), so that
    :meth:`DirectApply.apply` finds them read (15,000 one-row transactions: 60-100 ms of
    the driver's batch). Records are immutable and CRC-checked as any read's, and only a
    run of them that holds every seq of the batch's range is used; anything else (a gap,
    a batch elsewhere in the log, a cache at its bounds) reads the log as before. At most
    ``max_rows`` records and :data:`KEEP_BYTES` of payload are held past the cursor (the
    next batch's first seq, :meth:`follow`); the thread waits (no polling) while full
    or idle, and reads only when at least ``BURST_RECORDS`` (the source's burst gate's
    figure) wait past its cursor: a catch-up; a live workload's few records a batch are
    left to the batch.
    """

    def __init__(self, options: SourceOptions, max_rows: int) -> None:
        import threading

        self.options = options
        self.max_rows = max_rows
        self._cond = threading.Condition()
        self._records: list[Record] = []  # seqs _first, _first + 1, ...
        self._first = -1  # -1: no cursor yet (nothing read before the first follow)
        self._bytes = 0
        self._generation = 0  # moves with each follow that drops the cache
        self._stopped = False
        self._thread: threading.Thread | None = None

    def follow(self, seq: int) -> None:
        """The next batch starts at record ``seq``: drop what is before it (all of it when
        the cache does not reach ``seq``), and start the thread on the first call."""
        import threading

        with self._cond:
            if self._stopped:
                return
            have = self._first + len(self._records)
            if self._first <= seq <= have and self._first >= 0:
                gone = self._records[: seq - self._first]
                self._records = self._records[seq - self._first :]
                self._bytes -= sum(len(r.payload) for r in gone)
            else:
                self._records, self._bytes = [], 0
                self._generation += 1
            self._first = seq
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="hw-direct-prefetch", daemon=True
                )
                self._thread.start()

    def pause(self) -> None:
        """Drop the cache and read nothing until the next :meth:`follow` (a batch another
        path applies: its end is not known here, and it may be large)."""
        with self._cond:
            self._records, self._bytes, self._first = [], 0, -1
            self._generation += 1

    def take(self, first: int, stop: int) -> list[Record] | None:
        """Records ``[first, stop)`` when the cache holds every one of them, else None."""
        with self._cond:
            lo, hi = first - self._first, stop - self._first
            if self._first < 0 or lo < 0 or hi > len(self._records) or lo > hi:
                return None
            return self._records[lo:hi]

    def take_prefix(self, first: int, stop: int) -> list[Record]:
        """The records of ``[first, stop)`` the cache holds from ``first`` on (maybe
        none). When they do not reach ``stop`` the thread is paused (:meth:`pause`): the
        batch reads the rest itself, and a read of the same records by both (a batch cut
        while the thread was still reading a catch-up, or cut at once after a batch of
        another path) would only slow each other down."""
        with self._cond:
            lo, hi = first - self._first, stop - self._first
            if self._first < 0 or lo < 0 or lo > hi:
                held: list[Record] = []
            else:
                held = self._records[lo:hi]
            if first + len(held) < stop:
                self._records, self._bytes, self._first = [], 0, -1
                self._generation += 1
            return held

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(2 * WAIT_S + 1)

    def _room(self) -> int:
        """Records the cache may still take (under the lock)."""
        if self._bytes >= KEEP_BYTES:
            return 0
        return max(0, self.max_rows - len(self._records))

    def _run(self) -> None:
        from pathlib import Path

        from headwater.spark.source import BURST_RECORDS
        from headwater.store import AtSeq, ChangeLog, LogReader

        assert self.options.path is not None
        store = ChangeLog.open(str(Path(self.options.path) / "changes"), read_only=True)
        # One cursor read on sequentially (no lookup per record), opened again only when
        # follow() moves the cursor elsewhere.
        reader: LogReader | None = None
        at = -1  # the seq the reader returns next
        bursting = False  # BURST_RECORDS were waiting past the cursor when it was set
        try:
            while True:
                with self._cond:
                    while not self._stopped and (self._first < 0 or self._room() == 0):
                        self._cond.wait(WAIT_S)
                    if self._stopped:
                        return
                    nxt = self._first + len(self._records)
                    room, generation = self._room(), self._generation
                if reader is None or at != nxt:
                    if reader is not None:
                        reader.close()
                    reader, at = store.reader(AtSeq(nxt)), nxt
                    bursting = False
                if not bursting:
                    # Only a catch-up is read ahead: a live workload's few records a
                    # batch are read by the batch (no work here per commit).
                    store.read_side.wait_for(nxt + BURST_RECORDS - 1, WAIT_S)
                    bursting = store.acked_seq >= nxt + BURST_RECORDS - 1
                    if not bursting:
                        continue
                got: list[Record] = []
                rec = reader.next(WAIT_S)  # (the store's watch of the head file)
                while rec is not None:
                    got.append(rec)
                    if len(got) >= room:
                        break
                    rec = reader.next(0)
                at = nxt + len(got)
                with self._cond:
                    if generation == self._generation and nxt == self._first + len(self._records):
                        self._records += got
                        self._bytes += sum(len(r.payload) for r in got)
        except Exception as e:  # (the batch then reads the log itself, as before)
            log.info("driver path: record prefetch stopped: %r", e)
        finally:
            if reader is not None:
                reader.close()
            store.close()


class _Kept:
    """A batch's log for the decoder (:func:`~headwater.spark.partitions.read_slice`):
    the records already read, or the log itself when they were not kept."""

    def __init__(self, log: LocalLog | HttpLog, records: list[Record] | None) -> None:
        self.fde, self.schema = log.fde, log.schema
        self._log, self._records = log, records

    def records(self, first: int, end: int) -> Iterator[Record]:
        if self._records is None:
            return self._log.records(first, end)
        return (r for r in self._records if first <= r.seq < end)

    def close(self) -> None:
        """(The batch closes the log.)"""


#: Transforms that only rename databases or tables: their row operations touch no image.
_NAME_ONLY = ("RenameDatabaseSpec", "RenameTableSpec")
#: Transforms that run as Spark SQL expressions: no driver path.
_SQL_ONLY = ("FilterSpec", "ComputeSpec")
#: The columns the glue hands the apply step (sinks.glue's ``SOURCE_COLUMNS`` but
#: ``before_key``, which only routes).
_DDL_COLUMNS = (
    "source", "database", "table", "op", "sequence", "change_id", "file_num", "offset",
    "event_index", "key", "after", "sql", "ts_us",
)  # fmt: skip
#: The columns routing and applying read.
_APPLY_COLUMNS = (*_DDL_COLUMNS, "before_key")


def driver_unsupported(config: PipelineConfig, options: SourceOptions) -> str | None:
    """Why no batch of ``config`` can be applied in the driver, whatever its sinks (None:
    it can): the checks of :func:`unsupported` but the sinks', shared with the bus sinks'
    driver path (:mod:`headwater.pipeline.busdirect`)."""
    if options.direct_max_rows == 0:
        return "driverApplyMaxRows is 0"
    if config.source.logs is not None:
        return "a log-file source"
    if config.snapshot is not None:
        return "snapshot signals are counted by the Spark job"
    sql_only = sql_transforms(config)
    if sql_only:
        return f"{sql_only[0]} runs as Spark SQL"
    return None


def sql_transforms(config: PipelineConfig) -> list[str]:
    """The kinds of ``config``'s transforms that run as Spark SQL in every batch (a
    ``filter``, a computed column), in order."""
    return [type(t).__name__ for t in config.transforms if type(t).__name__ in _SQL_ONLY]


def unsupported(config: PipelineConfig, sinks: Sequence[Any], options: SourceOptions) -> str | None:
    """Why ``config`` cannot take the driver path (None: it can)."""
    why = driver_unsupported(config, options)
    if why is not None:
        return why
    if not sinks or not all(isinstance(s, SqlSink) for s in sinks):
        return "a sink that is not a SQL sink"
    return None


class RowTransforms:
    """The transforms' Python row operations over a batch in the driver (module
    docstring, step 4): the functions the executors' ``mapInArrow`` pass runs. Shared by
    this path and the bus sinks' (:mod:`headwater.pipeline.busdirect`)."""

    def __init__(self, transforms: Any) -> None:
        self.transforms: tuple[TransformSpec, ...] = tuple(transforms)
        self._ops: list[Any] | None = None

    def table(self, table: pyarrow.Table) -> pyarrow.Table:
        """:meth:`rows` of the batch's rows: renames of databases and tables on
        each distinct name pair (their row operations read and write nothing else);
        other transforms on the rows as dicts."""
        import pyarrow as pa

        if not self.transforms:
            return table
        if self.edits_images():
            return pa.Table.from_pylist(self.rows(table.to_pylist()), schema=table.schema)
        from headwater.spark.transforms import row_op

        if self._ops is None:
            self._ops = [row_op(spec, i) for i, spec in enumerate(self.transforms)]
        renamed: dict[tuple[str, str], tuple[str, str]] = {}
        for pair in set(zip(*_names(table), strict=True)):
            change: dict[str, Any] = {"database": pair[0], "table": pair[1]}
            for op in self._ops:
                change = op(change)
            renamed[pair] = (change["database"], change["table"])
        if all(old == new for old, new in renamed.items()):
            return table
        pairs = list(map(renamed.__getitem__, zip(*_names(table), strict=True)))
        for j, name in enumerate(("database", "table")):
            column = pa.array([p[j] for p in pairs], type=pa.string())
            table = table.set_column(table.schema.get_field_index(name), name, column)
        return table

    def edits_images(self) -> bool:
        return any(type(t).__name__ not in _NAME_ONLY for t in self.transforms)

    def rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The transforms' Python row operations, in order (module docstring, step 4)."""
        if not self.transforms:
            return rows
        from headwater.spark.rules import position_text
        from headwater.spark.transforms import IMAGES, RuleError, row_op

        if self._ops is None:
            self._ops = [row_op(spec, i) for i, spec in enumerate(self.transforms)]
        images = self.edits_images()
        out = []
        for row in rows:
            change: dict[str, Any] | None = row
            if images:
                for name in IMAGES:
                    if row.get(name) is not None:
                        row[name] = orjson.loads(row[name])
            for op in self._ops:
                try:
                    change = op(change)
                except RuleError:
                    raise
                except Exception as e:  # the executors' pass words it the same way
                    raise RuleError(
                        f"transform failed on {position_text(row)}: {type(e).__name__}: {e}"
                    ) from e
                if change is None:
                    break
            if change is None:
                continue
            if images:
                for name in IMAGES:
                    if change.get(name) is not None:
                        change[name] = orjson.dumps(change[name]).decode()
            out.append(change)
        return out


class DirectApply:
    """The driver path of one pipeline (module docstring)."""

    def __init__(
        self, checkpoint: Path, options: SourceOptions, sinks: Sequence[SqlSink], transforms: Any
    ) -> None:
        self.checkpoint = checkpoint
        self.options = options
        self.sinks = list(sinks)
        self.row_transforms = RowTransforms(transforms)
        self.transforms = self.row_transforms.transforms
        self.max_rows = options.direct_max_rows
        #: threads for the shard transactions of a batch (_apply_rows)
        shards = max((s.config.shards for s in self.sinks), default=1)
        self._pool = (
            ThreadPoolExecutor(min(shards, 8), thread_name_prefix="hw-direct")
            if shards > 1
            else None
        )
        #: batch id -> what the driver applied (the newest 1000 batches)
        self.batches: dict[int, DirectBatch] = {}
        #: the next batch's records read ahead (task directories only)
        self.prefetch = Prefetch(options, self.max_rows) if options.path is not None else None

    @classmethod
    def of(cls, config: PipelineConfig, sinks: Sequence[Any]) -> DirectApply | None:
        """The driver path of ``config``, or None (logged) when it cannot take it."""
        from headwater.pipeline.columns import source_options
        from headwater.spark.offsets import parse_options

        # The Spark path's options, ``columns`` included: the same columns are decoded.
        logs = config.source.logs is not None
        options = None if logs else parse_options(source_options(config, sinks))
        why = "a log-file source" if options is None else unsupported(config, sinks, options)
        if why is not None or options is None:
            log.info("pipeline %s: every micro-batch runs as a Spark job (%s)", config.name, why)
            return None
        return cls(config.checkpoint, options, sinks, config.transforms)

    # -- the batch ---------------------------------------------------------------------

    def range_of(self, batch_id: int) -> tuple[LogOffset, LogOffset] | None:
        """Batch ``batch_id``'s offsets when it is small enough for the driver."""
        begin, end = offset_at(self.checkpoint, batch_id - 1), offset_at(self.checkpoint, batch_id)
        if begin is None or end is None or end.key() < begin.key():
            return None
        if end.seq - begin.seq > self.max_rows:  # (a wanted record holds a row at least)
            return None
        return begin, end

    def _records(self, log: LocalLog | HttpLog, begin: LogOffset, end: LogOffset) -> _Kept | None:
        """The records of ``[begin, end)`` read once, for the decoder, when the rows of
        wanted tables in them are at most :attr:`max_rows` by the record headers (an
        upper bound: a record's DDL and the rows of other tables of a wanted record
        count); None: more (the Spark job's batch). Records past :data:`KEEP_BYTES` of
        payload are counted, not kept: the decoder then reads them again."""
        stop = end.seq + 1 if end.row > 0 else end.seq
        tables = self.options.tables
        rows = size = 0
        kept: list[Record] | None = []
        every = tables.patterns is None
        held = [] if self.prefetch is None else self.prefetch.take_prefix(begin.seq, stop)
        rest = begin.seq + len(held)
        for rec in chain(held, log.records(rest, stop)) if rest < stop else held:
            named = rec.tables
            if not (every or tables.record_wanted(named)):
                continue
            rows += max(1, named[0][1] if len(named) == 1 else sum(n for _name, n in named))
            if rows > self.max_rows:
                return None
            if kept is not None:
                size += len(rec.payload)
                kept.append(rec)
                if size > KEEP_BYTES:
                    kept = None
        return _Kept(log, kept)

    def apply(self, batch_id: int) -> DirectBatch | None:
        """Apply batch ``batch_id`` in the driver; None: it is the Spark job's."""
        import pyarrow.compute as pc

        from headwater.spark.logaccess import open_log
        from headwater.spark.partitions import LogSlice, read_slice

        t0 = time.monotonic()
        span = self.range_of(batch_id)
        if span is None:
            if self.prefetch is not None:
                self.prefetch.pause()
            return None
        begin, end = span
        part = LogSlice(self.options, 0, begin.key(), end.key())
        # The columns the sinks read (all of them for row operations on images: a rule
        # sees the whole change), not the ones only Spark would carry; kept as Arrow
        # columns (a Python list per column where the sinks want one, no dict per row).
        keep = None if self._edits_images() else _APPLY_COLUMNS
        # A log opened per batch, as an executor's task opens one: the schema history as
        # it is now.
        source = open_log(self.options)
        try:
            with gc_paused():  # (a read allocates per record, and makes no cycles)
                records = self._records(source, begin, end)
            if records is None:
                if self.prefetch is not None:
                    self.prefetch.pause()
                return None
            table = _table(list(read_slice(part, records)), keep)
        finally:
            source.close()
        out = DirectBatch(rows_in=table.num_rows, tables_in=_count(table))
        table = self._transform_table(table)
        out.rows_out = table.num_rows
        out.tables_out = _count(table)
        out.newest_ts_us = pc.max(table.column("ts_us")).as_py() if table.num_rows else None
        segments = _segments(table)
        t1 = time.monotonic()
        out.read_s = t1 - t0
        # (the glue's scope of an apply step: no cyclic GC, one look at the schema file)
        with gc_paused(), pinned_schemas():
            for sink in self.sinks:
                _apply_sink(sink, segments, batch_id, self._pool)
        if self.prefetch is not None:
            self.prefetch.follow(end.seq)
        out.seconds = time.monotonic() - t0
        out.apply_s = out.seconds - out.read_s
        self.batches[batch_id] = out
        for gone in [b for b in self.batches if b < batch_id - 1000]:
            del self.batches[gone]
        log.debug("batch %d applied in the driver: %s", batch_id, out)
        return out

    def _transform_table(self, table: pyarrow.Table) -> pyarrow.Table:
        return self.row_transforms.table(table)

    def _edits_images(self) -> bool:
        return self.row_transforms.edits_images()

    def _transform(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.row_transforms.rows(rows)

    # -- progress reports ----------------------------------------------------------------

    def patch(self, reports: Iterable[Any]) -> list[Any]:
        """Spark's progress reports with those of driver batches completed from
        :attr:`batches`: Spark read no rows for them and observed nothing."""
        return patch_reports(self.batches, reports)

    def close(self) -> None:
        """End the shard threads and the prefetch (each batch opens and closes its log)."""
        if self.prefetch is not None:
            self.prefetch.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def patch_reports(batches: dict[int, DirectBatch], reports: Iterable[Any]) -> list[Any]:
    """Spark's progress reports with the figures of ``batches`` (batch id -> what a
    driver path applied) filled in: Spark read no rows for them and observed nothing."""
    from headwater.pipeline.runner import OBSERVED
    from headwater.pipeline.status import OBSERVED_IN

    out = []
    for report in reports:
        done = batches.get(int(report.get("batchId", -1))) if report else None
        if done is None or report.get("numInputRows"):
            out.append(report)
            continue
        patched = dict(report)
        patched["numInputRows"] = done.rows_in
        patched["processedRowsPerSecond"] = done.rows_in / max(done.seconds, 1e-3)
        observed = dict(patched.get("observedMetrics") or {})
        observed[OBSERVED_IN] = {"tables": _items(done.tables_in)}
        observed[OBSERVED] = {
            "newest_ts_us": done.newest_ts_us,
            "rows_out": done.rows_out,
            "tables": _items(done.tables_out),
        }
        patched["observedMetrics"] = observed
        out.append(patched)
    return out


def _table(batches: list[pyarrow.RecordBatch], keep: Sequence[str] | None) -> pyarrow.Table:
    """The slice's record batches as one table of the ``keep`` columns (None: all)."""
    import pyarrow as pa

    from headwater.changes.schema import change_arrow_schema

    if not batches:
        schema = change_arrow_schema()
        table = schema.empty_table()
    else:
        table = pa.Table.from_batches(batches)
    return table if keep is None else table.select(list(keep))


def _names(table: pyarrow.Table) -> tuple[list[str], list[str]]:
    """The ``database`` and ``table`` columns as lists."""
    return table.column("database").to_pylist(), table.column("table").to_pylist()


def _count(table: pyarrow.Table) -> dict[str, int]:
    """Rows per ``database.table``, in the order of each one's first row."""
    from collections import Counter

    counts = Counter(zip(*_names(table), strict=True))
    return {f"{d}.{t}": n for (d, t), n in counts.items()}


def _items(counts: dict[str, int]) -> list[dict[str, Any]]:
    return [{"item": k, "count": v} for k, v in counts.items()]


#: Sinks whose checkpoint table this process has set up.
_SET_UP: weakref.WeakSet[SqlSink] = weakref.WeakSet()


@dataclass(slots=True)
class _Routed:
    """The routed copies of a run of change rows without DDL (one copy per row; an
    update of the key: the old key's delete and the new key's put), as the Spark glue
    routes them: the sinks' columns, and each copy's ``xxhash64(database, table, key)``
    (its shard is that ``pmod`` the sink's shard count)."""

    cols: ChangeColumns
    hashes: Any  # numpy int64, one per copy

    def by_shard(self, count: int) -> dict[int, list[int]]:
        import numpy as np

        shards = np.mod(self.hashes, count)
        if len(shards) and (shards == shards[0]).all():
            return {int(shards[0]): list(range(len(shards)))}
        return {int(s): np.flatnonzero(shards == s).tolist() for s in np.unique(shards)}


#: A batch's changes for the sinks, in sequence order: runs of rows, and DDL changes.
_Segment = _Routed | ChangeRow


def _segments(table: pyarrow.Table) -> list[_Segment]:
    """The batch's rows in sequence order as runs of routed rows and the DDL between
    them (module docstring, step 5)."""
    import numpy as np
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return []
    sequence = table.column("sequence").to_numpy()
    if (np.diff(sequence) < 0).any():  # (read_slice yields them in order)
        table = table.take(pc.sort_indices(table, [("sequence", "ascending")]))
    ddl = np.flatnonzero(
        pc.equal(table.column("op"), "ddl").fill_null(False).to_numpy(zero_copy_only=False)
    ).tolist()
    out: list[_Segment] = []
    start = 0
    for at in [*ddl, table.num_rows]:
        if at > start:
            out.append(_route(table.slice(start, at - start)))
        if at < table.num_rows:
            row = table.slice(at, 1).to_pylist()[0]
            out.append(as_change({c: row.get(c) for c in _DDL_COLUMNS}))
        start = at + 1
    return out


#: Columns the sinks read as Python lists, and those (:func:`_pylist`) whose value is
#: mostly one for a whole batch.
_LIST_COLUMNS = ("source", "database", "table", "op", "sequence", "change_id",
                 "file_num", "offset", "event_index", "after")  # fmt: skip
_REPEATED = frozenset(("source", "database", "table", "change_id", "file_num"))


def _route(rows: pyarrow.Table) -> _Routed:
    """The routed copies of ``rows`` (no DDL among them), in order: each row's copy, an
    update whose ``before_key`` is set leaving twice (old key, then new key)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    op, before_key = rows.column("op"), rows.column("before_key")
    moved = pc.and_(pc.equal(op, "update"), pc.is_valid(before_key)).fill_null(False)
    moves = moved.to_numpy(zero_copy_only=False).astype(np.int64)
    n = rows.num_rows
    copies = n + int(moves.sum())
    role = np.full(copies, ROLE_KEY, dtype=np.int64)
    if copies > n:
        firsts = np.cumsum(1 + moves) - (1 + moves)  # each row's first copy
        at = firsts[moves.astype(bool)]
        role[at], role[at + 1] = ROLE_OLD, ROLE_NEW
        rows = rows.take(pa.array(np.repeat(np.arange(n, dtype=np.int64), 1 + moves)))
        key = pc.if_else(pa.array(role == ROLE_OLD), rows.column("before_key"), rows.column("key"))
    else:
        key = rows.column("key")
    if isinstance(key, pa.ChunkedArray):
        key = key.combine_chunks()
    lists = {name: _pylist(rows.column(name), name in _REPEATED) for name in _LIST_COLUMNS}
    roles = pa.array(role, type=pa.int32())
    cols = ChangeColumns(
        lists["source"], lists["database"], lists["table"], lists["op"], lists["sequence"],
        lists["change_id"], lists["file_num"], lists["offset"], lists["event_index"],
        key.to_pylist(), lists["after"], role.tolist(),
        arrow=pa.table({"key": key, "op": rows.column("op"), "role": roles}),
    )  # fmt: skip
    # Spark's xxhash64(database, table, key): the key's hash seeded with the hash of its
    # table's names (one per distinct pair), a null key leaving that seed.
    prefix: dict[tuple[str, str], int] = {}
    for pair in set(zip(cols.database, cols.table, strict=True)):
        h = SPARK_SEED
        for name in pair:
            h = _xxh64(name.encode("utf-8", "surrogatepass"), h)
        prefix[pair] = h
    if len(prefix) == 1:
        seeds = np.full(copies, next(iter(prefix.values())), dtype=np.uint64)
    else:
        seeds = np.fromiter(
            map(prefix.__getitem__, zip(cols.database, cols.table, strict=True)),
            dtype=np.uint64,
            count=copies,
        )
    hashes = xxhash64_column(key, seeds).view(np.int64)
    return _Routed(cols, hashes)


def _pylist(column: Any, repeated: bool) -> list[Any]:
    """``column`` as a Python list; a ``repeated`` one holding one value as that one
    object repeated (as the glue's ``_pylist``)."""
    if repeated and len(column) > 0:
        unique = column.unique()
        if len(unique) == 1:
            return [unique[0].as_py()] * len(column)
    values: list[Any] = column.to_pylist()
    return values


def _apply_sink(
    sink: SqlSink, segments: Sequence[_Segment], batch_id: int, pool: Executor | None = None
) -> None:
    """One sink's apply of a batch's (transformed) changes, in sequence order, DDL
    between the changes before and after it (module docstring, step 5)."""
    if sink not in _SET_UP:  # (CREATE ... IF NOT EXISTS: once per sink object)
        sink.setup()
        _SET_UP.add(sink)
    for segment in segments:
        if isinstance(segment, _Routed):
            _apply_rows(sink, segment, batch_id, pool)
        else:
            sink.apply_ddl(segment, batch_id)


def _apply_rows(sink: SqlSink, routed: _Routed, batch_id: int, pool: Executor | None) -> None:
    """The shard transactions of a run of routed rows, at once in ``pool``'s threads
    when there are several (as the glue's run in parallel tasks: each waits for its
    target's statements and commit most of its time). A SinkError of one shard is raised
    after the other shards ran, as the glue raises it after every partition ran; any
    other error first (the first shard's, by shard number)."""
    shards = sorted(routed.by_shard(sink.config.shards).items())
    outcomes: list[tuple[ApplyResult | None, BaseException | None]] = []
    if pool is None or len(shards) < 2:
        for shard, rows in shards:
            outcomes.append(_apply_shard(sink, routed.cols, rows, batch_id, shard))
            exc = outcomes[-1][1]
            if exc is not None and not (isinstance(exc, SinkError) or is_terminal(exc)):
                break
    else:
        # (a context per thread: one context cannot be entered by two at once)
        futures = [
            pool.submit(
                contextvars.copy_context().run, _apply_shard, sink, routed.cols, rows, batch_id,
                shard,
            )
            for shard, rows in shards
        ]  # fmt: skip
        outcomes = [f.result() for f in futures]
    errors = [exc for _result, exc in outcomes if exc is not None]
    for exc in errors:
        if not (isinstance(exc, SinkError) or is_terminal(exc)):
            raise exc
    for result, _exc in outcomes:
        if result is not None:
            log.debug("batch %d: %s", batch_id, result)
    if errors:
        raise errors[0]


def _apply_shard(
    sink: SqlSink, cols: ChangeColumns, rows: list[int], batch_id: int, shard: int
) -> tuple[ApplyResult | None, BaseException | None]:
    """One shard's transaction: its result, or the exception it raised."""
    try:
        with pinned_schemas():  # (a scope per thread: a context variable)
            return sink.apply_columns(cols, rows, batch_id, shard), None
    except Exception as exc:
        return None, exc
