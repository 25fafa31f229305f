"""Applying a micro-batch's net effect, already collapsed into typed Arrow, to a SQL sink.

The read path (issue #17) computes per shard and per table the final after images of the
keys whose last write is a put (``upserts``) and the key columns of the keys whose last
write is a delete (``removes``). :meth:`headwater.sinks.sql.SqlSink.apply_net` applies them
in the sink's exactly-once checkpoint transaction; this module holds the data type and the
bulk writers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from headwater.position import Position
from headwater.schema.model import TableDef

__all__ = ["NetTable"]


@dataclass(frozen=True, slots=True)
class NetTable:
    """One table's net effect over a shard's range of one micro-batch.

    ``upserts`` holds one row per key whose last write is a put (its final after image),
    ``removes`` the key columns of the keys whose last write is a remove; a key is in at
    most one of them. Names in ``columns`` and ``key`` and the Arrow field names are the
    target-side names, ``columns`` in table order.
    """

    #: Target-side names (after the pipeline's renames; the sink's database_map still applies).
    database: str
    table: str
    #: The source's names (for create_tables and schema lookups).
    source_database: str
    source_table: str
    #: The table's source definition at this range (one version).
    definition: TableDef
    #: The upserts' column names, target-side, in table order.
    columns: tuple[str, ...]
    #: Primary key column names, target-side.
    key: tuple[str, ...]
    #: One row per key whose last write is a put: typed Arrow (int8..int64/uint*,
    #: float32/64, decimal128, string/binary; nulls allowed).
    upserts: pa.Table
    #: Key columns only: the keys whose last write is a remove.
    removes: pa.Table
    #: Position of the first record of the range (for create_tables).
    position: Position
