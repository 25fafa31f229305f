"""Which change-row columns a pipeline's plan reads: the source's ``columns`` option.

Spark 4.3 gives a Python data source no column pruning (its API has ``pushFilters`` for
batch reads, nothing for columns), so the source produced all 19 change columns and the
JVM turned every one of them from the Arrow batches into its rows, for every row, before
the SQL sinks' routing projection dropped ``before``, ``gtid``, ``txn_id``,
``commit_ts`` and ``schema_version``. The pipeline knows what its plan reads and tells the
source (:func:`source_options`):

* the SQL sinks (:mod:`headwater.sinks.glue`, :mod:`headwater.pipeline.direct`) read
  :data:`headwater.sinks.glue.SOURCE_COLUMNS`: positions, ``key``, ``after``,
  ``before_key`` (routing of key updates), ``sql`` and ``ts_us`` (DDL). Not ``before``:
  the glue routes and collapses by ``key`` and ``before_key`` (merge.py, "Columnar
  collapse");
* the message-bus sinks (Kafka, NATS, Redis) read every column but ``commit_ts``: no bus
  format writes it (``ts_us`` says the same instant; :mod:`headwater.sinks.bus.messages`),
  and :func:`headwater.sinks.bus.spark.write_partitions` drops it anyway. Not building
  it spares the source a timestamp column per row and the JVM its conversion from Arrow
  (:data:`BUS_COLUMNS`). The ``change_row`` format writes every other column, so a bus
  sink's set does not depend on its format;
* every other sink (files) writes whole changes, and then nothing is pruned;
* the query's observed metrics read ``database``, ``table``, ``ts_us`` and, with
  snapshot signals, ``op`` (all in the sinks' set);
* transforms: renames, include/exclude and masks edit what is there (an image that is not
  carried is not edited; a mask of ``before`` is moot when no sink writes it); a filter or
  a computed column reads the columns its SQL names (every change column whose name is a
  word of the text; ``*`` or a user rule: every column); a computed column is evaluated
  over ``before`` and ``after``, so it keeps both.

A ``columns`` option given in the source's own options is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from headwater.changes.schema import CHANGE_COLUMNS

if TYPE_CHECKING:
    from headwater.pipeline.config import PipelineConfig

__all__ = ["BUS_COLUMNS", "needed_columns", "source_options"]

_ALL = tuple(name for name, _kind in CHANGE_COLUMNS)
#: What a message-bus sink reads: every change column but ``commit_ts`` (module docstring).
BUS_COLUMNS = tuple(name for name in _ALL if name != "commit_ts")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def needed_columns(transforms: Sequence[Any], sinks: Sequence[Any]) -> tuple[str, ...] | None:
    """The change columns the plan of these transforms and sinks reads, in the change
    schema's order; None: all of them (module docstring)."""
    from headwater.sinks.glue import SOURCE_COLUMNS
    from headwater.sinks.kafka.factory import KafkaSink
    from headwater.sinks.nats.factory import NatsSink
    from headwater.sinks.redis.factory import RedisSink
    from headwater.sinks.sql import SqlSink
    from headwater.spark.transforms import ComputeSpec, FilterSpec, RuleSpec

    if not sinks:
        return None
    wanted: set[str] = set()
    for sink in sinks:
        if isinstance(sink, SqlSink):
            wanted |= set(SOURCE_COLUMNS)
        elif isinstance(sink, (KafkaSink, NatsSink, RedisSink)):
            wanted |= set(BUS_COLUMNS)
        else:
            return None
    for spec in transforms:
        if isinstance(spec, RuleSpec):
            return None  # a rule sees (and may set) every column
        texts: list[str] = []
        if isinstance(spec, FilterSpec):
            texts = [spec.where]
        elif isinstance(spec, ComputeSpec):
            texts = list(spec.columns.values())
            wanted |= {"before", "after"}
        for text in texts:
            if "*" in text:
                return None
            wanted |= set(_WORD.findall(text)) & set(_ALL)
    if wanted >= set(_ALL):
        return None
    return tuple(name for name in _ALL if name in wanted)


def source_options(config: PipelineConfig, sinks: Sequence[Any]) -> dict[str, str]:
    """The source options of ``config`` with ``columns`` set to what the plan reads
    (unless the configuration sets it, or the plan reads every column)."""
    options = dict(config.source.options)
    if any(k.lower() == "columns" for k in options):
        return options
    columns = needed_columns(config.transforms, sinks)
    if columns is not None:
        options["columns"] = ",".join(columns)
    return options
