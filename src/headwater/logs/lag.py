"""End-to-end lag of a log source: heartbeat lines, from their writer to the sinks' commit.

A heartbeat line carries the time it was written (``sent``). Its row in the heartbeat
table has ``lag_ms = read_ts - sent_ts``, ``read_ts`` being when the driver cut the
micro-batch (recorded in the checkpoint, so a replayed batch writes the same row): the lag
up to the reader. The lag up to the sinks is known only once they committed, after the
row was written, so it is not a column but a measurement of the running pipeline:

* the structuring plan observes, per micro-batch, the newest and oldest ``sent`` of its
  heartbeat lines and their number (:data:`HEARTBEAT_OBSERVED`, Spark's observed metrics:
  computed in the pass that writes the batch, no second job);
* the pipeline runner notes when each batch's ``foreachBatch`` returned, that is when
  every sink had committed the batch's writes (the SQL sinks' transactions, the file
  sinks' commits, the buses' acknowledgements);
* :func:`heartbeat_lag` combines the two: ``committed - newest sent`` (the lag of the
  freshest heartbeat) and ``committed - oldest sent`` (the batch's worst), in seconds,
  which the pipeline's status (``heartbeat`` in ``status.json``) and metrics
  (``headwater_pipeline_heartbeat_lag_seconds``) report.

Clocks: ``sent`` is the writer's clock (parsed from the line, UTC plus the configured
offset), ``committed`` the driver's; across hosts the lag includes their difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["HEARTBEAT_OBSERVED", "HeartbeatLag", "heartbeat_lag", "heartbeat_metrics"]

#: Name of the observed metrics of a log source's heartbeats (per micro-batch).
HEARTBEAT_OBSERVED = "headwater_heartbeat"


@dataclass(frozen=True, slots=True)
class HeartbeatLag:
    """One batch's heartbeats as committed: ``lag_seconds`` of its newest heartbeat,
    ``max_lag_seconds`` of its oldest, ``beats`` their number, and the times (Unix
    seconds) the newest was sent and the batch committed."""

    batch_id: int
    beats: int
    lag_seconds: float
    max_lag_seconds: float
    sent_at: float
    committed_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "beats": self.beats,
            "lag_seconds": round(self.lag_seconds, 3),
            "max_lag_seconds": round(self.max_lag_seconds, 3),
            "sent_at": self.sent_at,
            "committed_at": self.committed_at,
        }


def heartbeat_metrics(F: Any, sent_us: Any) -> list[Any]:
    """The aggregates observed as :data:`HEARTBEAT_OBSERVED`; ``sent_us`` is a record's
    heartbeat time in microseconds, null for records that are not (valid) heartbeats."""
    return [
        F.max(sent_us).alias("newest_sent_us"),
        F.min(sent_us).alias("oldest_sent_us"),
        F.count(sent_us).alias("beats"),
    ]


def heartbeat_lag(progress: Any, committed_at: float | None) -> HeartbeatLag | None:
    """The heartbeat lag of the batch of one progress report (a dict, as PySpark gives
    ``recentProgress``), committed at ``committed_at``; None when the batch had no
    heartbeat or its commit time is unknown."""
    if committed_at is None or not progress:
        return None
    row = (progress.get("observedMetrics") or {}).get(HEARTBEAT_OBSERVED)
    try:
        if row is None or not row["beats"]:
            return None
        beats = int(row["beats"])
        newest, oldest = row["newest_sent_us"], row["oldest_sent_us"]
    except (KeyError, ValueError, IndexError, TypeError):
        return None
    if newest is None or oldest is None:
        return None
    return HeartbeatLag(
        batch_id=int(progress.get("batchId", -1)),
        beats=beats,
        lag_seconds=committed_at - int(newest) / 1e6,
        max_lag_seconds=committed_at - int(oldest) / 1e6,
        sent_at=int(newest) / 1e6,
        committed_at=committed_at,
    )
