"""Bulk loads into MySQL/MariaDB: rows as LOAD DATA text, produced by the source server.

Snapshots copy whole key ranges. Moving them row by row through Python (decode, change
row, JSON image, merge, bind) costs far more than the two servers spend; this module lets
the *source* server format the rows as the text ``LOAD DATA`` reads and the *target*
server parse it, with Python only moving bytes.

**The text format** (one row a line; MySQL manual, "LOAD DATA", field and line handling)::

    field TAB field TAB ... LF         FIELDS TERMINATED BY x'09' ESCAPED BY '\\'
                                       LINES TERMINATED BY x'0a', CHARACTER SET binary
    backslash, TAB, LF in a value  ->  \\\\  \\t  \\n
    NULL                           ->  \\N

Each field is produced on the source by the SQL of :func:`line_sql` (``CONCAT_WS`` of
per-column expressions, all ``BINARY``, so no charset conversion happens on the way) and
assigned on the target by :func:`load_sql`, per column type:

=============================== ============================ ============================
type                            source expression            target assignment
=============================== ============================ ============================
integers, decimal, double,      ``CAST(c AS BINARY)``        the column (text parse)
date, time, datetime, year,
timestamp (sessions in UTC)
float                           ``CAST(c AS DOUBLE)``        the column (the double's
                                                             text rounds back exactly)
bit                             ``c + 0`` (decimal)          ``CAST(@v AS UNSIGNED)``
char, varchar, text, enum, set  bytes in the column charset  ``CONVERT(@v USING cs)``
                                (escaped)                    (``cs`` the source charset)
json (MySQL's binary JSON)      ``CONVERT(c USING utf8mb4)`` ``CONVERT(@v USING utf8mb4)``
binary, varbinary, blobs        bytes (escaped)              the column
geometry types                  internal bytes (SRID + WKB)  the column
=============================== ============================ ============================

Other types (MariaDB's ``inet4``, ``inet6``, ``uuid``, or anything unknown) have no bulk
form: :func:`line_sql` returns None and callers use the general path.

**Loading** (:class:`BulkTarget`, the MySQL sink's
:class:`~headwater.sinks.base.BulkLoad` capability): one target transaction per key
range::

    DELETE FROM target WHERE <range>         (keys compared as the source orders them)
    LOAD DATA LOCAL INFILE <file> REPLACE INTO TABLE target ...
    COMMIT

so a load replaces exactly the range: replaying it (a retried task, a resumed snapshot)
leaves the range as the newest load read it, including rows deleted at the source
between two attempts. The range is compared in the source's key order (placeholders of
:meth:`~headwater.snapshot.keys.KeyColumn.literal`, in the source collation). Sessions
run in READ COMMITTED, so loads of neighbouring ranges of one table take no gap locks
and run at once; retryable errors (deadlock, lost connection) redo the transaction per
the sink's retry policy. ``LOAD DATA LOCAL`` turns data errors into warnings: a load that
leaves any warning is rolled back and raised as :class:`~headwater.errors.SinkError`.
The session runs in UTC, keeps zero dates (the bulk path requires ``zero_dates: keep``)
and clears ``NO_BACKSLASH_ESCAPES`` so the statement's escape character means what it
says. The target must allow ``local_infile`` (:meth:`BulkTarget.probe`).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from headwater.errors import SinkError
from headwater.schema.model import BINARY_TYPES, CHARACTER_TYPES, Column, TableDef
from headwater.sinks.base import Renames, map_database
from headwater.sinks.dialect import SqlSinkConfig
from headwater.sinks.mysql.client import ZERO_DATE_MODES, MysqlDialect, configure_session

__all__ = ["BulkTarget", "line_sql", "load_sql"]

log = logging.getLogger(__name__)

_DIALECT = MysqlDialect()
_PLAIN = frozenset(
    {
        "tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "numeric",
        "double", "real", "date", "time", "datetime", "timestamp", "year",
    }
)  # fmt: skip
_GEOMETRY = frozenset(
    {
        "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
        "multipolygon", "geometrycollection", "geomcollection",
    }
)  # fmt: skip
_RAW_BINARY = BINARY_TYPES - {"inet4", "inet6", "uuid"}
# Hex literals: the same bytes whatever the session's sql_mode says about backslashes.
_NULL = "x'5c4e'"  # \N


def _escaped(expr: str) -> str:
    return f"REPLACE(REPLACE(REPLACE({expr}, x'5c', x'5c5c'), x'09', x'5c74'), x'0a', x'5c6e')"


def _field(col: Column) -> str | None:
    """The source expression of one column's field (module docstring), None if none."""
    c = _DIALECT.ident(col.name)
    t = col.data_type
    if t in _PLAIN:
        expr = f"CAST({c} AS BINARY)"
    elif t == "float":
        expr = f"CAST(CAST({c} AS DOUBLE) AS BINARY)"
    elif t == "bit":
        expr = f"CAST({c} + 0 AS BINARY)"
    elif t == "json":
        expr = _escaped(f"CAST(CONVERT({c} USING utf8mb4) AS BINARY)")
    elif t in CHARACTER_TYPES or t in _RAW_BINARY or t in _GEOMETRY:
        expr = _escaped(f"CAST({c} AS BINARY)")
    else:
        return None
    return f"COALESCE({expr}, {_NULL})"


