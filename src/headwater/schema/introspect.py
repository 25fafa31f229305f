"""Read table definitions from a live server's ``information_schema`` (through PyMySQL).

Three queries for any number of tables -- TABLES, COLUMNS and the unique indexes of
STATISTICS -- never one per table. Written for MariaDB 10.5+ and MySQL 8:

* ``COLUMN_TYPE`` is parsed and re-rendered in the canonical form of :mod:`.model`
  (MariaDB keeps integer display widths, ``int(11)``; MySQL 8.0.19+ drops them).
* Generated columns are those whose ``EXTRA`` says ``VIRTUAL GENERATED`` or
  ``STORED GENERATED`` (MySQL's ``DEFAULT_GENERATED`` is a default expression, not a
  generated column); invisible ones say ``INVISIBLE``.
* MySQL 8 returns some ``information_schema`` columns as binary strings; they are decoded.
* Views are skipped: they have no rows in the binary log.

The connection is only read from; callers own it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from headwater.schema.model import (
    BINARY_TYPES,
    CHARACTER_TYPES,
    Column,
    TableDef,
    TableKey,
    canonical_charset,
    canonical_type,
    charset_of_collation_name,
    parse_column_type,
)

__all__ = [
    "SYSTEM_DATABASES",
    "read_database_charsets",
    "read_server_charset",
    "read_tables",
]

#: Databases never read unless asked for by name.
SYSTEM_DATABASES = frozenset({"mysql", "information_schema", "performance_schema", "sys"})

TableFilter = Callable[[str, str], bool]


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "surrogateescape")
    return str(value)


def _opt(value: Any) -> str | None:
    return None if value is None else _text(value)


def _where(databases: Iterable[str] | None) -> tuple[str, list[str]]:
    if databases is None:
        marks = ", ".join(["%s"] * len(SYSTEM_DATABASES))
        return f"TABLE_SCHEMA NOT IN ({marks})", sorted(SYSTEM_DATABASES)
    names = sorted(set(databases))
    if not names:
        return "FALSE", []
    return f"TABLE_SCHEMA IN ({', '.join(['%s'] * len(names))})", names


def _rows(conn: Any, sql: str, args: list[str]) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def read_tables(
    conn: Any,
    databases: Iterable[str] | None = None,
    *,
    table_filter: TableFilter | None = None,
) -> dict[TableKey, TableDef]:
    """Definitions of the base tables of ``databases`` (default: every non-system one).

    ``table_filter(db, table)`` narrows the result further (the query still reads the
    databases' rows; filtering happens here).
    """
    where, args = _where(databases)
    keep = table_filter or (lambda _db, _t: True)
    tables: dict[TableKey, tuple[str | None, str | None]] = {}
    for db, name, collation in _rows(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES"
        f" WHERE {where} AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')",
        args,
    ):
        key = (_text(db), _text(name))
        if keep(*key):
            coll = _opt(collation)
            tables[key] = (None if coll is None else charset_of_collation_name(coll), coll)

    columns: dict[TableKey, list[Column]] = defaultdict(list)
    for row in _rows(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE,"
        " CHARACTER_SET_NAME, COLLATION_NAME, EXTRA FROM information_schema.COLUMNS"
        f" WHERE {where} ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
        args,
    ):
        key = (_text(row[0]), _text(row[1]))
        if key in tables:
            columns[key].append(_column(row[2:]))

    uniques: dict[TableKey, dict[str, list[str]]] = defaultdict(dict)
    for db, name, index, column in _rows(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME"
        f" FROM information_schema.STATISTICS WHERE {where} AND NON_UNIQUE = 0"
        " ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
        args,
    ):
        key = (_text(db), _text(name))
        if key in tables and column is not None:  # MySQL functional key parts have none
            uniques[key].setdefault(_text(index), []).append(_text(column))

    result: dict[TableKey, TableDef] = {}
    for key, (charset, collation) in tables.items():
        keys = uniques.get(key, {})
        pk = tuple(keys.pop("PRIMARY", ()))
        result[key] = TableDef(
            database=key[0],
            table=key[1],
            columns=tuple(columns.get(key, ())),
            primary_key=pk,
            unique_keys=tuple(sorted((n, tuple(c)) for n, c in keys.items())),
            charset=charset,
            collation=collation,
        )
    return result


def _column(row: tuple[Any, ...]) -> Column:
    name, data_type, column_type, is_nullable, charset, collation, extra = row
    data_type = _text(data_type).lower()
    _, args, unsigned, zerofill = parse_column_type(_text(column_type))
    extra_text = _text(extra or "").upper()
    generated = None
    if "VIRTUAL GENERATED" in extra_text:
        generated = "VIRTUAL"
    elif "STORED GENERATED" in extra_text:
        generated = "STORED"
    cs = canonical_charset(_opt(charset))
    if data_type in BINARY_TYPES:
        cs = "binary"
    elif data_type not in CHARACTER_TYPES:
        cs = None
    enum_values = args if data_type == "enum" else None
    set_values = args if data_type == "set" else None
    return Column(
        name=_text(name),
        data_type=data_type,
        column_type=canonical_type(data_type, args, unsigned=unsigned, zerofill=zerofill),
        nullable=_text(is_nullable).upper() == "YES",
        unsigned=unsigned,
        charset=cs,
        enum_values=enum_values,
        set_values=set_values,
        generated=generated,
        invisible="INVISIBLE" in extra_text,
        collation=_opt(collation),
    )


def read_database_charsets(conn: Any, databases: Iterable[str] | None = None) -> dict[str, str]:
    """Default charset of each database (``information_schema.SCHEMATA``)."""
    where, args = _where(databases)
    rows = _rows(
        conn,
        "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA"
        f" WHERE {where.replace('TABLE_SCHEMA', 'SCHEMA_NAME')}",
        args,
    )
    return {_text(name): canonical_charset(_text(cs)) or _text(cs) for name, cs in rows}


def read_server_charset(conn: Any) -> str:
    """``@@character_set_server``: the charset of databases created without one."""
    rows = _rows(conn, "SELECT @@GLOBAL.character_set_server", [])
    return canonical_charset(_text(rows[0][0])) or "utf8mb4"
