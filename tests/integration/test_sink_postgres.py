"""The PostgreSQL sink against the machine's PostgreSQL 15 (``postgres`` fixture)."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from headwater.connections import TargetConnection
from headwater.errors import SinkError
from headwater.schema.model import TableDef
from headwater.sinks import DdlMode, RetryPolicy, StaticSchema
from headwater.sinks.postgres import PostgresSink, PostgresSinkConfig
from tests.integration.sink_support import (
    FaultyConnection,
    VersionedSchema,
    col,
    items_table,
    pair_table,
    row,
)

SCHEMA = StaticSchema((items_table("src"), pair_table("src")))


def make_sink(pg: dict[str, Any], schema: Any = SCHEMA, **options: Any) -> PostgresSink:
    session = options.pop("session", ())
    return PostgresSink(
        PostgresSinkConfig(
            pipeline=options.pop("pipeline", "p1"),
            connection=TargetConnection(
                host=pg["host"],
                port=int(pg["port"]),
                user=pg["user"],
                database=pg["dbname"],
                session=session,
            ),
            schema=schema,
            database_map=(("src", "mirror"),),
            create_tables=True,
            retry=RetryPolicy(attempts=3, base_delay_s=0.01),
            **options,
        )
    )


def query(pg: dict[str, Any], sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(**pg) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def item(
    i: int, name: str | None = "n", price: str | None = "1.50", qty: int | None = 1
) -> dict[str, Any]:
    return {"id": i, "name": name, "price": price, "qty": qty}


SEED = [row("insert", i, "src", "items", after=item(i, f"n{i}")) for i in (1, 2, 3)]


def test_net_effects_of_a_multi_table_batch(postgres: dict[str, Any]) -> None:
    sink = make_sink(postgres)
    sink.apply_changes(SEED, 0)
    batch = [
        row("insert", 10, "src", "items", after=item(10)),
        row("update", 11, "src", "items", item(10), item(10, "m")),
        row("delete", 12, "src", "items", before=item(10, "m")),
        row("update", 13, "src", "items", item(1, "n1"), item(4, "n1")),
        row("update", 15, "src", "items", item(2, "n2"), item(2, None, None)),
        row("update", 16, "src", "items", item(2, None, None), item(2, "back", None)),
        row("delete", 17, "src", "items", before=item(3, "n3")),
        row("insert", 18, "src", "pairs", after={"a": 1, "b": "x", "v": "p"}, pk=("a", "b")),
        row("insert", 19, "src", "pairs", after={"a": 1, "b": "y", "v": "q"}, pk=("a", "b")),
        row("delete", 20, "src", "pairs", before={"a": 1, "b": "y", "v": "q"}, pk=("a", "b")),
    ]
    sink.apply_changes(batch, 1)
    assert query(postgres, "SELECT * FROM mirror.items ORDER BY id") == [
        (2, "back", None, 1),
        (4, "n1", Decimal("1.50"), 1),
    ]
    assert query(postgres, "SELECT * FROM mirror.pairs") == [(1, "x", "p")]
    assert query(
        postgres,
        "SELECT shard, batch_id, max_sequence, applies FROM headwater.headwater_checkpoint",
    ) == [(0, 1, 20, 2)]


def test_replay_changes_nothing_and_counts_each_batch_once(postgres: dict[str, Any]) -> None:
    sink = make_sink(postgres)
    batch = [row("update", 5, "src", "items", item(1, "n1"), item(1, "one"))]
    sink.apply_changes(SEED, 0)
    sink.apply_changes(batch, 1)
    state = query(postgres, "SELECT * FROM mirror.items ORDER BY id")
    assert sink.apply_changes(batch, 1).skipped == 1
    assert sink.apply_changes(SEED, 0).skipped == 3
    assert query(postgres, "SELECT * FROM mirror.items ORDER BY id") == state
    assert query(
        postgres, "SELECT batch_id, max_sequence, applies FROM headwater.headwater_checkpoint"
    ) == [(1, 5, 2)]


def test_a_crash_inside_the_transaction_leaves_the_target_unchanged(
    postgres: dict[str, Any],
) -> None:
    sink = make_sink(postgres, batch_rows=1)
    sink.apply_changes(SEED, 0)
    batch = [row("update", 10 + i, "src", "items", item(i), item(i, "new")) for i in (1, 2, 3)]

    def crash() -> None:
        raise RuntimeError("process died")

    # checkpoint setup (advisory lock + 2), create tables (nothing: this process saw the
    # table), checkpoint insert and lock (2), savepoint and the first one-row upsert,
    # savepoint: the crash hits before the second upsert
    faulty = FaultyConnection(sink.connect(), after=8, fault=crash)
    with pytest.raises(RuntimeError):
        sink.apply_changes(batch, 1, connection=faulty)
    assert faulty.executed[-2].startswith('INSERT INTO "mirror"."items"')
    faulty.close()
    assert [r[1] for r in query(postgres, "SELECT * FROM mirror.items ORDER BY id")] == [
        "n1",
        "n2",
        "n3",
    ]
    sink.apply_changes(batch, 1)
    sink.apply_changes(batch, 1)
    assert [r[1] for r in query(postgres, "SELECT * FROM mirror.items ORDER BY id")] == ["new"] * 3
    assert query(postgres, "SELECT applies FROM headwater.headwater_checkpoint") == [(2,)]


def test_a_lock_timeout_is_retried(postgres: dict[str, Any]) -> None:
    sink = make_sink(postgres, session=(("lock_timeout", "300ms"),))
    sink.apply_changes(SEED, 0)
    holder = psycopg.connect(**postgres)
    holder.execute("SELECT * FROM mirror.items WHERE id = 2 FOR UPDATE")
    states: list[str | None] = []

    def release(attempt: int, exc: BaseException) -> None:
        states.append(getattr(exc, "sqlstate", None))
        holder.commit()

    result = sink.apply_changes(
        [row("delete", 9, "src", "items", before=item(2))], 1, on_retry=release
    )
    holder.close()
    assert states == ["55P03"] and result.attempts == 2
    assert [r[0] for r in query(postgres, "SELECT id FROM mirror.items ORDER BY id")] == [1, 3]


def test_a_failing_row_is_named_by_table_key_and_statement(postgres: dict[str, Any]) -> None:
    sink = make_sink(postgres)
    batch = [row("insert", 10 + i, "src", "items", after=item(10 + i)) for i in range(3)]
    batch[1] = row("insert", 11, "src", "items", after=item(11, "y" * 21))
    with pytest.raises(SinkError) as info:
        sink.apply_changes(batch, 1)
    err = info.value
    assert (err.table, err.key, err.resume_sequence) == ("src.items", {"id": 11}, 10)
    assert err.statement is not None and err.statement.startswith('INSERT INTO "mirror"."items"')
    assert "StringDataRightTruncation" in str(err)
    assert query(postgres, "SELECT count(*) FROM mirror.items") == [(0,)]


TYPED = TableDef(
    "src",
    "typed",
    (
        col("id", "bigint", "bigint unsigned", unsigned=True, nullable=False),
        col("amount", "decimal", "decimal(30,10)"),
        col("raw", "varbinary", "varbinary(8)", charset="binary"),
        col("day", "date"),
        col("at", "datetime", "datetime(6)"),
        col("ts", "timestamp", "timestamp(6)"),
        col("span", "time", "time(6)"),
        col("tags", "set", "set('a','b')", set_values=("a", "b")),
        col("doc", "json", charset="utf8mb4"),
        col("small", "tinyint", "tinyint unsigned", unsigned=True),
    ),
    primary_key=("id",),
)


def test_types_map_to_postgresql(postgres: dict[str, Any]) -> None:
    sink = make_sink(postgres, StaticSchema((TYPED,)))
    image = {
        "id": 18446744073709551615,
        "amount": "-1.0000000001",
        "raw": {"base64": "AP8="},
        "day": "0000-00-00",
        "at": "2024-02-29T13:01:02.500000",
        "ts": "2022-04-20T22:18:04+00:00",
        "span": "-838:59:59",
        "tags": ["a", "b"],
        "doc": '{"a": [1, 2]}',
        "small": 255,
    }
    sink.apply_changes([row("insert", 1, "src", "typed", after=image)], 1)
    (got,) = query(postgres, "SELECT * FROM mirror.typed")
    assert got == (
        Decimal(18446744073709551615),
        Decimal("-1.0000000001"),
        b"\x00\xff",
        None,
        dt.datetime(2024, 2, 29, 13, 1, 2, 500000),
        dt.datetime(2022, 4, 20, 22, 18, 4, tzinfo=dt.UTC),
        -dt.timedelta(hours=838, minutes=59, seconds=59),
        "a,b",
        {"a": [1, 2]},
        255,
    )
    types = query(
        postgres,
        "SELECT column_name, data_type, numeric_precision FROM information_schema.columns"
        " WHERE table_schema = 'mirror' AND table_name = 'typed' ORDER BY ordinal_position",
    )
    assert [t[1] for t in types] == [
        "numeric",
        "numeric",
        "bytea",
        "date",
        "timestamp without time zone",
        "timestamp with time zone",
        "interval",
        "text",
        "jsonb",
        "smallint",
    ]
    assert types[0][2] == 20


def test_zero_dates_fail_when_configured(postgres: dict[str, Any]) -> None:
    sink = make_sink(postgres, StaticSchema((TYPED,)), zero_dates="fail")
    with pytest.raises(SinkError, match=r"zero date.*table src\.typed; key \{'id': 1\}"):
        sink.apply_changes(
            [row("insert", 1, "src", "typed", after={"id": 1, "day": "0000-00-00"})], 1
        )


def test_ddl_is_derived_ignored_or_fails(postgres: dict[str, Any]) -> None:
    """PostgreSQL gets DDL derived from the definitions before and after the change
    (never the MySQL text); ``ignore`` leaves the table and writes the columns it has;
    ``fail`` names the setting."""
    old = items_table("src")
    new = TableDef("src", "items", (*old.columns, col("x", "int")), primary_key=("id",))
    schema = VersionedSchema((old,), (new,), at=5)
    ddl = row("ddl", 5, "src", "", sql="ALTER TABLE items ADD COLUMN x INT")
    later = row("insert", 6, "src", "items", after={**item(4), "x": 9})
    assert make_sink(postgres).capabilities.applies_ddl
    make_sink(postgres, schema, ddl=DdlMode.IGNORE).apply_changes([*SEED, ddl, later], 1)
    assert query(postgres, "SELECT count(*) FROM mirror.items") == [(4,)]
    with pytest.raises(SinkError, match="ddl: fail"):
        make_sink(postgres, schema, ddl=DdlMode.FAIL).apply_changes([ddl], 2)
    sink = make_sink(postgres, schema, pipeline="p2")  # lenient, its own checkpoints
    sink.apply_changes([*SEED, ddl, later], 1)
    sink.apply_changes([*SEED, ddl, later], 1)  # a replay adds nothing twice
    assert query(postgres, "SELECT id, x FROM mirror.items ORDER BY id") == [
        (1, None), (2, None), (3, None), (4, 9)
    ]  # fmt: skip


def test_create_tables_with_concurrent_shards(postgres: dict[str, Any]) -> None:
    """``create_tables: true`` with several shards starting at once: PostgreSQL's
    ``CREATE SCHEMA/TABLE IF NOT EXISTS`` is not safe under concurrency (a unique
    violation on pg_namespace for the loser); the sink's advisory lock serializes them."""
    shards = 6
    sink = make_sink(postgres, shards=shards)
    ready = threading.Barrier(shards)
    results: list[Any] = []
    errors: list[BaseException] = []

    def apply(shard: int) -> None:
        rows = [row("insert", 100 + shard, "src", "items", after=item(shard, f"s{shard}"))]
        ready.wait()
        try:
            results.append(sink.apply_changes(rows, 0, shard))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=apply, args=(i,)) for i in range(shards)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(r.upserts for r in results) == [1] * shards
    assert query(postgres, "SELECT id, name FROM mirror.items ORDER BY id") == [
        (i, f"s{i}") for i in range(shards)
    ]