def line_sql(tdef: TableDef) -> str | None:
    """The SQL expression of one row's line (without its LF), or None when a column type
    has no bulk form."""
    fields = [_field(col) for col in tdef.columns]
    if any(f is None for f in fields):
        return None
    return f"CONCAT_WS(x'09', {', '.join(f for f in fields if f is not None)})"


def _assignment(col: Column, var: str) -> str | None:
    """The ``SET`` expression of a column loaded through ``var``; None: loaded directly."""
    t = col.data_type
    if t == "bit":
        return f"CAST({var} AS UNSIGNED)"
    if t == "json":
        return f"CONVERT({var} USING utf8mb4)"
    if t in CHARACTER_TYPES:
        return f"CONVERT({var} USING {col.charset or 'utf8mb4'})"
    return None


def load_sql(path: str, table_ref: str, tdef: TableDef) -> str:
    """The ``LOAD DATA LOCAL INFILE`` statement of a file in the module's text format."""
    targets: list[str] = []
    sets: list[str] = []
    for i, col in enumerate(tdef.columns):
        var = f"@hw{i}"
        how = _assignment(col, var)
        if how is None:
            targets.append(_DIALECT.ident(col.name))
        else:
            targets.append(var)
            sets.append(f"{_DIALECT.ident(col.name)} = {how}")
    quoted = "'" + path.replace("\\", "\\\\").replace("'", "\\'") + "'"
    sql = (
        f"LOAD DATA LOCAL INFILE {quoted} REPLACE INTO TABLE {table_ref} CHARACTER SET binary"
        " FIELDS TERMINATED BY '\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\n'"
        f" ({', '.join(targets)})"
    )
    return sql + (f" SET {', '.join(sets)}" if sets else "")


