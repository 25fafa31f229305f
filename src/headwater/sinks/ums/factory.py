"""The UMS file sink: capabilities (data) and the sink class."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headwater.sinks.base import DdlMode, SinkCapabilities
from headwater.sinks.ums.configuration import UmsConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["CAPABILITIES", "UmsFileSink"]

#: Files of a batch are replaced when the batch is replayed (one copy each); DDL has no
#: UMS form and is skipped.
CAPABILITIES = SinkCapabilities(
    name="ums",
    transactional=False,
    applies_ddl=False,
    ddl_modes=frozenset({DdlMode.SKIP}),
    zero_dates=frozenset({"keep"}),
    ordering="table",
)


@dataclass(frozen=True, slots=True)
class UmsFileSink:
    """Writes each micro-batch as UMS messages (:mod:`headwater.sinks.ums.messages`), one
    JSON per line, into ``path/batch=<id>/`` (overwritten when a batch is replayed, so a
    replay leaves one copy)."""

    config: UmsConfig

    @property
    def path(self) -> str:
        return self.config.path

    @property
    def max_rows(self) -> int:
        return self.config.max_rows

    @property
    def capabilities(self) -> SinkCapabilities:
        return CAPABILITIES

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        from headwater.sinks.ums.messages import to_ums

        out = to_ums(df, batch_id, self.config.max_rows).select("value")
        out.write.mode("overwrite").text(os.path.join(self.config.path, f"batch={batch_id}"))
