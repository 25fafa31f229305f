"""The SQL sinks' bulk write of a net effect (``SqlSink.apply_net``, issue #17) against
the existing columnar path (``SqlSink.apply_columns``) and the target's own bulk load.

Workload (``bench/pipeline.py``'s table shape, ``id INT PRIMARY KEY, a INT, b
VARCHAR(64) NULL, c DECIMAL(10,2) NULL, ts BIGINT``): a table holding ``--removes`` rows
(ids from ``--rows`` on); one shard's net effect inserts ``--rows`` new rows and deletes
those ``--removes``. Each applier starts from its own copy of that table and ends with
the same rows (checked by ``CHECKSUM TABLE`` / an aggregate):

* ``apply_net``: the net effect as typed Arrow (``NetTable``), one transaction;
* ``apply_columns``: the same net effect as the glue's routed change rows (one insert
  per new key, one delete per removed key; JSON images), one transaction;
* the limit: the target's own bulk load of the final rows (MariaDB ``LOAD DATA LOCAL
  INFILE`` of a prepared file, PostgreSQL ``COPY`` of prepared text) after a ``DELETE``
  of the removed range, one transaction.

Targets: a MariaDB sandbox with the durable ``--innodb-flush-log-at-trx-commit=1``
(binlog off), and the machine's PostgreSQL (``HEADWATER_TEST_POSTGRES``, database
``hw_bench_netwrite``). Printed: each applier's wall seconds and rows/s (rows written:
inserts + deletes; the median of ``--rounds``), the load average; the last line
``netwrite_vs_bulk_load=<MariaDB bulk-load seconds / apply_net seconds>`` (1.0: as fast
as the target's own load), after ``netwrite_pg_vs_copy=<the same for PostgreSQL>``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from typing import Any

import numpy as np
import orjson
import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from headwater.connections import TargetConnection
from headwater.position import Position
from headwater.sandbox import MariadbSandbox, SandboxOptions
from headwater.schema.model import Column, TableDef
from headwater.sinks import StaticSchema
from headwater.sinks.merge import ROLE_KEY, ChangeColumns
from headwater.sinks.mysql import MysqlSink, MysqlSinkConfig
from headwater.sinks.netwrite import NetTable
from headwater.sinks.postgres import PostgresSink, PostgresSinkConfig

PG_DSN = os.environ.get("HEADWATER_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres")
PG_DB = "hw_bench_netwrite"
SHAPE = (
    "(id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64) NULL, c DECIMAL(10,2) NULL,"
    " ts BIGINT NOT NULL)"
)
PG_SHAPE = (
    "(id integer PRIMARY KEY, a integer NOT NULL, b varchar(64), c numeric(10,2),"
    " ts bigint NOT NULL)"
)


def tdef(db: str, table: str) -> TableDef:
    return TableDef(
        db,
        table,
        (
            Column("id", "int", "int", nullable=False),
            Column("a", "int", "int", nullable=False),
            Column("b", "varchar", "varchar(64)", charset="utf8mb4"),
            Column("c", "decimal", "decimal(10,2)"),
            Column("ts", "bigint", "bigint", nullable=False),
        ),
        primary_key=("id",),
    )


def final_rows(rows: int) -> pa.Table:
    """The inserted rows, as the read path would give them (typed Arrow)."""
    ids = np.arange(rows, dtype=np.int32)
    b = pa.array([None if i % 10 == 0 else f"value {i} of the bench's text column" for i in ids])
    c = pa.array([None if i % 7 == 0 else Decimal(f"{i % 100000}.{i % 100:02d}") for i in ids])
    return pa.table(
        {
            "id": ids,
            "a": (ids * 7) % 1_000_003,
            "b": b,
            "c": c.cast(pa.decimal128(10, 2)),
            "ts": ids.astype(np.int64) + 1_714_000_000_000_000,
        }
    )


def columns(upserts: pa.Table, removed: range, db: str) -> ChangeColumns:
    """The same net effect as the glue's routed change rows (JSON images)."""
    n = upserts.num_rows + len(removed)
    ups = upserts.to_pylist()
    keys = [orjson.dumps({"id": r["id"]}).decode() for r in ups]
    keys += [orjson.dumps({"id": i}).decode() for i in removed]
    after: list[str | None] = [
        orjson.dumps({**r, "c": None if r["c"] is None else str(r["c"])}).decode() for r in ups
    ]
    after += [None] * len(removed)
    events = [i // 1000 for i in range(n)]  # 1000-row events
    return ChangeColumns(
        source=["src"] * n,
        database=[db] * n,
        table=["t"] * n,
        op=["insert"] * upserts.num_rows + ["delete"] * len(removed),
        sequence=list(range(1, n + 1)),
        change_id=[0] * n,
        file_num=[1] * n,
        offset=[4 + e for e in events],
        event_index=[0] * n,
        key=keys,
        after=after,
        role=[ROLE_KEY] * n,
    )


def lines(t: pa.Table) -> bytes:
    """LOAD DATA / COPY text of rows without tabs, newlines or backslashes."""
    fields = [pc.fill_null(t.column(n).cast(pa.string()), "\\N") for n in t.column_names]
    joined = pc.binary_join_element_wise(*fields, "\t")
    return ("\n".join(joined.to_pylist()) + "\n").encode()


def mysql_sink(server: MariadbSandbox, db: str) -> MysqlSink:
    return MysqlSink(
        MysqlSinkConfig(
            pipeline=db,
            connection=TargetConnection(host=server.host, port=server.port, user="root"),
            schema=StaticSchema((tdef(db, "t"),)),
            checkpoint_database="hw_ckpt",
        )
    )


def pg_sink(db: str) -> PostgresSink:
    params = dict(p.split("=", 1) for p in PG_DSN.split())
    return PostgresSink(
        PostgresSinkConfig(
            pipeline=db,
            connection=TargetConnection(
                host=params.get("host", "127.0.0.1"),
                port=int(params.get("port", 5432)),
                user=params.get("user", "postgres"),
                database=PG_DB,
            ),
            schema=StaticSchema((tdef(db, "t"),)),
        )
    )


def timed(work: Any) -> float:
    t0 = time.perf_counter()
    work()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="45 000 rows, 5 000 removes")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--removes", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = args.rows or (45_000 if args.quick else 450_000)
    removes = args.removes or (5_000 if args.quick else 50_000)
    upserts = final_rows(rows)
    removed = range(rows, rows + removes)
    gone = pa.table({"id": pa.array(removed, pa.int32())})
    old = final_rows(rows + removes).slice(rows)  # the rows the net effect deletes
    text, old_text = lines(upserts), lines(old)
    written = rows + removes
    tmp = tempfile.mkdtemp(prefix="hw-bench-netwrite-")
    infile, old_file = os.path.join(tmp, "rows.tsv"), os.path.join(tmp, "old.tsv")
    with open(infile, "wb") as f:
        f.write(text)
    with open(old_file, "wb") as f:
        f.write(old_text)

    server = MariadbSandbox(
        SandboxOptions(server_id=2, log_bin=False, extra=("--innodb-flush-log-at-trx-commit=1",))
    ).start()
    times: dict[str, list[float]] = {}
    try:
        print(
            f"rows {rows}, removes {removes}; MariaDB innodb_flush_log_at_trx_commit="
            f"{server.query('SELECT @@innodb_flush_log_at_trx_commit')[0][0]}",
            file=sys.stderr,
        )
        import pymysql

        conn = pymysql.connect(
            host=server.host, port=server.port, user="root", local_infile=True, autocommit=True
        )
        cur = conn.cursor()

        def fresh(db: str) -> None:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"CREATE TABLE {db}.t {SHAPE}")
            cur.execute(
                f"LOAD DATA LOCAL INFILE '{old_file}' INTO TABLE {db}.t"
                " FIELDS TERMINATED BY '\\t' LINES TERMINATED BY '\\n'"
            )

        def bulk() -> None:
            cur.execute("BEGIN")
            cur.execute(f"DELETE FROM bulk.t WHERE id >= {rows}")
            cur.execute(
                f"LOAD DATA LOCAL INFILE '{infile}' INTO TABLE bulk.t"
                " FIELDS TERMINATED BY '\\t' LINES TERMINATED BY '\\n'"
            )
            cur.execute("COMMIT")

        for rnd in range(args.rounds):
            for db in ("net", "cols", "bulk"):
                fresh(db)
            cur.execute("DROP DATABASE IF EXISTS hw_ckpt")
            net, cols_sink = mysql_sink(server, "net"), mysql_sink(server, "cols")
            net.setup()
            cols_sink.setup()
            table = NetTable(
                "net", "t", "net", "t", tdef("net", "t"), tuple(upserts.column_names), ("id",),
                upserts, gone, Position(0, 1, 4, 0),
            )  # fmt: skip
            cc = columns(upserts, removed, "cols")
            order = list(range(written))
            times.setdefault("mariadb apply_net", []).append(
                timed(
                    functools.partial(
                        net.apply_net, [table], source="src", first_seq=1,
                        last_seq=written, batch_id=rnd, shard=0,
                    )
                )
            )  # fmt: skip
            times.setdefault("mariadb apply_columns", []).append(
                timed(functools.partial(cols_sink.apply_columns, cc, order, rnd, 0))
            )
            times.setdefault("mariadb LOAD DATA (limit)", []).append(timed(bulk))
            sums = [
                cur.execute(f"CHECKSUM TABLE {db}.t") and cur.fetchone()[1]
                for db in ("net", "cols", "bulk")
            ]
            assert len(set(sums)) == 1, f"the appliers left different tables: {sums}"
            print(f"round {rnd}: load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
        conn.close()
    finally:
        server.stop()

    # PostgreSQL
    admin = psycopg.connect(f"{PG_DSN} dbname=postgres", autocommit=True)
    admin.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
    admin.execute(f"CREATE DATABASE {PG_DB}")
    try:
        pg = psycopg.connect(f"{PG_DSN} dbname={PG_DB}", autocommit=True)

        def pg_fresh(schema: str) -> None:
            pg.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            pg.execute(f"CREATE SCHEMA {schema}")
            pg.execute(f"CREATE TABLE {schema}.t {PG_SHAPE}")
            with pg.cursor() as c, c.copy(f"COPY {schema}.t FROM STDIN") as copy:
                copy.write(old_text)

        def pg_bulk() -> None:
            with pg.transaction(), pg.cursor() as c:
                c.execute(f"DELETE FROM copy.t WHERE id >= {rows}")
                with c.copy("COPY copy.t FROM STDIN") as copy:
                    copy.write(text)

        for rnd in range(args.rounds):
            for schema in ("net", "cols", "copy"):
                pg_fresh(schema)
            pg.execute("DROP SCHEMA IF EXISTS headwater CASCADE")
            net_pg, cols_pg = pg_sink("net"), pg_sink("cols")
            net_pg.setup()
            cols_pg.setup()
            table = NetTable(
                "net", "t", "net", "t", tdef("net", "t"), tuple(upserts.column_names), ("id",),
                upserts, gone, Position(0, 1, 4, 0),
            )  # fmt: skip
            cc = columns(upserts, removed, "cols")
            order = list(range(written))
            times.setdefault("postgres apply_net", []).append(
                timed(
                    functools.partial(
                        net_pg.apply_net, [table], source="src", first_seq=1,
                        last_seq=written, batch_id=rnd, shard=0,
                    )
                )
            )  # fmt: skip
            times.setdefault("postgres apply_columns", []).append(
                timed(functools.partial(cols_pg.apply_columns, cc, order, rnd, 0))
            )
            times.setdefault("postgres COPY (limit)", []).append(timed(pg_bulk))
            sums = [
                pg.execute(
                    f"SELECT count(*), sum(id), sum(a), sum(c), sum(ts), sum(length(b))"
                    f" FROM {schema}.t"
                ).fetchone()
                for schema in ("net", "cols", "copy")
            ]
            assert len(set(sums)) == 1, f"the appliers left different tables: {sums}"
            print(f"round {rnd}: load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
        pg.close()
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        admin.close()

    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, seconds in med.items():
        print(f"{name}: {seconds:.3f} s, {written / seconds:,.0f} rows/s")
    print(f"load average {os.getloadavg()[0]:.1f}")
    pg_ratio = med["postgres COPY (limit)"] / med["postgres apply_net"]
    my_ratio = med["mariadb LOAD DATA (limit)"] / med["mariadb apply_net"]
    print(f"netwrite_pg_vs_copy={pg_ratio:.2f}")
    print(f"netwrite_vs_bulk_load={my_ratio:.2f}")


if __name__ == "__main__":
    main()
