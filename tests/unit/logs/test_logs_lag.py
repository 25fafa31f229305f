"""headwater.logs.lag: a batch's heartbeat lag from its progress report and commit time."""

from __future__ import annotations

from headwater.logs.lag import HEARTBEAT_OBSERVED, heartbeat_lag


def _progress(batch: int, beats: int, newest_us: int | None, oldest_us: int | None) -> dict:
    row = {"newest_sent_us": newest_us, "oldest_sent_us": oldest_us, "beats": beats}
    return {"batchId": batch, "observedMetrics": {HEARTBEAT_OBSERVED: row}}


def test_lag_is_the_commit_time_minus_the_newest_and_the_oldest_heartbeat() -> None:
    lag = heartbeat_lag(_progress(7, 3, 1_700_000_000_250_000, 1_699_999_999_000_000), 1.7e9 + 2)
    assert lag is not None
    assert lag.to_dict() == {
        "batch_id": 7,
        "beats": 3,
        "lag_seconds": 1.75,
        "max_lag_seconds": 3.0,
        "sent_at": 1_700_000_000.25,
        "committed_at": 1.7e9 + 2,
    }


def test_no_lag_without_heartbeats_or_without_a_commit_time() -> None:
    assert heartbeat_lag(_progress(1, 0, None, None), 1.7e9) is None
    assert heartbeat_lag(_progress(1, 2, 1, 1), None) is None
    assert heartbeat_lag({"batchId": 1, "observedMetrics": {}}, 1.7e9) is None
