"""Sinks driven by Spark: ``write_batch`` in ``foreachBatch`` style, with real targets."""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from headwater.changes.schema import change_schema
from headwater.connections import TargetConnection
from headwater.sandbox import MariadbSandbox
from headwater.schema.model import TableDef
from headwater.sinks import StaticSchema
from headwater.sinks.files import MirrorConfig, ParquetChangeLog, ParquetLogConfig, ParquetMirror
from headwater.sinks.mysql import MysqlSink, MysqlSinkConfig
from tests.integration.sink_support import col, items_table, row

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def frame(spark: Any, rows: list[dict[str, Any]], partitions: int = 4) -> Any:
    full = [{**r, "commit_ts": EPOCH + dt.timedelta(microseconds=r["ts_us"])} for r in rows]
    return spark.createDataFrame(full, change_schema()).repartition(partitions)


def random_history(n_keys: int, n_changes: int, seed: int) -> tuple[list[dict[str, Any]], dict]:
    """Valid changes on tables ``items`` and ``more`` (key updates included) and the
    final state they leave, by applying each in order."""
    rnd = random.Random(seed)
    live: dict[tuple[str, int], dict[str, Any]] = {}
    rows = []
    for seq in range(1, n_changes + 1):
        table = rnd.choice(["items", "more"])
        present = [k for t, k in live if t == table]
        absent = [k for k in range(n_keys) if k not in present]
        op = rnd.choice(["insert", "update", "delete", "rekey"]) if present and absent else "insert"
        if not present:
            op = "insert"

        def image(k: int, seq: int = seq) -> dict[str, Any]:
            return {
                "id": k,
                "name": rnd.choice([None, f"v{seq}"]),
                "price": rnd.choice([None, f"{seq}.25"]),
                "qty": seq,
            }

        if op == "insert":
            k = rnd.choice(absent)
            live[(table, k)] = image(k)
            rows.append(row("insert", seq, "src", table, after=live[(table, k)]))
        elif op == "update":
            k = rnd.choice(present)
            before = live[(table, k)]
            live[(table, k)] = image(k)
            rows.append(row("update", seq, "src", table, before, live[(table, k)]))
        elif op == "delete":
            k = rnd.choice(present)
            rows.append(row("delete", seq, "src", table, before=live.pop((table, k))))
        else:
            old, new = rnd.choice(present), rnd.choice(absent)
            before = live.pop((table, old))
            live[(table, new)] = {**image(new)}
            rows.append(row("update", seq, "src", table, before, live[(table, new)]))
    return rows, live


