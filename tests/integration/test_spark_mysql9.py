"""The Spark source (local mode) over a MySQL 8.4 / 9.x style task directory: a start by a
tagged GTID set, and TABLE_MAP database, table and column names that are not UTF-8.

The task directory is built without a server (tests/unit/binlog/_mysql9_log.py: GTID and
GTID_TAGGED events through the reader's Grouper into a real change log). Expected values
come from the built transactions, not from the source's decoder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headwater.position import MysqlGtid, MysqlGtidSet
from headwater.spark import register
from tests.unit.binlog._mysql9_log import LATIN, SID, Txn, build_task

U = str(SID)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Txn]]:
    d = tmp_path_factory.mktemp("spark_mysql9") / "task"
    return d, build_task(d)


def _read(spark: Any, task_dir: Path, **options: str) -> list[Any]:
    register(spark)
    df = spark.read.format("headwater").option("path", str(task_dir)).options(**options).load()
    return list(df.orderBy("sequence").collect())


def test_names_that_are_not_utf8_read_without_an_exception(
    spark: Any, task: tuple[Path, list[Txn]]
) -> None:
    d, txns = task
    rows = _read(spark, d, partitions="2", minBytesPerPartition="0")
    assert [r["gtid"] for r in rows] == [t.gtid for t in txns]
    # Spark strings are UTF-8: undecodable bytes come out as \xNN (the dump's rendering),
    # the same text for the same bytes, so tables stay apart and filterable.
    names = [(r["database"], r["table"]) for r in rows]
    want = [("caf\\xe9", "t\\xe9l\\xe9") if t.table == LATIN else ("shop", "orders") for t in txns]
    assert names == want
    assert sum(1 for t in txns if t.table == LATIN) == 4


@pytest.mark.parametrize(
    "text", [f"{U}:1-2:alpha:1-3", f"{U}:1-4:ALPHA:1-4:beta:1-2", f"{U}:alpha:1-5"]
)
def test_starting_position_by_a_tagged_set_skips_the_contained_transactions(
    spark: Any, task: tuple[Path, list[Txn]], text: str
) -> None:
    d, txns = task
    wanted = MysqlGtidSet.parse(text)
    first = next(i for i, t in enumerate(txns) if MysqlGtid.parse(t.gtid) not in wanted)
    rows = _read(spark, d, startingPosition=f"gtid:{text}")
    assert [r["gtid"] for r in rows] == [t.gtid for t in txns[first:]]
