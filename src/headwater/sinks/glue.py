"""Spark glue of the SQL sinks: what ``foreachBatch(df, batch_id)`` runs.

:func:`write_sql_batch` runs **one Spark job** per micro-batch without DDL:

1. Spark SQL (in the JVM: no Python worker, no Arrow round trip) gives each change row
   its copies and their shards: one copy keyed by ``key``, or, for an update that changed
   the primary key (``before_key`` set), a delete copy keyed by ``before_key`` and a put
   copy keyed by ``key`` (the roles of :func:`headwater.sinks.merge.route_row`); the
   shard is ``pmod(xxhash64(database, table, key text), shards)``. A DDL row is copied
   to every shard: every shard sees every DDL of the batch. Only the columns the apply
   step reads go on (``before`` stays behind), so the shuffle moves less;
2. ``repartition(shards, "part")`` moves rows to their shard's partition inside the JVM
   (``part``, a value picked per shard, is such that shard *i* is partition *i*);
3. ``mapInArrow`` applies each partition's shard with its own connection and transaction
   (:meth:`SqlSink.apply_columns`: collapse on the columns, batched deletes and upserts,
   checkpoint), but only the changes before the batch's first DDL, and reports that DDL;
4. the driver collects one small result per shard, applies the DDL (if any), and runs the
   job again on the changes after it, until no DDL is left: data before a DDL statement is
   applied before it, data after it after it.

Arrow carries rows between the JVM and Python in columns: no pickled ``Row`` objects, no
Python-side shuffle. A :class:`~headwater.errors.SinkError` on an executor is returned to
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
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from headwater.errors import SinkError
from headwater.gcpause import gc_paused
from headwater.sinks.base import Change, as_change
from headwater.sinks.merge import ROLE_KEY, ROLE_NEW, ROLE_OLD, ChangeColumns

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, SparkSession

    from headwater.sinks.sql import SqlSink

__all__ = ["write_sql_batch"]

log = logging.getLogger(__name__)

#: Columns of the change rows the apply step reads (the rest stay in the JVM).
_COLUMNS = (
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
    "before",
    "after",
    "sql",
    "ts_us",
    "before_key",
)
#: Columns the apply step reads (after routing: ``key`` is the copy's key).
_APPLY_COLUMNS = (
    *(c for c in _COLUMNS if c not in ("before", "before_key")),
    "role",
    "part",
)

_PART_KEYS: dict[int, list[int]] = {}
_PART_LOCK = threading.Lock()


def write_sql_batch(sink: SqlSink, df: DataFrame, batch_id: int) -> None:
    """Apply a micro-batch of change rows through ``sink`` (module docstring)."""
    from pyspark.sql import functions as F

    sink.setup()
    count = sink.config.shards
    keys = _part_keys(df.sparkSession, count)
    rows = df.select(*(F.col(c) for c in _COLUMNS))
    low: int | None = None
    while True:
        segment = rows if low is None else rows.filter(F.col("sequence") > low)
        with warnings.catch_warnings():
            # PySpark 4.3 warns that pandas 3 is "not fully supported" even for
            # mapInArrow, which does not use pandas.
            warnings.simplefilter("ignore", FutureWarning)
            routed = _routed(segment, count, keys).repartition(count, "part")
            applied = routed.mapInArrow(
                functools.partial(_apply_partition, sink, batch_id, keys),
                "shard int, result binary",
            )
        out = applied.collect()
        results = [pickle.loads(r["result"]) for r in out]
        errors = [r for r in results if isinstance(r, SinkError)]
        for result in results:
            log.debug("batch %d: %s", batch_id, result)
        if errors:
            raise errors[0]
        ddl = [r for r in results if isinstance(r, Change)]
        if not ddl:
            return
        stop = min(ddl, key=lambda c: c.sequence)
        sink.apply_ddl(stop, batch_id)
        low = stop.sequence


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
    over the input (a union of two branches would read the source twice)."""
    from pyspark.sql import functions as F

    def copy(role: int, key: Any, shard: Any = None) -> Any:
        fixed = F.lit(None).cast("int") if shard is None else shard
        return F.struct(F.lit(role).alias("role"), key.alias("k"), fixed.alias("s"))

    null_key = F.lit(None).cast("string")
    every_shard = F.transform(
        F.sequence(F.lit(0), F.lit(count - 1)), lambda i: copy(ROLE_KEY, null_key, i)
    )
    moved = (F.col("op") == "update") & F.col("before_key").isNotNull()
    copies = (
        F.when(F.col("op") == "ddl", every_shard)
        .when(moved, F.array(copy(ROLE_OLD, F.col("before_key")), copy(ROLE_NEW, F.col("key"))))
        .otherwise(F.array(copy(ROLE_KEY, F.col("key"))))
    )
    c = F.col("__hw_copy")
    shard = F.coalesce(
        c["s"], F.pmod(F.xxhash64("database", "table", c["k"]), F.lit(count)).cast("int")
    )
    part_of = F.array(*(F.lit(k) for k in keys))
    return (
        rows.withColumn("__hw_copy", F.explode(copies))
        .withColumn("key", F.when(F.col("op") == "ddl", F.col("key")).otherwise(c["k"]))
        .withColumn("role", c["role"])
        .withColumn("part", F.element_at(part_of, shard + 1).cast("int"))
        .select(*_APPLY_COLUMNS)
    )


def _apply_partition(
    sink: SqlSink, batch_id: int, keys: list[int], batches: Iterable[pyarrow.RecordBatch]
) -> Iterator[pyarrow.RecordBatch]:
    with gc_paused():  # headwater.gcpause: most of this step's time otherwise
        yield from _apply_batches(sink, batch_id, keys, batches)


def _apply_batches(
    sink: SqlSink, batch_id: int, keys: list[int], batches: Iterable[pyarrow.RecordBatch]
) -> Iterator[pyarrow.RecordBatch]:
    import pyarrow as pa

    received = list(batches)
    if not received:
        return
    data = pa.Table.from_batches(received)
    col = {name: data.column(name).to_pylist() for name in _APPLY_COLUMNS}
    ops: list[str] = col["op"]
    seqs: list[int] = col["sequence"]
    # The batch's first DDL: this run applies only the changes before it.
    ddl: Change | None = None
    for i, op in enumerate(ops):
        if op == "ddl" and (ddl is None or seqs[i] < ddl.sequence):
            ddl = as_change({name: values[i] for name, values in col.items()})
    cut = None if ddl is None else ddl.sequence
    order = sorted(
        (i for i, op in enumerate(ops) if op != "ddl" and (cut is None or seqs[i] < cut)),
        key=seqs.__getitem__,
    )
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
    )
    part_shard = {key: shard for shard, key in enumerate(keys)}
    by_part: dict[int, list[int]] = {}
    parts: list[int] = col["part"]
    for i in order:
        by_part.setdefault(parts[i], []).append(i)
    shards: list[int] = []
    payloads: list[bytes] = []
    for part, rows in by_part.items():
        shard = part_shard[part]
        try:
            result: Any = sink.apply_columns(cols, rows, batch_id, shard)
        except SinkError as exc:
            result = exc
        shards.append(shard)
        payloads.append(pickle.dumps(result))
    if ddl is not None:
        shards.append(-1)
        payloads.append(pickle.dumps(ddl))
    if shards:
        yield pa.RecordBatch.from_arrays(
            [pa.array(shards, pa.int32()), pa.array(payloads, pa.binary())],
            names=["shard", "result"],
        )
