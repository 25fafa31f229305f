"""Spark glue of the SQL sinks: what ``foreachBatch(df, batch_id)`` runs.

:func:`write_sql_batch` runs **one Spark job** per micro-batch without DDL:

1. Spark SQL (in the JVM: no Python worker, no Arrow round trip) gives each change row
   its copies and their shards: one copy keyed by ``key``, or, for an update that changed
   the primary key (``before_key`` set), a delete copy keyed by ``before_key`` and a put
   copy keyed by ``key`` (the roles of :func:`headwater.sinks.merge.route_row`); the
   shard is ``pmod(xxhash64(database, table, key text), shards)``. A DDL row is copied
   to every shard: every shard sees every DDL of the batch. Only the columns the apply
   step reads go on (:data:`SOURCE_COLUMNS`; a pipeline has its source produce no
   others: :mod:`headwater.pipeline.columns`), so the shuffle moves less;
2. ``repartition(shards, "part")`` moves rows to their shard's partition inside the JVM
   (``part``, a value picked per shard, is such that shard *i* is partition *i*). A
   micro-batch that arrives in one partition (the source cuts small batches into one
   slice: ``minBytesPerPartition``) is not shuffled: its one task applies the shards one
   after the other, each in its own transaction as below, which saves a Spark stage
   (~100 ms on two cores) where parallel apply would save a few milliseconds;
3. ``mapInArrow`` applies each partition's shards, each with its own connection and
   transaction (:meth:`SqlSink.apply_columns`: collapse on the columns, batched deletes
   and upserts, checkpoint), but only the changes before the batch's first DDL, and
   reports that DDL;
4. the driver collects one small result per shard, applies the DDL (if any), and runs the
   job again on the changes after it, until no DDL is left: data before a DDL statement is
   applied before it, data after it after it.

Arrow carries rows between the JVM and Python in columns: no pickled ``Row`` objects, no
Python-side shuffle. A :class:`~headwater.errors.SinkError` (or another error that a
retry cannot fix, :mod:`headwater.sinks.failfast`) on an executor is returned to
the driver as data (Spark would wrap it into a Java exception) and raised there once every
partition has finished; the shards that succeeded stay applied (their checkpoints say
so), so a replay of the batch only redoes the failed ones.
"""

from __future__ import annotations

import functools
import logging
import pickle
import threading
import warnings
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from headwater.changes import ChangeRow
from headwater.errors import SinkError
from headwater.gcpause import freeze_worker_heap, gc_paused
from headwater.sinks.base import as_change, pinned_schemas
from headwater.sinks.failfast import is_terminal
from headwater.sinks.merge import ROLE_KEY, ROLE_NEW, ROLE_OLD, ChangeColumns

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, SparkSession

    from headwater.sinks.sql import SqlSink

__all__ = ["SOURCE_COLUMNS", "write_sql_batch"]

log = logging.getLogger(__name__)

#: Columns of the change rows routing and the apply step read: what a pipeline of SQL
#: sinks has the source produce (its ``columns`` option, :mod:`headwater.pipeline.columns`;
#: the others, ``before`` above all, are never built in the JVM). Not ``before``: routing
#: reads ``before_key`` and collapsing reads ``key`` and ``after`` (merge.py).
SOURCE_COLUMNS = (
    "source",
    "database",
    "table",
    "op",
    "sequence",
    "change_id",
    "file_num",
    "offset",
    "event_index",
    "key",
    "after",
    "sql",
    "ts_us",
    "before_key",
)
_COLUMNS = SOURCE_COLUMNS
#: Columns the apply step reads (after routing: ``key`` is the copy's key).
_APPLY_COLUMNS = (
    *(c for c in _COLUMNS if c != "before_key"),
    "role",
    "part",
)

#: Of those, the ones the shard transaction reads (``sql`` and ``ts_us`` only make the
#: DDL change, which is taken from its Arrow row).
_ROW_COLUMNS = tuple(c for c in _APPLY_COLUMNS if c not in ("sql", "ts_us"))
#: Columns that mostly hold one value in a shard's batch (one source, one table).
_REPEATED = frozenset(("source", "database", "table", "change_id", "file_num", "part"))

_PART_KEYS: dict[int, list[int]] = {}
_PART_LOCK = threading.Lock()
#: Sinks whose checkpoint table this process has set up.
_SET_UP: weakref.WeakSet[SqlSink] = weakref.WeakSet()


