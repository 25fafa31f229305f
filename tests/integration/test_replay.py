"""Replay (``headwater.spark.table_as_of``, ``headwater.replay``) against the live
MariaDB's own tables.

A random workload (seeded) on two tables: inserts, value updates, NULL flips, primary-key
updates in chains (1->2->3 over transactions, and a multi-row ``id = id + 1000`` shift),
swaps through a temporary key in one transaction, deletes and reinserts of the same key,
an ALTER TABLE ADD COLUMN and a DROP COLUMN on the way. At several moments the test
records ``@@gtid_binlog_pos`` and copies each table (the truth at that point, read from
the server). A reader task captures the whole run; replay as of each recorded GTID set
equals the copy row by row, for every table, from empty and from a base image; the
Parquet output reads back in DuckDB; replays into MariaDB and PostgreSQL through the
sinks equal the copy. Last, a table updated with ``binlog_row_image=MINIMAL`` is refused.

Lean on purpose (CI budget): every replay of the first test runs in one Spark job (the
states are unioned as JSON lines and collected once).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headwater.config import FilterConfig
from headwater.connections import TargetConnection
from headwater.errors import ConfigError
from headwater.replay import replay_to_parquet, replay_to_sink
from headwater.sandbox import MariadbSandbox
from headwater.sinks import SchemaFile, create_sink
from headwater.spark import table_as_of
from tests.integration.test_reader_capture import Running, source_config, start_at, wait_caught_up

DB = "replay_w"
TABLES = {"a": "id", "b": "k"}


def _copy(cur: Any, table: str) -> tuple[list[str], set[tuple[Any, ...]]]:
    cur.execute(f"SELECT * FROM {table}")
    names = [d[0] for d in cur.description]
    return names, {tuple(r) for r in cur.fetchall()}


def _workload(cur: Any, rng: random.Random, steps: int, a_ids: set[int], b_keys: set[str]) -> None:
    for _ in range(steps):
        kind = rng.choice(
            ["ins", "ins", "ins", "ins", "upd", "null", "chain", "swap", "del_re", "del", "b"]
        )
        cur.execute("BEGIN")
        if kind == "ins" or not a_ids:
            i = rng.choice([x for x in range(1, 400) if x not in a_ids])
            cur.execute("INSERT INTO a (id, v, n) VALUES (%s, %s, %s)", (i, f"v{i}", i % 7))
            a_ids.add(i)
        elif kind == "upd":
            i = rng.choice(sorted(a_ids))
            cur.execute("UPDATE a SET v = %s WHERE id = %s", (f"u{rng.random():.6f}", i))
        elif kind == "null":
            i = rng.choice(sorted(a_ids))
            cur.execute("UPDATE a SET n = IF(n IS NULL, 5, NULL) WHERE id = %s", (i,))
        elif kind == "chain":  # i -> j -> k in one transaction
            i = rng.choice(sorted(a_ids))
            free = [x for x in range(400, 800) if x not in a_ids]
            j, k = rng.sample(free, 2)
            cur.execute("UPDATE a SET id = %s WHERE id = %s", (j, i))
            cur.execute("UPDATE a SET id = %s, v = 'chained' WHERE id = %s", (k, j))
            a_ids.discard(i)
            a_ids.add(k)
        elif kind == "swap" and len(a_ids) >= 2:
            i, j = rng.sample(sorted(a_ids), 2)
            cur.execute("UPDATE a SET id = 999999 WHERE id = %s", (i,))
            cur.execute("UPDATE a SET id = %s WHERE id = %s", (i, j))
            cur.execute("UPDATE a SET id = %s WHERE id = 999999", (j,))
        elif kind == "del_re":
            i = rng.choice(sorted(a_ids))
            cur.execute("DELETE FROM a WHERE id = %s", (i,))
            cur.execute("INSERT INTO a (id, v, n) VALUES (%s, 'again', NULL)", (i,))
        elif kind == "del":
            i = rng.choice(sorted(a_ids))
            cur.execute("DELETE FROM a WHERE id = %s", (i,))
            a_ids.discard(i)
        else:  # table b: string keys, renamed and deleted
            if b_keys and rng.random() < 0.5:
                k = rng.choice(sorted(b_keys))
                new = f"r{rng.randrange(10**6)}"
                cur.execute("UPDATE b SET k = %s, x = x + 1 WHERE k = %s", (new, k))
                b_keys.discard(k)
                b_keys.add(new)
            else:
                k = f"k{rng.randrange(10**6)}"
                cur.execute("INSERT IGNORE INTO b VALUES (%s, %s)", (k, rng.randrange(100)))
                b_keys.add(k)
        cur.execute("COMMIT")


@pytest.fixture(scope="module")
def recorded(
    mariadb: MariadbSandbox, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[tuple[str, dict[str, Any]]]]:
    mariadb.execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}")
    task_dir = tmp_path_factory.mktemp("replay") / "rp"
    config = source_config(
        mariadb, "rp", start=start_at(mariadb), filters=FilterConfig(include=(rf"{DB}\..*",))
    )
    run = Running(config, task_dir)
    moments: list[tuple[str, dict[str, Any]]] = []
    rng = random.Random(2121)
    try:
        conn = mariadb.connect(DB)
        a_ids: set[int] = set()
        b_keys: set[str] = set()
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), n INT NULL)")
            cur.execute("CREATE TABLE b (k VARCHAR(12) PRIMARY KEY, x INT)")
            cur.execute("CREATE TABLE m (id INT PRIMARY KEY, v INT, w INT)")

            def record() -> None:
                gtid = str(mariadb.query("SELECT @@gtid_binlog_pos")[0][0])
                moments.append((gtid, {t: _copy(cur, t) for t in TABLES}))

            _workload(cur, rng, 150, a_ids, b_keys)
            record()
            cur.execute("UPDATE a SET id = id + 1000 WHERE id < 400")  # multi-row key shift
            a_ids = {i + 1000 if i < 400 else i for i in a_ids}
            _workload(cur, rng, 150, a_ids, b_keys)
            cur.execute("ALTER TABLE a ADD COLUMN c INT NULL")
            cur.execute("UPDATE a SET c = id % 3 WHERE id % 2 = 0")
            _workload(cur, rng, 150, a_ids, b_keys)
            record()
            cur.execute("ALTER TABLE a DROP COLUMN n")
            for i in sorted(a_ids)[:10]:
                cur.execute("UPDATE a SET v = 'after drop' WHERE id = %s", (i,))
            record()
            # A table updated with MINIMAL images (after the last moment: the tables
            # above keep FULL images throughout).
            cur.execute("INSERT INTO m VALUES (1, 1, 1), (2, 2, 2)")
            cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
            cur.execute("UPDATE m SET v = 10 WHERE id = 1")
            cur.execute("SET SESSION binlog_row_image = 'FULL'")
        conn.close()
        wait_caught_up(run.task, mariadb)
    finally:
        run.stop()
    return task_dir, moments


def _rows(df: Any, names: list[str]) -> set[tuple[Any, ...]]:
    assert df.columns == names
    return {tuple(r) for r in df.collect()}


def _as_json_lines(df: Any, tag: str) -> Any:
    from pyspark.sql import functions as F

    return df.select(F.lit(tag).alias("tag"), F.to_json(F.struct(*df.columns)).alias("row"))


def test_replay_as_of_each_recorded_gtid_equals_the_copy(
    spark: Any, recorded: Any, tmp_path: Path
) -> None:
    """Every table at every moment from empty, and table a at the last moment from a base
    image taken at the first moment, in one Spark job; all equal the server's copies row
    by row. Two partitions: rows move between them through primary-key updates."""
    task_dir, moments = recorded
    assert len(moments) == 3
    base_gtid, base_copies = moments[0]
    base_names, base_rows = base_copies["a"]
    base = tmp_path / "base_a"
    base.mkdir()
    pq.write_table(
        pa.Table.from_pylist([dict(zip(base_names, r, strict=True)) for r in base_rows]),
        base / "p.parquet",
    )
    parts: list[Any] = []
    want: dict[str, tuple[list[str], set[tuple[Any, ...]]]] = {}
    for m, (gtid, copies) in enumerate(moments):
        for table, (names, rows) in copies.items():
            df = table_as_of(spark, task_dir, f"{DB}.{table}", as_of=f"gtid:{gtid}", partitions=2)
            assert df.columns == names
            parts.append(_as_json_lines(df, f"{m}:{table}"))
            want[f"{m}:{table}"] = (names, rows)
        if m == len(moments) - 1:  # across both ALTERs
            df = table_as_of(
                spark,
                task_dir,
                f"{DB}.a",
                as_of=f"gtid:{gtid}",
                base=str(base),
                base_position=f"gtid:{base_gtid}",
            )
            parts.append(_as_json_lines(df, f"{m}:a:base"))
            want[f"{m}:a:base"] = copies["a"]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    got: dict[str, set[tuple[Any, ...]]] = {tag: set() for tag in want}
    for tag, line in union.collect():
        values = json.loads(line)
        got[tag].add(tuple(values.get(c) for c in want[tag][0]))
    for tag, (_names, rows) in want.items():
        assert len(rows) > 5, tag
        assert got[tag] == rows, (tag, sorted(got[tag] ^ rows, key=repr)[:10])


def test_parquet_output_reads_in_duckdb(spark: Any, recorded: Any, tmp_path: Path) -> None:
    task_dir, moments = recorded
    gtid, copies = moments[1]
    out = tmp_path / "out"
    result = replay_to_parquet(
        spark, task_dir, [f"{DB}.a", f"{DB}.b"], out, as_of=f"gtid:{gtid}", partitions=2
    )
    manifest = json.loads((out / "_replay.json").read_text())
    assert [t["table"] for t in manifest["tables"]] == [f"{DB}.a", f"{DB}.b"]
    assert manifest["end_seq"] == result.end_seq > result.first_seq
    for table in ("a", "b"):
        # typed in the read: each Spark task wrote its part's file itself
        files = sorted(p.name for p in (out / f"{DB}.{table}").glob("*.parquet"))
        assert files == ["part-00000.parquet", "part-00001.parquet"]
        names, rows = copies[table]
        con = duckdb.connect()
        got = con.execute(
            f"SELECT {', '.join(names)} FROM read_parquet('{out}/{DB}.{table}/*.parquet')"
        ).fetchall()
        con.close()
        assert (
            len(got) == len(rows) == next(t.rows for t in result.tables if t.table.endswith(table))
        )
        assert set(got) == rows


def test_replay_into_mariadb_and_postgresql_through_the_sinks(
    spark: Any, recorded: Any, mariadb_target: MariadbSandbox, postgres: dict[str, Any]
) -> None:
    """As of the moment after ADD COLUMN (c holds values, n still there), both tables into
    a MariaDB server and a PostgreSQL database (tables created by the sinks)."""
    task_dir, moments = recorded
    gtid, copies = moments[1]
    schema = SchemaFile(str(task_dir / "schema.jsonl"))
    tables = [f"{DB}.a", f"{DB}.b"]
    my = create_sink(
        "mysql",
        pipeline="replay-test",
        connection=TargetConnection(host=mariadb_target.host, port=mariadb_target.port),
        schema=schema,
        database_map=((DB, "replayed"),),
        create_tables=True,
    )
    result = replay_to_sink(spark, task_dir, tables, my, as_of=f"gtid:{gtid}")
    assert [t.rows for t in result.tables] == [len(copies["a"][1]), len(copies["b"][1])]
    pg = create_sink(
        "postgres",
        pipeline="replay-test",
        connection=TargetConnection(
            host=postgres["host"],
            port=int(postgres["port"]),
            user=postgres["user"],
            database=postgres["dbname"],
        ),
        schema=schema,
        create_tables=True,
    )
    replay_to_sink(spark, task_dir, tables, pg, as_of=f"gtid:{gtid}", partitions=2)
    conn = mariadb_target.connect("replayed")
    with psycopg.connect(**postgres) as pconn, conn.cursor() as cur, pconn.cursor() as pcur:
        for table, (names, rows) in copies.items():
            cols = ", ".join(names)
            cur.execute(f"SELECT {cols} FROM {table}")
            assert {tuple(r) for r in cur.fetchall()} == rows
            pcur.execute(f"SELECT {cols} FROM {DB}.{table}")
            assert {tuple(r) for r in pcur.fetchall()} == rows
    conn.close()


def test_points_past_the_log_end_and_unknown_tables_are_config_errors(
    spark: Any, recorded: Any
) -> None:
    task_dir, moments = recorded
    last_gtid = moments[-1][0]
    domain, server, seq = last_gtid.split(",")[0].split("-")
    with pytest.raises(ConfigError, match=r"past the log's end"):
        table_as_of(spark, task_dir, f"{DB}.a", as_of=f"gtid:{domain}-{server}-{int(seq) + 1000}")
    with pytest.raises(ConfigError, match=r"past the log's end"):
        table_as_of(spark, task_dir, f"{DB}.a", as_of="timestamp:2100-01-01T00:00:00")
    with pytest.raises(ConfigError, match=r"past the log's end"):
        table_as_of(spark, task_dir, f"{DB}.a", as_of="seq:100000")
    with pytest.raises(ConfigError, match=r"replay_w\.nope does not exist"):
        table_as_of(spark, task_dir, f"{DB}.nope")


def test_minimal_row_images_are_refused(spark: Any, recorded: Any, tmp_path: Path) -> None:
    task_dir, _ = recorded
    with pytest.raises(ConfigError, match=r"partial row image: replay_w\.m .*MINIMAL"):
        replay_to_parquet(spark, task_dir, [f"{DB}.m"], tmp_path / "m")


TYPED_DB = "replay_types"


@pytest.fixture(scope="module")
def typed_log(mariadb: MariadbSandbox, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table of many column types with a composite (VARCHAR, INT) key: inserts, key
    moves, value updates, NULLs, deletes; then ``v`` goes from INT to VARCHAR (older
    images hold integers in a text column, which the read cannot type on the way)."""
    mariadb.execute(f"DROP DATABASE IF EXISTS {TYPED_DB}", f"CREATE DATABASE {TYPED_DB}")
    task_dir = tmp_path_factory.mktemp("replay_types") / "rt"
    config = source_config(
        mariadb, "rt", start=start_at(mariadb), filters=FilterConfig(include=(rf"{TYPED_DB}\..*",))
    )
    run = Running(config, task_dir)
    try:
        conn = mariadb.connect(TYPED_DB)
        with conn.cursor() as cur:
            cur.execute(
                "CREATE TABLE t (k VARCHAR(10), n INT, v INT, big BIGINT UNSIGNED,"
                " d DECIMAL(12,3), f FLOAT, x DOUBLE, day DATE, at DATETIME(3),"
                " ts TIMESTAMP(6) NULL, hms TIME, b VARBINARY(8), blob_ BLOB, txt TEXT,"
                " e ENUM('a','b'), s SET('x','y'), j JSON, bits BIT(5), yr YEAR,"
                " tiny TINYINT UNSIGNED, PRIMARY KEY (k, n))"
            )
            for i in range(40):
                cur.execute(
                    "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
                    " %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        f"k{i % 7}", i, i * 3, 2**64 - 1 - i, f"{i}.125", i / 4, i / 3,
                        f"2024-01-{i % 28 + 1:02d}", f"2024-02-03 04:05:06.{i:03d}",
                        None if i % 5 == 0 else f"2024-03-04 05:06:07.{i:06d}",
                        f"-{i}:01:02", bytes([i, 0, 255]), bytes([i]) * 3, f"text é {i}",
                        "ab"[i % 2], "x,y" if i % 3 else "", '{"a": [1, 2.5, "z"]}',
                        i % 32, 2000 + i, 255 - i,
                    ),
                )  # fmt: skip
            cur.execute("UPDATE t SET k = CONCAT(k, 'm'), x = NULL WHERE n % 4 = 1")  # moves
            cur.execute("UPDATE t SET n = n + 100 WHERE n % 6 = 2")  # moves on the other column
            cur.execute("UPDATE t SET txt = NULL, j = '[true, null]', d = -d WHERE n % 3 = 0")
            cur.execute("DELETE FROM t WHERE n % 9 = 4")
            cur.execute("ALTER TABLE t MODIFY v VARCHAR(20)")
            cur.execute("UPDATE t SET v = CONCAT('s', v) WHERE n % 2 = 0")
            # u: every column typed by the read, but v's odd rows keep integers in text
            cur.execute("CREATE TABLE u (id INT PRIMARY KEY, v INT)")
            cur.execute("INSERT INTO u SELECT seq, seq * 3 FROM seq_1_to_30")
            cur.execute("ALTER TABLE u MODIFY v VARCHAR(20)")
            cur.execute("UPDATE u SET v = CONCAT('s', v) WHERE id % 2 = 0")
            conn.commit()
        conn.close()
        wait_caught_up(run.task, mariadb)
    finally:
        run.stop()
    return task_dir