@dataclass(frozen=True, slots=True)
class BulkTarget:
    """A MySQL/MariaDB sink's target as bulk loads see it (picklable, no connection).

    ``renames`` are the pipeline's name-only transforms, as ``(kind, mapping)`` pairs in
    order: ``("database", {old: new})`` or ``("table", {"db.t": "t2" | "db2.t2"})``.
    """

    config: SqlSinkConfig
    renames: Renames = ()

    def line_sql(self, tdef: TableDef) -> str | None:
        """:func:`line_sql`: the source's text of one row for this target."""
        return line_sql(tdef)

    def target_name(self, database: str, table: str) -> tuple[str, str]:
        """Where rows of ``database.table`` land: renames in order, then the sink's
        ``database_map``. Also the name the sink's schema knows the table by is
        :meth:`renamed`."""
        db, tbl = self.renamed(database, table)
        return map_database(self.config.database_map, db), tbl

    def renamed(self, database: str, table: str) -> tuple[str, str]:
        name = (database, table)
        for kind, pairs in self.renames:
            mapping = dict(pairs)
            if kind == "database":
                name = (mapping.get(name[0], name[0]), name[1])
            else:
                new = mapping.get(f"{name[0]}.{name[1]}")
                if new is not None:
                    db, _, tbl = new.rpartition(".")
                    name = (db or name[0], tbl)
        return name

    def connect(self) -> Any:
        """A target connection allowed to send local files (module docstring, session)."""
        options = self.config.connection
        conn = options.connect_mysql(autocommit=False, local_infile=True)
        try:
            with conn.cursor() as cur:
                # No gap locks: loads of neighbouring ranges of one table run at once.
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                configure_session(cur, options, (*ZERO_DATE_MODES, "NO_BACKSLASH_ESCAPES"))
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def probe(self) -> bool:
        """Whether the target accepts ``LOAD DATA LOCAL`` (``@@local_infile`` on)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@GLOBAL.local_infile")
                return bool(int(cur.fetchone()[0]))
        finally:
            conn.close()

    def create_table(self, database: str, table: str, position: Any) -> None:
        """``CREATE ... IF NOT EXISTS`` of the target table as the sink would create it,
        with its definition at ``position`` (only when the sink's ``create_tables`` is
        on). Run it before loading: it waits for loads in progress into the table."""
        if not self.config.create_tables:
            return
        db, tbl = self.renamed(database, table)
        tdef = self.config.schema.table_at(db, tbl, position)
        if tdef is None:
            raise SinkError(f"no table definition at {position}", table=f"{db}.{tbl}")
        target = map_database(self.config.database_map, db)
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                for sql in _DIALECT.create_table_sql(target, tdef):
                    cur.execute(sql)
            conn.commit()
        finally:
            conn.close()

    def load(
        self,
        path: str,
        database: str,
        table: str,
        tdef: TableDef,
        where: tuple[str, Sequence[Any]],
        conn: Any = None,
    ) -> int:
        """Replace the rows of the key range ``where`` (SQL over the key columns with
        ``%s`` placeholders, and its parameters) of the target of ``database.table`` with
        the rows in ``path`` (module docstring). Returns the rows loaded. ``conn``: a
        connection of :meth:`connect` to use first (retries open their own)."""
        attempt = 0
        while True:
            attempt += 1
            given = conn is not None and attempt == 1
            c = conn if given else self.connect()
            try:
                return self._load(c, path, database, table, tdef, where)
            except Exception as exc:
                policy = self.config.retry
                if not _DIALECT.retryable(exc) or attempt >= policy.attempts:
                    raise
                log.warning("bulk load of %s.%s: %s; retry %d", database, table, exc, attempt)
                time.sleep(policy.delay(attempt, random.random()))
            finally:
                if not given:
                    c.close()

    def _load(
        self,
        conn: Any,
        path: str,
        database: str,
        table: str,
        tdef: TableDef,
        where: tuple[str, Sequence[Any]],
    ) -> int:
        target = _DIALECT.table_ref(*self.target_name(database, table))
        try:
            with conn.cursor() as cur:
                cur.execute(f"DELETE FROM {target} WHERE {where[0]}", list(where[1]))
                loaded = cur.execute(load_sql(path, target, tdef))
                warnings = conn.show_warnings() if cur.warning_count else ()
            if warnings:
                raise SinkError(
                    f"LOAD DATA left {len(warnings)} warnings, the first: "
                    f"{' '.join(str(w) for w in warnings[0])}",
                    table=f"{database}.{table}",
                )
            conn.commit()
            return int(loaded)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.rollback()  # a lost connection cannot; the server already did
            raise