@pytest.fixture
def target(mariadb_target: MariadbSandbox, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "k_" + re.sub(r"\W", "_", request.node.name)[:40].lower()
    drop = (f"DROP DATABASE IF EXISTS `{name}`", f"DROP DATABASE IF EXISTS `{name}_hw`")
    mariadb_target.execute(*drop)
    yield name
    mariadb_target.execute(*drop)


#: Input partitions of the batches: several (routed to shards through a shuffle), or one
#: (not shuffled: its task applies the shards one after another).
PATHS = pytest.mark.parametrize("partitions", [4, 1], ids=["shuffled", "one-partition"])


@PATHS
def test_write_batch_applies_shards_in_parallel_exactly_once(
    spark: Any, mariadb_target: MariadbSandbox, target: str, partitions: int
) -> None:
    defs = (items_table("src"), items_table("src", "more"))
    sink = MysqlSink(
        MysqlSinkConfig(
            pipeline="spark",
            connection=TargetConnection(host=mariadb_target.host, port=mariadb_target.port),
            schema=StaticSchema(defs),
            database_map=(("src", target),),
            checkpoint_database=f"{target}_hw",
            shards=3,
            batch_rows=7,
            create_tables=True,
        )
    )
    rows, live = random_history(40, 600, seed=5)
    first, second = rows[:300], rows[300:]
    other = 1 if partitions > 1 else 4  # replays take the other path
    sink.write_batch(frame(spark, first, partitions), 0)
    sink.write_batch(frame(spark, second, partitions), 1)
    sink.write_batch(frame(spark, second, other), 1)  # replay of the same batch
    sink.write_batch(frame(spark, first, other), 0)  # and of an older one
    for table in ("items", "more"):
        got = mariadb_target.query(f"SELECT * FROM `{target}`.`{table}` ORDER BY id")
        want = sorted((r for (t, _), r in live.items() if t == table), key=lambda r: r["id"])
        assert [tuple(g) for g in got] == [
            (r["id"], r["name"], None if r["price"] is None else Decimal(r["price"]), r["qty"])
            for r in want
        ]
    ckpt = mariadb_target.query(
        f"SELECT shard, batch_id, applies FROM `{target}_hw`.headwater_checkpoint ORDER BY shard"
    )
    assert [tuple(c) for c in ckpt] == [(0, 1, 2), (1, 1, 2), (2, 1, 2)]


@PATHS
def test_write_batch_applies_ddl_between_the_data_around_it(
    spark: Any, mariadb_target: MariadbSandbox, target: str, partitions: int
) -> None:
    from tests.integration.sink_support import VersionedSchema

    old = items_table("src")
    new = TableDef("src", "items", (*old.columns, col("extra", "int")), primary_key=("id",))
    sink = MysqlSink(
        MysqlSinkConfig(
            pipeline="spark",
            connection=TargetConnection(host=mariadb_target.host, port=mariadb_target.port),
            schema=VersionedSchema((old,), (new,), at=50),
            database_map=(("src", target),),
            checkpoint_database=f"{target}_hw",
            shards=2,
            create_tables=True,
        )
    )
    base = {"name": "a", "price": "1.00", "qty": 1}
    rows = [row("insert", i, "src", "items", after={"id": i, **base}) for i in range(1, 9)]
    rows.append(row("ddl", 50, "src", "", sql="ALTER TABLE items ADD COLUMN extra INT"))
    rows += [
        row("update", 60 + i, "src", "items", {"id": i, **base}, {"id": i, **base, "extra": i})
        for i in range(1, 5)
    ]
    sink.write_batch(frame(spark, rows, partitions), 0)
    got = mariadb_target.query(f"SELECT id, extra FROM `{target}`.items ORDER BY id")
    assert [tuple(g) for g in got] == [(i, i if i < 5 else None) for i in range(1, 9)]


def test_parquet_change_log_is_idempotent_per_batch_id(spark: Any, tmp_path: Path) -> None:
    import duckdb

    log = ParquetChangeLog(ParquetLogConfig(str(tmp_path / "log")))
    day = 86_400_000_000
    batch0 = [row("insert", i, "src", "items", after={"id": i}, ts_us=i * day) for i in range(6)]
    batch0.append(row("ddl", 9, "src", "", sql="CREATE TABLE x (id INT)", ts_us=0))
    batch1 = [row("delete", 10 + i, "src", "items", before={"id": i}) for i in range(2)]
    log.write_batch(frame(spark, batch0, 3), 0)
    log.write_batch(frame(spark, batch0, 2), 0)  # replay: replaces batch 0's files
    log.write_batch(frame(spark, batch1), 1)
    log.write_changes(batch1, 1)  # the Spark-free writer replaces them too

    files = sorted(
        p.relative_to(tmp_path / "log").as_posix() for p in (tmp_path / "log").rglob("*.parquet")
    )
    assert "table_id=src.items/date=1970-01-01/batch-000000000000-0.parquet" in files
    assert "table_id=src._ddl/date=1970-01-01/batch-000000000000-0.parquet" in files
    assert len(files) == 6 + 1 + 1  # six days of batch 0, its DDL, batch 1's day
    back = spark.read.parquet(str(tmp_path / "log"))
    assert sorted(r.sequence for r in back.select("sequence").collect()) == [
        0,
        1,
        2,
        3,
        4,
        5,
        9,
        10,
        11,
    ]
    assert set(change_schema().fieldNames()) <= set(back.columns)
    pattern = str(tmp_path / "log" / "*" / "*" / "*.parquet")
    count = duckdb.sql(f"SELECT count(*), count(DISTINCT sequence) FROM read_parquet('{pattern}')")
    assert count.fetchall() == [(9, 9)]


MIRRORED = TableDef(
    "src",
    "people",
    (
        col("id", "int", nullable=False),
        col("region", "varchar", "varchar(10)"),
        col("balance", "decimal", "decimal(12,2)"),
        col("born", "date"),
        col("seen", "timestamp", "timestamp(6)"),
        col("photo", "blob", charset="binary"),
    ),
    primary_key=("id",),
)


def _mirror_history(db: str, source: MariadbSandbox) -> list[dict[str, Any]]:
    """Run changes on a real source table and build the change rows that describe them."""
    source.execute(
        "CREATE TABLE people (id INT PRIMARY KEY, region VARCHAR(10), balance DECIMAL(12,2),"
        " born DATE, seen TIMESTAMP(6) NULL, photo BLOB)",
        database=db,
    )
    rnd = random.Random(11)
    conn = source.connect(db)
    cur = conn.cursor()
    cur.execute("SET time_zone = '+00:00'")
    rows: list[dict[str, Any]] = []

    def fetch(k: int) -> dict[str, Any] | None:
        cur.execute("SELECT id, region, balance, born, seen, photo FROM people WHERE id = %s", (k,))
        got = cur.fetchone()
        if got is None:
            return None
        image = dict(zip(("id", "region", "balance", "born", "seen", "photo"), got, strict=True))
        if image["seen"] is not None:
            image["seen"] = image["seen"].replace(tzinfo=dt.UTC)
        return image

    for seq in range(1, 200):
        k = rnd.randrange(30)
        before = fetch(k)
        values = (
            rnd.choice(["north", "south", "east", None]),
            Decimal(rnd.randrange(-10_000, 10_000)) / 100,
            dt.date(1970 + rnd.randrange(50), 1 + rnd.randrange(12), 1),
            dt.datetime(2024, 1, 1, 0, 0, seq % 60, seq),
            rnd.choice([None, bytes([seq % 256, 0, 255])]),
        )
        if before is None:
            cur.execute("INSERT INTO people VALUES (%s, %s, %s, %s, %s, %s)", (k, *values))
            rows.append(row("insert", seq, "src", "people", after=fetch(k)))
        elif rnd.random() < 0.2:
            cur.execute("DELETE FROM people WHERE id = %s", (k,))
            rows.append(row("delete", seq, "src", "people", before=before))
        elif rnd.random() < 0.2 and fetch(k + 100) is None:
            cur.execute("UPDATE people SET id = %s WHERE id = %s", (k + 100, k))
            rows.append(row("update", seq, "src", "people", before, fetch(k + 100)))
        else:
            cur.execute(
                "UPDATE people SET region=%s, balance=%s, born=%s, seen=%s, photo=%s WHERE id=%s",
                (*values, k),
            )
            rows.append(row("update", seq, "src", "people", before, fetch(k)))
    conn.close()
    return rows


@pytest.mark.parametrize("partition_column", [None, "region"])
def test_parquet_mirror_read_by_spark_and_duckdb_equals_the_source_table(
    spark: Any, mariadb: MariadbSandbox, db: str, tmp_path: Path, partition_column: str | None
) -> None:
    import duckdb

    rows = _mirror_history(db, mariadb)
    mirror = ParquetMirror(
        MirrorConfig(
            str(tmp_path),
            StaticSchema((MIRRORED,)),
            buckets=4,
            partition_column=partition_column,
            shards=3,
        )
    )
    for n, start in enumerate(range(0, len(rows), 100)):
        mirror.write_batch(frame(spark, rows[start : start + 100], 3), n)
    mirror.write_batch(frame(spark, rows[:100], 2), 0)  # an old batch again: skipped
    source = [
        tuple(r)
        for r in mariadb.query(
            "SELECT id, region, balance, born, CONVERT_TZ(seen, @@session.time_zone, '+00:00'),"
            " photo FROM people ORDER BY id",
            database=db,
        )
    ]
    source = [(*r[:4], None if r[4] is None else r[4].replace(tzinfo=dt.UTC), r[5]) for r in source]
    path = mirror.table_path("src", "people")
    cols = "id, region, balance, born, seen, photo"
    by_spark = spark.read.parquet(path).selectExpr(*cols.split(", ")).orderBy("id").collect()
    assert [
        (
            *r[:4],
            None if r[4] is None else r[4].astimezone(dt.UTC),
            None if r[5] is None else bytes(r[5]),
        )
        for r in by_spark
    ] == source
    duck = duckdb.connect()
    duck.execute("SET TimeZone = 'UTC'")
    by_duckdb = duck.execute(
        "SELECT id, region, balance, born, timezone('UTC', seen), photo"
        f" FROM read_parquet('{path}/*/*.parquet', hive_partitioning = true) ORDER BY id"
    ).fetchall()
    assert [
        (*r[:4], None if r[4] is None else r[4].replace(tzinfo=dt.UTC), r[5]) for r in by_duckdb
    ] == source


def _jobs_and_stages(spark: Any, group: str) -> tuple[int, int]:
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    stages = set()
    for job in jobs:
        info = tracker.getJobInfo(job)
        assert info is not None
        stages.update(info.stageIds)
    return len(jobs), len(stages)


def test_a_one_partition_batch_is_one_job_of_one_stage(
    spark: Any, mariadb_target: MariadbSandbox, target: str
) -> None:
    from headwater.sinks.glue import _part_keys

    sink = MysqlSink(
        MysqlSinkConfig(
            pipeline="spark",
            connection=TargetConnection(host=mariadb_target.host, port=mariadb_target.port),
            schema=StaticSchema((items_table("src"),)),
            database_map=(("src", target),),
            checkpoint_database=f"{target}_hw",
            shards=2,
            create_tables=True,
        )
    )
    _part_keys(spark, 2)  # once per process (a job of its own)
    base = {"name": "a", "price": "1.00", "qty": 1}
    rows = [row("insert", i, "src", "items", after={"id": i, **base}) for i in range(1, 41)]
    full = [{**r, "commit_ts": EPOCH + dt.timedelta(microseconds=r["ts_us"])} for r in rows]
    local = spark.createDataFrame(full, change_schema())  # no exchange before the sink
    sc = spark.sparkContext
    try:
        sc.setJobGroup("hw-one-partition", "one partition")
        sink.write_batch(local.coalesce(1), 0)
        sc.setJobGroup("hw-two-partitions", "two partitions")
        sink.write_batch(local.repartition(2).coalesce(2), 0)  # a replay: nothing new
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    # Planning the shuffle decision ran no job, and no shard shuffle ran.
    assert _jobs_and_stages(spark, "hw-one-partition") == (1, 1)
    # Two input partitions: routed to the shards through a shuffle (a stage more).
    assert _jobs_and_stages(spark, "hw-two-partitions")[1] >= 3
    got = mariadb_target.query(f"SELECT COUNT(*), SUM(id) FROM `{target}`.items")
    assert tuple(got[0]) == (40, sum(range(1, 41)))
