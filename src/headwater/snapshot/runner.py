"""Running a snapshot on Spark: waves of chunks read in parallel, written through the sinks.

The driver plans (:mod:`headwater.snapshot.planner`), then runs *waves* until every chunk
is done. A wave:

1. takes the next ``wave_chunks`` pending chunks and a new wave number (saved first);
2. maps them on the executors, one Spark task per chunk (:func:`~headwater.snapshot.
   reader.run_chunk`: own connection, SELECT between watermarks, reconciliation with the
   change log read from the task directory or the reader's HTTP API:
   :mod:`headwater.snapshot.changelog`), persisting the result. Bulk chunks
   (:mod:`headwater.snapshot.bulk`, chosen per table by
   :meth:`SnapshotRunner._choose_paths`) are loaded into the targets by the task itself
   and return only their window's changes: a wave of them is one job whose Spark tasks
   run up to :data:`BULK_PER_TASK` chunks each, at once in threads (a bulk chunk's
   Python work is small; it waits for the two servers), so all of a wave's chunks read
   and load at the same time;
3. collects the chunks' metadata; ``S_w`` is the largest ``last_seq`` (record before
   high) of the wave;
4. builds the wave's *catch-up*: the change log's row changes of the snapshot's tables in
   records ``(emitted_seq, S_w]`` (the first wave: from the smallest ``last_seq``) whose
   key lies in a chunk done in an earlier wave, or in a chunk of this wave whose
   ``last_seq`` is below the change's record. An update moving a key from such a chunk
   into a chunk not read yet becomes a delete of the old key. Changes of keys whose chunk
   is not read yet are dropped: that chunk's read will include their effect;
5. writes chunk rows (op ``read``; for bulk chunks, their window's changes instead)
   plus catch-up through the pipeline's transforms to every sink with
   ``write_batch(df, batch_base + wave)`` (default ``WAVE_BATCH_BASE``; no batch when
   there is nothing to write);
6. records the chunks as done and ``emitted_seq = S_w`` in the state file.

Why this is exact with the SQL sinks, whose checkpoint is a max sequence per shard:
within a wave every row of a key carries its own sequence (chunk rows
:func:`~headwater.snapshot.watermarks.read_sequence`, catch-up its log sequence), and the
sink collapses a key's events in sequence order; across waves sequences only grow (a
wave's chunks are read after the previous wave ended, so their ``last_seq >= S_{w-1}``,
and the wave number breaks ties), so no shard checkpoint ever skips a change the snapshot
still needs. After the last wave the target holds every snapshot table as of record
``emitted_seq``; the stream must start at record ``emitted_seq + 1``
(:attr:`SnapshotResult.starting_position`), with the same sinks and checkpoint table.

Resume: a wave interrupted by a crash is run again under a new wave number: its chunks
are read again (newer state, higher sequences); shards that committed the old attempt
skip what they hold and apply the newer rows; catch-up from ``emitted_seq`` is the same.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.changes import ChangeRow
from headwater.changes.schema import change_row_values, change_schema
from headwater.changes.sequence import record_of
from headwater.connections import SourceConnection
from headwater.position import Position
from headwater.sinks.failfast import Failed, catch_terminal
from headwater.snapshot.changelog import LogRef, SnapshotLog
from headwater.snapshot.chunks import ChunkConnections, ChunkTask, connect_source, run_chunk
from headwater.snapshot.keys import KeyOrder, decode_key
from headwater.snapshot.planner import key_order, parse_tables, plan_state
from headwater.snapshot.state import Progress, SnapshotState
from headwater.snapshot.watermarks import kid

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "WAVE_BATCH_BASE",
    "SnapshotOptions",
    "SnapshotResult",
    "SnapshotRunner",
    "bulk_slices",
]

log = logging.getLogger(__name__)

#: Bulk chunks one Spark task runs at once (in threads).
BULK_PER_TASK = 8


def bulk_slices(chunks: int, cores: int) -> int:
    """Spark tasks for a bulk wave of ``chunks``: at most :data:`BULK_PER_TASK` chunks a
    task, and at least one task per executor core (``cores``: the context's default
    parallelism, its executors' total cores on a cluster), never more tasks than chunks."""
    return max(-(-chunks // BULK_PER_TASK), min(chunks, cores), 1)


#: A position after every schema change: table definitions as they are now.
_LATEST = Position(1 << 30, 1 << 30, 1 << 60, 0)

#: Sink batch ids of snapshot waves: ``WAVE_BATCH_BASE + wave`` (apart from stream ids).
WAVE_BATCH_BASE = 100_000_000_000


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    """``chunk_rows``: rows per chunk; ``wave_chunks``: chunks per wave (0: twice Spark's
    default parallelism); ``timeout_s``: the longest wait for the reader to store a
    chunk's window; ``keys``: ``db.table -> key columns`` for tables without a primary
    key (a unique key); ``bulk``: use the bulk path (:mod:`headwater.snapshot.bulk`)
    where it applies, False keeps every chunk on the general path; ``batch_base``: the
    sinks' batch id of wave *w* is ``batch_base + w`` (a re-snapshot takes its own)."""

    chunk_rows: int = 50_000
    wave_chunks: int = 0
    timeout_s: float = 60.0
    keys: tuple[tuple[str, tuple[str, ...]], ...] = ()
    bulk: bool = True
    batch_base: int = WAVE_BATCH_BASE


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    """A finished snapshot: its id, rows written, and the record the stream starts at."""

    snapshot_id: str
    rows: int
    emitted_seq: int
    progress: dict[str, Any]

    @property
    def starting_position(self) -> str:
        """The Spark source's ``startingPosition`` for the stream after the snapshot."""
        return f"seq:{self.emitted_seq + 1}"


def _chunk_partition(tasks: Iterable[ChunkTask]) -> Iterable[tuple[str, Any]]:
    """One Spark task: its chunks one after the other, or, when they all take the bulk
    path, at once in threads (a bulk chunk mostly waits for the two servers, and its
    output is small)."""
    todo = list(tasks)
    if len(todo) > 1 and all(t.bulk for t in todo):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(todo), thread_name_prefix="hw-chunk") as pool:
            results = list(pool.map(_collect_chunk, todo))
        for result in results:
            yield from result
        return
    conns = ChunkConnections()
    try:
        for task in todo:
            yield from run_chunk(task, conns)
    except BaseException:
        conns.close()
        raise
    conns.release()


@catch_terminal
def _guarded_chunks(tasks: Iterable[ChunkTask]) -> Iterable[tuple[str, Any]]:
    return _chunk_partition(tasks)


def _chunk_items(tasks: Iterable[ChunkTask]) -> Iterator[tuple[str, Any]]:
    """:func:`_chunk_partition` whose error a retry cannot fix (a missing privilege on a
    bulk target, a log the executor cannot open) ends its output as a ``("failed",
    Failed)`` item: the task succeeds, Spark does not run it again, and the driver raises
    the error (:mod:`headwater.sinks.failfast`, issue #16)."""
    for item in _guarded_chunks(tasks):
        yield ("failed", item) if isinstance(item, Failed) else item


def _raise_failed(failed: Iterable[Any]) -> None:
    for item in failed:
        raise item.exception()


def _warm_partition(modules: tuple[str, ...], items: Iterable[int]) -> Iterable[int]:
    import importlib

    for name in modules:
        importlib.import_module(name)  # what a chunk imports first
    return list(items)


def _collect_chunk(task: ChunkTask) -> list[tuple[str, Any]]:
    return list(run_chunk(task))


class SnapshotRunner:
    """One snapshot of ``tables`` from the source behind the reader task ``log`` (a
    :class:`~headwater.snapshot.changelog.LogRef`: its directory or its HTTP API; a path
    is a directory) into ``sinks`` (objects with ``write_batch(df, batch_id)``), state in
    ``state_path``.

    ``transforms`` are the pipeline's (:func:`headwater.spark.transforms.apply_transforms`
    runs on each wave). ``on_progress(dict)`` is called after each wave.
    """

    def __init__(
        self,
        spark: SparkSession,
        *,
        source: str,
        log: LogRef | str | Path,
        connection: SourceConnection,
        tables: str | Sequence[str],
        state_path: str | Path,
        sinks: Sequence[Any],
        transforms: Sequence[Any] = (),
        options: SnapshotOptions | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.spark = spark
        self.source = source
        self.log = log if isinstance(log, LogRef) else LogRef(task_dir=str(log))
        self.connection = connection
        self.tables = parse_tables(tables)
        self.state_path = str(state_path)
        self.sinks = list(sinks)
        self.transforms = tuple(transforms)
        self.options = options or SnapshotOptions()
        self.on_progress = on_progress
        self.state: SnapshotState | None = None
        self.progress_tracker: Progress | None = None
        self.bulk: tuple[Any, ...] = ()
        self.bulk_tables: set[str] = set()

    # -- driver -------------------------------------------------------------------------

    def run(self) -> SnapshotResult:
        """Plan (or resume), run every wave, return the result (module docstring)."""
        warm = self._warm_workers()
        tlog = self.log.open()
        conn = connect_source(self.connection)
        try:
            state = SnapshotState.load(self.state_path)
            wanted = sorted(f"{d}.{t}" for d, t in self.tables)
            if state is None or (state.finished_us is not None and sorted(state.tables) != wanted):
                state = plan_state(
                    conn,
                    tlog,
                    source=self.source,
                    tables=self.tables,
                    chunk_rows=self.options.chunk_rows,
                    keys=dict(self.options.keys),
                )
                state.save(self.state_path)
            elif sorted(state.tables) != wanted:
                raise ValueError(
                    f"{self.state_path} holds an unfinished snapshot of {sorted(state.tables)}, "
                    f"not {wanted}: finish it or remove the file"
                )
            self.state = state
            self.progress_tracker = Progress(state)
            self._choose_paths(state, tlog)
            orders = {n: key_order(t["key"]) for n, t in state.tables.items()}
            warm.join()
            width = self.options.wave_chunks or 2 * self.spark.sparkContext.defaultParallelism
            while state.pending():
                self._wave(state, state.pending()[:width], orders, tlog, conn)
            if state.finished_us is None:
                state.finished_us = time.time_ns() // 1000
                state.save(self.state_path)
        finally:
            conn.close()
            tlog.close()
        progress = self.progress()
        return SnapshotResult(state.snapshot_id, int(progress["rows"]), state.emitted_seq, progress)

    def _warm_workers(self) -> threading.Thread:
        """Start Spark's Python workers (and their imports of this package) in a thread,
        while the driver plans: the first wave would otherwise wait for them."""
        from headwater.snapshot.bulk import bulk_target

        sc = self.spark.sparkContext
        width = max(1, min(sc.defaultParallelism, self.options.wave_chunks or 1 << 30))
        targets = [bulk_target(s, self.transforms) for s in self.sinks]
        sink_modules = sorted({type(t).__module__ for t in targets if t is not None})
        modules = ("headwater.snapshot.bulk", "pymysql", *sink_modules)
        work = functools.partial(_warm_partition, modules)

        def warm() -> None:
            try:
                sc.parallelize(range(width), width).mapPartitions(work).collect()
            except Exception:  # only an optimization; the first wave reports real trouble
                log.debug("warming the Python workers failed", exc_info=True)

        thread = threading.Thread(target=warm, name="hw-snapshot-warm", daemon=True)
        thread.start()
        return thread

    def progress(self) -> dict[str, Any]:
        """Chunks done of total, rows, rows/s, ETA, per table (:class:`Progress`)."""
        return {} if self.progress_tracker is None else self.progress_tracker.as_dict()

    def _choose_paths(self, state: SnapshotState, tlog: SnapshotLog) -> None:
        """Which tables take the bulk path (:mod:`headwater.snapshot.bulk`): when every
        sink has a bulk target that accepts local files, each table whose column types
        all have a text form; none when ``options.bulk`` is off."""
        from headwater.snapshot.bulk import bulk_target

        if not self.options.bulk or not self.sinks:
            return
        targets = [bulk_target(s, self.transforms) for s in self.sinks]
        found = [t for t in targets if t is not None]
        if len(found) < len(targets):
            return
        for target in found:
            if not target.probe():
                log.warning(
                    "snapshot: a target refuses LOAD DATA LOCAL (local_infile is off);"
                    " rows take the general path"
                )
                return
        self.bulk = tuple(found)
        for name in state.tables:
            db, _, table = name.partition(".")
            tdef = tlog.table_def(db, table)
            if tdef is not None and all(t.line_sql(tdef) is not None for t in found):
                self.bulk_tables.add(name)
                for target in found:
                    target.create_table(db, table, _LATEST)
        general = sorted(set(state.tables) - self.bulk_tables)
        if general:
            log.info("snapshot: general path for %s (column types without a bulk form)", general)

    def _tasks(
        self, state: SnapshotState, ids: list[str], orders: dict[str, KeyOrder]
    ) -> list[ChunkTask]:
        out = []
        for name, t in state.tables.items():
            db, _, table = name.partition(".")
            bulk = self.bulk if name in self.bulk_tables else ()
            for c in t["chunks"]:
                if c["id"] in ids:
                    out.append(
                        ChunkTask(c["id"], self.source, self.log, self.connection, db, table,
                                  orders[name], c["lo"], c["hi"], state.wave,
                                  self.options.timeout_s, bulk)
                    )  # fmt: skip
        return out

    def _wave(
        self,
        state: SnapshotState,
        ids: list[str],
        orders: dict[str, KeyOrder],
        tlog: SnapshotLog,
        conn: Any,
    ) -> None:
        from pyspark import StorageLevel

        state.wave += 1
        state.save(self.state_path)
        tasks = self._tasks(state, ids, orders)
        sc = self.spark.sparkContext
        rows: Any
        if all(t.bulk for t in tasks):
            # Bulk chunks are in the targets already; only their window changes and
            # metadata come back, few enough for the driver: one job, nothing cached. The
            # chunks mostly wait for the servers: a Spark task runs up to BULK_PER_TASK
            # at once in threads (each Python task, and each worker, costs CPU). But at
            # least one task per executor core (up to one per chunk): on a cluster a
            # wave of four chunks in one task ran on one worker while the others idled.
            slices = bulk_slices(len(tasks), sc.defaultParallelism)
            out = sc.parallelize(tasks, slices).mapPartitions(_chunk_items)
            items = out.collect()
            _raise_failed(v for k, v in items if k == "failed")
            metas = [v for k, v in items if k == "meta"]
            rows = [v for k, v in items if k == "row"]
        else:
            out = sc.parallelize(tasks, len(tasks)).mapPartitions(_chunk_items)
            out = out.persist(StorageLevel.MEMORY_AND_DISK)
            metas = out.filter(lambda kv: kv[0] != "row").collect()
            rows = out.filter(lambda kv: kv[0] == "row").map(lambda kv: kv[1])
            try:
                _raise_failed(v for k, v in metas if k == "failed")
            except BaseException:
                out.unpersist()
                raise
            metas = [v for k, v in metas if k == "meta"]
        try:
            catchup = self._catch_up(state, metas, orders, tlog, conn)
            if catchup or any(m["emitted"] for m in metas):
                df: DataFrame = self.spark.createDataFrame(rows, change_schema())
                if catchup:
                    df = df.unionByName(self.spark.createDataFrame(catchup, change_schema()))
                if self.transforms:
                    from headwater.spark.transforms import apply_transforms

                    df = apply_transforms(df, self.transforms)
                for sink in self.sinks:
                    sink.write_batch(df, self.options.batch_base + state.wave)
        finally:
            out.unpersist()
        for m in metas:
            state.done[m["chunk_id"]] = {
                "path": m["path"],
                "wave": state.wave,
                "high": m["high"],
                "last_seq": m["last_seq"],
                "rows": m["rows"],
                "window_changes": m["window_changes"],
                "seconds": m["seconds"],
            }
        state.emitted_seq = max([state.emitted_seq, *(int(m["last_seq"]) for m in metas)])
        state.save(self.state_path)
        assert self.progress_tracker is not None
        self.progress_tracker.record(metas)
        log.info("%s (catch-up %d changes)", self.progress_tracker.line(), len(catchup))
        if self.on_progress is not None:
            self.on_progress(self.progress())

    # -- catch-up -------------------------------------------------------------------------

    def _catch_up(
        self,
        state: SnapshotState,
        metas: list[dict[str, Any]],
        orders: dict[str, KeyOrder],
        tlog: SnapshotLog,
        conn: Any,
    ) -> list[tuple[Any, ...]]:
        """The wave's catch-up change rows (module docstring, step 4)."""
        wave_last = {m["chunk_id"]: int(m["last_seq"]) for m in metas}
        s_w = max(wave_last.values())
        first = state.emitted_seq + 1 if state.emitted_seq else min(wave_last.values()) + 1
        started = {
            name
            for name, t in state.tables.items()
            if any(c["id"] in state.done or c["id"] in wave_last for c in t["chunks"])
        }
        tables = {(n.partition(".")[0], n.partition(".")[2]) for n in started}
        changes = list(tlog.changes(first, s_w, tables, self.source))
        if not changes:
            return []
        chunk_of = self._chunk_lookup(state, changes, orders, conn)

        def emitted(name: str, key: dict[str, Any] | None, record_seq: int) -> bool:
            if key is None:
                return False
            cid = chunk_of[name][kid(key)]
            if cid in state.done:
                return True
            return cid in wave_last and record_seq > wave_last[cid]

        out: list[tuple[Any, ...]] = []
        for c in changes:
            name = f"{c.database}.{c.table}"
            cols = tuple(k["name"] for k in state.tables[name]["key"])
            rseq = record_of(c.sequence)
            new = None if c.after is None else {k: c.after.get(k) for k in cols}
            old = None if c.before is None else {k: c.before.get(k) for k in cols}
            if c.op == "delete":
                if emitted(name, old, rseq):
                    out.append(change_row_values(c))
            elif emitted(name, new, rseq):
                out.append(change_row_values(c))
            elif c.op == "update" and old is not None and emitted(name, old, rseq):
                out.append(change_row_values(_as_delete(c, old)))
        return out

    def _chunk_lookup(
        self,
        state: SnapshotState,
        changes: list[ChangeRow],
        orders: dict[str, KeyOrder],
        conn: Any,
    ) -> dict[str, dict[str, str]]:
        """Per table, key id -> chunk id for every key the changes mention."""
        keys: dict[str, dict[str, tuple[Any, ...]]] = {}
        for c in changes:
            name = f"{c.database}.{c.table}"
            cols = tuple(k["name"] for k in state.tables[name]["key"])
            for image in (c.before, c.after):
                if image is not None:
                    key = {k: image.get(k) for k in cols}
                    keys.setdefault(name, {})[kid(key)] = tuple(key.values())
        out: dict[str, dict[str, str]] = {}
        for name, found in keys.items():
            chunks = state.tables[name]["chunks"]
            bounds = [k for c in chunks[1:] if (k := decode_key(c["lo"])) is not None]
            ids = list(found)
            idx = orders[name].classify([found[i] for i in ids], bounds, conn)
            out[name] = {i: chunks[n]["id"] for i, n in zip(ids, idx, strict=True)}
        return out


def _as_delete(change: ChangeRow, old_key: dict[str, Any]) -> ChangeRow:
    return ChangeRow(
        change.source, change.database, change.table, "delete", change.ts_us, change.position,
        change.gtid, change.txn_id, change.sequence, old_key, change.before, None,
        change.schema_version,
    )  # fmt: skip
