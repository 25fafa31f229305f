"""``SqlSink.apply_net`` (the net effect as typed Arrow, written set-based) against the
existing path (``apply_changes``): the same histories leave identical target tables and
checkpoint rows, in MariaDB and in PostgreSQL; a replayed call and a call behind the
checkpoint change nothing; a value the target refuses is named by table and key."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import random
import threading
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from headwater.connections import TargetConnection
from headwater.errors import SinkError
from headwater.position import Position
from headwater.sandbox import MariadbSandbox
from headwater.schema.model import TableDef
from headwater.sinks import RetryPolicy, StaticSchema, netwrite
from headwater.sinks.base import DdlMode
from headwater.sinks.mysql import MysqlSink, MysqlSinkConfig
from headwater.sinks.netwrite import NetTable, PartlyApplied, StreamedRows
from headwater.sinks.postgres import PostgresSink, PostgresSinkConfig
from headwater.sinks.sql import SqlSink
from tests.integration.sink_support import col, row

TDEF = TableDef(
    "src",
    "vals",
    (
        col("id", "int", nullable=False),
        col("tag", "varchar", "varchar(8)", nullable=False),
        col("big", "bigint", "bigint unsigned", unsigned=True),
        col("neg", "bigint"),
        col("small", "tinyint"),
        col("dbl", "double"),
        col("flt", "float"),
        col("amount", "decimal", "decimal(30,10)"),
        col("name", "varchar", "varchar(40)"),
        col("body", "text"),
        col("raw", "varbinary", "varbinary(16)", charset="binary"),
        col("day", "date"),
    ),
    primary_key=("id", "tag"),
)
KEY = ("id", "tag")
SCHEMA = pa.schema(
    [
        ("id", pa.int32()),
        ("tag", pa.string()),
        ("big", pa.uint64()),
        ("neg", pa.int64()),
        ("small", pa.int8()),
        ("dbl", pa.float64()),
        ("flt", pa.float32()),
        ("amount", pa.decimal128(30, 10)),
        ("name", pa.string()),
        ("body", pa.string()),
        ("raw", pa.binary()),
        ("day", pa.string()),  # as the JSON text: the general path's conversion
    ]
)
TEXTS = ["", "plain", "tab\there", "new\nline", "back\\slash", "quo'te\"s", "\\N", "ünï €",
         "\r", "\x1a", "𝄞 emoji", "NULL", "a\\'b"]  # fmt: skip
NUMBERS: dict[str, list[Any]] = {
    "big": [0, 1, 2**63, 2**64 - 1],
    "neg": [-(2**63), -1, 2**63 - 1],
    "small": [-128, 0, 127],
    "dbl": [0.0, -1.5, 1e300, 3.141592653589793, 0.1, -2.5e-308, 1e16, 123456789.123],
    "flt": [0.5, -2.25, 1024.0, 0.1, 3.4e38, 1e-7],
    "amount": [
        "0.0000000000",
        "-1.0000000001",
        "12345678901234567890.1234567890",
        "0.0000001000",
        "-0.0000000001",
    ],
    "raw": [b"", b"\x00\xff", b"\t\n\\'\"", bytes(range(16))],
    "day": ["2024-02-29", "1000-01-01", "0000-00-00"],
}


def choices(nul: bool) -> dict[str, list[Any]]:
    texts = TEXTS + (["nul\x00byte"] if nul else [])
    return {**NUMBERS, "name": texts, "body": [t * 3 for t in texts]}


def only(tdef: TableDef, names: tuple[str, ...]) -> TableDef:
    """``tdef`` with the columns ``names`` only."""
    return dataclasses.replace(tdef, columns=tuple(c for c in tdef.columns if c.name in names))


#: Column sets: every column (``day``, a DATE as JSON text, sends the table's upserts
#: through the general path), the bulk text's types only (PostgreSQL: no bytea either).
ALL = tuple(SCHEMA.names)
FAST_MYSQL = tuple(n for n in ALL if n != "day")
FAST_PG = tuple(n for n in ALL if n not in ("day", "raw"))


def image(
    rnd: random.Random, key: tuple[int, str], nul: bool, names: tuple[str, ...] = ALL
) -> dict[str, Any]:
    """A random row (Python values; each non-key column may be NULL)."""
    out: dict[str, Any] = {"id": key[0], "tag": key[1]}
    for c, vs in choices(nul).items():
        if c in names:
            out[c] = None if rnd.random() < 0.2 else rnd.choice(vs)
    return out


def as_json(img: dict[str, Any]) -> dict[str, Any]:
    """A row image as change rows carry it (docs/formats.md "Values")."""
    out = dict(img)
    if out.get("raw") is not None:
        out["raw"] = {"base64": base64.b64encode(out["raw"]).decode()}
    return out


def history(
    seed: int, changes: int, nul: bool, names: tuple[str, ...]
) -> list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]:
    """``(op, before, after)`` of a valid random history (inserts, updates, deletes,
    re-inserts)."""
    rnd = random.Random(seed)
    live: dict[tuple[int, str], dict[str, Any]] = {}
    out: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
    for _ in range(changes):
        op = rnd.choice(["insert", "insert", "update", "delete"] if live else ["insert"])
        if op == "insert":
            key = (rnd.randrange(300), rnd.choice(["a", "b\tc", "d\\e", "f'g"]))
            before, live[key] = live.get(key), image(rnd, key, nul, names)
            out.append(("update" if before else "insert", before, live[key]))
        elif op == "update":
            key = rnd.choice(sorted(live))
            before, live[key] = live[key], image(rnd, key, nul, names)
            out.append(("update", before, live[key]))
        else:
            key = rnd.choice(sorted(live))
            out.append(("delete", live.pop(key), None))
    # Every value at least once, on keys of their own.
    for i in range(40):
        img: dict[str, Any] = {"id": 1000 + i, "tag": "z"}
        for c, vs in choices(nul).items():
            if c in names:
                img[c] = None if i % 13 == 12 else vs[i % len(vs)]
        out.append(("insert", None, img))
    return out


def change_rows(chunk: list[Any], first: int) -> list[dict[str, Any]]:
    return [
        row(op, first + i, "src", "vals",
            None if b is None else as_json(b), None if a is None else as_json(a), pk=KEY)
        for i, (op, b, a) in enumerate(chunk)
    ]  # fmt: skip


def net_table(chunk: list[Any], first: int, names: tuple[str, ...]) -> NetTable:
    """The chunk's net effect per key, as the read path computes it."""
    last: dict[tuple[int, str], dict[str, Any] | None] = {}
    for _, before, after in chunk:
        img = after if after is not None else before
        last[(img["id"], img["tag"])] = after
    puts = [img for img in last.values() if img is not None]
    gone = [k for k, img in last.items() if img is None]
    upserts = pa.Table.from_pylist(
        [
            {**img, "amount": None if img["amount"] is None else Decimal(img["amount"])}
            for img in puts
        ],
        schema=SCHEMA,
    )
    removes = pa.table(
        {"id": pa.array([k[0] for k in gone], pa.int32()), "tag": pa.array([k[1] for k in gone])}
    )
    return NetTable(
        "src", "vals", "src", "vals", only(TDEF, names), names, KEY, upserts, removes,
        Position(0, 1, 4 + first, 0),
    )  # fmt: skip


