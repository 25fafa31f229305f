"""The Spark pipeline: the ``headwater`` data source, typed table views, transforms and the
pipeline runner. Change rows have the schema of :mod:`headwater.spark.schema`.

``register(spark)`` makes ``spark.read/readStream.format("headwater")`` available
(:mod:`headwater.spark.source`); ``table_changes(df, "db.table", schema=...)`` gives one
table's changes with typed columns (:mod:`headwater.spark.views`). Modules importing
pyspark are loaded on first use, so ``headwater.spark.schema`` stays cheap to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from headwater.spark.schema import (
    CHANGE_COLUMNS,
    CHANGE_SCHEMA_DDL,
    change_arrow_schema,
    change_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from headwater.spark.source import HeadwaterDataSource
    from headwater.spark.views import table_changes

__all__ = [
    "CHANGE_COLUMNS",
    "CHANGE_SCHEMA_DDL",
    "HeadwaterDataSource",
    "change_arrow_schema",
    "change_schema",
    "register",
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
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
