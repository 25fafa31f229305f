"""The Kafka sink: capabilities (data) and the sink class."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from headwater.sinks.base import ApplyResult, DdlMode, SinkCapabilities
from headwater.sinks.kafka.configuration import KafkaConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from headwater.sinks.bus.spark import Writer

__all__ = ["CAPABILITIES", "KafkaSink"]

log = logging.getLogger(__name__)

#: DDL is not run anywhere: it is sent as a DDL message on the schema topic. Ordering is
#: per key (``partitioning: key``) or global (``single``). Transactions depend on the
#: configuration (``delivery``), so ``transactional`` says what every Kafka sink gives.
CAPABILITIES = SinkCapabilities(
    name="kafka",
    transactional=False,
    applies_ddl=False,
    ddl_modes=frozenset({DdlMode.SKIP}),
    zero_dates=frozenset({"keep"}),
    ordering="key",
)


@dataclass(frozen=True, slots=True)
class KafkaSink:
    """Writes each micro-batch as Kafka messages from the executors
    (:mod:`headwater.sinks.kafka.producer`)."""

    config: KafkaConfig

    @property
    def capabilities(self) -> SinkCapabilities:
        return CAPABILITIES

    def writer(self, batch_id: int) -> tuple[str, int, Writer]:
        """How batch ``batch_id`` is split over tasks (ordering, task count) and the
        function that writes one task's rows: the Spark path's
        (:func:`~headwater.sinks.bus.spark.write_partitions`) and the driver's
        (:mod:`headwater.pipeline.busdirect`), so both send the same messages."""
        from headwater.sinks.kafka.producer import write_partition

        c = self.config
        tasks = 1 if c.ordering == "global" else c.tasks
        return c.ordering, tasks, partial(write_partition, c, batch_id)

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        from headwater.sinks.bus.spark import write_partitions

        sent = write_partitions(df, *self.writer(batch_id))
        log.debug("kafka sink: batch %d: %d messages", batch_id, sent)

    def apply_changes(self, rows: Any, batch_id: int, shard: int = 0) -> ApplyResult:
        """The changes of one shard without Spark (``rows`` in sequence order)."""
        import pyarrow as pa

        from headwater.changes.schema import CHANGE_COLUMNS, change_row_values
        from headwater.sinks.base import as_change

        changes = sorted((as_change(r) for r in rows), key=lambda ch: ch.sequence)
        names = [n for n, _ in CHANGE_COLUMNS]
        table = pa.Table.from_pylist(
            [dict(zip(names, change_row_values(ch), strict=True)) for ch in changes]
        )
        from headwater.sinks.kafka.producer import write_partition

        sent = write_partition(self.config, batch_id, shard, iter(table.to_batches()))
        return ApplyResult(shard=shard, batch_id=batch_id, upserts=sent)
