"""The statements with small grammars, read without sqlglot, and what every handler shares.

``DROP TABLE``, ``RENAME TABLE``, ``TRUNCATE``, ``DROP INDEX`` and ``CREATE/ALTER/DROP
DATABASE`` are lists of (possibly back-quoted, possibly qualified) names and a few options:
regular expressions over the comment-free text read them exactly. :class:`Work` is the
catalog plus the changes a statement made so far, so that a later clause or a later pair of
a multi-table rename sees the earlier ones.
"""

from __future__ import annotations

import re
from typing import Protocol

from headwater.errors import DdlError
from headwater.schema._columns import TableBuilder
from headwater.schema.model import TableDef, TableKey, canonical_charset, charset_of_collation_name

__all__ = [
    "IDENT",
    "Catalog",
    "Work",
    "alter_database",
    "create_database",
    "drop_database",
    "drop_index",
    "drop_table",
    "guess_tables",
    "matching_paren",
    "name_at",
    "rename_table",
    "skip",
    "split_clauses",
    "truncate_table",
]


class Catalog(Protocol):
    """Read-only view of the definitions in force before a statement."""

    mariadb: bool

    def table(self, database: str, table: str) -> TableDef | None: ...

    def tables_in(self, database: str) -> list[TableKey]: ...

    def database_charset(self, database: str) -> str | None: ...

    @property
    def server_charset(self) -> str: ...


# --- identifiers ---------------------------------------------------------------------------

IDENT = r"(?:`(?:[^`]|``)*`|[\w$]+)"
_NAME = re.compile(rf"\s*({IDENT})(?:\s*\.\s*({IDENT}))?")


def unident(text: str) -> str:
    return text[1:-1].replace("``", "`") if text.startswith("`") else text


def name_at(text: str, pos: int, default_db: str) -> tuple[TableKey, int] | None:
    m = _NAME.match(text, pos)
    if m is None:
        return None
    if m.group(2) is not None:
        return (unident(m.group(1)), unident(m.group(2))), m.end()
    return (default_db, unident(m.group(1))), m.end()


def skip(text: str, pos: int, pattern: str) -> int:
    m = re.compile(pattern, re.I).match(text, pos)
    return m.end() if m else pos


