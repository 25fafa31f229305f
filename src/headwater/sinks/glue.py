"""Spark glue of the SQL sinks: what ``foreachBatch(df, batch_id)`` runs.

:func:`write_sql_batch` runs **one Spark job** per micro-batch without DDL:

1. ``mapInArrow`` routes each change row to the shard of its key
   (:func:`headwater.sinks.merge.shard_of`): the row leaves with a ``part`` column (the
   shard's partition key). An update that moves a row to another key leaves twice, once
   for the old key's shard (its delete) and once for the new key's (its upsert). A DDL row
   leaves once per shard: every shard sees every DDL of the batch;
2. ``repartition(shards, "part")`` moves rows to their shard's partition inside the JVM
   (``part`` values are chosen so that shard *i* is partition *i*);
3. ``mapInArrow`` applies each partition's shard with its own connection and transaction
   (:meth:`SqlSink.apply_events`: collapse, batched deletes and upserts, checkpoint), but
   only the changes before the batch's first DDL, and reports that DDL;
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
from headwater.sinks.base import Change, as_change
from headwater.sinks.merge import KeyEvent, explode, shard_of

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
            routed = segment.mapInArrow(
                functools.partial(_route_batches, count, keys),
                f"{', '.join(f'`{c}` {t}' for c, t in _column_types(rows))}, part int",
            ).repartition(count, "part")
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


def _column_types(df: DataFrame) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


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


def _route_batches(
    count: int, keys: list[int], batches: Iterable[pyarrow.RecordBatch]
) -> Iterator[pyarrow.RecordBatch]:
    import pyarrow as pa

    for batch in batches:
        take: list[int] = []
        parts: list[int] = []
        columns = {name: batch.column(name).to_pylist() for name in _COLUMNS}
        for i in range(batch.num_rows):
            row = {name: values[i] for name, values in columns.items()}
            if row["op"] == "ddl":
                for shard in range(count):
                    take.append(i)
                    parts.append(keys[shard])
                continue
            shards = {shard_of(e.database, e.table, e.key, count) for e in explode(as_change(row))}
            for shard in sorted(shards):
                take.append(i)
                parts.append(keys[shard])
        if not take:
            continue
        out = batch.take(pa.array(take, pa.int64()))
        yield out.append_column("part", pa.array(parts, pa.int32()))


def _apply_partition(
    sink: SqlSink, batch_id: int, keys: list[int], batches: Iterable[pyarrow.RecordBatch]
) -> Iterator[pyarrow.RecordBatch]:
    import pyarrow as pa

    count = sink.config.shards
    # Rows keyed by the shard they were routed to (a partition holds one shard).
    changes: dict[int, list[Change]] = {}
    ddl: Change | None = None
    for batch in batches:
        columns = {name: batch.column(name).to_pylist() for name in (*_COLUMNS, "part")}
        for i in range(batch.num_rows):
            row = {name: values[i] for name, values in columns.items()}
            change = as_change(row)
            if change.op == "ddl":
                if ddl is None or change.sequence < ddl.sequence:
                    ddl = change
                continue
            changes.setdefault(row["part"], []).append(change)
    part_shard = {key: shard for shard, key in enumerate(keys)}
    shards: list[int] = []
    payloads: list[bytes] = []
    for part, rows in changes.items():
        shard = part_shard[part]
        events: list[KeyEvent] = []
        for change in rows:
            if ddl is not None and change.sequence > ddl.sequence:
                continue
            for ev in explode(change):
                if shard_of(ev.database, ev.table, ev.key, count) == shard:
                    events.append(ev)
        events.sort(key=lambda e: e.sequence)
        try:
            result: Any = sink.apply_events(events, batch_id, shard)
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
