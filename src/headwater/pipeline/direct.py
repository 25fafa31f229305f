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

Only SQL sinks (every sink of the pipeline) and the ``headwater`` source take this path,
and not with ``snapshot`` signals (counted by Spark's observed metrics). The driver's
statistics of such a batch (rows in and out, per table, newest commit time) replace the
observed metrics that Spark reports empty for a batch it did not read
(:meth:`DirectApply.patch`).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from headwater.errors import ConfigError, SinkError
from headwater.gcpause import gc_paused
from headwater.sinks.base import as_change, pinned_schemas
from headwater.sinks.failfast import is_terminal
from headwater.sinks.merge import ROLE_KEY, ROLE_NEW, ROLE_OLD, ChangeColumns
from headwater.sinks.sql import SqlSink

if TYPE_CHECKING:
    from headwater.pipeline.config import PipelineConfig
    from headwater.spark.logaccess import HttpLog, LocalLog
    from headwater.spark.offsets import LogOffset, SourceOptions
    from headwater.spark.transforms import TransformSpec

__all__ = ["DirectApply", "DirectBatch", "offset_at", "spark_shard", "xxhash64"]

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


def unsupported(config: PipelineConfig, sinks: Sequence[Any], options: SourceOptions) -> str | None:
    """Why ``config`` cannot take the driver path (None: it can)."""
    if options.direct_max_rows == 0:
        return "driverApplyMaxRows is 0"
    if config.source.logs is not None:
        return "a log-file source"
    if config.snapshot is not None:
        return "snapshot signals are counted by the Spark job"
    sql_only = [type(t).__name__ for t in config.transforms if type(t).__name__ in _SQL_ONLY]
    if sql_only:
        return f"{sql_only[0]} runs as Spark SQL"
    if not sinks or not all(isinstance(s, SqlSink) for s in sinks):
        return "a sink that is not a SQL sink"
    return None


class DirectApply:
    """The driver path of one pipeline (module docstring)."""

    def __init__(
        self, checkpoint: Path, options: SourceOptions, sinks: Sequence[SqlSink], transforms: Any
    ) -> None:
        self.checkpoint = checkpoint
        self.options = options
        self.sinks = list(sinks)
        self.transforms: tuple[TransformSpec, ...] = tuple(transforms)
        self.max_rows = options.direct_max_rows
        self._log: LocalLog | HttpLog | None = None
        self._ops: list[Any] | None = None
        #: batch id -> what the driver applied (the newest 1000 batches)
        self.batches: dict[int, DirectBatch] = {}

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

    def _rows_in(self, begin: LogOffset, end: LogOffset) -> int:
        """Rows of wanted tables in ``[begin, end)`` by the record headers (an upper
        bound: a record's DDL and the rows of other tables of a wanted record count)."""
        from headwater.spark.logaccess import open_log

        if self._log is None:
            self._log = open_log(self.options, decoding=False)
        stop = end.seq + 1 if end.row > 0 else end.seq
        rows = 0
        for rec in self._log.records(begin.seq, stop):
            if self.options.tables.record_wanted(rec.tables):
                rows += max(1, sum(n for _name, n in rec.tables))
        return rows

    def apply(self, batch_id: int) -> DirectBatch | None:
        """Apply batch ``batch_id`` in the driver; None: it is the Spark job's."""
        from headwater.spark.partitions import LogSlice, read_slice

        t0 = time.monotonic()
        span = self.range_of(batch_id)
        if span is None:
            return None
        begin, end = span
        if self._rows_in(begin, end) > self.max_rows:
            return None
        batches = list(read_slice(LogSlice(self.options, 0, begin.key(), end.key())))
        # Rows as dicts of the columns the sinks read (all of them for row operations
        # on images: a rule sees the whole change), not the ones only Spark would carry.
        keep = None if self._edits_images() else _APPLY_COLUMNS
        rows = [r for b in batches for r in (b if keep is None else b.select(keep)).to_pylist()]
        out = DirectBatch(rows_in=len(rows), tables_in=_count(rows))
        rows = self._transform(rows)
        out.rows_out = len(rows)
        out.tables_out = _count(rows)
        out.newest_ts_us = max((int(r["ts_us"]) for r in rows), default=None)
        t1 = time.monotonic()
        out.read_s = t1 - t0
        # (the glue's scope of an apply step: no cyclic GC, one look at the schema file)
        with gc_paused(), pinned_schemas():
            for sink in self.sinks:
                _apply_sink(sink, rows, batch_id)
        out.seconds = time.monotonic() - t0
        out.apply_s = out.seconds - out.read_s
        self.batches[batch_id] = out
        for gone in [b for b in self.batches if b < batch_id - 1000]:
            del self.batches[gone]
        log.debug("batch %d applied in the driver: %s", batch_id, out)
        return out

    def _edits_images(self) -> bool:
        return any(type(t).__name__ not in _NAME_ONLY for t in self.transforms)

    def _transform(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The transforms' Python row operations, in order (module docstring, step 4)."""
        if not self.transforms:
            return rows
        from headwater.spark.rules import position_text
        from headwater.spark.transforms import IMAGES, RuleError, row_op

        if self._ops is None:
            self._ops = [row_op(spec, i) for i, spec in enumerate(self.transforms)]
        images = self._edits_images()
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

    # -- progress reports ----------------------------------------------------------------

    def patch(self, reports: Iterable[Any]) -> list[Any]:
        """Spark's progress reports with those of driver batches completed from
        :attr:`batches`: Spark read no rows for them and observed nothing."""
        from headwater.pipeline.runner import OBSERVED
        from headwater.pipeline.status import OBSERVED_IN

        out = []
        for report in reports:
            done = self.batches.get(int(report.get("batchId", -1))) if report else None
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

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _count(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        name = f"{r['database']}.{r['table']}"
        out[name] = out.get(name, 0) + 1
    return out


def _items(counts: dict[str, int]) -> list[dict[str, Any]]:
    return [{"item": k, "count": v} for k, v in counts.items()]


#: Sinks whose checkpoint table this process has set up.
_SET_UP: weakref.WeakSet[SqlSink] = weakref.WeakSet()


def _apply_sink(sink: SqlSink, rows: list[dict[str, Any]], batch_id: int) -> None:
    """One sink's apply of a batch's (transformed) change rows, in sequence order, DDL
    between the changes before and after it (module docstring, step 5)."""
    if sink not in _SET_UP:  # (CREATE ... IF NOT EXISTS: once per sink object)
        sink.setup()
        _SET_UP.add(sink)
    ordered = sorted(rows, key=lambda r: int(r["sequence"]))
    pending: list[dict[str, Any]] = []
    for row in ordered:
        if row["op"] != "ddl":
            pending.append(row)
            continue
        _apply_rows(sink, pending, batch_id)
        pending = []
        sink.apply_ddl(as_change({c: row.get(c) for c in _DDL_COLUMNS}), batch_id)
    _apply_rows(sink, pending, batch_id)


def _apply_rows(sink: SqlSink, rows: list[dict[str, Any]], batch_id: int) -> None:
    """The shard transactions of changes without DDL, routed as the Spark glue routes
    them (one copy per row; an update of the key: the old key's delete and the new key's
    put). A SinkError of one shard is raised after the other shards ran, as the glue
    raises it after every partition ran."""
    if not rows:
        return
    count = sink.config.shards
    cols = ChangeColumns([], [], [], [], [], [], [], [], [], [], [], [])
    by_shard: dict[int, list[int]] = {}

    def add(row: dict[str, Any], key: str | None, role: int) -> None:
        i = len(cols.op)
        for name in ("source", "database", "table", "op", "sequence", "change_id",
                     "file_num", "offset", "event_index", "after"):  # fmt: skip
            getattr(cols, name).append(row[name])
        cols.key.append(key)
        cols.role.append(role)
        shard = spark_shard(row["database"], row["table"], key, count)
        by_shard.setdefault(shard, []).append(i)

    for row in rows:
        if row["op"] == "update" and row.get("before_key") is not None:
            add(row, row["before_key"], ROLE_OLD)
            add(row, row["key"], ROLE_NEW)
        else:
            add(row, row["key"], ROLE_KEY)
    error: BaseException | None = None
    for shard in sorted(by_shard):
        try:
            result = sink.apply_columns(cols, by_shard[shard], batch_id, shard)
            log.debug("batch %d: %s", batch_id, result)
        except Exception as exc:
            if not (isinstance(exc, SinkError) or is_terminal(exc)):
                raise
            error = error or exc
    if error is not None:
        raise error
