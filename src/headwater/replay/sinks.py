"""Replay into a SQL table through the existing sinks (MySQL/MariaDB, PostgreSQL).

The replayed state of each table (:func:`headwater.spark.table_as_of`) becomes one
``read`` change row per row, as a snapshot's rows are: ``after`` is the row rendered as
the log renders images (docs/formats.md "Values": DECIMAL as text, bytes as
``{"base64"}``, TIME as ``HH:MM:SS``), ``key`` its primary key, the position the state's
point (so the sink's schema source gives the definition in force there, and
``create_tables`` creates the table with it). The rows go to the sink's ``write_batch``
(the ``foreachBatch`` body: shards by key hash, upserts in parallel, one checkpoint per
shard), batch id 0.

Invariants: ``source`` of the rows is ``replay <db.table> <as_of>`` (one per table: the
sequences of each table's rows start again at 1) and their sequences are unique and
increasing within a Spark partition, so the sink's exactly-once checkpoints (per pipeline,
source and shard) make a re-run of the same replay into the same target with the same
pipeline name apply nothing twice. The target table should be new or empty: the
replay upserts the state's rows and deletes nothing (a row the target holds that the
state lacks stays).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from headwater.errors import ConfigError
from headwater.replay.run import ReplayResult, TableReplay, spark_errors
from headwater.spark.asof import plan_as_of, table_as_of
from headwater.store import EARLIEST, LATEST

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from headwater.position import Position

__all__ = ["replay_to_sink", "state_change_rows"]

#: Bits of a change-row sequence left for the row index within a Spark partition.
_PARTITION_SHIFT = 36


def state_change_rows(
    batches: Iterable[pa.RecordBatch],
    *,
    source: str,
    database: str,
    table: str,
    key: tuple[str, ...],
    at: Position,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: typed state rows (one struct column ``image``) to change rows
    (:func:`headwater.changes.schema.change_arrow_schema`), op ``read``."""
    import pyarrow as pa
    from pyspark import TaskContext

    from headwater.changes.schema import change_arrow_schema, image_json

    schema = change_arrow_schema()
    context = TaskContext.get()
    partition = 0 if context is None else context.partitionId()
    n = 0
    for batch in batches:
        images = batch.column("image").to_pylist()
        count = len(images)
        first = (partition << _PARTITION_SHIFT) + n + 1
        n += count
        columns: dict[str, Any] = {
            "source": [source] * count,
            "database": [database] * count,
            "table": [table] * count,
            "op": ["read"] * count,
            "ts_us": [0] * count,
            "commit_ts": [None] * count,
            "change_id": [at.change_id] * count,
            "file_num": [at.file_num] * count,
            "offset": [at.offset] * count,
            "event_index": [at.event_index] * count,
            "gtid": [""] * count,
            "txn_id": [""] * count,
            "sequence": list(range(first, first + count)),
            "key": [image_json({k: image[k] for k in key}) for image in images],
            "before": [None] * count,
            "after": [image_json(image) for image in images],
            "schema_version": [0] * count,
            "sql": [None] * count,
            "before_key": [None] * count,
        }
        yield pa.RecordBatch.from_pydict(columns, schema=schema)


def replay_to_sink(
    spark: SparkSession,
    log: str | os.PathLike[str] | Mapping[str, str],
    tables: Sequence[str],
    sink: Any,
    *,
    as_of: str = LATEST,
    base: str | os.PathLike[str] | None = None,
    base_position: str | None = None,
    partitions: int | None = None,
) -> ReplayResult:
    """Rebuild ``tables`` as of ``as_of`` and write them through ``sink`` (a SQL sink of
    :mod:`headwater.sinks`, e.g. ``create_sink("postgres", ...)`` or one a pipeline file
    builds); see the module docstring. ``base``/``base_position`` as
    :func:`headwater.replay.replay_to_parquet`."""
    from pyspark.sql import functions as F

    from headwater.changes.schema import change_schema

    if not tables:
        raise ConfigError("name at least one table", field="tables")
    if (base is None) != (base_position is None):
        raise ConfigError("give both a base image and its position, or neither", field="base")
    if not hasattr(sink, "write_batch"):
        raise ConfigError(f"{type(sink).__name__} is not a sink", field="sink")
    began = time.monotonic()
    done: list[TableReplay] = []
    first = end = 0
    for table in tables:
        table_base = None if base is None else os.path.join(os.fspath(base), table)
        if table_base is not None and not os.path.exists(table_base):
            raise ConfigError(f"{table_base} does not exist", field="base")
        plan = plan_as_of(
            log, table, as_of=as_of, start=base_position or EARLIEST, partitions=partitions
        )
        first, end = plan.first_seq, plan.end_seq
        state = table_as_of(
            spark,
            log,
            table,
            as_of=as_of,
            base=table_base,
            base_position=base_position,
            partitions=partitions,
            plan=plan,
        )
        database, _, name = table.partition(".")
        body = _Body(
            f"replay {table} {as_of}", database, name, tuple(plan.definition.primary_key), plan.at
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # as in spark/asof.py
            rows = state.select(F.struct("*").alias("image")).mapInArrow(body, change_schema())
        with spark_errors():
            rows = rows.persist()
            count = rows.count()
            sink.write_batch(rows, 0)
            rows.unpersist()
        done.append(TableReplay(table, repr(sink), count, tuple(state.columns)))
    return ReplayResult(
        as_of=as_of,
        first_seq=first,
        end_seq=end,
        base=None if base is None else os.fspath(base),
        base_position=base_position,
        tables=tuple(done),
        seconds=round(time.monotonic() - began, 3),
    )


class _Body:
    """:func:`state_change_rows` bound to one table (picklable for the executors)."""

    def __init__(
        self, source: str, database: str, table: str, key: tuple[str, ...], at: Position
    ) -> None:
        self.source, self.database, self.table, self.key, self.at = (
            source,
            database,
            table,
            key,
            at,
        )

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return state_change_rows(
            batches,
            source=self.source,
            database=self.database,
            table=self.table,
            key=self.key,
            at=self.at,
        )
