"""Write paths of the SQL sinks against each other: the same change rows leave identical
target tables.

* PostgreSQL's bulk path (COPY into a temporary table, then one set-based statement)
  against its statement path (batched ``INSERT ... VALUES ... ON CONFLICT`` and
  ``DELETE ... IN``): two sinks that differ only in ``bulk_rows`` (1: every statement
  group is a bulk write; 0: none);
* the Spark glue's columnar path (``apply_columns``: collapse_column_rows and
  plan_column_writes, no NetEffect per effect) against the general one (``apply_changes``:
  explode, collapse, plan_writes), on PostgreSQL and on MariaDB.

Random histories on a table with a two-column key and a column of every value type of
docs/formats.md ("Values"), with NULLs, text that COPY must escape (tab, newline,
backslash, quotes), key updates, deletes and re-inserts, MINIMAL update images (some
columns only), applied in batches.
"""

from __future__ import annotations

import base64
import random
from typing import Any, ClassVar

import orjson
import psycopg
import pytest

from headwater.connections import TargetConnection
from headwater.errors import SinkError
from headwater.sandbox import MariadbSandbox
from headwater.schema.model import TableDef
from headwater.sinks import RetryPolicy, StaticSchema
from headwater.sinks.merge import ChangeColumns, route_row
from headwater.sinks.mysql import MysqlSink, MysqlSinkConfig
from headwater.sinks.postgres import PostgresSink, PostgresSinkConfig
from headwater.sinks.postgres.client import PostgresDialect
from tests.integration.sink_support import col, row

ALL_TYPES = TableDef(
    "src",
    "every",
    (
        col("id", "int", nullable=False),
        col("tag", "varchar", "varchar(8)", nullable=False),
        col("big", "bigint", "bigint unsigned", unsigned=True),
        col("small", "tinyint", "tinyint"),
        col("dbl", "double"),
        col("flt", "float"),
        col("amount", "decimal", "decimal(30,10)"),
        col("raw", "varbinary", "varbinary(16)", charset="binary"),
        col("blob", "blob", charset="binary"),
        col("name", "varchar", "varchar(40)"),
        col("body", "text"),
        col("day", "date"),
        col("at", "datetime", "datetime(6)"),
        col("ts", "timestamp", "timestamp(6)"),
        col("span", "time", "time(6)"),
        col("yr", "year"),
        col("bits", "bit", "bit(8)"),
        col("kind", "enum", "enum('a','b')", enum_values=("a", "b")),
        col("tags", "set", "set('a','b')", set_values=("a", "b")),
        col("doc", "json", charset="utf8mb4"),
        col("shape", "geometry", charset="binary"),
    ),
    primary_key=("id", "tag"),
)

TEXTS = ["", "plain", "tab\there", "new\nline", "back\\slash", "quo'te\"s", "\\N", "ünï €", "\r"]


def b64(data: bytes) -> dict[str, str]:
    return {"base64": base64.b64encode(data).decode()}


def choices(undecodable: bool) -> dict[str, list[Any]]:
    """The values of ALL_TYPES' non-key columns the tests draw from; ``undecodable``:
    ``body`` may hold bytes invalid in UTF-8 (PostgreSQL stores them with U+FFFD, a strict
    MariaDB refuses them in a utf8mb4 column)."""
    return {
        "big": [0, 1, 2**63, 2**64 - 1],
        "small": [-128, 0, 127],
        "dbl": [0.0, -1.5, 1e300, 3.141592653589793],
        "flt": [0.5, -2.25, 1024.0],
        "amount": ["0.0000000000", "-1.0000000001", "12345678901234567890.1234567890"],
        "raw": [b64(b""), b64(b"\x00\xff"), b64(b"\t\n\\")],
        "blob": [b64(bytes(range(256))), b64(b"\\x00")],
        "name": TEXTS,
        "body": [t * 3 for t in TEXTS] + [{"undecodable_text_base64": "/w=="}] * undecodable,
        "day": ["2024-02-29", "0000-00-00", "1000-01-01"],
        "at": ["2024-02-29T13:01:02.500000", "9999-12-31T23:59:59.999999", "2020-01-01T00:00:00"],
        "ts": ["2022-04-20T22:18:04+00:00", "1970-01-01T00:00:01.000001+00:00"],
        "span": ["-838:59:59", "100:00:00.000005", "00:00:00", "-00:00:01.5"],
        "yr": [1901, 2155, 0],
        "bits": [0, 255],
        "kind": ["a", "b"],
        "tags": [[], ["a"], ["a", "b"]],
        "doc": ['{"a": [1, 2]}', "null", '"tab\\there"', '[{"k": "back\\\\slash"}]'],
        "shape": [b64(b"\x00\x00\x00\x00\x01\x01\x00\x00\x00" + bytes(16))],
    }


