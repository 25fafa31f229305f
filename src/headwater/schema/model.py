"""Table definitions as the schema history keeps them: :class:`Column` and :class:`TableDef`.

A :class:`TableDef` is what headwater needs to know about a table to decode and describe its
row changes: the columns in table order (the order of row images), their types, signedness,
character sets and ENUM/SET value names, and the key that identifies a row. Both sources of
definitions -- ``information_schema`` (:mod:`.introspect`) and DDL replay (:mod:`.ddl`) --
produce the same *canonical* form, so that two definitions of the same table compare equal
whichever way they were obtained:

* ``data_type`` is the lowercase base type as ``information_schema.COLUMNS.DATA_TYPE`` names
  it (``int``, ``varchar``, ``enum``, ``mediumtext``...).
* ``column_type`` is canonical SQL type text (:func:`canonical_type`): lowercase type name,
  integer display widths and ``year(4)`` dropped, DECIMAL always with ``(p,s)``, CHAR/BINARY/
  BIT always with a length, temporal types with ``(fsp)`` only when ``fsp > 0``, ENUM/SET
  values quoted with ``''`` escaping and no spaces, then `` unsigned`` / `` zerofill``.
* ``charset`` is the MySQL charset name for columns that hold characters (CHAR, VARCHAR, the
  TEXT family, ENUM, SET), ``"binary"`` for binary strings (BINARY, VARBINARY, the BLOB family
  and MariaDB's INET4/INET6/UUID) and ``None`` for everything else. ``utf8`` is spelled
  ``utf8mb3``. Collations are kept for information but do not take part in equality: their
  defaults differ between servers and versions, and decoding needs only the charset.
* Column names keep the case the server stores; lookups by name are case-insensitive, as
  MySQL's are. Default values are not kept.

Invariants: :class:`Column` and :class:`TableDef` are immutable and hashable; unique keys are
sorted by name; ``to_json``/``from_json`` round-trip exactly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from headwater.binlog.codec import ColumnDef

__all__ = [
    "BINARY_TYPES",
    "CHARACTER_TYPES",
    "Column",
    "TableDef",
    "TableKey",
    "canonical_charset",
    "canonical_type",
    "charset_of_collation_name",
    "parse_column_type",
]

#: (database, table)
TableKey = tuple[str, str]

INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
NUMERIC_TYPES = INTEGER_TYPES | {"decimal", "float", "double"}
TEXT_TYPES = ("tinytext", "text", "mediumtext", "longtext")
BLOB_TYPES = ("tinyblob", "blob", "mediumblob", "longblob")
#: Column types whose values are characters in a charset.
CHARACTER_TYPES = frozenset({"char", "varchar", "enum", "set", *TEXT_TYPES})
#: Column types whose values are bytes (charset ``binary``).
BINARY_TYPES = frozenset({"binary", "varbinary", "inet4", "inet6", "uuid", *BLOB_TYPES})
_TEMPORAL_FSP = frozenset({"time", "datetime", "timestamp"})
_LENGTH_DEFAULT_1 = frozenset({"char", "binary", "bit"})

_COLUMN_TYPE = re.compile(
    r"^\s*(?P<base>[a-z][a-z0-9_ ]*?)\s*(?:\((?P<args>.*)\))?"
    r"(?P<mods>(?:\s+(?:unsigned|signed|zerofill))*)\s*$",
    re.IGNORECASE | re.DOTALL,
)
_QUOTED = re.compile(r"'((?:[^'\\]|''|\\.)*)'", re.DOTALL)


def canonical_charset(name: str | None) -> str | None:
    """Lowercase charset name, ``utf8`` spelled ``utf8mb3`` (as MariaDB 10.6+ and MySQL 8 do)."""
    if name is None:
        return None
    low = name.lower()
    return "utf8mb3" if low == "utf8" else low


def charset_of_collation_name(collation: str) -> str | None:
    """The charset a collation name belongs to (``latin1_bin`` -> ``latin1``), else ``None``.

    MariaDB 11's charset-less ``uca1400_*`` names give ``None``.
    """
    low = collation.lower()
    if low == "binary":
        return "binary"
    head = low.split("_", 1)[0]
    if head.startswith("uca") or not head:
        return None
    return canonical_charset(head)


def _unquote(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append({"n": "\n", "t": "\t", "0": "\0", "r": "\r"}.get(nxt, nxt))
            i += 2
            continue
        if ch == "'" and text[i + 1 : i + 2] == "'":
            out.append("'")
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def parse_column_type(text: str) -> tuple[str, tuple[str, ...], bool, bool]:
    """``COLUMN_TYPE`` text -> (base type, args, unsigned, zerofill).

    ENUM/SET args are the unquoted value names; other args are the numbers as text.
    """
    m = _COLUMN_TYPE.match(text)
    if m is None:
        raise ValueError(f"not a column type: {text!r}")
    base = " ".join(m.group("base").lower().split())
    args_text = m.group("args")
    mods = m.group("mods").lower().split()
    args: tuple[str, ...] = ()
    if args_text is not None:
        if base in ("enum", "set"):
            args = tuple(_unquote(v) for v in _QUOTED.findall(args_text))
        else:
            args = tuple(a.strip() for a in args_text.split(",") if a.strip())
    zerofill = "zerofill" in mods
    return base, args, "unsigned" in mods or zerofill, zerofill


def canonical_type(
    data_type: str, args: Sequence[str] = (), *, unsigned: bool = False, zerofill: bool = False
) -> str:
    """Canonical ``column_type`` text for a base type and its arguments (module docstring)."""
    base = data_type.lower()
    text = base
    if base in ("enum", "set"):
        text = f"{base}({','.join(_quote(v) for v in args)})"
    elif base in INTEGER_TYPES or base == "year":
        pass
    elif base == "decimal":
        precision = args[0] if args else "10"
        scale = args[1] if len(args) > 1 else "0"
        text = f"decimal({precision},{scale})"
    elif base in _TEMPORAL_FSP:
        if args and int(args[0]) > 0:
            text = f"{base}({int(args[0])})"
    elif base in _LENGTH_DEFAULT_1:
        text = f"{base}({int(args[0]) if args else 1})"
    elif args:
        text = f"{base}({','.join(str(int(a)) for a in args)})"
    if base in NUMERIC_TYPES:
        if unsigned or zerofill:
            text += " unsigned"
        if zerofill:
            text += " zerofill"
    return text


@dataclass(frozen=True, slots=True)
class Column:
    """One column, in the canonical form described in the module docstring.

    ``generated`` is ``"VIRTUAL"`` or ``"STORED"`` for generated columns (both are in row
    images), ``None`` otherwise; ``invisible`` marks MySQL/MariaDB invisible columns.
    """

    name: str
    data_type: str
    column_type: str
    nullable: bool = True
    unsigned: bool = False
    charset: str | None = None
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    generated: str | None = None
    invisible: bool = False
    collation: str | None = field(default=None, compare=False)

    @property
    def is_character(self) -> bool:
        return self.data_type in CHARACTER_TYPES

    def to_column_def(self) -> ColumnDef:
        """What :class:`~headwater.binlog.codec.RowDecoder` needs of this column."""
        return ColumnDef(
            name=self.name,
            unsigned=self.unsigned,
            charset=self.charset,
            enum_values=self.enum_values,
            set_values=self.set_values,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.column_type, "dt": self.data_type}
        if not self.nullable:
            out["null"] = False
        if self.unsigned:
            out["unsigned"] = True
        for key, value in (
            ("charset", self.charset),
            ("collation", self.collation),
            ("generated", self.generated),
        ):
            if value is not None:
                out[key] = value
        if self.enum_values is not None:
            out["enum"] = list(self.enum_values)
        if self.set_values is not None:
            out["set"] = list(self.set_values)
        if self.invisible:
            out["invisible"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Column:
        enum = data.get("enum")
        set_ = data.get("set")
        return cls(
            name=str(data["name"]),
            data_type=str(data["dt"]),
            column_type=str(data["type"]),
            nullable=bool(data.get("null", True)),
            unsigned=bool(data.get("unsigned", False)),
            charset=data.get("charset"),
            enum_values=None if enum is None else tuple(enum),
            set_values=None if set_ is None else tuple(set_),
            generated=data.get("generated"),
            invisible=bool(data.get("invisible", False)),
            collation=data.get("collation"),
        )


@dataclass(frozen=True, slots=True)
class TableDef:
    """A table's definition at one point of the log.

    ``primary_key`` lists column names in key order (empty: no primary key);
    ``unique_keys`` holds ``(index name, column names)`` sorted by name. ``charset`` is the
    table's default charset (what new character columns get).
    """

    database: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    unique_keys: tuple[tuple[str, tuple[str, ...]], ...] = ()
    charset: str | None = None
    collation: str | None = field(default=None, compare=False)

    @property
    def key(self) -> TableKey:
        return (self.database, self.table)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def index_of(self, name: str) -> int | None:
        """Position of a column by name, case-insensitively; ``None`` if absent."""
        low = name.lower()
        for i, col in enumerate(self.columns):
            if col.name.lower() == low:
                return i
        return None

    def column(self, name: str) -> Column | None:
        i = self.index_of(name)
        return None if i is None else self.columns[i]

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The primary key, else the first unique key (by name) whose columns are all NOT
        NULL (what InnoDB would cluster on), else ``()``."""
        if self.primary_key:
            return self.primary_key
        for _, cols in self.unique_keys:
            found = [self.column(c) for c in cols]
            if found and all(c is not None and not c.nullable for c in found):
                return cols
        return ()

    def columns_for_decoder(self) -> tuple[ColumnDef, ...]:
        """The :class:`~headwater.binlog.codec.ColumnDef` of each column, in table order."""
        return tuple(c.to_column_def() for c in self.columns)

    def renamed(self, database: str, table: str) -> TableDef:
        return replace(self, database=database, table=table)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "db": self.database,
            "table": self.table,
            "columns": [c.to_json() for c in self.columns],
        }
        if self.primary_key:
            out["pk"] = list(self.primary_key)
        if self.unique_keys:
            out["unique"] = [[name, list(cols)] for name, cols in self.unique_keys]
        if self.charset is not None:
            out["charset"] = self.charset
        if self.collation is not None:
            out["collation"] = self.collation
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableDef:
        return cls(
            database=str(data["db"]),
            table=str(data["table"]),
            columns=tuple(Column.from_json(c) for c in data["columns"]),
            primary_key=tuple(data.get("pk", ())),
            unique_keys=tuple((str(n), tuple(cols)) for n, cols in data.get("unique", ())),
            charset=data.get("charset"),
            collation=data.get("collation"),
        )
