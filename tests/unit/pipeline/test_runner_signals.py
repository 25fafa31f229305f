"""The pipeline runner's reading of signal counts from the query's progress reports."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson

from headwater.pipeline.runner import OBSERVED_SIGNALS, _signal_batches


def report(batch: int, rows: int, signals: int | None, lo: int, hi: int) -> dict[str, Any]:
    metrics = {} if signals is None else {OBSERVED_SIGNALS: {"signals": signals}}
    return {
        "batchId": batch,
        "numInputRows": rows,
        "observedMetrics": metrics,
        "sources": [
            {
                "startOffset": orjson.dumps({"seq": lo, "row": 0}).decode(),
                "endOffset": orjson.dumps({"seq": hi, "row": 2}).decode(),
            }
        ],
    }


def test_signal_batches_after_the_seen_one_give_their_sequence_ranges() -> None:
    query = SimpleNamespace(
        recentProgress=[
            report(2, 3, 1, 10, 11),  # seen already
            report(3, 40, 0, 11, 20),
            report(4, 7, 2, 20, 25),
        ]
    )
    ranges, newest = _signal_batches(query, 2)  # type: ignore[arg-type]
    assert ranges == [(20 << 24, (25 << 24) | 2)] and newest == 4


def test_an_idle_report_does_not_hide_the_batch_that_runs_under_its_id() -> None:
    # A query waiting for data reports under the id of the batch it has yet to run.
    idle = SimpleNamespace(recentProgress=[report(3, 0, None, 11, 11)])
    ranges, seen = _signal_batches(idle, 2)  # type: ignore[arg-type]
    assert (ranges, seen) == ([], 2)
    ran = SimpleNamespace(recentProgress=[report(3, 0, None, 11, 11), report(3, 52, 1, 11, 30)])
    ranges, seen = _signal_batches(ran, seen)  # type: ignore[arg-type]
    assert ranges == [(11 << 24, (30 << 24) | 2)] and seen == 3


def test_reported_through_counts_an_idle_report_as_the_batch_before_it() -> None:
    from headwater.pipeline.runner import _reported_through

    assert _reported_through([]) == -1
    ran = {"batchId": 4, "numInputRows": 10}
    waiting = {"batchId": 5, "numInputRows": 0}  # the idle query's report of batch 5
    assert _reported_through([ran]) == 4
    assert _reported_through([ran, waiting]) == 4
    assert _reported_through([ran, waiting, {"batchId": 5, "numInputRows": 3}]) == 5
    assert _reported_through([{"batchId": 6, "numInputRows": 0}]) == 5


def test_a_trigger_getting_offsets_is_not_a_batch_to_wait_for() -> None:
    from headwater.pipeline.runner import _in_batch

    getting = "Getting offsets from PythonMicroBatchStream"
    assert not _in_batch({"isTriggerActive": False, "message": "Waiting for data to arrive"})
    assert not _in_batch({"isTriggerActive": True, "message": getting})
    assert _in_batch({"isTriggerActive": True, "message": "Processing new data"})
