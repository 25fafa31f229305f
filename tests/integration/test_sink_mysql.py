"""The MySQL/MariaDB sink against a real MariaDB target (``mariadb_target``)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from headwater.connections import TargetConnection
from headwater.errors import SinkError, TransientSinkError
from headwater.sandbox import MariadbSandbox
from headwater.schema.model import TableDef
from headwater.sinks import DdlMode, RetryPolicy, StaticSchema, create_sink
from headwater.sinks.merge import ROLE_KEY, ChangeColumns
from headwater.sinks.mysql import MysqlSink, MysqlSinkConfig
from tests.integration.sink_support import (
    FaultyConnection,
    VersionedSchema,
    col,
    items_table,
    pair_table,
    row,
)


@pytest.fixture
def target(mariadb_target: MariadbSandbox, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh target database (and its checkpoint database ``<name>_hw``)."""
    name = "s_" + re.sub(r"\W", "_", request.node.name)[:40].lower()
    drop = (f"DROP DATABASE IF EXISTS `{name}`", f"DROP DATABASE IF EXISTS `{name}_hw`")
    mariadb_target.execute(*drop, f"CREATE DATABASE `{name}`")
    yield name
    mariadb_target.execute(*drop)


def make_sink(server: MariadbSandbox, db: str, schema: Any, **options: Any) -> MysqlSink:
    options.setdefault("database_map", (("src", db),))
    config = MysqlSinkConfig(
        pipeline="p1",
        connection=TargetConnection(host=server.host, port=server.port, user="root"),
        schema=schema,
        checkpoint_database=f"{db}_hw",
        retry=options.pop("retry", RetryPolicy(attempts=3, base_delay_s=0.01)),
        **options,
    )
    return MysqlSink(config)


def create(server: MariadbSandbox, db: str, *defs: TableDef) -> None:
    sink = make_sink(server, db, StaticSchema(defs))
    conn = sink.connect()
    with conn.cursor() as cur:
        for tdef in defs:
            for sql in sink.dialect.create_table_sql(db, tdef):
                cur.execute(sql)
    conn.commit()
    conn.close()


def rows_of(server: MariadbSandbox, db: str, table: str, order: str = "1") -> list[tuple[Any, ...]]:
    return [tuple(r) for r in server.query(f"SELECT * FROM `{db}`.`{table}` ORDER BY {order}")]


def checkpoints(server: MariadbSandbox, db: str) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in server.query(
            "SELECT pipeline, source, shard, batch_id, max_sequence, applies, rows_applied "
            f"FROM `{db}_hw`.headwater_checkpoint ORDER BY shard"
        )
    ]


def item(
    i: int, name: str | None = "n", price: str | None = "1.50", qty: int | None = 1
) -> dict[str, Any]:
    return {"id": i, "name": name, "price": price, "qty": qty}


SEED = [row("insert", 1, "src", "items", after=item(i, f"n{i}")) for i in (1, 2, 3)]


def test_net_effects_of_a_multi_table_batch(mariadb_target: MariadbSandbox, target: str) -> None:
    schema = StaticSchema((items_table("src"), pair_table("src")))
    create(mariadb_target, target, items_table(target), pair_table(target))
    sink = make_sink(mariadb_target, target, schema)
    sink.apply_changes(SEED, batch_id=0)
    batch = [
        # key 10: insert, update, delete -> nothing
        row("insert", 10, "src", "items", after=item(10)),
        row("update", 11, "src", "items", item(10), item(10, "m")),
        row("delete", 12, "src", "items", before=item(10, "m")),
        # key 1 -> 4: a primary key update, then an update of the new key
        row("update", 13, "src", "items", item(1, "n1"), item(4, "n1")),
        row("update", 14, "src", "items", item(4, "n1"), item(4, "n4", qty=9)),
        # NULL flips on key 2: name to NULL and price to NULL, then name back
        row("update", 15, "src", "items", item(2, "n2"), item(2, None, None)),
        row("update", 16, "src", "items", item(2, None, None), item(2, "back", None)),
        # key 3 deleted
        row("delete", 17, "src", "items", before=item(3, "n3")),
        # a second table with a two-column key, one key updated
        row("insert", 18, "src", "pairs", after={"a": 1, "b": "x", "v": "p"}, pk=("a", "b")),
        row("insert", 19, "src", "pairs", after={"a": 1, "b": "y", "v": "q"}, pk=("a", "b")),
        row(
            "update",
            20,
            "src",
            "pairs",
            {"a": 1, "b": "y", "v": "q"},
            {"a": 2, "b": "y", "v": None},
            pk=("a", "b"),
        ),
    ]
    result = sink.apply_changes(list(reversed(batch)), batch_id=1)
    assert rows_of(mariadb_target, target, "items") == [
        (2, "back", None, 1),
        (4, "n4", Decimal("1.50"), 9),
    ]
    assert rows_of(mariadb_target, target, "pairs", "a, b") == [(1, "x", "p"), (2, "y", None)]
    assert (result.upserts, result.deletes, result.skipped) == (4, 2, 0)
    assert checkpoints(mariadb_target, target) == [("p1", "src", 0, 1, 20, 2, 13)]