def test_typed_values_equal_a_sequential_replay_of_the_typed_change_view(
    spark: Any, typed_log: Path
) -> None:
    """The replay's values (read typed, or as text typed in the JVM) equal those of
    ``table_changes`` (every image's JSON typed with the same definition) replayed
    sequentially on the driver: same rows, same Spark values, for every column type."""
    from headwater.spark import register
    from headwater.spark.views import table_changes

    register(spark)
    table = f"{TYPED_DB}.t"
    changes = spark.read.format("headwater").options(path=str(typed_log), tables=table).load()
    view = table_changes(changes, table, schema=typed_log).orderBy("sequence").collect()
    state: dict[tuple[Any, ...], Any] = {}
    for change in view:
        if change.before is not None:
            state.pop((change.before.k, change.before.n), None)
        if change.after is not None:
            state[(change.after.k, change.after.n)] = change.after
    assert len(state) > 20
    got = table_as_of(spark, typed_log, table, partitions=2).collect()
    assert len(got) == len(state)
    for row in got:
        assert tuple(row) == tuple(state[(row.k, row.n)]), row
    assert {type(row.v) for row in got} == {str}
    assert any(row.v.startswith("s") for row in got) and any(row.v.isdigit() for row in got)


def test_a_value_the_read_cannot_type_sends_the_parquet_write_through_the_jvm(
    spark: Any, typed_log: Path, tmp_path: Path
) -> None:
    """u's columns are all typed in the read, so its tasks write Parquet themselves, but
    its odd rows' last images hold integers in a column that is text at the point: the
    table is written again through the JVM, which types them as the typed view does."""
    result = replay_to_parquet(spark, typed_log, [f"{TYPED_DB}.u"], tmp_path / "u", partitions=2)
    path = tmp_path / "u" / f"{TYPED_DB}.u"
    assert not (path / "part-00000.parquet").exists()  # Spark's file names, not the tasks'
    got = pq.read_table(path).to_pylist()
    expected = {i: f"s{i * 3}" if i % 2 == 0 else str(i * 3) for i in range(1, 31)}
    assert {r["id"]: r["v"] for r in got} == expected
    assert len(got) == result.tables[0].rows == 30


