"""The MySQL/MariaDB dialect: connections, upserts, DDL, error classes.

* Sessions run with ``time_zone = '+00:00'`` (TIMESTAMP images are UTC), ``sql_mode``
  without ``NO_ZERO_DATE``/``NO_ZERO_IN_DATE`` when zero dates are kept, and the extra
  session variables of :class:`~headwater.connections.TargetConnection`.
* Upserts are ``INSERT ... VALUES (...), (...) ON DUPLICATE KEY UPDATE c = VALUES(c)``
  (``VALUES()`` works on MariaDB and MySQL; MySQL 8.0.20+ only warns about it).
* Retryable errors (:data:`RETRYABLE_CODES`): 1205 lock wait timeout, 1213 deadlock,
  2003 cannot connect, 2006 server gone away, 2013 lost connection, 1927 connection
  killed (MariaDB), 4031 disconnected for inactivity (MySQL), and a closed connection.
* Schema changes are steps (:mod:`headwater.sinks.schemachange`) rendered as MySQL DDL
  from the source's definitions; only DDL with no table definition (indexes, views) runs
  as the source wrote it, after ``USE`` of the mapped default database, with qualified
  names of mapped databases rewritten by sqlglot (MySQL dialect).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from decimal import Decimal
from types import NoneType
from typing import Any, ClassVar

from headwater.changes import ChangeRow
from headwater.connections import TargetConnection
from headwater.schema.model import Column, TableDef
from headwater.sinks.base import SinkCapabilities, map_database
from headwater.sinks.dialect import SqlDialect, SqlSinkConfig
from headwater.sinks.schemachange import Step, TargetColumns

__all__ = ["RETRYABLE_CODES", "ZERO_DATE_MODES", "MysqlDialect", "configure_session"]

log = logging.getLogger(__name__)

RETRYABLE_CODES = frozenset({1205, 1213, 1927, 2003, 2006, 2013, 4031})


#: ``sql_mode`` flags dropped so that zero dates can be written as they came.
ZERO_DATE_MODES = ("NO_ZERO_DATE", "NO_ZERO_IN_DATE")


def configure_session(cur: Any, options: TargetConnection, drop_modes: Sequence[str]) -> None:
    """A target session as the sinks need it: UTC, ``drop_modes`` removed from
    ``sql_mode`` (none: left as it is), then the extra session variables of ``options``."""
    cur.execute("SET time_zone = '+00:00'")
    if drop_modes:
        cur.execute("SELECT @@SESSION.sql_mode")
        modes = [m for m in str(cur.fetchone()[0]).split(",") if m and m not in drop_modes]
        cur.execute("SET SESSION sql_mode = %s", (",".join(modes),))
    for name, value in options.session:
        if not name.replace("_", "").isalnum():
            raise ValueError(f"not a session variable name: {name!r}")
        cur.execute(f"SET SESSION {name} = %s", (value,))


class MysqlDialect(SqlDialect):
    capabilities: ClassVar[SinkCapabilities]  # set by headwater.sinks.mysql.factory
    quote_char = "`"
    text_bytes = True
    runs_mysql_ddl = True

    def connect(self, options: TargetConnection, config: SqlSinkConfig) -> Any:
        # CLIENT_LOCAL_FILES announced (the server refuses LOAD DATA LOCAL otherwise; the
        # net-effect write loads from memory: headwater.sinks.netwrite._load_local), but
        # PyMySQL's own handler, which sends whatever file the server names on any
        # statement, switched off again: only _load_local answers, for its own statement.
        conn = options.connect_mysql(autocommit=False, local_infile=True)
        conn._local_infile = False
        try:
            with conn.cursor() as cur:
                zero = config.zero_dates == "keep"
                configure_session(cur, options, ZERO_DATE_MODES if zero else ())
                cur.execute("SELECT @@log_bin, @@binlog_format")
                log_bin, binlog_format = cur.fetchone()
                if not int(log_bin) or str(binlog_format).upper() != "STATEMENT":
                    # Shards apply disjoint keys of one table at once; under REPEATABLE
                    # READ a DELETE's next-key locks cover the gaps the other shard
                    # inserts into, and the two deadlock (1213, retried, but each retry
                    # redoes a whole shard transaction). READ COMMITTED takes no gap
                    # locks for searches (MariaDB KB "InnoDB Lock Modes"; MySQL manual
                    # 17.7.2.1 "READ COMMITTED": "gap locking is disabled ... except for
                    # foreign-key constraint checking and duplicate-key checking"). The
                    # transactions read nothing but their locked checkpoint row, so the
                    # result is the same. Not with a STATEMENT-format binlog on the
                    # target, which refuses writes under READ COMMITTED (ER 1665).
                    cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def retryable(self, exc: BaseException) -> bool | None:
        import pymysql

        if isinstance(exc, pymysql.err.InterfaceError):
            return True  # the connection is closed
        if not isinstance(exc, pymysql.err.MySQLError):
            return None
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        return code in RETRYABLE_CODES

    def missing_table(self, exc: BaseException) -> bool:
        import pymysql

        # ER_NO_SUCH_TABLE (1146), mysys/errmsg / include/mysqld_error.h
        return isinstance(exc, pymysql.err.MySQLError) and bool(exc.args) and exc.args[0] == 1146

    def upsert_rendered(
        self, table: str, columns: Sequence[str], key: Sequence[str], rows: str
    ) -> str:
        cols = ", ".join(self.ident(c) for c in columns)
        update = [c for c in columns if c not in key] or list(key)
        sets = ", ".join(f"{self.ident(c)} = VALUES({self.ident(c)})" for c in update)
        return f"INSERT INTO {table} ({cols}) VALUES {rows} ON DUPLICATE KEY UPDATE {sets}"

    def render_columns(self, cur: Any, columns: Sequence[list[Any]]) -> str:
        """Values as literals, escaped exactly as PyMySQL escapes parameters (it honours
        the session's NO_BACKSLASH_ESCAPES); rendered a column at a time, so a column of
        one type costs one comprehension, not PyMySQL's dispatch per value, and no ``%``
        formatting of a statement with thousands of placeholders is done."""
        conn = cur.connection
        literals = [_literals(conn, values) for values in columns]
        return "(" + "), (".join(map(", ".join, zip(*literals, strict=True))) + ")"

    def column_sql(self, col: Column) -> str:
        """A column's definition as ``CREATE``/``ALTER TABLE`` takes it."""
        text = f"{self.ident(col.name)} {col.column_type}"
        if col.is_character and col.charset and col.charset != "binary":
            text += f" CHARACTER SET {col.charset}"
        return text + ("" if col.nullable else " NOT NULL")

    def create_table_sql(self, schema: str, tdef: TableDef) -> list[str]:
        lines = [self.column_sql(col) for col in tdef.columns]
        if tdef.primary_key:
            lines.append(f"PRIMARY KEY ({', '.join(self.ident(c) for c in tdef.primary_key)})")
        options = f" DEFAULT CHARSET={tdef.charset}" if tdef.charset else ""
        return [
            self.create_schema_sql(schema),
            f"CREATE TABLE IF NOT EXISTS {self.table_ref(schema, tdef.table)} "
            f"({', '.join(lines)}){options}",
        ]

    def create_schema_sql(self, schema: str) -> str:
        return f"CREATE DATABASE IF NOT EXISTS {self.ident(schema)}"

    def target_columns(self, cur: Any, schema: str, table: str) -> TargetColumns:
        # COLUMN_TYPE, not DATA_TYPE: relaxing a column (MODIFY ... NULL) restates it.
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        found = {_text(n): (_text(t), _text(null) == "YES") for n, t, null in cur.fetchall()}
        return found or None

    def render_step(self, step: Step, config: SqlSinkConfig) -> list[str]:
        db = map_database(config.database_map, step.database)
        table = self.table_ref(db, step.table) if step.table else ""
        op = step.op
        if op == "create_database":
            return [self.create_schema_sql(db)]
        if op == "drop_database":
            return [f"DROP DATABASE IF EXISTS {self.ident(db)}"]
        if op == "create_table" and step.tdef is not None:
            return self.create_table_sql(db, step.tdef)[1:]  # the sink creates the database
        if op == "drop_table":
            return [f"DROP TABLE IF EXISTS {table}"]
        if op == "truncate":
            return [f"TRUNCATE TABLE {table}"]
        if op == "rename_table":
            new_db = map_database(config.database_map, step.new_database)
            return [f"RENAME TABLE {table} TO {self.table_ref(new_db, step.new_table)}"]
        if op == "add_column" and step.column is not None:
            return [f"ALTER TABLE {table} ADD COLUMN {self.column_sql(step.column)}"]
        if op == "modify_column" and step.column is not None:
            return [f"ALTER TABLE {table} MODIFY COLUMN {self.column_sql(step.column)}"]
        if op == "drop_column":
            return [f"ALTER TABLE {table} DROP COLUMN {self.ident(step.name)}"]
        if op == "relax_column":
            return [f"ALTER TABLE {table} MODIFY COLUMN {self.ident(step.name)} {step.type_text}"]
        if op == "rename_column":
            return [
                f"ALTER TABLE {table} RENAME COLUMN {self.ident(step.name)}"
                f" TO {self.ident(step.new_name)}"
            ]
        if op == "primary_key":
            parts = ["DROP PRIMARY KEY"] if step.type_text == "had" else []
            if step.key:
                parts.append(f"ADD PRIMARY KEY ({', '.join(map(self.ident, step.key))})")
            return [f"ALTER TABLE {table} {', '.join(parts)}"] if parts else []
        if op == "source_sql":
            # DDL with no table definition (indexes, views): MySQL's own text, run in
            # the mapped default database with mapped qualified names.
            sql = step.sql
            mapping = dict(config.database_map)
            if mapping and any(src.lower() in sql.lower() for src in mapping):
                sql = rewrite_databases(sql, mapping)
            return [f"USE {self.ident(db)}", sql]
        raise ValueError(f"unknown schema-change step {op!r}")

    def checkpoint_setup_sql(self, schema: str) -> list[str]:
        return [
            f"CREATE DATABASE IF NOT EXISTS {self.ident(schema)}",
            f"CREATE TABLE IF NOT EXISTS {self.table_ref(schema, 'headwater_checkpoint')} ("
            "pipeline VARCHAR(190) NOT NULL, source VARCHAR(190) NOT NULL, shard INT NOT NULL,"
            " batch_id BIGINT NOT NULL, max_sequence BIGINT NOT NULL,"
            " applies BIGINT NOT NULL, rows_applied BIGINT NOT NULL,"
            " applied_at TIMESTAMP(6) NULL,"
            " PRIMARY KEY (pipeline, source, shard)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        ]

    def insert_missing_sql(self, table: str) -> str:
        return (
            f"INSERT IGNORE INTO {table} (pipeline, source, shard, batch_id, max_sequence,"
            " applies, rows_applied, applied_at) VALUES (%s, %s, %s, -1, -1, 0, 0, NULL)"
        )

    def ddl_statements(self, change: ChangeRow, config: SqlSinkConfig) -> list[str]:
        sql = change.sql or ""
        mapping = dict(config.database_map)
        if mapping and any(src.lower() in sql.lower() for src in mapping):
            sql = rewrite_databases(sql, mapping)
        out = []
        if change.database:
            target = map_database(config.database_map, change.database)
            out += [
                f"CREATE DATABASE IF NOT EXISTS {self.ident(target)}",
                f"USE {self.ident(target)}",
            ]
        return [*out, sql]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _literals(conn: Any, values: list[Any]) -> list[str]:
    """``values`` as SQL literals, as ``conn.escape`` renders each (ints as ``str``, NULL,
    text quoted and escaped, Decimal as ``format(d, "f")``), with the common column types
    (one type, maybe NULLs) rendered without a call per value."""
    kinds = set(map(type, values))
    kinds.discard(NoneType)
    if kinds <= {int}:
        return ["NULL" if v is None else str(v) for v in values]
    if kinds == {str}:
        return _quoted(conn, values)
    if kinds == {Decimal} and all(map(Decimal.is_finite, filter(None, values))):
        # PyMySQL's Decimal2Literal, less its refusal of NaN and infinities (none here).
        return ["NULL" if v is None else format(v, "f") for v in values]
    escape = conn.escape
    return ["NULL" if v is None else escape(v) for v in values]


def _quoted(conn: Any, values: list[str | None]) -> list[str]:
    """Text values quoted and escaped as PyMySQL escapes them. Most text needs no escape
    at all: one scan of the whole column finds out, and then each value is only quoted
    (``str.translate`` with multi-character replacements costs 0.4-1 us per value)."""
    text = "".join(filter(None, values))
    if conn.server_status & _no_backslash_escapes():
        if "'" not in text:
            return ["NULL" if v is None else "'" + v + "'" for v in values]
        return ["NULL" if v is None else "'" + v.replace("'", "''") + "'" for v in values]
    table, special = _escapes()
    if special.search(text) is None:
        return ["NULL" if v is None else "'" + v + "'" for v in values]
    return ["NULL" if v is None else "'" + v.translate(table) + "'" for v in values]


@functools.cache
def _escapes() -> tuple[list[str], re.Pattern[str]]:
    """The translation table of PyMySQL's ``escape_string`` (backslash escapes), taken
    from it once, and a pattern matching the characters it changes."""
    from pymysql.converters import escape_string

    table = [escape_string(chr(c)) for c in range(128)]
    changed = "".join(chr(c) for c in range(128) if table[c] != chr(c))
    return table, re.compile(f"[{re.escape(changed)}]")


@functools.cache
def _no_backslash_escapes() -> int:
    from pymysql.constants import SERVER_STATUS

    return int(SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES)


def rewrite_databases(sql: str, mapping: dict[str, str]) -> str:
    """``sql`` with every database name of ``mapping`` replaced (tables qualified by it,
    and ``CREATE``/``DROP``/``ALTER DATABASE`` of it). Unparsable SQL is returned as is."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="mysql")
    except sqlglot.errors.ParseError:
        log.warning("DDL not parsed; database names not mapped: %.200s", sql)
        return sql
    kind = str(tree.args.get("kind") or "").upper()
    if isinstance(tree, (exp.Create, exp.Drop, exp.Alter)) and kind in ("DATABASE", "SCHEMA"):
        node = tree.this
        name = node.name if node is not None else ""
        if name in mapping:
            node.set("this", exp.to_identifier(mapping[name]))
    else:
        for table in tree.find_all(exp.Table):
            db = table.args.get("db")
            if db is not None and db.name in mapping:
                table.set("db", exp.to_identifier(mapping[db.name]))
    return str(tree.sql(dialect="mysql"))
