"""Options, offsets and slicing of the Spark source (no Spark session, no log)."""

from __future__ import annotations

import pickle

import pytest

from headwater.errors import ConfigError
from headwater.position import MariadbGtidPos, MysqlGtidSet, Position
from headwater.spark.offsets import (
    DEFAULT_BURST_QUIET_MS,
    DEFAULT_BURST_WAIT_MS,
    DEFAULT_MIN_PARTITION_BYTES,
    DEFAULT_PARTITIONS,
    LogOffset,
    TableMatcher,
    parse_options,
    parse_start,
    start_request,
)
from headwater.spark.partitions import plan_slices
from headwater.spark.source import BurstGate
from headwater.store import EARLIEST, LATEST, AtSeq, AtTime

PATH = {"path": "/data/orders"}


def test_defaults_for_a_task_directory() -> None:
    opts = parse_options(PATH)
    assert (opts.task, opts.source_name, opts.partitions) == (
        "orders",
        "orders",
        DEFAULT_PARTITIONS,
    )
    assert (opts.starting, opts.ending, opts.max_rows, opts.max_bytes) == (
        EARLIEST,
        None,
        None,
        None,
    )
    assert opts.tables == TableMatcher() and opts.ddl


def test_option_names_are_case_insensitive() -> None:
    opts = parse_options({**PATH, "MAXROWSPERTRIGGER": "5", "maxBytesPerTrigger": "100"})
    assert (opts.max_rows, opts.max_bytes) == (5, 100)