def test_the_c_survivor_decode_and_one_walk_equal_the_python_route_and_two_walks(
    spark: Any, typed_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key-first read's parts, with the events walked in C, survivors decoded in C
    (falling back to Python for u's images logged while v was an INT) in runs of events
    (Columns.add_events) or one event per call, and pass 1's payloads kept for pass 2 (or
    read again), equal the Python walk and decode over the range read twice, row for
    row, in order."""
    from headwater.spark import asofscan
    from headwater.spark.asof import key_first_read, plan_as_of

    for name in ("t", "u"):
        table = f"{TYPED_DB}.{name}"
        plan = plan_as_of(typed_log, table, partitions=2)
        scan = key_first_read(spark, plan, table, partitions=2)
        assert scan is not None
        fast = [pa.concat_tables(list(scan.read_part(part))) for part in range(2)]
        with monkeypatch.context() as patch:
            patch.setattr(asofscan, "EVENTS_IN_C", False)
            per_event = [pa.concat_tables(list(scan.read_part(part))) for part in range(2)]
            patch.setattr(asofscan, "EVENTS_IN_C", True)
            patch.setattr(asofscan, "KEEP_BYTES", 0)
            again = [pa.concat_tables(list(scan.read_part(part))) for part in range(2)]
            patch.setattr(asofscan, "SURVIVORS_IN_C", False)
            patch.setattr(asofscan, "WALK_IN_C", False)
            slow = [pa.concat_tables(list(scan.read_part(part))) for part in range(2)]
        assert sum(t.num_rows for t in fast) == (30 if name == "u" else 36)
        for a, b in zip(again + per_event, fast + fast, strict=True):
            assert a.equals(b)
        for a, b in zip(fast, slow, strict=True):
            assert a.schema == b.schema
            assert values(a) == values(b)
    # u's images of the text era come typed from C, in their own batches: the Python
    # route types whole batches, so there they travel as text (the same value, below)
    assert fast[0]["_v1"].null_count < slow[0]["_v1"].null_count


def values(table: pa.Table) -> list[tuple[Any, ...]]:
    """Each row's values as the JVM finishes them: ``_v{i}`` when set, else ``_t{i}``
    (the text it types); a typed value as the text it would have travelled as."""
    from headwater.spark.asofread import field_text

    out = []
    for row in table.to_pylist():
        columns = sorted({int(k[2:]) for k in row})
        out.append(
            tuple(
                row[f"_t{i}"] if row.get(f"_v{i}") is None else field_text(row[f"_v{i}"])
                for i in columns
            )
        )
    return out