def write_sql_batch(sink: SqlSink, df: DataFrame, batch_id: int) -> None:
    """Apply a micro-batch of change rows through ``sink`` (module docstring)."""
    # The checkpoint table is created once per sink object, not at every micro-batch
    # (its CREATE ... IF NOT EXISTS statements cost a target round trip each).
    with _PART_LOCK:
        ready = sink in _SET_UP
    if not ready:
        sink.setup()
        with _PART_LOCK:
            _SET_UP.add(sink)
    count = sink.config.shards
    keys = _part_keys(df.sparkSession, count)
    apply = functools.partial(_apply_partition, sink, batch_id, keys)
    shuffle: bool | None = None  # known from the first run's plan
    low: int | None = None
    while True:
        segment = df if low is None else df.filter(f"sequence > {low}")
        with warnings.catch_warnings():
            # PySpark 4.3 warns that pandas 3 is "not fully supported" even for
            # mapInArrow, which does not use pandas.
            warnings.simplefilter("ignore", FutureWarning)
            routed = _routed(segment, count, keys)
            applied = routed.mapInArrow(apply, _RESULT)
            if shuffle is None:
                shuffle = _partitions(applied) > 1
            if shuffle:
                applied = routed.repartition(count, "part").mapInArrow(apply, _RESULT)
        out = applied.collect()
        results = [pickle.loads(r["result"]) for r in out]
        errors = [r for r in results if isinstance(r, Exception)]
        for result in results:
            log.debug("batch %d: %s", batch_id, result)
        if errors:
            raise errors[0]
        ddl = [r for r in results if isinstance(r, ChangeRow)]
        if not ddl:
            return
        stop = min(ddl, key=lambda c: c.sequence)
        sink.apply_ddl(stop, batch_id)
        low = stop.sequence


#: The schema of the apply step's results (one row per shard, and one per first DDL).
_RESULT = "shard int, result binary"


def _partitions(applied: DataFrame) -> int:
    """How many partitions ``applied`` (the routed rows, not shuffled) runs in: those of
    its input, from the physical plan its ``collect`` then uses (a DataFrame keeps its
    plan), so a batch that needs no shuffle is planned once. Asking ``df.rdd`` planned
    the query a second time (the source's partitions included): 25-45 ms a micro-batch
    at load 4. No job runs: ``execute()`` only builds the RDD."""
    plan = applied._jdf.queryExecution().executedPlan()
    return int(plan.execute().getNumPartitions())


def _part_keys(spark: SparkSession, count: int) -> list[int]:
    """For each shard *i*, an int whose ``repartition(count, part)`` partition is *i*
    (Spark hashes with Murmur3; found once per process and shard count)."""
    with _PART_LOCK:
        keys = _PART_KEYS.get(count)
        if keys is not None:
            return keys
    from pyspark.sql import functions as F

    candidates = spark.range(0, 64 * count).select(
        F.col("id").cast("int").alias("v"),
        F.pmod(F.hash(F.col("id").cast("int")), F.lit(count)).alias("p"),
    )
    found: dict[int, int] = {}
    for row in candidates.collect():
        found.setdefault(int(row["p"]), int(row["v"]))
    if len(found) < count:  # pragma: no cover - Murmur3 spreads 64 * count ints
        raise RuntimeError(f"no partition keys for {count} shards")
    keys = [found[i] for i in range(count)]
    with _PART_LOCK:
        _PART_KEYS[count] = keys
    return keys


def _routed(rows: DataFrame, count: int, keys: list[int]) -> DataFrame:
    """The routed copies of ``rows`` (module docstring, step 1): the apply columns with
    ``key`` the copy's key text, ``role`` and ``part``. One projection and one explode
    over the input (a union of two branches would read the source twice).

    Built from SQL text, the same for every batch of a query: Spark caches generated code
    by its text, and a Python ``lambda`` in a column expression (``F.transform``) gets a
    fresh variable name each time it is built, which made every micro-batch compile its
    whole-stage code anew (Janino, then the JIT: measured at 1-2 CPU-seconds per large
    batch on two cores). Two ``selectExpr`` calls are also two py4j calls, where building
    the columns one function at a time took about 150 ms per batch."""
    return rows.selectExpr(*_passed(), _copies_sql(count)).selectExpr(*_routed_sql(count, keys))


@functools.cache
def _passed() -> tuple[str, ...]:
    return tuple(f"`{c}`" for c in _COLUMNS)


@functools.cache
def _copies_sql(count: int) -> str:
    """``explode`` of each row's copies: ``struct<role, k (key text), s (fixed shard)>``."""

    def copy(role: int, key: str, shard: str = "CAST(NULL AS INT)") -> str:
        return f"named_struct('role', {role}, 'k', {key}, 's', {shard})"

    every_shard = ", ".join(copy(ROLE_KEY, "CAST(NULL AS STRING)", str(i)) for i in range(count))
    return (
        "explode(CASE"
        f" WHEN op = 'ddl' THEN array({every_shard})"
        " WHEN op = 'update' AND before_key IS NOT NULL"
        f" THEN array({copy(ROLE_OLD, 'before_key')}, {copy(ROLE_NEW, '`key`')})"
        f" ELSE array({copy(ROLE_KEY, '`key`')}) END) AS __hw_copy"
    )


