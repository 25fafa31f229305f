"""``headwater verify`` against real servers: equal tables exit 0; a target row altered,
deleted or added behind the pipeline's back is reported by exactly its key (exit 1);
MariaDB -> PostgreSQL copies with the type differences of the PostgreSQL sink's mapping
(numeric, timestamptz, unsigned widening, jsonb, interval, text keys under another
collation) compare equal when their values are."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from headwater.cli.main import main
from headwater.sandbox import MariadbSandbox

ORDERS = (
    "CREATE TABLE {t} (id INT PRIMARY KEY, customer VARCHAR(40) NOT NULL,"
    " amount DECIMAL(10,2) NULL, placed DATETIME(3) NULL)"
)


def _fill(server: MariadbSandbox, db: str, n: int = 40) -> None:
    rows = ", ".join(
        f"({i}, 'c{i % 7}', {i * 1.25:.2f}, '2024-05-0{1 + i % 9} 10:00:0{i % 10}.5')"
        for i in range(1, n + 1)
    )
    server.execute(ORDERS.format(t="orders"), f"INSERT INTO orders VALUES {rows}", database=db)


@pytest.fixture
def copy_db(mariadb_target: MariadbSandbox, db: str) -> Any:
    dst = f"{db}_copy"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`", f"CREATE DATABASE `{dst}`")
    yield dst
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")


def _copy_orders(source: MariadbSandbox, db: str, target: MariadbSandbox, dst: str) -> None:
    rows = source.query("SELECT id, customer, amount, placed FROM orders", database=db)
    target.execute(ORDERS.format(t="orders"), database=dst)
    conn = target.connect(dst)
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s)", rows)
    conn.close()


def _verify(
    capsys: pytest.CaptureFixture[str], source: MariadbSandbox, target: str, *extra: str
) -> tuple[int, list[str]]:
    status = main(
        ["verify", "--source", source.url + "/" + extra[0], "--target", target, *extra[1:]]
    )
    return status, capsys.readouterr().out.splitlines()


def test_equal_tables_exit_0(
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    copy_db: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _fill(mariadb, db)
    _copy_orders(mariadb, db, mariadb_target, copy_db)
    status, out = _verify(
        capsys, mariadb, mariadb_target.url, db, "--map", f"{db}={copy_db}", "--chunk-size", "7"
    )
    assert out == [
        f"{db}.orders -> {copy_db}.orders: rows=40 chunks=6 equal",
        "verify tables=1 rows=40 mismatches=0",
    ]
    assert status == 0


def test_rows_altered_deleted_added_behind_the_pipeline_are_reported_by_key(
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    copy_db: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _fill(mariadb, db)
    _copy_orders(mariadb, db, mariadb_target, copy_db)
    mariadb_target.execute(
        "UPDATE orders SET amount = amount + 0.01 WHERE id = 17",
        "DELETE FROM orders WHERE id = 3",
        "INSERT INTO orders VALUES (1000, 'x', NULL, NULL)",  # beyond the source's last key
        "INSERT INTO orders VALUES (0, 'y', NULL, NULL)",  # before the source's first key
        database=copy_db,
    )
    status, out = _verify(
        capsys, mariadb, mariadb_target.url, db, "--map", f"{db}={copy_db}", "--chunk-size", "7"
    )
    assert out[0] == f"{db}.orders -> {copy_db}.orders: rows=40 chunks=6 4 mismatches"
    assert sorted(out[1:-1]) == [
        "  different: id=17 (amount)",
        "  extra in target: id=0",
        "  extra in target: id=1000",
        "  missing in target: id=3",
    ]
    assert out[-1] == "verify tables=1 rows=40 mismatches=4"
    assert status == 1


def test_missing_target_table_is_a_mismatch(
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    copy_db: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _fill(mariadb, db, 5)
    status, out = _verify(capsys, mariadb, mariadb_target.url, db, "--map", f"{db}={copy_db}")
    assert out[0] == (
        f"{db}.orders -> {copy_db}.orders: rows=5 chunks=0 table missing in the target"
        " (1 mismatches)"
    )
    assert status == 1


def test_table_without_primary_key_is_an_error_exit_2(
    mariadb: MariadbSandbox, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mariadb.execute("CREATE TABLE nokey (a INT)", database=db)
    status = main(["verify", "--source", f"{mariadb.url}/{db}", "--target", mariadb.url])
    assert status == 2
    assert "nokey: no primary key" in capsys.readouterr().err


TYPES = (
    "CREATE TABLE {t} (code VARCHAR(20) PRIMARY KEY, big BIGINT UNSIGNED NOT NULL,"
    " price DECIMAL(12,4) NULL, ratio DOUBLE NULL, at DATETIME(6) NULL, ts TIMESTAMP(3) NULL,"
    " day DATE NULL, dur TIME NULL, note TEXT NULL, doc JSON NULL, flag TINYINT NULL)"
)
PG_TYPES = (
    'CREATE TABLE "{s}".types (code varchar(20) PRIMARY KEY, big numeric(20) NOT NULL,'
    " price numeric(12,4), ratio double precision, at timestamp(6), ts timestamptz(3),"
    " day date, dur interval, note text, doc jsonb, flag smallint)"
)
VALUES = [
    ("apple", 18446744073709551615, "1.5000", 0.1, "2024-01-02 03:04:05.123456",
     "2024-06-30 23:59:59.125", "2024-02-29", "-12:30:00", "héllo\nworld",
     '{"b": 1, "a": [1, 2]}', 1),
    ("Banana", 0, None, None, None, None, None, None, None, None, None),
    ("cherry", 42, "-0.0100", -2.5e-10, "1999-12-31 23:59:59.000000", "1970-01-01 00:00:01.000",
     "1000-01-01", "838:59:59", "", "[]", 0),
    ("Ärger", 7, "99999999.9999", 1e300, "2038-01-19 03:14:08.000001", None, None, "00:00:05",
     "emoji 😀", "null", -1),
    ("zebra", 1, "0.0000", 0.0, None, None, None, None, "z", '"text"', None),
]  # fmt: skip


def test_mariadb_to_postgres_type_differences_compare_equal(
    mariadb: MariadbSandbox,
    db: str,
    postgres: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    mariadb.execute(TYPES.format(t="types"), database=db)
    conn = mariadb.connect(db)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.executemany(f"INSERT INTO types VALUES ({', '.join(['%s'] * 11)})", VALUES)
    conn.close()
    with psycopg.connect(**postgres, autocommit=True) as pg:
        pg.execute("SET TimeZone = 'Europe/Berlin'")  # the stored instant is what counts
        pg.execute(f'CREATE SCHEMA "{db}"')
        pg.execute(PG_TYPES.format(s=db))
        pg.cursor().executemany(
            f'INSERT INTO "{db}".types VALUES (%s, %s, %s, %s, %s, %s::timestamp AT TIME ZONE'
            " 'UTC', %s, %s::interval, %s, %s::jsonb, %s)",
            VALUES,
        )
    target = f"postgresql://{postgres['user']}@{postgres['host']}:{postgres.get('port', 5432)}"
    target += f"/{postgres['dbname']}"
    status, out = _verify(capsys, mariadb, target, db, "--chunk-size", "2")
    assert out == [
        f"{db}.types -> {db}.types: rows=5 chunks=3 equal",
        "verify tables=1 rows=5 mismatches=0",
    ]
    assert status == 0
    with psycopg.connect(**postgres, autocommit=True) as pg:
        pg.execute(
            f"""UPDATE "{db}".types SET ts = ts + interval '1 millisecond' WHERE code = 'apple'"""
        )
        pg.execute(f"""UPDATE "{db}".types SET doc = '{{"a": 2}}' WHERE code = 'Ärger'""")
    status, out = _verify(capsys, mariadb, target, db, "--chunk-size", "2")
    assert sorted(out[1:-1]) == ["  different: code=apple (ts)", "  different: code=Ärger (doc)"]
    assert out[-1] == "verify tables=1 rows=5 mismatches=2"
    assert status == 1