def guess_tables(sql: str, default_db: str, *, lists: bool = False) -> tuple[TableKey, ...]:
    """Table names a statement seems to name (after TABLE, ON, TO; after commas too when
    ``lists``: DROP TABLE and RENAME TABLE take lists of tables)."""
    found: list[TableKey] = []
    lead = r"(?:\b(?:TABLES?|ON|TO)\s+|,\s*)" if lists else r"\b(?:TABLES?|ON|TO)\s+"
    for m in re.finditer(lead + r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?", sql, re.I):
        hit = name_at(sql, m.end(), default_db)
        if hit and hit[0][1].upper() not in ("IF", "SELECT") and hit[0] not in found:
            found.append(hit[0])
    return tuple(found)


# --- the working set of one statement ------------------------------------------------------


class Work:
    """The catalog plus the changes made so far by the statement being applied."""

    def __init__(self, catalog: Catalog, default_db: str) -> None:
        self.catalog = catalog
        self.default_db = default_db
        self.tables: dict[TableKey, TableDef | None] = {}
        self.dbs: dict[str, str | None] = {}
        self.named: list[TableKey] = []

    def get(self, key: TableKey) -> TableDef | None:
        if key in self.tables:
            return self.tables[key]
        return self.catalog.table(*key)

    def put(self, key: TableKey, tdef: TableDef | None) -> None:
        self.tables.pop(key, None)  # re-insert: keep statement order
        self.tables[key] = tdef

    def name(self, key: TableKey) -> None:
        if key not in self.named:
            self.named.append(key)

    def db_charset(self, db: str) -> str:
        if db in self.dbs and self.dbs[db] is not None:
            return self.dbs[db]  # type: ignore[return-value]
        return self.catalog.database_charset(db) or self.catalog.server_charset

    def tables_in(self, db: str) -> list[TableKey]:
        keys = [k for k in self.catalog.tables_in(db) if k not in self.tables]
        keys += [k for k, v in self.tables.items() if k[0] == db and v is not None]
        return keys


def matching_paren(text: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch in "'\"`":
            j = i + 1
            while j < len(text) and text[j] != ch:
                j += 2 if text[j] == "\\" and ch != "`" else 1
            i = j + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def split_clauses(text: str) -> list[str]:
    clauses: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"`":
            j = i + 1
            while j < len(text) and text[j] != ch:
                j += 2 if text[j] == "\\" and ch != "`" else 1
            i = j + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            clauses.append(text[start:i].strip())
            start = i + 1
        i += 1
    clauses.append(text[start:].strip())
    return [c for c in clauses if c]


def drop_table(text: str, work: Work) -> None:
    m = re.match(r"DROP\s+TABLES?\s+", text, re.I)
    if m is None:
        raise DdlError("DROP TABLE not understood")
    pos = skip(text, m.end(), r"IF\s+EXISTS\s+")
    while True:
        hit = name_at(text, pos, work.default_db)
        if hit is None:
            raise DdlError("DROP TABLE: expected a table name")
        key, pos = hit
        work.name(key)
        if work.get(key) is not None:
            work.put(key, None)
        comma = re.compile(r"\s*,").match(text, pos)
        if comma is None:
            break
        pos = comma.end()
    if not re.fullmatch(r"\s*(RESTRICT|CASCADE)?\s*", text[pos:], re.I):
        raise DdlError(f"DROP TABLE: unexpected {text[pos : pos + 40]!r}")


def rename_table(text: str, work: Work) -> None:
    m = re.match(r"RENAME\s+TABLES?\s+", text, re.I)
    pos = m.end() if m else 0
    while True:
        old = name_at(text, pos, work.default_db)
        to = re.compile(r"\s+TO\s+", re.I).match(text, old[1]) if old else None
        new = name_at(text, to.end(), work.default_db) if old and to else None
        if old is None or new is None:
            raise DdlError("RENAME TABLE: expected 'a TO b'")
        (old_key, _), (new_key, pos) = old, new
        work.name(old_key)
        work.name(new_key)
        current = work.get(old_key)
        if current is None:
            raise DdlError(f"RENAME TABLE of unknown table {old_key[0]}.{old_key[1]}")
        work.put(old_key, None)
        work.put(new_key, current.renamed(*new_key))
        comma = re.compile(r"\s*,").match(text, pos)
        if comma is None:
            break
        pos = comma.end()
    if text[pos:].strip():
        raise DdlError(f"RENAME TABLE: unexpected {text[pos : pos + 40]!r}")


def truncate_table(text: str, work: Work) -> None:
    pos = skip(text, 0, r"TRUNCATE\s+(?:TABLE\s+)?")
    hit = name_at(text, pos, work.default_db)
    if hit is None:
        raise DdlError("TRUNCATE: expected a table name")
    work.name(hit[0])


def drop_index(text: str, work: Work) -> None:
    m = re.match(rf"DROP\s+INDEX\s+(?:IF\s+EXISTS\s+)?({IDENT})\s+ON\s+", text, re.I)
    hit = name_at(text, m.end(), work.default_db) if m else None
    if m is None or hit is None:
        raise DdlError("DROP INDEX not understood")
    key = hit[0]
    work.name(key)
    current = work.get(key)
    if current is None:
        return
    builder = TableBuilder.from_def(current)
    name = unident(m.group(1))
    if name.upper() == "PRIMARY":
        builder.set_primary_key([])
    else:
        builder.drop_unique(name)
    work.put(key, builder.build())


_DB_OPTIONS = re.compile(
    r"(?:DEFAULT\s+)?(?:(?:CHARACTER\s+SET|CHARSET)\s*=?\s*(\w+)|COLLATE\s*=?\s*(\w+))", re.I
)


def _db_charset(text: str) -> str | None:
    charset = collation = None
    for m in _DB_OPTIONS.finditer(text):
        charset = canonical_charset(m.group(1)) if m.group(1) else charset
        collation = m.group(2) or collation
    if charset is None and collation is not None:
        charset = charset_of_collation_name(collation)
    return charset


def create_database(text: str, work: Work) -> None:
    m = re.match(
        rf"CREATE\s+(?:OR\s+REPLACE\s+)?(?:DATABASE|SCHEMA)\s+(IF\s+NOT\s+EXISTS\s+)?({IDENT})",
        text,
        re.I,
    )
    if m is None:
        raise DdlError("CREATE DATABASE not understood")
    name = unident(m.group(2))
    exists = work.catalog.database_charset(name) is not None or bool(work.catalog.tables_in(name))
    if m.group(1) and exists:
        return
    charset = _db_charset(text[m.end() :]) or work.catalog.server_charset
    if text.upper().startswith("CREATE OR REPLACE"):
        for key in work.tables_in(name):
            work.put(key, None)
    work.dbs[name] = charset


def alter_database(text: str, work: Work) -> None:
    m = re.match(rf"ALTER\s+(?:DATABASE|SCHEMA)(?:\s+({IDENT}))?", text, re.I)
    if m is None:
        raise DdlError("ALTER DATABASE not understood")
    name = m.group(1)
    rest = text[m.end() :]
    if name is None or name.upper() in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE"):
        rest = text[m.start(1) if name else m.end() :]
        db = work.default_db
    else:
        db = unident(name)
    charset = _db_charset(rest)
    if charset is not None:
        work.dbs[db] = charset


def drop_database(text: str, work: Work) -> None:
    m = re.match(rf"DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?({IDENT})", text, re.I)
    if m is None:
        raise DdlError("DROP DATABASE not understood")
    name = unident(m.group(1))
    for key in work.tables_in(name):
        work.name(key)
        work.put(key, None)
    work.dbs[name] = None