def values(rnd: random.Random, undecodable: bool = True) -> dict[str, Any]:
    """A random image of ALL_TYPES' non-key columns (each may be NULL)."""
    return {
        c: None if rnd.random() < 0.2 else rnd.choice(vs) for c, vs in choices(undecodable).items()
    }


def every_value(first_seq: int, undecodable: bool = True) -> list[dict[str, Any]]:
    """Inserts of 70 new keys (ids 1000-1069, tags COPY escapes) going through every value
    of :func:`choices` and NULL in each column: the batch that makes sure each value is
    written, whatever the random history left."""
    out = []
    for i in range(70):
        image = {"id": 1000 + i, "tag": ["b\tc", "d\\e"][i % 2]}
        for c, vs in choices(undecodable).items():
            image[c] = None if i % 11 == 10 else vs[i % len(vs)]  # 11: longer than a list
        out.append(row("insert", first_seq + i, "src", "every", None, image, pk=("id", "tag")))
    return out


def history(seed: int, changes: int, undecodable: bool = True) -> list[dict[str, Any]]:
    """Change rows of a valid random history (inserts, updates, key updates, deletes)."""
    rnd = random.Random(seed)
    live: dict[tuple[int, str], dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    pk = ("id", "tag")
    for seq in range(1, changes + 1):
        ops = ["insert", "insert"] + (["update", "update", "rekey", "delete"] if live else [])
        op = rnd.choice(ops)
        if op == "insert":
            key = (rnd.randrange(60), rnd.choice(["a", "b\tc", "d\\e"]))
            image = {"id": key[0], "tag": key[1], **values(rnd, undecodable)}
            before = live.get(key)
            live[key] = image
            # A key seen before is updated in place; a new one inserted.
            kind = "update" if before else "insert"
            out.append(row(kind, seq, "src", "every", before, image, pk=pk))
        elif op == "update":
            key = rnd.choice(sorted(live))
            before, live[key] = live[key], {"id": key[0], "tag": key[1], **values(rnd, undecodable)}
            after = live[key]
            if rnd.random() < 0.25:  # a MINIMAL image: the columns set (MariaDB leaves
                # out the key the statement did not set; then the change's key comes from
                # the before image)
                keep = rnd.choice([c for c in after if c not in pk])
                after = {
                    c: v
                    for c, v in after.items()
                    if c == keep or rnd.random() < (0.5 if c in pk else 0.3)
                }
                live[key] = {**before, **after}
            out.append(row("update", seq, "src", "every", before, after, pk=pk))
        elif op == "rekey":
            old = rnd.choice(sorted(live))
            new = (rnd.randrange(60, 120), old[1])
            if new in live:
                continue
            before = live.pop(old)
            live[new] = {**before, "id": new[0]}
            out.append(row("update", seq, "src", "every", before, live[new], pk=pk))
        else:
            key = rnd.choice(sorted(live))
            out.append(row("delete", seq, "src", "every", live.pop(key), None, pk=pk))
    return out


def live_keys(changes: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """The keys live after ``changes``, from the change rows themselves."""
    live: set[tuple[int, str]] = set()
    for change in changes:
        image = orjson.loads(change["key"])
        if change["before_key"] is not None:
            old = orjson.loads(change["before_key"])
            live.discard((old["id"], old["tag"]))
        if change["op"] == "delete":
            live.discard((image["id"], image["tag"]))
        else:
            live.add((image["id"], image["tag"]))
    return sorted(live)


class _StatementsOnly(PostgresDialect):
    bulk_rows: ClassVar[int] = 0


class _BulkAlways(PostgresDialect):
    bulk_rows: ClassVar[int] = 1


class StatementSink(PostgresSink):
    dialect = _StatementsOnly()


class BulkSink(PostgresSink):
    dialect = _BulkAlways()


def make(kind: type[PostgresSink], pg: dict[str, Any], schema: str) -> PostgresSink:
    return kind(
        PostgresSinkConfig(
            pipeline=schema,
            connection=TargetConnection(
                host=pg["host"], port=int(pg["port"]), user=pg["user"], database=pg["dbname"]
            ),
            schema=StaticSchema((ALL_TYPES,)),
            database_map=(("src", schema),),
            create_tables=True,
            batch_rows=7,  # several statements per group on the statement path
            retry=RetryPolicy(attempts=2, base_delay_s=0.01),
        )
    )


def table(pg: dict[str, Any], schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(**pg) as conn:
        rows = conn.execute(f'SELECT * FROM "{schema}".every ORDER BY id, tag').fetchall()
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bulk_and_statement_paths_leave_identical_tables(
    postgres: dict[str, Any], seed: int
) -> None:
    changes = history(seed, 400)
    changes += every_value(len(changes) + 1)
    bulk, statements = make(BulkSink, postgres, "bulk"), make(StatementSink, postgres, "stmt")
    for batch, start in enumerate(range(0, len(changes), 80)):
        chunk = changes[start : start + 80]
        got = bulk.apply_changes(chunk, batch)
        want = statements.apply_changes(chunk, batch)
        assert (got.upserts, got.deletes) == (want.upserts, want.deletes)
    got_rows, want_rows = table(postgres, "bulk"), table(postgres, "stmt")
    assert [r[:2] for r in got_rows] == live_keys(changes)
    assert got_rows == want_rows
    # The values went through: keys and text that COPY escapes, bytes, NULLs.
    assert any("\t" in r[1] for r in got_rows) and any("\\" in r[1] for r in got_rows)
    assert any(isinstance(r[7], bytes) for r in got_rows)
    assert any(r[9] is None for r in got_rows) and any(r[9] for r in got_rows)


def failing_batch() -> list[dict[str, Any]]:
    """99 inserts; the 50th holds a value too long for ``name`` (varchar(40))."""
    image = {"id": 1, "tag": "a", **dict.fromkeys(c.name for c in ALL_TYPES.columns[2:])}
    rows = [
        row("insert", i, "src", "every", None, {**image, "id": i}, pk=("id", "tag"))
        for i in range(1, 100)
    ]
    bad = {**image, "id": 50, "name": "x" * 41}
    rows[49] = row("insert", 50, "src", "every", None, bad, pk=("id", "tag"))
    return rows


@pytest.mark.parametrize("entry", ["apply_changes", "apply_columns"])
def test_a_failing_row_of_a_bulk_write_is_named_by_table_key_and_statement(
    postgres: dict[str, Any], entry: str
) -> None:
    sink = make(BulkSink, postgres, "bulk")
    rows = failing_batch()
    with pytest.raises(SinkError) as info:
        if entry == "apply_changes":
            sink.apply_changes(rows, 1)
        else:
            sink.setup()
            sink.apply_columns(*routed(rows), 1, 0)
    err = info.value
    assert (err.table, err.key, err.resume_sequence) == ("src.every", {"id": 50, "tag": "a"}, 1)
    assert err.statement is not None and err.statement.startswith('INSERT INTO "bulk"."every"')
    assert "StringDataRightTruncation" in str(err)
    assert table(postgres, "bulk") == []


def routed(rows: list[dict[str, Any]]) -> tuple[ChangeColumns, list[int]]:
    """Change rows as the Spark glue hands them to ``apply_columns``: each row's copies
    (route_row: a key update leaves as the old key's delete and the new key's put), and
    their indexes in sequence order. Consecutive rows are given one position, as the
    rows of one event have (the planner's fast path keeps them in one statement shape
    unless action or column set differ)."""
    names = ("source", "database", "table", "op", "sequence", "change_id", "file_num",
             "offset", "event_index")  # fmt: skip
    for r in rows:  # rows of one binlog event share its position: 8 rows an event here
        r["offset"] = 4 + r["sequence"] // 8
    copies = [
        (r, role, text)
        for r in rows
        for role, text in route_row(r["op"], r["key"], r["before_key"])
    ]
    cols = ChangeColumns(
        *([r[n] for r, _, _ in copies] for n in names),
        key=[text for _, _, text in copies],
        after=[r["after"] for r, _, _ in copies],
        role=[role for _, role, _ in copies],
    )
    return cols, sorted(range(len(copies)), key=cols.sequence.__getitem__)


def test_columnar_and_general_paths_leave_identical_tables_in_postgresql(
    postgres: dict[str, Any],
) -> None:
    columnar, general = make(PostgresSink, postgres, "cols"), make(PostgresSink, postgres, "rows")
    changes = history(4, 600)
    changes += every_value(len(changes) + 1)
    columnar.setup()
    for batch, start in enumerate(range(0, len(changes), 150)):
        chunk = changes[start : start + 150]  # groups of 64+ rows: COPY, smaller: statements
        cols, order = routed(chunk)
        got = columnar.apply_columns(cols, order, batch, 0)
        want = general.apply_changes(chunk, batch)
        assert (got.upserts, got.deletes, got.checkpoints) == (
            want.upserts,
            want.deletes,
            want.checkpoints,
        )
    got_rows = table(postgres, "cols")
    assert [r[:2] for r in got_rows] == live_keys(changes)
    assert got_rows == table(postgres, "rows")


def test_columnar_and_general_paths_leave_identical_tables_in_mariadb(
    mariadb_target: MariadbSandbox,
) -> None:
    server = mariadb_target
    server.execute(*(f"DROP DATABASE IF EXISTS {d}" for d in ("hw_cols", "hw_rows", "hw_ckpt")))

    def sink(db: str) -> MysqlSink:
        return MysqlSink(
            MysqlSinkConfig(
                pipeline=db,
                connection=TargetConnection(host=server.host, port=server.port, user="root"),
                schema=StaticSchema((ALL_TYPES,)),
                database_map=(("src", db),),
                checkpoint_database="hw_ckpt",
                create_tables=True,
                zero_dates="keep",
                batch_rows=7,
                retry=RetryPolicy(attempts=2, base_delay_s=0.01),
            )
        )

    columnar, general = sink("hw_cols"), sink("hw_rows")
    changes = history(5, 600, undecodable=False)
    changes += every_value(len(changes) + 1, undecodable=False)
    columnar.setup()
    for batch, start in enumerate(range(0, len(changes), 150)):
        chunk = changes[start : start + 150]
        cols, order = routed(chunk)
        got = columnar.apply_columns(cols, order, batch, 0)
        want = general.apply_changes(chunk, batch)
        assert (got.upserts, got.deletes) == (want.upserts, want.deletes)
    query = "SELECT * FROM {}.every ORDER BY id, tag"
    got_rows = server.query(query.format("hw_cols"))
    assert [(r[0], r[1]) for r in got_rows] == live_keys(changes)
    assert got_rows == server.query(query.format("hw_rows"))


def test_a_failing_row_of_the_columnar_path_is_named_in_mariadb(
    mariadb_target: MariadbSandbox,
) -> None:
    server = mariadb_target
    server.execute("DROP DATABASE IF EXISTS hw_fail", "DROP DATABASE IF EXISTS hw_fail_ckpt")
    sink = MysqlSink(
        MysqlSinkConfig(
            pipeline="fail",
            connection=TargetConnection(host=server.host, port=server.port, user="root"),
            schema=StaticSchema((ALL_TYPES,)),
            database_map=(("src", "hw_fail"),),
            checkpoint_database="hw_fail_ckpt",
            create_tables=True,
            batch_rows=30,
            retry=RetryPolicy(attempts=2, base_delay_s=0.01),
        )
    )
    sink.setup()
    with pytest.raises(SinkError) as info:
        sink.apply_columns(*routed(failing_batch()), 1, 0)
    err = info.value
    assert (err.table, err.key, err.resume_sequence) == ("src.every", {"id": 50, "tag": "a"}, 31)
    assert err.statement is not None and err.statement.startswith("INSERT INTO `hw_fail`.`every`")
    assert "Data too long" in str(err)
    assert server.query("SELECT COUNT(*) FROM hw_fail.every") == [(0,)]
