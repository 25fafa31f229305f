"""The Redis Streams sink: capabilities (data) and the sink class."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from headwater.sinks.base import DdlMode, SinkCapabilities
from headwater.sinks.redis.configuration import RedisConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from headwater.sinks.bus.spark import Writer

__all__ = ["CAPABILITIES", "RedisSink"]

#: DDL goes as DDL entries on the schema streams; a replayed entry is refused by its id.
CAPABILITIES = SinkCapabilities(
    name="redis",
    transactional=False,
    applies_ddl=False,
    ddl_modes=frozenset({DdlMode.SKIP}),
    zero_dates=frozenset({"keep"}),
    ordering="table",
)


@dataclass(frozen=True, slots=True)
class RedisSink:
    """Appends each micro-batch to Redis streams from the executors."""

    config: RedisConfig

    @property
    def capabilities(self) -> SinkCapabilities:
        return CAPABILITIES

    def writer(self, batch_id: int) -> tuple[str, int, Writer]:
        """How batch ``batch_id`` is split over tasks (ordering, task count) and the
        function that writes one task's rows: the Spark path's
        (:func:`~headwater.sinks.bus.spark.write_partitions`) and the driver's
        (:mod:`headwater.pipeline.busdirect`), so both send the same messages."""
        from headwater.sinks.redis.writer import write_partition

        c = self.config
        tasks = 1 if c.ordering == "global" else c.tasks
        return c.ordering, tasks, partial(write_partition, c)

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        from headwater.sinks.bus.spark import write_partitions

        write_partitions(df, *self.writer(batch_id))