def test_a_key_declared_out_of_column_order_deletes_its_rows(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    """PRIMARY KEY (b, a) on columns (a, b, v): key images list b first, and the delete's
    ``(b, a) IN (...)`` must bind b first too."""
    base = pair_table("src")
    tdef = TableDef(base.database, base.table, base.columns, primary_key=("b", "a"))
    create(mariadb_target, target, TableDef(target, tdef.table, tdef.columns, ("b", "a")))
    sink = make_sink(mariadb_target, target, StaticSchema((tdef,)))
    pk = ("b", "a")
    pairs = [{"a": 1, "b": "x", "v": "p"}, {"a": 2, "b": "y", "v": "q"}]
    sink.apply_changes(
        [row("insert", 1 + n, "src", "pairs", after=p, pk=pk) for n, p in enumerate(pairs)], 0
    )
    sink.apply_changes([row("delete", 3, "src", "pairs", before=pairs[0], pk=pk)], batch_id=1)
    assert rows_of(mariadb_target, target, "pairs", "a") == [(2, "y", "q")]


def test_replaying_the_same_or_an_older_batch_changes_nothing(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    create(mariadb_target, target, items_table(target))
    sink = make_sink(mariadb_target, target, StaticSchema((items_table("src"),)))
    batch1 = [row("update", 5, "src", "items", item(1, "n1"), item(1, "one"))]
    batch2 = [
        row("delete", 6, "src", "items", before=item(2, "n2")),
        row("update", 7, "src", "items", item(1, "one"), item(1, "uno")),
    ]
    sink.apply_changes(SEED, 0)
    sink.apply_changes(batch1, 1)
    sink.apply_changes(batch2, 2)
    state = rows_of(mariadb_target, target, "items")
    assert state == [(1, "uno", Decimal("1.50"), 1), (3, "n3", Decimal("1.50"), 1)]
    ckpt = checkpoints(mariadb_target, target)
    assert ckpt == [("p1", "src", 0, 2, 7, 3, 2)]

    again = sink.apply_changes(batch2, 2)  # the same batch id
    older = sink.apply_changes(batch1 + SEED, 1)  # an older batch
    assert (again.skipped, again.upserts, older.skipped, older.upserts) == (2, 0, 4, 0)
    assert rows_of(mariadb_target, target, "items") == state
    assert checkpoints(mariadb_target, target) == ckpt  # applies still 3: each batch once


def columns_of(rows: list[dict[str, Any]]) -> ChangeColumns:
    """Change rows as the Spark glue hands them to ``apply_columns`` (no key updates)."""
    names = ("source", "database", "table", "op", "sequence", "change_id", "file_num",
             "offset", "event_index", "key", "after")  # fmt: skip
    return ChangeColumns(*([r[n] for r in rows] for n in names), role=[ROLE_KEY] * len(rows))


@pytest.mark.parametrize("sources", [("src",), ("src", "other")])
def test_columns_already_applied_are_skipped_and_the_rest_applied(
    mariadb_target: MariadbSandbox, target: str, sources: tuple[str, ...]
) -> None:
    """A batch that starts before the shard's checkpoint: only the newer rows apply (with
    one source the new rows are found as the tail of the sequence order)."""
    create(mariadb_target, target, items_table(target))
    sink = make_sink(mariadb_target, target, StaticSchema((items_table("src"),)))
    history = [
        {
            **row("insert", seq, "src", "items", after=item(seq)),
            "source": sources[seq % len(sources)],
        }
        for seq in range(1, 11)
    ]
    cols = columns_of(history)
    sink.setup()  # the Spark glue's part
    first = sink.apply_columns(cols, range(6), batch_id=0, shard=0)
    again = sink.apply_columns(cols, range(10), batch_id=1, shard=0)
    assert (first.upserts, again.skipped, again.upserts) == (6, 6, 4)
    assert [r[0] for r in rows_of(mariadb_target, target, "items")] == list(range(1, 11))
    assert again.checkpoints == {
        s: max(r["sequence"] for r in history if r["source"] == s) for s in sources
    }


def test_a_crash_inside_the_transaction_leaves_the_target_unchanged(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    create(mariadb_target, target, items_table(target))
    sink = make_sink(mariadb_target, target, StaticSchema((items_table("src"),)), batch_rows=2)
    sink.apply_changes(SEED, 0)
    batch = [row("insert", 10 + i, "src", "items", after=item(10 + i)) for i in range(5)]
    batch.append(row("delete", 20, "src", "items", before=item(1, "n1")))
    before = rows_of(mariadb_target, target, "items")

    def crash() -> None:
        raise RuntimeError("process died")

    # statements: checkpoint setup (2), checkpoint insert and lock (2), savepoint + delete,
    # savepoint + the first upsert batch of 2 rows; the crash hits before the second batch
    faulty = FaultyConnection(sink.connect(), after=8, fault=crash)
    with pytest.raises(RuntimeError, match="process died"):
        sink.apply_changes(batch, 1, connection=faulty)
    assert "ON DUPLICATE" in faulty.executed[-1] and "DELETE" in faulty.executed[-3]
    faulty.close()
    assert rows_of(mariadb_target, target, "items") == before
    assert checkpoints(mariadb_target, target)[0][3:6] == (0, 1, 1)

    sink.apply_changes(batch, 1)  # the retry
    sink.apply_changes(batch, 1)  # and a replay
    assert [r[0] for r in rows_of(mariadb_target, target, "items")] == [2, 3, 10, 11, 12, 13, 14]
    assert checkpoints(mariadb_target, target)[0][3:6] == (1, 20, 2)


def test_a_killed_connection_is_retried_on_a_new_one_and_applies_once(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    create(mariadb_target, target, items_table(target))
    admin = mariadb_target.connect()

    class KilledOnce(MysqlSink):
        kills = 0

        def connect(self) -> Any:
            conn = super().connect()
            if KilledOnce.kills:
                return conn

            def kill() -> None:
                KilledOnce.kills += 1
                with admin.cursor() as cur:
                    cur.execute(f"KILL CONNECTION {conn.thread_id()}")

            return FaultyConnection(conn, after=4, fault=kill)

    base = make_sink(mariadb_target, target, StaticSchema((items_table("src"),)))
    sink = KilledOnce(base.config)
    retries: list[BaseException] = []
    result = sink.apply_changes(SEED, 0, on_retry=lambda n, exc: retries.append(exc))
    admin.close()
    assert KilledOnce.kills == 1
    assert len(retries) == 1 and retries[0].args[0] in (2006, 2013)
    assert result.attempts == 2
    assert [r[0] for r in rows_of(mariadb_target, target, "items")] == [1, 2, 3]
    assert checkpoints(mariadb_target, target)[0][3:6] == (0, 1, 1)


def test_a_lock_wait_timeout_is_retried_with_backoff(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    create(mariadb_target, target, items_table(target))
    options = TargetConnection(
        host=mariadb_target.host,
        port=mariadb_target.port,
        session=(("innodb_lock_wait_timeout", 1),),
    )
    sink = make_sink(mariadb_target, target, StaticSchema((items_table("src"),)))
    sink = MysqlSink(MysqlSinkConfig(**{**_fields(sink.config), "connection": options}))
    sink.apply_changes(SEED, 0)
    holder = mariadb_target.connect(target)
    holder.autocommit(False)
    with holder.cursor() as cur:
        cur.execute("SELECT * FROM items WHERE id = 2 FOR UPDATE")
    errors: list[int] = []

    def release(attempt: int, exc: BaseException) -> None:
        errors.append(exc.args[0])
        holder.commit()  # the lock holder finishes; the retry goes through

    result = sink.apply_changes(
        [row("update", 5, "src", "items", item(2, "n2"), item(2, "locked"))], 1, on_retry=release
    )
    holder.close()
    assert errors == [1205] and result.attempts == 2
    assert rows_of(mariadb_target, target, "items")[1][1] == "locked"


def test_retries_that_run_out_raise_a_transient_error_with_the_position(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    create(mariadb_target, target, items_table(target))
    options = TargetConnection(
        host=mariadb_target.host,
        port=mariadb_target.port,
        session=(("innodb_lock_wait_timeout", 1),),
    )
    base = make_sink(mariadb_target, target, StaticSchema((items_table("src"),)))
    sink = MysqlSink(
        MysqlSinkConfig(
            **{
                **_fields(base.config),
                "connection": options,
                "retry": RetryPolicy(attempts=2, base_delay_s=0.01),
            }
        )
    )
    sink.apply_changes(SEED, 0)
    holder = mariadb_target.connect(target)
    holder.autocommit(False)
    with holder.cursor() as cur:
        cur.execute("SELECT * FROM items WHERE id = 3 FOR UPDATE")
    with pytest.raises(TransientSinkError, match="gave up after 2 attempts") as info:
        sink.apply_changes([row("delete", 8, "src", "items", before=item(3))], 1)
    holder.close()
    assert info.value.retryable and info.value.resume_sequence == 8


def test_a_failing_row_is_named_by_table_key_and_statement(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    create(mariadb_target, target, items_table(target))
    sink = make_sink(mariadb_target, target, StaticSchema((items_table("src"),)))
    batch = [row("insert", 10 + i, "src", "items", after=item(10 + i)) for i in range(4)]
    batch[2] = row("insert", 12, "src", "items", after=item(12, "x" * 30))  # VARCHAR(20)
    with pytest.raises(SinkError) as info:
        sink.apply_changes(batch, 1)
    err = info.value
    assert not getattr(err, "retryable", False)
    assert err.table == "src.items" and err.key == {"id": 12}
    assert err.statement is not None and err.statement.startswith(f"INSERT INTO `{target}`.`items`")
    assert "Data too long" in str(err) and "resume from sequence 10" in str(err)
    assert "password" not in str(err).lower()
    assert rows_of(mariadb_target, target, "items") == []


def _ddl_batch(target: str) -> tuple[VersionedSchema, list[dict[str, Any]]]:
    old = items_table("src")
    new = TableDef("src", "items", (*old.columns, col("extra", "int")), primary_key=("id",))
    schema = VersionedSchema((old,), (new,), at=20)
    batch = [
        row("insert", 10, "src", "items", after=item(1)),
        row("ddl", 20, "src", "", sql="ALTER TABLE src.items ADD COLUMN extra INT"),
        row("insert", 30, "src", "items", after={**item(2), "extra": 7}),
    ]
    return schema, batch


def test_ddl_apply_runs_in_order_with_mapped_database(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    create(mariadb_target, target, items_table(target))
    schema, batch = _ddl_batch(target)
    sink = make_sink(mariadb_target, target, schema, ddl=DdlMode.APPLY)
    sink.apply_changes(batch, 1)
    sink.apply_changes(batch, 1)  # the replay skips the DDL too (no "duplicate column")
    assert rows_of(mariadb_target, target, "items") == [
        (1, "n", Decimal("1.50"), 1, None),
        (2, "n", Decimal("1.50"), 1, 7),
    ]
    assert checkpoints(mariadb_target, target) == [
        ("p1", "src", -1, 1, 20, 1, 1),
        ("p1", "src", 0, 1, 30, 2, 1),
    ]


def test_ddl_skip_leaves_the_target_table_alone(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    create(mariadb_target, target, items_table(target))
    schema, batch = _ddl_batch(target)
    sink = make_sink(mariadb_target, target, schema, ddl=DdlMode.SKIP)
    sink.apply_changes(batch[:2], 1)
    columns = mariadb_target.query(f"SHOW COLUMNS FROM `{target}`.items")
    assert [c[0] for c in columns] == ["id", "name", "price", "qty"]


def test_ddl_fail_stops_after_the_data_before_it(
    mariadb_target: MariadbSandbox, target: str
) -> None:
    create(mariadb_target, target, items_table(target))
    schema, batch = _ddl_batch(target)
    sink = make_sink(mariadb_target, target, schema, ddl=DdlMode.FAIL)
    with pytest.raises(SinkError, match="ddl: fail") as info:
        sink.apply_changes(batch, 1)
    assert info.value.resume_sequence == 20
    assert info.value.statement == "ALTER TABLE src.items ADD COLUMN extra INT"
    assert [r[0] for r in rows_of(mariadb_target, target, "items")] == [1]


TYPES = TableDef(
    "src",
    "typed",
    (
        col("id", "bigint", "bigint unsigned", unsigned=True, nullable=False),
        col("amount", "decimal", "decimal(30,10)"),
        col("blob", "blob", charset="binary"),
        col("day", "date"),
        col("at", "datetime", "datetime(6)"),
        col("ts", "timestamp", "timestamp(6)"),
        col("span", "time", "time(6)"),
        col("tags", "set", "set('a','b','c')", set_values=("a", "b", "c")),
        col("kind", "enum", "enum('x','y')", enum_values=("x", "y")),
        col("doc", "json", charset="utf8mb4"),
    ),
    primary_key=("id",),
)


def test_created_tables_take_every_value_type(mariadb_target: MariadbSandbox, target: str) -> None:
    sink = make_sink(mariadb_target, target, StaticSchema((TYPES,)), create_tables=True)
    images = [
        {
            "id": 18446744073709551615,
            "amount": "-12345678901234567890.0123456789",
            "blob": {"base64": "AP8="},
            "day": "2024-02-29",
            "at": "2024-02-29T13:01:02.500000",
            "ts": "2022-04-20T22:18:04+00:00",
            "span": "-838:59:59",
            "tags": ["a", "c"],
            "kind": "y",
            "doc": '{"a": 1}',
        },
        {
            "id": 1,
            "amount": "0.0000000000",
            "blob": None,
            "day": "0000-00-00",
            "at": "0000-00-00 00:00:00",
            "ts": None,
            "span": "100:00:00.000005",
            "tags": [],
            "kind": "x",
            "doc": None,
        },
    ]
    sink.apply_changes([row("insert", i, "src", "typed", after=a) for i, a in enumerate(images)], 1)
    got = mariadb_target.query(
        f"SELECT id, amount, `blob`, CAST(day AS CHAR), CAST(`at` AS CHAR), "
        f"CAST(ts AS CHAR), span, tags, kind, doc FROM `{target}`.typed ORDER BY id"
    )
    assert [tuple(r) for r in got] == [
        (
            1,
            Decimal("0E-10"),
            None,
            "0000-00-00",
            "0000-00-00 00:00:00.000000",
            None,
            dt.timedelta(hours=100, microseconds=5),
            "",
            "x",
            None,
        ),
        (
            18446744073709551615,
            Decimal("-12345678901234567890.0123456789"),
            b"\x00\xff",
            "2024-02-29",
            "2024-02-29 13:01:02.500000",
            "2022-04-20 22:18:04.000000",
            -dt.timedelta(hours=838, minutes=59, seconds=59),
            "a,c",
            "y",
            '{"a": 1}',
        ),
    ]


def test_registry_builds_the_sink_from_options(mariadb_target: MariadbSandbox, target: str) -> None:
    sink = create_sink(
        "mysql",
        pipeline="p1",
        connection=TargetConnection(host=mariadb_target.host, port=mariadb_target.port),
        schema=StaticSchema((items_table("src"),)),
        database_map=(("src", target),),
        checkpoint_database=f"{target}_hw",
        create_tables=True,
    )
    assert sink.capabilities.transactional and sink.capabilities.applies_ddl
    sink.apply_changes(SEED, 0)
    assert len(rows_of(mariadb_target, target, "items")) == 3


def _fields(config: MysqlSinkConfig) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
