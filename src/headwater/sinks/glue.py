"""Spark glue of the SQL sinks: what ``foreachBatch(df, batch_id)`` runs.

:func:`write_sql_batch` on the driver:

1. collects the batch's DDL rows (few) and cuts the batch at them into segments, so that
   data before a DDL statement is applied before it and data after it after it;
2. per segment, explodes each change row into key events on the executors
   (:func:`headwater.sinks.merge.route`), moves every event to the partition of its key's
   shard (``rdd.partitionBy(shards)`` with the shard number as partition: partition *i*
   holds exactly the events of shard *i*), and applies each partition in parallel with
   its own connection and transaction (:meth:`SqlSink.apply_events`: collapse, batched
   deletes and upserts, checkpoint);
3. applies the DDL statement on the driver, then the next segment.

A :class:`~headwater.errors.SinkError` on an executor is returned to the driver as data
(Spark would wrap it into a Java exception) and raised there once every partition has
finished; the partitions that succeeded stay applied (their checkpoints say so), so a
replay of the batch only redoes the failed ones.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from headwater.errors import SinkError
from headwater.sinks.base import as_change
from headwater.sinks.merge import KeyEvent, route

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from headwater.sinks.sql import SqlSink

__all__ = ["write_sql_batch"]

log = logging.getLogger(__name__)


def write_sql_batch(sink: SqlSink, df: DataFrame, batch_id: int) -> None:
    """Apply a micro-batch of change rows through ``sink`` (module docstring)."""
    from pyspark.sql import functions as F

    sink.setup()
    ddl = sorted(df.filter(F.col("op") == "ddl").collect(), key=lambda r: r["sequence"])
    data = df.filter(F.col("op") != "ddl")
    low: int | None = None
    for stop in [*ddl, None]:
        segment = data
        if low is not None:
            segment = segment.filter(F.col("sequence") > low)
        if stop is not None:
            segment = segment.filter(F.col("sequence") < stop["sequence"])
        _apply_segment(sink, segment, batch_id)
        if stop is not None:
            sink.apply_ddl(as_change(stop), batch_id)
            low = stop["sequence"]


def _shard_of(shard: int) -> int:
    return shard


def _route_rows(count: int, rows: Iterable[Any]) -> Iterator[tuple[int, KeyEvent]]:
    return route((as_change(r) for r in rows), count)


def _apply_partition(
    sink: SqlSink, batch_id: int, index: int, pairs: Iterable[tuple[int, KeyEvent]]
) -> Iterator[Any]:
    events = [event for _, event in pairs]
    try:
        yield sink.apply_events(events, batch_id, index)
    except SinkError as exc:
        yield exc


def _apply_segment(sink: SqlSink, segment: DataFrame, batch_id: int) -> None:
    count = sink.config.shards
    results = (
        segment.rdd.mapPartitions(functools.partial(_route_rows, count))
        .partitionBy(count, _shard_of)
        .mapPartitionsWithIndex(functools.partial(_apply_partition, sink, batch_id))
        .collect()
    )
    errors = [r for r in results if isinstance(r, SinkError)]
    for result in results:
        log.debug("batch %d: %s", batch_id, result)
    if errors:
        raise errors[0]