def test_server_needs_a_task_and_a_url() -> None:
    opts = parse_options({"server": "http://h:1/", "task": "t", "source": "s"})
    assert (opts.server, opts.task, opts.source_name) == ("http://h:1", "t", "s")
    with pytest.raises(ConfigError, match="task: is required"):
        parse_options({"server": "http://h:1"})
    with pytest.raises(ConfigError, match="server: expected an http"):
        parse_options({"server": "h:1", "task": "t"})


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "path"),
        ({**PATH, "server": "http://h", "task": "t"}, "path"),
        ({**PATH, "maxRowsPerTrigger": "0"}, "maxRowsPerTrigger"),
        ({**PATH, "maxBytesPerTrigger": "lots"}, "maxBytesPerTrigger"),
        ({**PATH, "partitions": "-1"}, "partitions"),
        ({**PATH, "minBytesPerPartition": "-1"}, "minBytesPerPartition"),
        ({**PATH, "minBytesPerPartition": "1M"}, "minBytesPerPartition"),
        ({**PATH, "tables": "orders"}, "tables"),
        ({**PATH, "tables": "a.b.c"}, "tables"),
        ({**PATH, "tables": " , "}, "tables"),
        ({**PATH, "ddl": "maybe"}, "ddl"),
        ({**PATH, "startingPosition": "yesterday"}, "startingPosition"),
        ({**PATH, "endingPosition": "seq:0"}, "endingPosition"),
        ({**PATH, "startingPosition": "timestamp:noon"}, "startingPosition"),
        ({**PATH, "startingPosition": "gtid:garbage"}, "startingPosition"),
        ({**PATH, "startingPosition": '{"change_id": 0}'}, "startingPosition"),
        ({**PATH, "startingPosition": "binlog:xyz"}, "startingPosition"),
        ({**PATH, "maxRows": "5"}, "maxrows"),
    ],
)
def test_bad_options_raise_config_errors_naming_the_option(
    options: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(options)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_start_points() -> None:
    assert parse_start("Earliest") == EARLIEST
    assert parse_start("latest") == LATEST
    assert parse_start("seq:42") == AtSeq(42)
    assert parse_start("timestamp:1714000000000001") == AtTime(1714000000000001)
    assert parse_start("timestamp:2024-04-24T23:06:40.000001Z") == AtTime(1714000000000001)
    assert parse_start("timestamp:2024-04-24T23:06:40.000001") == AtTime(1714000000000001)
    assert parse_start("timestamp:2024-04-25T01:06:40.000001+02:00") == AtTime(1714000000000001)
    assert parse_start("gtid:0-1-100,1-2-7") == MariadbGtidPos.parse("0-1-100,1-2-7")
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert parse_start(f"gtid:{uuid}:1-77") == MysqlGtidSet.parse(f"{uuid}:1-77")
    assert parse_start("position:1:3:1234:2") == Position(1, 3, 1234, 2)
    assert parse_start('{"change_id": 1, "file": 3, "offset": 1234}') == Position(1, 3, 1234, 0)
    assert parse_start("mysql-bin.000003:1234") == Position(0, 3, 1234, 0)


def test_start_points_as_subscribe_requests() -> None:
    assert start_request(AtSeq(5)) == {"seq": 5}
    assert start_request(AtTime(7)) == {"timestamp_us": 7}
    assert start_request(Position(0, 3, 4, 0)) == {"position": "0:3:4:0"}
    assert start_request(MariadbGtidPos.parse("0-1-5")) == {"gtid_set": "0-1-5"}
    assert start_request(EARLIEST) == "earliest"


def test_offsets_round_trip_and_order_by_seq_and_row() -> None:
    off = LogOffset(43, 2, Position(0, 3, 1234, 0))
    doc = off.to_dict()
    assert doc == {"seq": 43, "row": 2, "last_position": "0:3:1234:0"}
    assert LogOffset.from_dict(doc) == off
    assert LogOffset.from_dict({"seq": 5}) == LogOffset(5, 0)
    assert LogOffset(5, 1) < LogOffset(5, 2) < LogOffset(6, 0)
    assert LogOffset(5, 0, Position(0, 1, 2, 0)) == LogOffset(5, 0)


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"seq": "5"},
        {"seq": 0},
        {"seq": 5, "row": -1},
        {"seq": True},
        {"seq": 5, "last_position": "x"},
    ],
)
def test_bad_offsets_are_config_errors(doc: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as info:
        LogOffset.from_dict(doc)
    assert info.value.field == "offset"


def test_table_matcher() -> None:
    m = TableMatcher(("shop.orders", "crm.*"))
    assert m("shop", "orders") and m("crm", "x") and not m("shop", "items")
    assert m.record_wanted((("crm.a", 1),)) and not m.record_wanted((("shop.items", 1),))
    assert m.record_wanted(())  # DDL records carry no tables
    assert TableMatcher()("any", "thing")


def test_slices_are_contiguous_cover_the_range_and_balance_bytes() -> None:
    opts = parse_options({**PATH, "minBytesPerPartition": "0"})
    # 20 records of 100 bytes, then one of 1000: three slices of 1000 bytes each
    sizes = [(seq, 100) for seq in range(10, 30)] + [(30, 1000)]
    slices = plan_slices(opts, LogOffset(10, 3), LogOffset(31, 2), sizes, 3)
    assert [(s.lo, s.hi) for s in slices] == [
        ((10, 3), (20, 0)),
        ((20, 0), (30, 0)),
        ((30, 0), (31, 2)),
    ]
    assert [s.index for s in slices] == [0, 1, 2]
    again = pickle.loads(pickle.dumps(slices[1]))
    assert (again.lo, again.hi, again.options) == (slices[1].lo, slices[1].hi, opts)


def test_no_slices_for_an_empty_range_and_at_most_one_per_record() -> None:
    opts = parse_options({**PATH, "minBytesPerPartition": "0"})
    assert plan_slices(opts, LogOffset(5), LogOffset(5), [(5, 10)], 4) == []
    assert plan_slices(opts, LogOffset(5), LogOffset(9), [], 4) == []
    slices = plan_slices(opts, LogOffset(5), LogOffset(7), [(5, 10), (6, 10)], 8)
    assert [(s.lo, s.hi) for s in slices] == [((5, 0), (6, 0)), ((6, 0), (7, 0))]


def test_slices_hold_at_least_the_minimum_bytes() -> None:
    sizes = [(seq, 100_000) for seq in range(1, 41)]  # 4,000,000 bytes
    at = {**PATH, "partitions": "8"}
    default = plan_slices(parse_options(at), LogOffset(1), LogOffset(41), sizes, 8)
    assert len(default) == 3  # 1 MiB each at least: 4,000,000 // 1,048,576
    small = plan_slices(parse_options(at), LogOffset(1), LogOffset(4), sizes[:3], 8)
    assert [(s.lo, s.hi) for s in small] == [((1, 0), (4, 0))]
    opts = parse_options({**at, "minBytesPerPartition": "500000"})
    assert len(plan_slices(opts, LogOffset(1), LogOffset(41), sizes, 8)) == 8
    assert opts.min_partition_bytes == 500_000
    assert parse_options(PATH).min_partition_bytes == DEFAULT_MIN_PARTITION_BYTES


def test_the_spark_package_exports_what_its_all_lists() -> None:
    import headwater.spark as pkg

    assert sorted(pkg.__all__) == pkg.__all__
    assert {"register", "table_changes", "HeadwaterDataSource"} <= set(pkg.__all__)
    for name in pkg.__all__:
        assert getattr(pkg, name) is not None
    assert pkg.HeadwaterDataSource.name() == "headwater"


class _Clock:
    """A scripted clock for BurstGate: sleeping advances it; the log's end grows by the
    given steps, one per poll."""

    def __init__(self, ends: list[int]) -> None:
        self.now = 100.0
        self.ends = ends
        self.polls = 0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def end(self) -> int:
        self.polls += 1
        return self.ends[min(self.polls, len(self.ends)) - 1]


def test_after_an_idle_stream_the_gate_waits_for_the_burst_to_land() -> None:
    clock = _Clock([12, 40, 75, 75, 90])
    gate = BurstGate(0.2, 0.01, clock=lambda: clock.now, sleep=clock.sleep)
    # The log grows while polled: the cut is where it stopped for one poll.
    assert gate.settle(5, clock.end) == 75
    assert clock.polls == 4 and round(clock.now - 100.0, 3) == 0.04
    # The stream is busy now: the next batch is cut at once, without polling.
    assert gate.settle(90, clock.end) == 90 and clock.polls == 4


def test_the_gate_waits_at_most_its_wait_and_not_at_all_when_off() -> None:
    clock = _Clock(list(range(10, 1000, 10)))  # a log that never stops growing
    gate = BurstGate(0.05, 0.01, clock=lambda: clock.now, sleep=clock.sleep)
    end = gate.settle(1, clock.end)
    assert round(clock.now - 100.0, 3) == 0.05 and end == clock.ends[clock.polls - 1]
    gate.nothing_new()  # idle again: the next burst is waited for again
    assert gate.settle(end, clock.end) > end
    off = BurstGate(0, 0.01, clock=lambda: clock.now, sleep=clock.sleep)
    polls = clock.polls
    assert off.settle(7, clock.end) == 7 and clock.polls == polls


class _Log:
    """A scripted log for BurstGate's ``wait``: records land at given times (seconds after
    100.0); ``wait(end, timeout)`` sleeps until the next landing past ``end`` or the
    timeout, as the store's watch of the head file does."""

    def __init__(self, landings: list[tuple[float, int]]) -> None:
        self.now = 100.0
        self.landings = landings  # (time, end from then on)
        self.waits = 0

    def end(self) -> int:
        ends = [e for t, e in self.landings if 100.0 + t <= self.now + 1e-9]
        return ends[-1] if ends else 0

    def wait(self, end: int, timeout: float) -> None:
        self.waits += 1
        later = [100.0 + t for t, e in self.landings if e > end and 100.0 + t > self.now]
        self.now = min([self.now + timeout, *later])


def test_the_gate_with_a_watch_times_the_quiet_period_from_the_last_growth() -> None:
    # Records land at 0, 10, 30 and 45 ms, then nothing until 300 ms.
    log = _Log([(0.0, 100), (0.01, 200), (0.03, 350), (0.045, 400), (0.3, 500)])
    seen: list[tuple[float, int]] = []
    gate = BurstGate(0.2, 0.05, clock=lambda: log.now, sleep=lambda s: None)
    end = gate.settle(
        100, log.end, begin=0, wait=log.wait,
        grown=lambda e: seen.append((round(log.now - 100.0, 3), e)),
    )  # fmt: skip
    # cut 50 ms after the last landing (45 ms), not at a poll's granularity
    assert end == 400 and round(log.now - 100.0, 3) == 0.095
    # every new end is handed on as it is seen, the first at once
    assert seen == [(0.0, 100), (0.01, 200), (0.03, 350), (0.045, 400)]
    # a log that never stops growing is cut at the wait's end
    log = _Log([(i / 100, 100 * (i + 1)) for i in range(100)])
    gate = BurstGate(0.2, 0.05, clock=lambda: log.now, sleep=lambda s: None)
    assert gate.settle(100, log.end, begin=0, wait=log.wait) == 2100
    assert round(log.now - 100.0, 3) == 0.2
    # a few records are a live workload's commit: no wait
    waits = log.waits
    gate.nothing_new()
    assert gate.settle(log.end() + 5, log.end, begin=log.end(), wait=log.wait) == log.end() + 5
    assert log.waits == waits


def test_burst_options() -> None:
    assert parse_options(PATH).burst_wait_ms == DEFAULT_BURST_WAIT_MS == 200
    assert parse_options(PATH).burst_quiet_ms == DEFAULT_BURST_QUIET_MS == 50
    assert parse_options({**PATH, "burstWaitMs": "0"}).burst_wait_ms == 0
    assert parse_options({**PATH, "burstQuietMs": "20"}).burst_quiet_ms == 20
    with pytest.raises(ConfigError):
        parse_options({**PATH, "burstQuietMs": "0"})
    with pytest.raises(ConfigError) as info:
        parse_options({**PATH, "burstWaitMs": "soon"})
    assert info.value.field == "burstWaitMs"
