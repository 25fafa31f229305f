"""Spark adapters: the ``headwater`` data source, typed table views and transforms (the
pipeline that wires them to sinks is :mod:`headwater.pipeline`; this package imports no
sink). Change rows have the schema of :mod:`headwater.changes.schema`.

``register(spark)`` makes ``spark.read/readStream.format("headwater")`` available
(:mod:`headwater.spark.source`); ``table_changes(df, "db.table", schema=...)`` gives one
table's changes with typed columns (:mod:`headwater.spark.views`);
``table_as_of(spark, log, "db.table", as_of=...)`` the table's rows at a point of the log
(:mod:`headwater.spark.asof`). Modules importing
pyspark are loaded on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from headwater.changes.schema import (
    CHANGE_COLUMNS,
    CHANGE_SCHEMA_DDL,
    change_arrow_schema,
    change_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from headwater.spark.asof import table_as_of
    from headwater.spark.source import HeadwaterDataSource
    from headwater.spark.views import table_changes

__all__ = [
    "CHANGE_COLUMNS",
    "CHANGE_SCHEMA_DDL",
    "HeadwaterDataSource",
    "change_arrow_schema",
    "change_schema",
    "register",
    "table_as_of",
    "table_changes",
]


def register(spark: SparkSession) -> None:
    """Register the ``headwater`` data source with ``spark`` (idempotent)."""
    from headwater.spark.source import HeadwaterDataSource

    spark.dataSource.register(HeadwaterDataSource)


def __getattr__(name: str) -> Any:
    if name == "HeadwaterDataSource":
        from headwater.spark.source import HeadwaterDataSource

        return HeadwaterDataSource
    if name == "table_changes":
        from headwater.spark.views import table_changes

        return table_changes
    if name == "table_as_of":
        from headwater.spark.asof import table_as_of

        return table_as_of
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
