"""The bus sinks' Spark path (headwater.sinks.bus.spark): batches in log order, and Spark's
per-row Arrow size check off only when every row is within the per-row budget, with the
checked path taking over, before anything is written, when a row is not.

The writer runs in Spark's Python workers, so it records what it receives in a file: the
sequences in the order received and the task's ``maxBytesPerBatch`` local property (Spark
skips its per-row check when that is 2147483647)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.sinks.bus import spark as bus_spark

MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
MAX_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
UNCHECKED = "2147483647"


def _recorder(path: Path) -> Callable[[int, Iterator[Any]], int]:
    def write(index: int, batches: Iterator[Any]) -> int:
        from pyspark import TaskContext

        context = TaskContext.get()
        prop = context.getLocalProperty(MAX_BYTES) if context else None
        n = 0
        with open(path, "a") as out:
            for batch in batches:
                tables = batch.column("table").to_pylist()
                for table, seq in zip(tables, batch.column("sequence").to_pylist(), strict=True):
                    out.write(f"{index} {prop} {table} {seq}\n")
                n += batch.num_rows
        return n

    return write


def _received(path: Path) -> list[tuple[str, str, str, int]]:
    rows = []
    for line in path.read_text().splitlines():
        index, prop, table, seq = line.split()
        rows.append((index, prop, table, int(seq)))
    path.unlink()
    return rows


def _frame(spark: Any, n: int, big: set[int]) -> Any:
    """``n`` change-like rows of three tables in three partitions, out of sequence order;
    the rows whose sequence is in ``big`` carry a 5 000-byte image."""
    seqs = list(range(1, n + 1))
    random.Random(7).shuffle(seqs)
    rows = [("src", "db", f"t{s % 3}", s, "x" * (5000 if s in big else 80), None) for s in seqs]
    schema = (
        "source string, database string, table string, sequence bigint, after string, sql string"
    )
    return spark.createDataFrame(rows, schema).repartition(3)


@pytest.fixture
def limits(spark: Any) -> Iterator[Any]:
    """Batches of at most 50 rows and 100 000 bytes: a per-row budget of 2 000 bytes less the
    per-column allowance (the 5 000-byte rows are over it, the 80-byte ones within)."""
    context = spark.sparkContext
    context.setLocalProperty(MAX_ROWS, "50")
    context.setLocalProperty(MAX_BYTES, "100000")
    bus_spark._exact_left = 0
    try:
        yield context
    finally:
        context.setLocalProperty(MAX_ROWS, None)
        context.setLocalProperty(MAX_BYTES, None)
        bus_spark._exact_left = 0


def test_rows_within_the_budget_go_with_the_size_check_off_in_log_order(
    spark: Any, limits: Any, tmp_path: Path
) -> None:
    out = tmp_path / "got"
    budget = bus_spark._row_budget(_frame(spark, 10, set()))
    assert budget == (100_000 // 50 - 17 * 6, ["source", "database", "table", "after", "sql"])
    sent = bus_spark.write_partitions(_frame(spark, 300, set()), "global", 1, _recorder(out))
    got = _received(out)
    assert sent == 300
    assert [r[3] for r in got] == list(range(1, 301))
    assert {r[1] for r in got} == {UNCHECKED}
    assert bus_spark._exact_left == 0
    assert limits.getLocalProperty(MAX_BYTES) == "100000"  # the caller's value is back


def test_a_row_over_the_budget_sends_nothing_then_the_checked_path_sends_all_once(
    spark: Any, limits: Any, tmp_path: Path
) -> None:
    out = tmp_path / "got"
    sent = bus_spark.write_partitions(_frame(spark, 300, {150}), "global", 1, _recorder(out))
    got = _received(out)
    assert sent == 300
    # one pass only, every row once and in sequence order, all of it with Spark's check on
    assert [r[3] for r in got] == list(range(1, 301))
    assert {r[1] for r in got} == {"100000"}
    assert bus_spark._exact_left == bus_spark.EXACT_AFTER_OVER
    # the next batches take the checked path directly, counting down
    sent = bus_spark.write_partitions(_frame(spark, 30, set()), "global", 1, _recorder(out))
    got = _received(out)
    assert sent == 30 and {r[1] for r in got} == {"100000"}
    assert bus_spark._exact_left == bus_spark.EXACT_AFTER_OVER - 1


def test_per_table_tasks_keep_each_table_in_order_either_way(
    spark: Any, limits: Any, tmp_path: Path
) -> None:
    out = tmp_path / "got"
    for big, prop in ((set(), UNCHECKED), ({7, 200}, "100000")):
        bus_spark._exact_left = 0
        sent = bus_spark.write_partitions(_frame(spark, 300, big), "table", 2, _recorder(out))
        got = _received(out)
        assert sent == 300 and len(got) == 300 and {r[1] for r in got} == {prop}
        for t in ("t0", "t1", "t2"):
            seqs = [r[3] for r in got if r[2] == t]
            assert seqs == sorted(s for s in range(1, 301) if f"t{s % 3}" == t)
            assert len({r[0] for r in got if r[2] == t}) == 1  # one task per table


def test_no_budget_for_nested_columns_or_a_check_already_off(spark: Any, limits: Any) -> None:
    nested = spark.createDataFrame([(1, [1, 2])], "sequence bigint, xs array<int>")
    assert bus_spark._row_budget(nested) is None
    limits.setLocalProperty(MAX_BYTES, UNCHECKED)
    assert bus_spark._row_budget(_frame(spark, 3, set())) is None
    limits.setLocalProperty(MAX_ROWS, "0")
    limits.setLocalProperty(MAX_BYTES, "100000")
    assert bus_spark._row_budget(_frame(spark, 3, set())) is None