@functools.cache
def _routed_sql_cached(count: int, keys: tuple[int, ...]) -> tuple[str, ...]:
    shard = (
        "COALESCE(__hw_copy.s,"
        f" CAST(pmod(xxhash64(`database`, `table`, __hw_copy.k), {count}) AS INT))"
    )
    part_of = ", ".join(str(k) for k in keys)
    derived = {
        "key": "CASE WHEN op = 'ddl' THEN `key` ELSE __hw_copy.k END AS `key`",
        "role": "__hw_copy.role AS role",
        "part": f"CAST(element_at(array({part_of}), {shard} + 1) AS INT) AS part",
    }
    return tuple(derived.get(c, f"`{c}`") for c in _APPLY_COLUMNS)


def _routed_sql(count: int, keys: list[int]) -> tuple[str, ...]:
    """The output columns of the routing projection, in :data:`_APPLY_COLUMNS` order."""
    return _routed_sql_cached(count, tuple(keys))


def _apply_partition(
    sink: SqlSink, batch_id: int, keys: list[int], batches: Iterable[pyarrow.RecordBatch]
) -> Iterator[pyarrow.RecordBatch]:
    # headwater.gcpause: most of this step's time otherwise. One look at the schema
    # history file per task, not per row (sinks.base.pinned_schemas); no yield inside
    # the scope, so it never stays set while the consumer runs.
    with gc_paused(), pinned_schemas():
        out = _apply_batches(sink, batch_id, keys, batches)
    freeze_worker_heap()  # the daemon's collection after the task (headwater.gcpause)
    if out is not None:
        yield out


def _pylist(column: pyarrow.ChunkedArray, repeated: bool) -> list[Any]:
    """``column`` as a Python list. A ``repeated`` column (:data:`_REPEATED`) holding one
    value becomes that one object repeated: no object per row, one hash computed."""
    if repeated and len(column) > 0:
        unique = column.unique()
        if len(unique) == 1:
            return [unique[0].as_py()] * len(column)
    values: list[Any] = column.to_pylist()
    return values


def _apply_batches(
    sink: SqlSink, batch_id: int, keys: list[int], batches: Iterable[pyarrow.RecordBatch]
) -> pyarrow.RecordBatch | None:
    """Apply the shards of one partition; their results (module docstring), or None for
    an empty partition."""
    import pyarrow as pa

    received = list(batches)
    if not received:
        return None
    data = pa.Table.from_batches(received)
    col = {name: _pylist(data.column(name), name in _REPEATED) for name in _ROW_COLUMNS}
    ops: list[str] = col["op"]
    seqs: list[int] = col["sequence"]
    # The batch's first DDL: this run applies only the changes before it.
    ddl: ChangeRow | None = None
    order = sorted(range(len(ops)), key=seqs.__getitem__)
    if "ddl" in ops:
        first = min((i for i, op in enumerate(ops) if op == "ddl"), key=seqs.__getitem__)
        ddl = as_change(data.slice(first, 1).to_pylist()[0])
        order = [i for i in order if seqs[i] < ddl.sequence]
    cols = ChangeColumns(
        col["source"],
        col["database"],
        col["table"],
        ops,
        seqs,
        col["change_id"],
        col["file_num"],
        col["offset"],
        col["event_index"],
        col["key"],
        col["after"],
        col["role"],
        arrow=data,
    )
    part_shard = {key: shard for shard, key in enumerate(keys)}
    parts: list[int] = col["part"]
    by_part: dict[int, list[int]] = {}
    if len(set(parts)) == 1:  # the usual partition: one shard's rows
        if order:
            by_part[parts[0]] = order
    else:
        for i in order:
            by_part.setdefault(parts[i], []).append(i)
    shards: list[int] = []
    payloads: list[bytes] = []
    for part, rows in by_part.items():
        shard = part_shard[part]
        try:
            result: Any = sink.apply_columns(cols, rows, batch_id, shard)
        except Exception as exc:  # returned, not raised: no task retry (sinks.failfast)
            if not (isinstance(exc, SinkError) or is_terminal(exc)):
                raise
            result = exc
        shards.append(shard)
        payloads.append(pickle.dumps(result))
    if ddl is not None:
        shards.append(-1)
        payloads.append(pickle.dumps(ddl))
    if not shards:
        return None
    return pa.RecordBatch.from_arrays(
        [pa.array(shards, pa.int32()), pa.array(payloads, pa.binary())],
        names=["shard", "result"],
    )
