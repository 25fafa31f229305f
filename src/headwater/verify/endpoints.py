"""The two servers ``headwater verify`` compares: URLs, connections, catalog lookups and the
dialect of their SQL (MySQL/MariaDB through pymysql, PostgreSQL through psycopg).

An :class:`Endpoint` names a server by URL (``mysql://user@host:port/db``,
``postgresql://user@host:port/dbname``); the password never comes from the URL (it
would land in shell histories): it is given, read from a file, or taken from an
environment variable, and never appears in a message or ``repr``. On PostgreSQL a MySQL
"database" is a schema (as the PostgreSQL sink maps it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from headwater.errors import ConfigError, HeadwaterError

__all__ = ["Column", "Connection", "Endpoint", "VerifyError", "connect", "parse_endpoint"]

_MYSQL = ("mysql", "mariadb")
_POSTGRES = ("postgresql", "postgres")
#: Key columns of these types order by collation: across products they are compared in
#: code point order (utf8mb4_bin, COLLATE "C") so both servers cut the same chunks.
_TEXT_TYPES = {
    "char",
    "varchar",
    "tinytext",
    "text",
    "mediumtext",
    "longtext",
    "enum",
    "set",
    "character varying",
    "character",
}


class VerifyError(HeadwaterError):
    """A comparison that cannot be made: a server refuses, a table lacks a primary key."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A server to compare: ``kind`` is ``mysql`` or ``postgresql``; ``database`` is the
    URL's path (MySQL: the default database to compare; PostgreSQL: the database to
    connect to)."""

    kind: str
    host: str
    port: int
    user: str
    database: str | None
    password: str = field(default="", repr=False)

    def __str__(self) -> str:
        db = f"/{self.database}" if self.database else ""
        return f"{self.kind}://{self.user}@{self.host}:{self.port}{db}"


def parse_endpoint(
    url: str,
    *,
    role: str,
    password_file: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
) -> Endpoint:
    """An Endpoint from a URL; ``role`` (``source``/``target``) names the option in errors
    and the password variable ``HEADWATER_<ROLE>_PASSWORD`` used without ``password_file``."""
    parts = urlsplit(url)
    if parts.scheme in _MYSQL:
        kind, default_port = "mysql", 3306
    elif parts.scheme in _POSTGRES:
        kind, default_port = "postgresql", 5432
    else:
        raise ConfigError(
            f"expected mysql://USER@HOST:PORT/DB or postgresql://USER@HOST:PORT/DB, "
            f"got {parts.scheme or '(no scheme)'}://",
            field=role,
        )
    if parts.password is not None:
        raise ConfigError(
            f"the URL carries a password: remove it and set HEADWATER_{role.upper()}_PASSWORD"
            f" or use --{role}-password-file",
            field=role,
        )
    if not parts.hostname or not parts.username:
        raise ConfigError(f"the URL needs a user and a host: {kind}://USER@HOST:PORT", field=role)
    try:
        port = parts.port or default_port
    except ValueError:
        raise ConfigError("the URL's port is not a number in 1..65535", field=role) from None
    if password_file is not None:
        lines = Path(password_file).read_text(encoding="utf-8").splitlines()
        password = lines[0] if lines else ""
    else:
        variable = f"HEADWATER_{role.upper()}_PASSWORD"
        password = (os.environ if env is None else env).get(variable, "")
    database = unquote(parts.path.strip("/")) or None
    return Endpoint(kind, parts.hostname, port, unquote(parts.username), database, password)


@dataclass(frozen=True, slots=True)
class Column:
    """A column as the catalog describes it: its name, type name and whether it is JSON."""

    name: str
    data_type: str
    is_json: bool

    @property
    def is_text(self) -> bool:
        return self.data_type in _TEXT_TYPES


class Connection:
    """One open connection to an Endpoint, with the dialect's catalog and chunk queries."""

    def __init__(self, endpoint: Endpoint, raw: Any) -> None:
        self.endpoint = endpoint
        self.kind = endpoint.kind
        self._raw = raw

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- SQL text ----------------------------------------------------------------------------

    def quote(self, name: str) -> str:
        if self.kind == "mysql":
            return "`" + name.replace("`", "``") + "`"
        return '"' + name.replace('"', '""') + '"'

    def table_ref(self, schema: str, table: str) -> str:
        return f"{self.quote(schema)}.{self.quote(table)}"

    def key_expr(self, column: str, *, binary_text: bool) -> str:
        """A key column as chunk boundaries compare and order it."""
        q = self.quote(column)
        if not binary_text:
            return q
        return (
            f"CONVERT({q} USING utf8mb4) COLLATE utf8mb4_bin"
            if self.kind == "mysql"
            else (f'{q} COLLATE "C"')
        )

    # -- queries -----------------------------------------------------------------------------

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self._raw.cursor()
        try:
            cur.execute(sql, tuple(params))
            return [tuple(r) for r in cur.fetchall()]
        finally:
            cur.close()

    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        cur = self._raw.cursor()
        try:
            cur.execute(sql, tuple(params))
            while batch := cur.fetchmany(1000):
                for r in batch:
                    yield tuple(r)
        finally:
            cur.close()

    def tables(self, schema: str) -> list[str]:
        """The base tables of a database (PostgreSQL: schema), by name."""
        got = self.rows(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name",
            (schema,),
        )
        return [str(r[0]) for r in got]

    def columns(self, schema: str, table: str) -> list[Column]:
        """The table's columns in definition order; empty when the table does not exist."""
        got = self.rows(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (schema, table),
        )
        json_cols = self._mariadb_json_columns(schema, table) if self.kind == "mysql" else set()
        out = []
        for name, data_type in got:
            t = str(data_type).lower()
            out.append(Column(str(name), t, t in ("json", "jsonb") or str(name) in json_cols))
        return out

    def _mariadb_json_columns(self, schema: str, table: str) -> set[str]:
        # MariaDB's JSON is LONGTEXT with a json_valid() check named after the column.
        try:
            got = self.rows(
                "SELECT constraint_name FROM information_schema.check_constraints"
                " WHERE constraint_schema = %s AND table_name = %s"
                " AND check_clause LIKE 'json_valid(%%'",
                (schema, table),
            )
        except Exception:  # MySQL 8's check_constraints has no table_name column
            return set()
        return {str(r[0]) for r in got}

    def primary_key(self, schema: str, table: str) -> list[str]:
        """The primary key's columns in key order (empty: none)."""
        if self.kind == "mysql":
            sql = (
                "SELECT column_name FROM information_schema.key_column_usage"
                " WHERE table_schema = %s AND table_name = %s AND constraint_name = 'PRIMARY'"
                " ORDER BY ordinal_position"
            )
        else:
            sql = (
                "SELECT k.column_name FROM information_schema.table_constraints c"
                " JOIN information_schema.key_column_usage k"
                " ON k.constraint_name = c.constraint_name AND k.table_schema = c.table_schema"
                " AND k.table_name = c.table_name"
                " WHERE c.table_schema = %s AND c.table_name = %s"
                " AND c.constraint_type = 'PRIMARY KEY' ORDER BY k.ordinal_position"
            )
        return [str(r[0]) for r in self.rows(sql, (schema, table))]


def connect(endpoint: Endpoint, *, timeout: float = 10.0) -> Connection:
    """Open a connection (MySQL sessions in UTC, autocommit, REPEATABLE READ snapshot per
    statement); raises VerifyError naming the server (never the password)."""
    try:
        if endpoint.kind == "mysql":
            from headwater.connections import mysql_connect

            raw: Any = mysql_connect(
                host=endpoint.host,
                port=endpoint.port,
                user=endpoint.user,
                password=endpoint.password,
                database=endpoint.database,
                autocommit=True,
                connect_timeout=int(timeout),
                init_command="SET time_zone = '+00:00'",
            )
        else:
            import psycopg

            raw = psycopg.connect(
                host=endpoint.host,
                port=endpoint.port,
                user=endpoint.user,
                password=endpoint.password or None,
                dbname=endpoint.database or "postgres",
                autocommit=True,
                connect_timeout=int(timeout),
                options="-c TimeZone=UTC",
            )
    except Exception as e:
        message = str(e).replace(endpoint.password, "***") if endpoint.password else str(e)
        raise VerifyError(f"cannot connect to {endpoint}: {message.strip()}") from None
    return Connection(endpoint, raw)
