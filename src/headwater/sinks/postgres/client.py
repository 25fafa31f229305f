"""The PostgreSQL dialect: type mapping, upserts, error classes (psycopg 3).

Types (:func:`pg_type`), from the MySQL column definition:

==============================  ===================================
MySQL                           PostgreSQL
==============================  ===================================
TINYINT, SMALLINT               smallint (SMALLINT UNSIGNED: integer)
MEDIUMINT, INT                  integer (INT UNSIGNED: bigint)
BIGINT                          bigint (BIGINT UNSIGNED: numeric(20))
DECIMAL(p,s)                    numeric(p,s)
FLOAT, DOUBLE                   real, double precision
BIT, YEAR                       bigint, smallint
DATE, TIME                      date, interval (TIME may be negative or over 24 h)
DATETIME(n), TIMESTAMP(n)       timestamp(n), timestamptz(n)
CHAR(n), VARCHAR(n)             varchar(n) (no blank padding)
TEXT family, ENUM, SET          text (SET members joined by ",")
JSON                            jsonb
BINARY, BLOB family, GEOMETRY   bytea
VECTOR                          double precision[]
==============================  ===================================

Schemas and tables (``create_tables``, the checkpoint table) are created under a
transaction-scoped advisory lock (:data:`SETUP_LOCK`), since ``IF NOT EXISTS`` is not safe
under concurrency in PostgreSQL; a creator outside headwater that wins the race anyway
makes the sink run its statements again (they then find the objects).

Upserts are ``INSERT ... ON CONFLICT (key) DO UPDATE SET c = EXCLUDED.c`` (``DO NOTHING``
when every column is in the key). A statement group of :attr:`PostgresDialect.bulk_rows`
rows or more is written set-based (:meth:`PostgresDialect.bulk_write`): ``COPY`` into a
temporary table dropped at commit, then ``INSERT ... SELECT ... ON CONFLICT`` or
``DELETE ... USING`` from it, in the shard's transaction.

Retryable: SQLSTATE 40001 serialization failure, 40P01 deadlock, 55P03 lock not available
(``lock_timeout``), class 08 connection exceptions, 57P01-57P03 server shutting down, and
operational errors without a SQLSTATE (a connection lost mid-statement).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, ClassVar

from headwater.connections import TargetConnection
from headwater.schema.model import BINARY_TYPES, Column, TableDef, parse_column_type
from headwater.sinks.base import SinkCapabilities, map_database
from headwater.sinks.dialect import SqlDialect, SqlSinkConfig
from headwater.sinks.schemachange import Step

__all__ = ["RETRYABLE_SQLSTATES", "PostgresDialect", "pg_type"]

RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03"})

#: The advisory lock key every headwater sink takes around schema and table creation.
SETUP_LOCK = 0x68776174  # "hwat"

#: What a losing concurrent ``CREATE ... IF NOT EXISTS`` raises: unique violation (on
#: pg_namespace or pg_type), duplicate schema, duplicate table, duplicate object.
_CREATE_RACE_SQLSTATES = frozenset({"23505", "42P06", "42P07", "42710"})

_SIMPLE = {
    "tinyint": "smallint",
    "mediumint": "integer",
    "float": "real",
    "double": "double precision",
    "bit": "bigint",
    "year": "smallint",
    "date": "date",
    "time": "interval",
    "tinytext": "text",
    "text": "text",
    "mediumtext": "text",
    "longtext": "text",
    "enum": "text",
    "set": "text",
    "json": "jsonb",
    "vector": "double precision[]",
}
_UNSIGNED = {
    "smallint": ("smallint", "integer"),
    "int": ("integer", "bigint"),
    "bigint": ("bigint", "numeric(20)"),
}
_GEOMETRY = frozenset(
    {
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
    }
)


def pg_type(col: Column) -> str:
    """The PostgreSQL type of a MySQL column (module docstring)."""
    kind = col.data_type
    if kind in _UNSIGNED:
        return _UNSIGNED[kind][col.unsigned]
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    _, args, _, _ = parse_column_type(col.column_type)
    if kind == "decimal":
        return f"numeric({args[0]},{args[1]})" if len(args) == 2 else "numeric"
    if kind in ("datetime", "timestamp"):
        base = "timestamp" if kind == "datetime" else "timestamptz"
        return f"{base}({args[0]})" if args else base
    if kind in ("char", "varchar"):
        return f"varchar({args[0]})" if args else "text"
    if kind in BINARY_TYPES or kind in _GEOMETRY or col.charset == "binary":
        return "bytea"
    return "text"


#: Names of the temporary tables of :meth:`PostgresDialect.bulk_write` (unique in a process,
#: so in each of its sessions).
_STAGES = itertools.count()


class PostgresDialect(SqlDialect):
    capabilities: ClassVar[SinkCapabilities]  # set by headwater.sinks.postgres.factory
    quote_char = '"'
    text_bytes = False
    #: The bulk path's fixed cost is three round trips more (CREATE TEMPORARY TABLE, COPY,
    #: the statement); measured on PostgreSQL 15 at load 15-19 (too noisy to place the
    #: crossing exactly): within noise of batched ``VALUES`` statements from about 50 to
    #: 250 rows, slower below 30, about 3x faster at 30,000 (bench/apply.py).
    bulk_rows = 64

    def connect(self, options: TargetConnection, config: SqlSinkConfig) -> Any:
        import psycopg

        conn = psycopg.connect(
            host=options.host,
            port=options.port,
            user=options.user,
            password=options.password() or None,
            dbname=options.database,
            connect_timeout=max(1, int(options.connect_timeout_s)),
            autocommit=False,
        )
        try:
            with conn.cursor() as cur:
                cur.execute("SET TIME ZONE 'UTC'")
                for name, value in options.session:
                    cur.execute("SELECT set_config(%s, %s, false)", (name, str(value)))
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def retryable(self, exc: BaseException) -> bool | None:
        import psycopg

        if not isinstance(exc, psycopg.Error):
            return None
        state = exc.sqlstate
        if state is None:
            return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
        return state in RETRYABLE_SQLSTATES or state.startswith("08")

    def upsert_rendered(
        self, table: str, columns: Sequence[str], key: Sequence[str], rows: str
    ) -> str:
        cols = ", ".join(self.ident(c) for c in columns)
        return f"INSERT INTO {table} ({cols}) VALUES {rows} {self._on_conflict(columns, key)}"

    def _on_conflict(self, columns: Sequence[str], key: Sequence[str]) -> str:
        update = [c for c in columns if c not in key]
        conflict = ", ".join(self.ident(c) for c in key)
        action = (
            "DO UPDATE SET "
            + ", ".join(f"{self.ident(c)} = EXCLUDED.{self.ident(c)}" for c in update)
            if update
            else "DO NOTHING"
        )
        return f"ON CONFLICT ({conflict}) {action}"

    def bulk_write(
        self,
        cur: Any,
        table: str,
        columns: Sequence[str],
        key: Sequence[str],
        delete: bool,
        values: Sequence[list[Any]],
    ) -> None:
        """``COPY`` the rows into a temporary table of the target's column types (dropped
        at commit), then one set-based statement from it: ``INSERT ... SELECT ... ON
        CONFLICT`` (the upsert of :meth:`upsert_rendered`) or ``DELETE ... USING``.

        Rows go through psycopg's ``Copy.write_row``: the same dumpers as bound
        parameters, formatted in C, where a statement with thousands of ``%s`` cost more
        in psycopg's client-side query splitting (``_split_query``, about 5 us a row)
        than the server spent. A value the column refuses fails the ``COPY`` (into a
        table of the same types) or the statement with the error a bound parameter
        gets."""
        stage = self.ident(f"hw_stage_{next(_STAGES)}")
        cols = ", ".join(self.ident(c) for c in columns)
        cur.execute(
            f"CREATE TEMPORARY TABLE {stage} ON COMMIT DROP AS SELECT {cols} FROM {table}"
            " WITH NO DATA"
        )
        with cur.copy(f"COPY {stage} ({cols}) FROM STDIN") as copy:
            write_row = copy.write_row
            for row in zip(*values, strict=True):
                write_row(row)
        if delete:
            match = " AND ".join(f"t.{self.ident(c)} = s.{self.ident(c)}" for c in columns)
            cur.execute(f"DELETE FROM {table} AS t USING {stage} AS s WHERE {match}")
        else:
            cur.execute(
                f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {stage}"
                f" {self._on_conflict(columns, key)}"
            )

    def create_table_sql(self, schema: str, tdef: TableDef) -> list[str]:
        lines = []
        for col in tdef.columns:
            text = f"{self.ident(col.name)} {pg_type(col)}"
            if not col.nullable:
                text += " NOT NULL"
            lines.append(text)
        if tdef.primary_key:
            lines.append(f"PRIMARY KEY ({', '.join(self.ident(c) for c in tdef.primary_key)})")
        return [
            self.create_schema_sql(schema),
            f"CREATE TABLE IF NOT EXISTS {self.table_ref(schema, tdef.table)} ({', '.join(lines)})",
        ]

    def create_schema_sql(self, schema: str) -> str:
        return f"CREATE SCHEMA IF NOT EXISTS {self.ident(schema)}"

    def render_step(self, step: Step, config: SqlSinkConfig) -> list[str]:
        """PostgreSQL DDL derived from the source's definitions (never MySQL text): types
        by :func:`pg_type`; a column added mid-stream is nullable (PostgreSQL has no
        implicit default to give the rows already there, as MySQL does)."""
        db = map_database(config.database_map, step.database)
        table = self.table_ref(db, step.table) if step.table else ""
        op, col = step.op, step.column
        if op == "create_database":
            return [self.create_schema_sql(db)]
        if op == "drop_database":
            return [f"DROP SCHEMA IF EXISTS {self.ident(db)} CASCADE"]
        if op == "create_table" and step.tdef is not None:
            return self.create_table_sql(db, step.tdef)[1:]  # the sink creates the schema
        if op == "drop_table":
            return [f"DROP TABLE IF EXISTS {table}"]
        if op == "truncate":
            return [f"TRUNCATE TABLE {table}"]
        if op == "rename_table":
            new_db = map_database(config.database_map, step.new_database)
            out = []
            if new_db != db:
                out.append(f"ALTER TABLE {table} SET SCHEMA {self.ident(new_db)}")
                table = self.table_ref(new_db, step.table)
            if step.new_table != step.table:
                out.append(f"ALTER TABLE {table} RENAME TO {self.ident(step.new_table)}")
            return out
        if op == "add_column" and col is not None:
            return [f"ALTER TABLE {table} ADD COLUMN {self.ident(col.name)} {pg_type(col)}"]
        if op == "modify_column" and col is not None:
            name, kind = self.ident(col.name), pg_type(col)
            null = "DROP NOT NULL" if col.nullable else "SET NOT NULL"
            return [
                f"ALTER TABLE {table} ALTER COLUMN {name} TYPE {kind} USING {name}::{kind}",
                f"ALTER TABLE {table} ALTER COLUMN {name} {null}",
            ]
        if op == "drop_column":
            return [f"ALTER TABLE {table} DROP COLUMN {self.ident(step.name)}"]
        if op == "relax_column":
            return [f"ALTER TABLE {table} ALTER COLUMN {self.ident(step.name)} DROP NOT NULL"]
        if op == "rename_column":
            return [
                f"ALTER TABLE {table} RENAME COLUMN {self.ident(step.name)}"
                f" TO {self.ident(step.new_name)}"
            ]
        if op == "primary_key":
            # The key constraint's name is PostgreSQL's choice (``<table>_pkey`` when the
            # table was created, kept across renames): look it up.
            regclass = table.replace("'", "''")
            out = [
                "DO $$ DECLARE n text; BEGIN SELECT conname INTO n FROM pg_constraint"
                f" WHERE conrelid = '{regclass}'::regclass AND contype = 'p';"
                f" IF n IS NOT NULL THEN EXECUTE format('ALTER TABLE {regclass}"
                " DROP CONSTRAINT %I', n); END IF; END $$"
            ]
            if step.key:
                key = ", ".join(map(self.ident, step.key))
                out.append(f"ALTER TABLE {table} ADD PRIMARY KEY ({key})")
            return out
        if op == "source_sql":
            return []  # MySQL text: never run on PostgreSQL
        raise ValueError(f"unknown schema-change step {op!r}")

    def setup_lock_sql(self) -> list[str]:
        # CREATE SCHEMA/TABLE IF NOT EXISTS is not safe under concurrency in PostgreSQL
        # (two creators both pass the check; one fails on the pg_namespace or pg_type
        # unique index): creators take one transaction-scoped advisory lock in turn.
        return [f"SELECT pg_advisory_xact_lock({SETUP_LOCK})"]

    def missing_table(self, exc: BaseException) -> bool:
        import psycopg

        # 42P01 undefined_table (PostgreSQL, Appendix A "Error Codes")
        return isinstance(exc, psycopg.Error) and exc.sqlstate == "42P01"

    def lost_create_race(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, psycopg.Error) and exc.sqlstate in _CREATE_RACE_SQLSTATES

    def checkpoint_setup_sql(self, schema: str) -> list[str]:
        return [
            f"CREATE SCHEMA IF NOT EXISTS {self.ident(schema)}",
            f"CREATE TABLE IF NOT EXISTS {self.table_ref(schema, 'headwater_checkpoint')} ("
            "pipeline varchar(190) NOT NULL, source varchar(190) NOT NULL, shard integer NOT NULL,"
            " batch_id bigint NOT NULL, max_sequence bigint NOT NULL,"
            " applies bigint NOT NULL, rows_applied bigint NOT NULL,"
            " applied_at timestamptz(6) NULL,"
            " PRIMARY KEY (pipeline, source, shard))",
        ]

    def insert_missing_sql(self, table: str) -> str:
        return (
            f"INSERT INTO {table} (pipeline, source, shard, batch_id, max_sequence,"
            " applies, rows_applied, applied_at) VALUES (%s, %s, %s, -1, -1, 0, 0, NULL)"
            " ON CONFLICT DO NOTHING"
        )