def run_both(
    net: SqlSink, general: SqlSink, changes: list[Any], size: int, names: tuple[str, ...]
) -> None:
    net.setup()
    general.setup()
    for batch, start in enumerate(range(0, len(changes), size)):
        chunk = changes[start : start + size]
        first, last = start + 1, start + len(chunk)
        want = general.apply_changes(change_rows(chunk, first), batch)
        got = net.apply_net(
            [net_table(chunk, first, names)], source="src", first_seq=first, last_seq=last,
            batch_id=batch, shard=0,
        )  # fmt: skip
        assert got.checkpoints == want.checkpoints == {"src": last}
        assert got.skipped == 0 and got.upserts + got.deletes > 0


def count_general(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The ``delete`` flag of each write that went through the general path."""
    calls: list[bool] = []
    general = netwrite._Writer._general

    def counted(self: Any, plan: Any, rows: Any, columns: Any, delete: bool) -> int:
        calls.append(delete)
        return general(self, plan, rows, columns, delete)

    monkeypatch.setattr(netwrite._Writer, "_general", counted)
    return calls


def sink_pair(server: MariadbSandbox, dbs: tuple[str, ...]) -> tuple[MysqlSink, MysqlSink]:
    """Two set-up sinks of FAST_MYSQL's columns: the net path's into ``dbs[0]`` and the
    general path's into ``dbs[1]`` (checkpoints in ``dbs[2]``)."""
    net, general = mysql_sink(server, dbs[0], FAST_MYSQL), mysql_sink(server, dbs[1], FAST_MYSQL)
    net.setup()
    general.setup()
    return net, general


def fresh_pair(server: MariadbSandbox, dbs: tuple[str, ...]) -> tuple[MysqlSink, MysqlSink]:
    """:func:`sink_pair` after every database of ``dbs`` is dropped."""
    server.execute(*(f"DROP DATABASE IF EXISTS {d}" for d in dbs))
    return sink_pair(server, dbs)


def mysql_sink(server: MariadbSandbox, db: str, names: tuple[str, ...] = ALL) -> MysqlSink:
    return MysqlSink(
        MysqlSinkConfig(
            pipeline=db,
            connection=TargetConnection(host=server.host, port=server.port, user="root"),
            schema=StaticSchema((only(TDEF, names),)),
            database_map=(("src", db),),
            checkpoint_database="hw_net_ckpt",
            create_tables=True,
            zero_dates="keep",
            batch_rows=50,
            retry=RetryPolicy(attempts=2, base_delay_s=0.01),
        )
    )


def pg_sink(pg: dict[str, Any], schema: str, names: tuple[str, ...]) -> PostgresSink:
    return PostgresSink(
        PostgresSinkConfig(
            pipeline=schema,
            connection=TargetConnection(
                host=pg["host"], port=int(pg["port"]), user=pg["user"], database=pg["dbname"]
            ),
            schema=StaticSchema((only(TDEF, names),)),
            database_map=(("src", schema),),
            create_tables=True,
            batch_rows=50,
            retry=RetryPolicy(attempts=2, base_delay_s=0.01),
        )
    )


MYSQL_CKPT = (
    "SELECT batch_id, max_sequence, applies FROM hw_net_ckpt.headwater_checkpoint"
    " WHERE pipeline = '{}'"
)


@pytest.mark.parametrize("names", [FAST_MYSQL, ALL], ids=["bulk-text", "general"])
def test_net_and_general_paths_leave_identical_tables_in_mariadb(
    mariadb_target: MariadbSandbox, names: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = mariadb_target
    server.execute(*(f"DROP DATABASE IF EXISTS {d}" for d in ("hw_net", "hw_gen", "hw_net_ckpt")))
    net, general = mysql_sink(server, "hw_net", names), mysql_sink(server, "hw_gen", names)
    changes = history(7, 1500, nul=True, names=names)
    general_writes = count_general(monkeypatch)
    run_both(net, general, changes, 400, names)
    # Which path wrote the upserts: the bulk text's, or (a DATE column) the general one.
    assert general_writes == ([] if names == FAST_MYSQL else [False] * 4)
    query = "SELECT * FROM {}.vals ORDER BY id, tag"
    got, want = server.query(query.format("hw_net")), server.query(query.format("hw_gen"))
    assert len(got) > 100
    assert got == want
    # Every kind of value went through (and NUL, quotes, backslashes in keys and text).
    names = {r[8] for r in got}
    assert {"", "nul\x00byte", "back\\slash", "quo'te\"s", "\x1a", None} <= names
    assert {2**64 - 1} <= {r[2] for r in got} and {-(2**63)} <= {r[3] for r in got}
    assert {b"\x00\xff", b""} <= {r[10] for r in got}
    if "day" in names:
        assert {dt.date(2024, 2, 29), None} <= {r[11] for r in got}
    assert Decimal("12345678901234567890.1234567890") in {r[7] for r in got}
    assert {r[1] for r in got} >= {"b\tc", "d\\e", "f'g"}
    assert server.query(MYSQL_CKPT.format("hw_net")) == server.query(MYSQL_CKPT.format("hw_gen"))

    # A replay of the last call, and a call behind the checkpoint, change nothing.
    last = len(changes)
    chunk = changes[1200:]
    again = net.apply_net(
        [net_table(chunk, 1201, names)], source="src", first_seq=1201, last_seq=last, batch_id=3,
        shard=0,
    )  # fmt: skip
    assert (again.upserts, again.deletes, again.checkpoints) == (0, 0, {"src": last})
    assert again.skipped > 0
    behind = net.apply_net(
        [net_table(changes[:400], 1, names)], source="src", first_seq=1, last_seq=400, batch_id=9,
        shard=0,
    )  # fmt: skip
    assert (behind.upserts, behind.deletes) == (0, 0)
    # A range around the checkpoint (applied in part before): nothing written, raised.
    with pytest.raises(PartlyApplied, match=f"checkpoint \\({last}\\) is inside"):
        net.apply_net(
            [net_table(changes[:400], last - 10, names)], source="src", first_seq=last - 10,
            last_seq=last + 390, batch_id=10, shard=0,
        )  # fmt: skip
    assert server.query(query.format("hw_net")) == got
    assert server.query(MYSQL_CKPT.format("hw_net")) == [(3, last, 4)]


@pytest.mark.parametrize("names", [FAST_PG, ALL], ids=["bulk-text", "general"])
def test_net_and_general_paths_leave_identical_tables_in_postgresql(
    postgres: dict[str, Any], names: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    net, general = pg_sink(postgres, "net", names), pg_sink(postgres, "gen", names)
    changes = history(8, 1500, nul=False, names=names)
    general_writes = count_general(monkeypatch)
    run_both(net, general, changes, 400, names)
    assert general_writes == ([] if names == FAST_PG else [False] * 4)
    with psycopg.connect(**postgres) as conn:

        def rows(schema: str) -> list[tuple[Any, ...]]:
            return conn.execute(f"SELECT * FROM {schema}.vals ORDER BY id, tag").fetchall()

        def ckpt(schema: str) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT batch_id, max_sequence, applies FROM headwater.headwater_checkpoint"
                " WHERE pipeline = %s",
                (schema,),
            ).fetchall()

        got = rows("net")
        assert len(got) > 100
        assert got == rows("gen")
        assert {"", "back\\slash", "quo'te\"s", "\r", "tab\there", None} <= {r[8] for r in got}
        assert {Decimal(2**64 - 1)} <= {r[2] for r in got}
        assert ckpt("net") == ckpt("gen") == [(3, len(changes), 4)]
        again = net.apply_net(
            [net_table(changes[1200:], 1201, names)], source="src", first_seq=1201,
            last_seq=len(changes), batch_id=3, shard=0,
        )  # fmt: skip
        assert (again.upserts, again.deletes) == (0, 0) and again.skipped > 0
        assert rows("net") == got and ckpt("net") == [(3, len(changes), 4)]


def test_a_value_the_target_refuses_is_named_by_table_and_key(
    mariadb_target: MariadbSandbox,
) -> None:
    server = mariadb_target
    server.execute("DROP DATABASE IF EXISTS hw_net_bad", "DROP DATABASE IF EXISTS hw_net_ckpt")
    sink = mysql_sink(server, "hw_net_bad", FAST_MYSQL)
    sink.setup()
    rnd = random.Random(3)
    chunk: list[Any] = [
        ("insert", None, image(rnd, (i, "a"), False, FAST_MYSQL)) for i in range(300)
    ]
    chunk[170] = ("insert", None, {**chunk[170][2], "name": "x" * 41})
    with pytest.raises(SinkError) as info:
        sink.apply_net(
            [net_table(chunk, 1, FAST_MYSQL)],
            source="src",
            first_seq=1,
            last_seq=300,
            batch_id=1,
            shard=0,
        )
    err = info.value
    assert (err.table, err.key, err.resume_sequence) == ("src.vals", {"id": 170, "tag": "a"}, 1)
    assert "Data too long" in str(err)
    assert server.query("SELECT COUNT(*) FROM hw_net_bad.vals") == [(0,)]


def test_ddl_ignore_writes_only_the_columns_the_target_has(
    mariadb_target: MariadbSandbox,
) -> None:
    server = mariadb_target
    dbs = ("hw_net_ign", "hw_gen_ign", "hw_net_ckpt")
    server.execute(*(f"DROP DATABASE IF EXISTS {d}" for d in dbs))
    for db in dbs[:2]:  # the target's table lacks ``body`` and ``neg``
        server.execute(
            f"CREATE DATABASE {db}",
            f"CREATE TABLE {db}.vals (id INT NOT NULL, tag VARCHAR(8) NOT NULL,"
            " big BIGINT UNSIGNED, small TINYINT, dbl DOUBLE, flt FLOAT,"
            " amount DECIMAL(30,10), name VARCHAR(40), raw VARBINARY(16),"
            " PRIMARY KEY (id, tag))",
        )

    def sink(db: str) -> MysqlSink:
        base = mysql_sink(server, db, FAST_MYSQL)
        return MysqlSink(dataclasses.replace(base.config, ddl=DdlMode.IGNORE, create_tables=False))

    changes = history(9, 600, nul=False, names=FAST_MYSQL)
    run_both(sink("hw_net_ign"), sink("hw_gen_ign"), changes, 300, FAST_MYSQL)
    query = "SELECT * FROM {}.vals ORDER BY id, tag"
    got = server.query(query.format("hw_net_ign"))
    assert len(got) > 50 and len(got[0]) == 9
    assert got == server.query(query.format("hw_gen_ign"))


# -- MariaDB: LOAD DATA LOCAL straight into the table (keys the target cannot hold yet) ----


def count_direct(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, int]]:
    """``(loaded, warnings)`` of each ``LOAD DATA`` the net path ran (False: rolled back)."""
    calls: list[tuple[bool, int]] = []
    load = netwrite._load_local

    def counted(*args: Any) -> tuple[int, int]:
        try:
            loaded, warnings = load(*args)
        except Exception:
            calls.append((False, -1))
            raise
        calls.append((warnings == 0, warnings))
        return loaded, warnings

    monkeypatch.setattr(netwrite, "_load_local", counted)
    return calls


def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulk text in slices of 37 rows (the next built on a thread while one is sent)."""
    texts = netwrite._texts
    monkeypatch.setattr(netwrite, "_texts", lambda rows, columns: texts(rows, columns, 37))


def inserts(seed: int, first_id: int, count: int, names: tuple[str, ...]) -> list[Any]:
    """``count`` inserts of new keys from ``first_id``, every value of :func:`choices` (NUL
    included) at least once."""
    rnd = random.Random(seed)
    out: list[Any] = []
    for i in range(count):
        key = (first_id + i, rnd.choice(["a", "b\tc", "d\\e", "f'g"]))
        img = image(rnd, key, True, names)
        if i < 40:  # every value in turn, and NULL
            for c, vs in choices(True).items():
                if c in names:
                    img[c] = None if i % 13 == 12 else vs[i % len(vs)]
        out.append(("insert", None, img))
    return out


#: The columns of ``vals`` with :data:`FAST_MYSQL`, as ``create_tables`` makes them.
VALS_COLUMNS = (
    "id INT NOT NULL, tag VARCHAR(8) NOT NULL, big BIGINT UNSIGNED, neg BIGINT, small TINYINT,"
    " dbl DOUBLE, flt FLOAT, amount DECIMAL(30,10), name VARCHAR(40), body TEXT,"
    " raw VARBINARY(16)"
)


def test_load_data_path_leaves_the_statement_paths_values_in_mariadb(
    mariadb_target: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = mariadb_target
    server.execute(*(f"DROP DATABASE IF EXISTS {d}" for d in ("hw_ld", "hw_ld_gen", "hw_net_ckpt")))
    net, general = (
        mysql_sink(server, "hw_ld", FAST_MYSQL),
        mysql_sink(server, "hw_ld_gen", FAST_MYSQL),
    )
    # Batches 1-2: new keys above the table's (LOAD DATA); batch 3 rewrites old keys and
    # deletes some (every column written: LOAD DATA ... REPLACE).
    changes = inserts(1, 0, 300, FAST_MYSQL) + inserts(2, 300, 300, FAST_MYSQL)
    rnd = random.Random(4)
    for i in rnd.sample(range(600), 120):
        before = changes[i][2]
        if i % 3:
            changes.append(
                ("update", before, image(rnd, (before["id"], before["tag"]), True, FAST_MYSQL))
            )
        else:
            changes.append(("delete", before, None))
    loads = count_direct(monkeypatch)
    general_writes = count_general(monkeypatch)
    small_slices(monkeypatch)
    run_both(net, general, changes, 300, FAST_MYSQL)
    assert loads == [(True, 0), (True, 0), (True, 0)] and general_writes == []
    query = "SELECT * FROM {}.vals ORDER BY id, tag"
    got, want = server.query(query.format("hw_ld")), server.query(query.format("hw_ld_gen"))
    assert len(got) == 600 - sum(op == "delete" for op, _, _ in changes) and got == want
    by_name = {r[8] for r in got}
    assert {"", "nul\x00byte", "back\\slash", "\\N", "NULL", "tab\there", "\r", None} <= by_name
    assert {"ünï €", "𝄞 emoji", "quo'te\"s", "a\\'b", "\x1a", "new\nline"} <= by_name
    assert {2**64 - 1, 0, None} <= {r[2] for r in got}
    assert {-(2**63), 2**63 - 1} <= {r[3] for r in got}
    assert {b"", b"\x00\xff", b"\t\n\\'\"", bytes(range(16)), None} <= {r[10] for r in got}
    assert {Decimal("12345678901234567890.1234567890"), Decimal("0E-10")} <= {r[7] for r in got}
    assert {1e300, -2.5e-308, 0.1, 3.141592653589793} <= {r[5] for r in got}
    assert {r[1] for r in got} >= {"b\tc", "d\\e", "f'g"}
    assert server.query(MYSQL_CKPT.format("hw_ld")) == server.query(MYSQL_CKPT.format("hw_ld_gen"))


def test_load_data_without_a_bytes_column_reads_utf8mb4_in_mariadb(
    mariadb_target: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table without a column of bytes: the text is loaded ``CHARACTER SET utf8mb4``
    straight into the columns (no variable, no CONVERT), with the general path's values:
    NUL, backslashes, tabs, ``\\N``, quotes, 4-byte characters."""
    server = mariadb_target
    names = tuple(n for n in FAST_MYSQL if n != "raw")
    dbs = ("hw_ldu8", "hw_ldu8_gen", "hw_net_ckpt")
    server.execute(*(f"DROP DATABASE IF EXISTS {d}" for d in dbs))
    net, general = mysql_sink(server, dbs[0], names), mysql_sink(server, dbs[1], names)
    statements: list[bytes] = []
    load = netwrite._load_local

    def seen(conn: Any, statement: bytes, *rest: Any) -> tuple[int, int]:
        statements.append(statement)
        return load(conn, statement, *rest)

    monkeypatch.setattr(netwrite, "_load_local", seen)
    general_writes = count_general(monkeypatch)
    changes = inserts(1, 0, 300, names)
    rnd = random.Random(6)
    for i in rnd.sample(range(300), 60):
        before = changes[i][2]
        changes.append(("update", before, image(rnd, (before["id"], before["tag"]), True, names)))
    run_both(net, general, changes, 300, names)
    assert len(statements) == 2 and general_writes == []
    assert all(b" CHARACTER SET utf8mb4 " in s and b"CONVERT" not in s for s in statements)
    query = "SELECT * FROM {}.vals ORDER BY id, tag"
    got = server.query(query.format(dbs[0]))
    assert len(got) == 300 and got == server.query(query.format(dbs[1]))
    by_name = {r[8] for r in got}
    assert {"", "nul\x00byte", "back\\slash", "\\N", "NULL", "tab\there", None} <= by_name
    assert {"ünï €", "𝄞 emoji", "quo'te\"s", "a\\'b", "\x1a", "new\nline"} <= by_name
    assert {r[1] for r in got} >= {"b\tc", "d\\e", "f'g"}


def test_load_data_that_warns_goes_back_and_runs_the_statements(
    mariadb_target: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside strict mode a value the column clips: LOAD DATA clips it with a warning;
    the net path rolls the load back and the upsert statements give the general path's
    result. A table with a UNIQUE secondary key (a value may move between keys within a
    batch) is never loaded: the statements take it whole, with the general path's
    result."""
    server = mariadb_target
    dbs = ("hw_ldw", "hw_ldw_gen", "hw_ldu", "hw_ldu_gen", "hw_net_ckpt")
    server.execute(*(f"DROP DATABASE IF EXISTS {d}" for d in dbs))
    for db in dbs[:4]:
        unique = ", UNIQUE KEY (name)" if db.startswith("hw_ldu") else ""
        server.execute(
            f"CREATE DATABASE {db}",
            f"CREATE TABLE {db}.vals (id INT NOT NULL, tag VARCHAR(8) NOT NULL,"
            " big BIGINT UNSIGNED, neg BIGINT, small TINYINT, dbl DOUBLE, flt FLOAT,"
            " amount DECIMAL(30,10), name VARCHAR(40), body TEXT, raw VARBINARY(16),"
            f" PRIMARY KEY (id, tag){unique})",
            f"INSERT INTO {db}.vals (id, tag, name) VALUES (5000, 'a', 'taken')",
        )

    def sink(db: str, sql_mode: str | None = None) -> MysqlSink:
        base = mysql_sink(server, db, FAST_MYSQL)
        session = () if sql_mode is None else (("sql_mode", sql_mode),)
        conn = dataclasses.replace(base.config.connection, session=session)
        return MysqlSink(dataclasses.replace(base.config, connection=conn, create_tables=False))

    def batch(first_id: int, special: dict[str, Any]) -> list[Any]:
        rnd = random.Random(first_id)
        out = [
            ("insert", None, {**image(rnd, (first_id + i, "a"), False, FAST_MYSQL), "name": None})
            for i in range(50)
        ]
        out[20] = ("insert", None, {**out[20][2], **special})
        return out

    loads = count_direct(monkeypatch)
    # The unique key: no load; the upsert updates the row holding 'taken', as the general
    # path does.
    changes = batch(0, {"name": "taken"})
    run_both(sink("hw_ldu"), sink("hw_ldu_gen"), changes, 50, FAST_MYSQL)
    assert loads == []
    query = "SELECT * FROM {}.vals ORDER BY id, tag"
    got = server.query(query.format("hw_ldu"))
    assert got == server.query(query.format("hw_ldu_gen"))
    assert len(got) == 50 and [r[0] for r in got if r[8] == "taken"] == [5000]
    # A value the column clips, outside strict mode: the statements clip it as well.
    server.execute("DROP DATABASE hw_net_ckpt")
    changes = batch(100, {"name": "y" * 41, "small": 127})
    run_both(sink("hw_ldw", ""), sink("hw_ldw_gen", ""), changes, 50, FAST_MYSQL)
    assert loads == [(False, 1)]
    got = server.query(query.format("hw_ldw"))
    assert got == server.query(query.format("hw_ldw_gen")) and len(got) == 51
    assert [r[8] for r in got if r[0] == 120] == ["y" * 40]


def test_load_data_of_the_keys_the_target_does_not_hold_in_mariadb(
    mariadb_target: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catch-up's second batch: the first (a few rows) put keys inside its key range.
    The held keys' rows run as statements, the others are loaded; removes of keys the
    target never held send no statement. Then a batch of updates only: the probe gives up
    after its first slice and the statements take it. Then removes in a range the target
    fills, probed key by key."""
    server = mariadb_target
    dbs = ("hw_lds", "hw_lds_gen", "hw_net_ckpt")
    server.execute(*(f"DROP DATABASE IF EXISTS {d}" for d in dbs))
    # A column the net effect does not write: no REPLACE (it would reset ``extra``).
    for db in dbs[:2]:
        server.execute(f"CREATE DATABASE {db}", f"CREATE TABLE {db}.vals ({VALS_COLUMNS},"
                       " extra INT NULL DEFAULT 7, PRIMARY KEY (id, tag))")  # fmt: skip
    net, general = sink_pair(server, dbs)
    rnd = random.Random(7)
    held = {i: image(rnd, (i, "a"), True, FAST_MYSQL) for i in range(0, 3000, 50)}
    first = [("insert", None, img) for img in held.values()]
    second: list[Any] = inserts(8, 1, 49, FAST_MYSQL)  # every value, NUL included
    second += [
        ("insert", None, image(rnd, (i, "b\tc"), True, FAST_MYSQL))
        for i in range(50, 3000) if i % 50
    ]  # fmt: skip
    for i, before in list(held.items())[:30]:
        if i % 100:
            second.append(("delete", before, None))
        else:
            second.append(("update", before, image(rnd, (i, "a"), True, FAST_MYSQL)))
    # keys inserted and deleted within the batch: removes the target never held
    second += [("insert", None, image(rnd, (i, "z"), False, FAST_MYSQL)) for i in range(20)]
    second += [("delete", image(rnd, (i, "z"), False, FAST_MYSQL), None) for i in range(20)]
    updates = [
        ("update", img, image(rnd, (i, "a"), True, FAST_MYSQL))
        for i, img in list(held.items())[30:]
    ]
    # removes in a range the target fills: asked key by key; two it never held
    removes = [
        ("delete", r[2], None) for r in second if r[0] == "insert" and r[2]["id"] in (51, 777, 2999)
    ]
    removes += [("delete", image(rnd, (i, "q"), False, FAST_MYSQL), None) for i in (5000, 6000)]
    loads = count_direct(monkeypatch)
    statements: list[tuple[bool, int]] = []
    run = netwrite._Writer._mysql_statements

    def counted(self: Any, plan: Any, rows: Any, columns: Any, delete: bool) -> None:
        statements.append((delete, rows.num_rows))
        run(self, plan, rows, columns, delete)

    monkeypatch.setattr(netwrite._Writer, "_mysql_statements", counted)
    monkeypatch.setattr(netwrite, "_PROBE_KEYS", 500)  # several probe statements
    seq = 1
    for batch, chunk in enumerate((first, second, updates, removes)):
        last = seq + len(chunk) - 1
        want = general.apply_changes(change_rows(chunk, seq), batch)
        statements.clear()
        got = net.apply_net(
            [net_table(chunk, seq, FAST_MYSQL)], source="src", first_seq=seq, last_seq=last,
            batch_id=batch, shard=0,
        )  # fmt: skip
        assert got.checkpoints == want.checkpoints == {"src": last}
        seq = last + 1
        if batch == 1:
            # 15 held keys deleted and (0, 'z'), whose first key value the target holds
            # (the only removes sent), 15 held keys updated by statements, the new rows
            # loaded
            assert statements == [(True, 16), (False, 15)]
            assert got.deletes == 35 and got.upserts == 49 + 2891 + 15
        if batch == 2:
            assert statements == [(False, 30)]
    assert statements == [(True, 3)]
    assert loads == [(True, 0), (True, 0)]
    query = "SELECT * FROM {}.vals ORDER BY id, tag"
    rows = server.query(query.format(dbs[0]))
    assert len(rows) == 60 - 15 + 49 + 2891 - 3 and rows == server.query(query.format(dbs[1]))
    assert server.query(MYSQL_CKPT.format(dbs[0])) == server.query(MYSQL_CKPT.format(dbs[1]))


def test_updates_of_held_keys_go_by_load_data_replace_in_mariadb(
    mariadb_target: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that rewrites keys the target holds (and adds new ones) on a table whose
    stored columns are all written: one ``LOAD DATA ... REPLACE``, no statement, the
    general path's result; a generated column is recomputed as the statements leave it.
    The same batch on a table that a child table's foreign key names (``ON DELETE
    CASCADE``: a REPLACE that deleted would take the children) goes to the statements,
    and the children stay."""
    server = mariadb_target
    dbs = ("hw_rep", "hw_rep_gen", "hw_repfk", "hw_repfk_gen", "hw_net_ckpt")
    server.execute(*(f"DROP DATABASE IF EXISTS {d}" for d in dbs))
    for db in dbs[:4]:
        server.execute(
            f"CREATE DATABASE {db}",
            f"CREATE TABLE {db}.vals ({VALS_COLUMNS}, twice INT AS (2 * small) VIRTUAL,"
            " PRIMARY KEY (id, tag))",
        )
        if "fk" in db:
            server.execute(
                f"CREATE TABLE {db}.child (n INT PRIMARY KEY, id INT NOT NULL,"
                " tag VARCHAR(8) NOT NULL, FOREIGN KEY (id, tag) REFERENCES"
                f" {db}.vals (id, tag) ON DELETE CASCADE)"
            )
    rnd = random.Random(11)
    first = inserts(12, 0, 400, FAST_MYSQL)
    second = [
        ("update", img, image(rnd, (img["id"], img["tag"]), True, FAST_MYSQL))
        for _op, _b, img in first[::2]
    ] + inserts(13, 400, 1200, FAST_MYSQL)
    loads = count_direct(monkeypatch)
    statements: list[tuple[bool, int]] = []
    run = netwrite._Writer._mysql_statements

    def counted(self: Any, plan: Any, rows: Any, columns: Any, delete: bool) -> None:
        statements.append((delete, rows.num_rows))
        run(self, plan, rows, columns, delete)

    monkeypatch.setattr(netwrite._Writer, "_mysql_statements", counted)
    query = "SELECT * FROM {}.vals ORDER BY id, tag"
    for db, gen in ((dbs[0], dbs[1]), (dbs[2], dbs[3])):
        net, general = mysql_sink(server, db, FAST_MYSQL), mysql_sink(server, gen, FAST_MYSQL)
        net.setup()
        general.setup()
        for batch, (seq, chunk) in enumerate(((1, first), (401, second))):
            want = general.apply_changes(change_rows(chunk, seq), batch)
            got = net.apply_net(
                [net_table(chunk, seq, FAST_MYSQL)], source="src", first_seq=seq,
                last_seq=seq + len(chunk) - 1, batch_id=batch, shard=0,
            )  # fmt: skip
            assert got.checkpoints == want.checkpoints
            assert (got.upserts, got.deletes) == (len(chunk), 0)
            if batch == 0 and "fk" in db:
                server.execute(
                    f"INSERT INTO {db}.child SELECT id, id, tag FROM {db}.vals WHERE id < 10"
                )
        rows = server.query(query.format(db))
        assert len(rows) == 1600 and rows == server.query(query.format(gen))
        assert all(r[11] == (None if r[4] is None else 2 * r[4]) for r in rows)
        server.execute("DROP DATABASE hw_net_ckpt")
    # hw_rep: two loads (the second a REPLACE of 200 held keys and 1200 new), no statement.
    # hw_repfk: the first load, then the probe: 200 held keys by statements, 1200 loaded.
    assert loads == [(True, 0), (True, 0), (True, 0), (True, 0)]
    assert statements == [(False, 200)]
    assert server.query("SELECT COUNT(*) FROM hw_repfk.child") == [(10,)]


def streamed(table: NetTable, per: int, log: list[Any], fail_after: int | None = None) -> NetTable:
    """``table`` with its upserts as :class:`StreamedRows` of ``per`` rows a part; each
    part decoded appends ``(the thread's name, whether a LOAD DATA runs)`` to ``log``
    (see :func:`loading`); with ``fail_after``, the part after that many raises."""
    rows = table.upserts
    assert isinstance(rows, pa.Table)

    def parts() -> Any:
        for n, start in enumerate(range(0, rows.num_rows, per)):
            if n == fail_after:
                raise RuntimeError("a value the net path refuses")
            log.append((threading.current_thread().name, LOADING[0]))
            yield rows.slice(start, per)

    return dataclasses.replace(table, upserts=StreamedRows(rows.num_rows, rows.schema, parts()))


#: Whether a ``LOAD DATA`` runs (:func:`loading`).
LOADING = [False]


def loading(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, int]]:
    """:func:`count_direct`, and :data:`LOADING` set while each load runs."""
    calls = count_direct(monkeypatch)
    load = netwrite._load_local

    def flagged(*args: Any) -> tuple[int, int]:
        LOADING[0] = True
        try:
            return load(*args)
        finally:
            LOADING[0] = False

    monkeypatch.setattr(netwrite, "_load_local", flagged)
    return calls


def test_streamed_upserts_are_decoded_while_load_data_runs_in_mariadb(
    mariadb_target: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upserts handed over as :class:`StreamedRows` (the net path's survivors, decoded
    part by part) on a table that takes ``LOAD DATA ... REPLACE``: one load a batch, every
    part decoded on the text thread while it runs, and the general path's result; new
    keys, rewritten keys and removes alike."""
    server = mariadb_target
    dbs = ("hw_str", "hw_str_gen", "hw_net_ckpt")
    net, general = fresh_pair(server, dbs)
    changes = inserts(1, 0, 300, FAST_MYSQL)
    rnd = random.Random(5)
    for i in rnd.sample(range(300), 90):
        before = changes[i][2]
        if i % 3:
            after = image(rnd, (before["id"], before["tag"]), True, FAST_MYSQL)
            changes.append(("update", before, after))
        else:
            changes.append(("delete", before, None))
    changes += inserts(2, 300, 200, FAST_MYSQL)
    loads = loading(monkeypatch)
    decoded: list[Any] = []
    for batch, (start, stop) in enumerate(((0, 300), (300, len(changes)))):
        chunk, first, last = changes[start:stop], start + 1, stop
        want = general.apply_changes(change_rows(chunk, first), batch)
        table = streamed(net_table(chunk, first, FAST_MYSQL), 37, decoded)
        got = net.apply_net(
            [table], source="src", first_seq=first, last_seq=last, batch_id=batch, shard=0
        )
        assert got.checkpoints == want.checkpoints == {"src": last}
        assert got.upserts == table.upserts.num_rows > 100
    assert loads == [(True, 0), (True, 0)]
    assert len(decoded) == 9 + 8  # 300 rows, then 200 new and 60 rewritten, 37 a part
    assert {name for name, _ in decoded} != {threading.current_thread().name}
    assert all(name.startswith("hw-net-text") and during for name, during in decoded)
    query = "SELECT * FROM {}.vals ORDER BY id, tag"
    got_rows = server.query(query.format(dbs[0]))
    assert len(got_rows) == 500 - 30 and got_rows == server.query(query.format(dbs[1]))
    assert server.query(MYSQL_CKPT.format(dbs[0])) == server.query(MYSQL_CKPT.format(dbs[1]))


def test_a_streamed_upserts_error_rolls_the_shard_back_in_mariadb(
    mariadb_target: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error of the decoding after some parts were loaded (the net path's refusal of
    a value): raised, and the shard's transaction rolled back whole: the target table
    and the checkpoint as before the call. The same batch handed over again applies."""
    server = mariadb_target
    dbs = ("hw_strf", "hw_strf_gen", "hw_net_ckpt")
    net, general = fresh_pair(server, dbs)
    first_batch = inserts(1, 0, 100, FAST_MYSQL)
    second = inserts(2, 100, 300, FAST_MYSQL)
    second += [("delete", img, None) for _op, _b, img in first_batch[:10]]
    loads = loading(monkeypatch)
    decoded: list[Any] = []
    for chunk, first in ((first_batch, 1), (second, 101)):
        general.apply_changes(change_rows(chunk, first), first)
    net.apply_net(
        [streamed(net_table(first_batch, 1, FAST_MYSQL), 37, decoded)], source="src",
        first_seq=1, last_seq=100, batch_id=1, shard=0,
    )  # fmt: skip
    query = "SELECT * FROM {}.vals ORDER BY id, tag"
    before, ckpt = server.query(query.format(dbs[0])), server.query(MYSQL_CKPT.format(dbs[0]))
    assert len(before) == 100
    failing = streamed(net_table(second, 101, FAST_MYSQL), 37, decoded, fail_after=3)
    with pytest.raises(RuntimeError, match="refuses"):
        net.apply_net([failing], source="src", first_seq=101, last_seq=410, batch_id=2, shard=0)
    assert loads[-1] == (False, -1) and len(decoded) == 3 + 3
    assert server.query(query.format(dbs[0])) == before
    assert server.query(MYSQL_CKPT.format(dbs[0])) == ckpt
    # asked again, the same object raises again (nothing decoded twice, nothing applied)
    with pytest.raises(RuntimeError, match="refuses"):
        net.apply_net([failing], source="src", first_seq=101, last_seq=410, batch_id=2, shard=0)
    assert server.query(query.format(dbs[0])) == before
    got = net.apply_net(
        [streamed(net_table(second, 101, FAST_MYSQL), 37, decoded)], source="src",
        first_seq=101, last_seq=410, batch_id=2, shard=0,
    )  # fmt: skip
    assert (got.upserts, got.deletes, got.checkpoints) == (300, 10, {"src": 410})
    rows = server.query(query.format(dbs[0]))
    assert len(rows) == 390 and rows == server.query(query.format(dbs[1]))


def test_the_probe_reads_back_only_the_values_of_a_slice_held_in_part(
    mariadb_target: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_mysql_present`` past its range read (the range holds at least as many rows as
    there are values), in slices of 4 values: each slice counted; a slice held whole or
    not at all sends no value back, one held in part has its held values read. The mask
    names exactly the values held (a composite key: several rows per first-key value)."""
    server = mariadb_target
    db = "hw_probe"
    server.execute(
        f"DROP DATABASE IF EXISTS {db}",
        f"CREATE DATABASE {db}",
        f"CREATE TABLE {db}.vals ({VALS_COLUMNS}, PRIMARY KEY (id, tag))",
    )
    server.execute(  # ids 0-29 held, twice each (two tags), but 9, 10 and 20-23
        "INSERT INTO vals (id, tag) SELECT seq, t FROM seq_0_to_29,"
        " (SELECT 'a' AS t UNION SELECT 'b') AS tags WHERE seq NOT IN (9, 10, 20, 21, 22, 23)",
        database=db,
    )
    monkeypatch.setattr(netwrite, "_PROBE_KEYS", 4)
    sink = mysql_sink(server, db, FAST_MYSQL)
    values = pa.array([0, 1, 2, 3, 8, 9, 10, 11, 20, 21, 22, 23, 3, 9], pa.int32())
    conn = sink.connect()
    try:
        with conn.cursor() as cur:
            sent: list[str] = []
            execute = cur.execute

            def seen(sql: str, *args: Any) -> Any:
                sent.append(sql)
                return execute(sql, *args)

            cur.execute = seen  # type: ignore[method-assign]
            writer = netwrite._Writer(sink, cur, "src", 1, 1, 0)
            removes = pa.table({"id": values, "tag": pa.array(["a"] * len(values))})
            empty = SCHEMA.empty_table().select(list(FAST_MYSQL))
            table = NetTable(
                "src", "vals", "src", "vals", only(TDEF, FAST_MYSQL), FAST_MYSQL, KEY, empty,
                removes, Position(0, 1, 4, 0),
            )  # fmt: skip
            mask = writer._mysql_present(writer.plan(table), values)
    finally:
        conn.close()
    assert mask is not None
    assert mask.to_pylist() == [True] * 5 + [False, False, True] + [False] * 4 + [True, False]
    counts = [q for q in sent if "COUNT(DISTINCT" in q]
    reads = [q for q in sent if q.startswith("SELECT DISTINCT")]
    assert len(counts) == 3  # 12 distinct values: three slices of 4
    assert len(reads) == 1 and "IN (8,9,10,11)" in reads[0]


def test_load_data_replace_counts_a_replaced_row_once(mariadb_target: MariadbSandbox) -> None:
    """``LOAD DATA ... REPLACE``: the OK packet's affected rows count a replaced row twice
    (deleted and inserted); :func:`netwrite._load_local` returns the rows written, from
    its ``Records`` and ``Skipped``."""
    server = mariadb_target
    server.execute("DROP DATABASE IF EXISTS hw_ldc", "CREATE DATABASE hw_ldc",
                   "CREATE TABLE hw_ldc.f (k INT PRIMARY KEY, v INT)",
                   "INSERT INTO hw_ldc.f VALUES (1, 10), (2, 20)")  # fmt: skip
    sink = mysql_sink(server, "hw_ldc", FAST_MYSQL)
    conn = sink.dialect.connect(sink.config.connection, sink.config)
    try:
        statement = b"LOAD DATA LOCAL INFILE 'n' REPLACE INTO TABLE hw_ldc.f"
        assert netwrite._load_local(conn, statement, "n", [b"1\t11\n3\t30\n"], 1 << 16) == (2, 0)
        assert conn.affected_rows() == 3
        statement = b"LOAD DATA LOCAL INFILE 'n' INTO TABLE hw_ldc.f"
        assert netwrite._load_local(conn, statement, "n", [b"2\t21\n4\t40\n"], 1 << 16) == (1, 1)
        conn.commit()
    finally:
        conn.close()
    assert server.query("SELECT * FROM hw_ldc.f ORDER BY k") == [(1, 11), (2, 20), (3, 30), (4, 40)]


def test_load_data_refused_by_the_target_runs_the_statements(
    mariadb_target: MariadbSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = mariadb_target
    server.execute("DROP DATABASE IF EXISTS hw_ldr", "DROP DATABASE IF EXISTS hw_net_ckpt")
    sink = mysql_sink(server, "hw_ldr", FAST_MYSQL)
    sink.setup()
    loads = count_direct(monkeypatch)
    server.execute("SET GLOBAL local_infile = 0")
    try:
        for n, first_id in enumerate((0, 100)):
            chunk = inserts(n, first_id, 100, FAST_MYSQL)
            done = sink.apply_net(
                [net_table(chunk, 1 + 100 * n, FAST_MYSQL)], source="src",
                first_seq=1 + 100 * n, last_seq=100 * (n + 1), batch_id=n, shard=0,
            )  # fmt: skip
            assert done.upserts == 100
    finally:
        server.execute("SET GLOBAL local_infile = 1")
    assert loads == [(False, -1)]  # refused once (1148), then not asked again
    assert server.query("SELECT COUNT(*) FROM hw_ldr.vals") == [(200,)]


def test_the_sink_connection_sends_no_file_the_server_asks_for(
    mariadb_target: MariadbSandbox,
) -> None:
    """PyMySQL's own LOAD DATA LOCAL handler sends whatever file the server names; the
    sink's connections keep it off, and ``_load_local`` sends only its own bytes."""
    server = mariadb_target
    server.execute("DROP DATABASE IF EXISTS hw_ldf", "CREATE DATABASE hw_ldf",
                   "CREATE TABLE hw_ldf.f (line VARCHAR(200))")  # fmt: skip
    sink = mysql_sink(server, "hw_ldf", FAST_MYSQL)
    conn = sink.dialect.connect(sink.config.connection, sink.config)
    try:
        with conn.cursor() as cur, pytest.raises(RuntimeError, match="local_infile"):
            cur.execute("LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE hw_ldf.f")
    finally:
        conn.close()
    conn = sink.dialect.connect(sink.config.connection, sink.config)
    try:
        statement = b"LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE hw_ldf.f"
        with pytest.raises(SinkError, match="asked for the local file"):
            netwrite._load_local(conn, statement, "headwater-net-0", [b"mine\n"], 1 << 16)
        conn.rollback()
        # The name it was given: the bytes from memory.
        statement = b"LOAD DATA LOCAL INFILE 'headwater-net-0' INTO TABLE hw_ldf.f"
        assert netwrite._load_local(conn, statement, "headwater-net-0", [b"mine\n"], 2) == (1, 0)
        conn.commit()
    finally:
        conn.close()
    assert server.query("SELECT line FROM hw_ldf.f") == [("mine",)]


def test_removes_of_a_one_column_integer_key_in_postgresql(
    postgres: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DELETE ... = ANY(%s)`` (no temporary table) leaves the general path's table."""
    names = ("id", "tag", "name", "amount")
    tdef = dataclasses.replace(only(TDEF, names), primary_key=("id",))

    def sink(schema: str) -> PostgresSink:
        base = pg_sink(postgres, schema, names)
        return PostgresSink(dataclasses.replace(base.config, schema=StaticSchema((tdef,))))

    net, general = sink("net1"), sink("gen1")
    net.setup()
    general.setup()
    rnd = random.Random(11)
    live: dict[int, dict[str, Any]] = {}
    stages: list[Any] = []

    def put(k: int) -> None:
        before = live.get(k)
        live[k] = {"id": k, "tag": "t", "name": rnd.choice(TEXTS), "amount": "1.5000000000"}
        stages.append(("update" if before else "insert", before, live[k]))

    for k in range(300):
        put(k)
    for k in rnd.sample(range(300), 150):
        stages.append(("delete", live.pop(k), None))
    for k in rnd.sample(range(300), 100):
        put(k)
    copies = count_general(monkeypatch)
    small_slices(monkeypatch)
    staged: list[bool] = []
    copy = netwrite._Writer._pg_copy

    def counted(self: Any, plan: Any, rows: Any, columns: Any, delete: bool) -> None:
        staged.append(delete)
        copy(self, plan, rows, columns, delete)

    monkeypatch.setattr(netwrite._Writer, "_pg_copy", counted)
    for batch, start in enumerate(range(0, len(stages), 200)):
        chunk = stages[start : start + 200]
        first, last = start + 1, start + len(chunk)
        general.apply_changes(
            [row(op, first + i, "src", "vals", b, a, pk=("id",))
             for i, (op, b, a) in enumerate(chunk)], batch,
        )  # fmt: skip
        final: dict[int, dict[str, Any] | None] = {}
        for _, b, a in chunk:
            final[(a or b)["id"]] = a
        puts = [
            {**img, "amount": Decimal(img["amount"])} for img in final.values() if img is not None
        ]
        gone = [k for k, img in final.items() if img is None]
        table = NetTable(
            "src", "vals", "src", "vals", tdef, names, ("id",),
            pa.Table.from_pylist(puts, schema=pa.schema([SCHEMA.field(n) for n in names])),
            pa.table({"id": pa.array(gone, pa.int32())}), Position(0, 1, 4 + first, 0),
        )  # fmt: skip
        net.apply_net(
            [table], source="src", first_seq=first, last_seq=last, batch_id=batch, shard=0
        )
    assert copies == [] and True not in staged  # no temporary table for the removes
    with psycopg.connect(**postgres) as conn:
        got = conn.execute("SELECT * FROM net1.vals ORDER BY id").fetchall()
        assert (
            len(got) == len(live)
            and got == conn.execute("SELECT * FROM gen1.vals ORDER BY id").fetchall()
        )
