"""Replay: chosen tables' state as of a point of the change log, written out.

:func:`replay_to_parquet` rebuilds each table with
:func:`headwater.spark.table_as_of` (the parallel apply and why it is correct:
:mod:`headwater.spark.lastwrite`) and writes one Parquet file set per table,
``<output>/<db>.<table>/part-*.parquet``, readable by Spark, DuckDB and pyarrow, plus
``<output>/_replay.json`` saying what was replayed: the log, the ``as_of`` point, the last
store record applied, the base image and the row count of each table. A replay's output
is itself a base image for a later replay (its ``end_seq`` names where the log resumes:
``seq:<end_seq>``).

:func:`replay_to_sink` writes the same state into a MySQL/MariaDB or PostgreSQL table
through a sink of :mod:`headwater.sinks` (``read`` change rows, replay/sinks.py).

This package sits beside ``pipeline`` (it imports ``spark``, never the reverse); the
``headwater replay`` command (cli/replay.py) is its command line.
"""

from __future__ import annotations

from headwater.replay.run import ReplayResult, TableReplay, replay_to_parquet
from headwater.replay.sinks import replay_to_sink

__all__ = ["ReplayResult", "TableReplay", "replay_to_parquet", "replay_to_sink"]
