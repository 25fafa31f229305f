"""The Parquet change log: every change row, append-only, one file per table, day and batch.

Layout (hive-style directories, readable by Spark, DuckDB, pyarrow)::

    <path>/table_id=<database>.<table>/date=<YYYY-MM-DD>/batch-<batch_id:012d>-<n>.parquet

``table_id`` is ``database.table`` (``database._ddl`` for DDL rows, whose table is
empty); ``date`` is the commit date in UTC (from ``commit_ts``). Each file holds change
rows with exactly the change-row schema (:mod:`headwater.changes.schema`); readers that
discover partitions also see ``table_id`` and ``date`` columns.

Idempotence per batch id: a batch is written under ``<path>/_staging/`` (a directory
Spark and DuckDB globbing skip), then each file is moved into place (a rename:
:mod:`headwater.sinks.files.fs`, which also says what is atomic on which store; ``path``
may be a URI such as ``hdfs://`` or ``s3a://``) under its deterministic name, and files
of the same batch id that the new write did not produce are deleted. A replayed batch id
therefore replaces its files and never adds duplicates; a crash in the middle of
publishing leaves at most the old and new files of that one batch, which the replay
settles.

Schema changes (``ddl``): the file schema is the change-row schema whatever the source's
DDL (images are JSON text), so a schema change needs nothing of the files: every mode but
``fail`` writes DDL rows as rows (``evolve``, ``lenient`` and ``ignore`` are the same here).
``fail`` writes the batch's rows before the first DDL row about data (accounts, privileges
and the like do not count) and stops with an error naming the statement and the setting.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from headwater.changes import ChangeRow
from headwater.sinks.base import DdlMode, SinkCapabilities, as_change
from headwater.sinks.files.fs import FileStore, store_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from headwater.sinks.files.configuration import ParquetLogConfig

__all__ = ["ParquetChangeLog"]

STAGING = "_staging"


class ParquetChangeLog:
    """Sink: the change log as Parquet (module docstring)."""

    def __init__(self, config: ParquetLogConfig) -> None:
        self.config = config

    @property
    def capabilities(self) -> SinkCapabilities:
        from headwater.sinks.files.factory import LOG_CAPABILITIES

        return LOG_CAPABILITIES

    def _staging(self, store: FileStore, batch_id: int) -> str:
        return store.join(self.config.path, STAGING, f"batch-{batch_id}-{uuid.uuid4().hex}")

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        """Write a micro-batch of change rows with Spark, then publish it."""
        from pyspark.sql import functions as F

        stop = None
        if DdlMode(self.config.ddl) is DdlMode.FAIL:
            ddl = df.filter(F.col("op") == "ddl").collect()
            stop = self._first_schema_change(map(as_change, ddl))
            if stop is not None:
                df = df.filter(F.col("sequence") < stop.sequence)
        store = store_for(self.config.path, df.sparkSession)
        staging = self._staging(store, batch_id)
        table = F.when(F.col("table") == "", F.lit("_ddl")).otherwise(F.col("table"))
        out = df.withColumn("table_id", F.concat_ws(".", F.col("database"), table)).withColumn(
            "date", F.date_format(F.col("commit_ts"), "yyyy-MM-dd")
        )
        # one task per (table, day): one file per partition directory and batch
        out.repartition("table_id", "date").write.partitionBy("table_id", "date").parquet(staging)
        self._publish(store, staging, batch_id)
        if stop is not None:
            raise self._stopped(stop, batch_id)

    def _first_schema_change(self, changes: Iterable[ChangeRow]) -> ChangeRow | None:
        """The first DDL change row about data (``ddl: fail`` stops there), or None."""
        from headwater.schema.ddlscope import ddl_scope

        for change in sorted(changes, key=lambda c: c.sequence):
            if change.op == "ddl" and ddl_scope(change.sql or "", change.database).about_data:
                return change
        return None

    def _stopped(self, change: ChangeRow, batch_id: int) -> Exception:
        from headwater.errors import SinkError
        from headwater.schema.ddlscope import ddl_scope

        kind = ddl_scope(change.sql or "", change.database).kind
        return SinkError(
            f"schema change ({kind}) stopped the sink (ddl: fail); set ddl to lenient,"
            " evolve or ignore to keep writing DDL rows to the change log",
            table=change.table_name if change.table else change.database,
            statement=change.sql,
            batch_id=batch_id,
            resume_sequence=change.sequence,
        )

    def write_changes(self, rows: Iterable[Any], batch_id: int) -> int:
        """The same without Spark (pyarrow): change-row dicts, ChangeRows or Rows."""
        import datetime as dt

        import pyarrow as pa
        import pyarrow.parquet as pq

        from headwater.changes.schema import CHANGE_COLUMNS, change_arrow_schema, image_json

        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        count = 0
        items = [(raw, as_change(raw)) for raw in rows]
        stop = None
        if DdlMode(self.config.ddl) is DdlMode.FAIL:
            stop = self._first_schema_change(c for _, c in items)
        for raw, c in items:
            if stop is not None and c.sequence >= stop.sequence:
                continue
            ts = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=c.ts_us)
            values = raw if isinstance(raw, dict) else {}
            record = {name: values.get(name) for name, _ in CHANGE_COLUMNS}
            record.update(
                source=c.source,
                database=c.database,
                table=c.table,
                op=c.op,
                ts_us=c.ts_us,
                commit_ts=ts,
                change_id=c.position.change_id,
                file_num=c.position.file_num,
                offset=c.position.offset,
                event_index=c.position.event_index,
                sequence=c.sequence,
                key=image_json(c.key),
                before=image_json(c.before),
                after=image_json(c.after),
                sql=c.sql,
            )
            table_id = f"{c.database}.{c.table or '_ddl'}"
            groups.setdefault((table_id, ts.date().isoformat()), []).append(record)
            count += 1
        store = store_for(self.config.path)
        staging = self._staging(store, batch_id)
        for (table_id, date), records in groups.items():
            folder = store.join(staging, f"table_id={table_id}", f"date={date}")
            store.makedirs(folder)
            table = pa.Table.from_pylist(records, schema=change_arrow_schema())
            filesystem, part = store.arrow(store.join(folder, "part-0.parquet"))
            pq.write_table(table, part, filesystem=filesystem)
        self._publish(store, staging, batch_id)
        if stop is not None:
            raise self._stopped(stop, batch_id)
        return count

    def _publish(self, store: FileStore, staging: str, batch_id: int) -> None:
        root = self.config.path
        prefix = f"batch-{batch_id:012d}-"
        written: set[str] = set()
        folders: dict[str, list[str]] = {}
        for folder, name in store.files(staging):
            if name.endswith(".parquet"):
                folders.setdefault(folder, []).append(name)
        for folder, files in folders.items():
            final = store.join(root, folder)
            store.makedirs(final)
            for n, name in enumerate(sorted(files)):
                target = store.join(final, f"{prefix}{n}.parquet")
                store.replace(store.join(staging, folder, name), target)
                written.add(store.normal(target))
        for stale in store.glob(store.join(root, "table_id=*", "date=*", f"{prefix}*.parquet")):
            if store.normal(stale) not in written:
                store.remove(stale)
        store.rmtree(staging)
