"""Column definitions from sqlglot trees, and :class:`TableBuilder`, the mutable table that
:mod:`.ddl` edits clause by clause before freezing it into a :class:`~.model.TableDef`.

Type rules follow the servers (MySQL 8 ``sql/sql_parse.cc`` ``Create_field::init``, MariaDB
``Column_definition``): ``FLOAT(p)`` is FLOAT for p <= 24 and DOUBLE above; ``TEXT(n)`` and
``BLOB(n)`` become the smallest TEXT/BLOB type holding n characters/bytes; ``BOOL`` is
TINYINT; ``SERIAL`` is ``BIGINT UNSIGNED NOT NULL`` with a unique key; ``NCHAR``/``NVARCHAR``
are utf8mb3; a character column of charset ``binary`` is the matching binary type; on
MariaDB ``JSON`` is ``LONGTEXT`` utf8mb4 (with ``utf8mb4_bin``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from sqlglot import exp

from headwater.errors import DdlError
from headwater.schema.model import (
    BINARY_TYPES,
    BLOB_TYPES,
    CHARACTER_TYPES,
    NUMERIC_TYPES,
    TEXT_TYPES,
    Column,
    TableDef,
    canonical_charset,
    canonical_type,
    charset_of_collation_name,
)

__all__ = ["ColumnSpec", "TableBuilder", "column_from_sqlglot", "convert_charset", "key_columns"]

_T = exp.DType

# sqlglot type -> (MySQL data type, unsigned)
_TYPES: dict[exp.DType, tuple[str, bool]] = {
    _T.TINYINT: ("tinyint", False),
    _T.UTINYINT: ("tinyint", True),
    _T.BOOLEAN: ("tinyint", False),
    _T.SMALLINT: ("smallint", False),
    _T.USMALLINT: ("smallint", True),
    _T.MEDIUMINT: ("mediumint", False),
    _T.UMEDIUMINT: ("mediumint", True),
    _T.INT: ("int", False),
    _T.UINT: ("int", True),
    _T.BIGINT: ("bigint", False),
    _T.UBIGINT: ("bigint", True),
    _T.SERIAL: ("bigint", True),
    _T.DECIMAL: ("decimal", False),
    _T.UDECIMAL: ("decimal", True),
    _T.FLOAT: ("float", False),
    _T.DOUBLE: ("double", False),
    _T.UDOUBLE: ("double", True),
    _T.BIT: ("bit", False),
    _T.YEAR: ("year", False),
    _T.DATE: ("date", False),
    _T.TIME: ("time", False),
    _T.DATETIME: ("datetime", False),
    _T.DATETIME64: ("datetime", False),
    _T.TIMESTAMP: ("timestamp", False),
    _T.TIMESTAMPTZ: ("timestamp", False),
    _T.TIMESTAMPLTZ: ("timestamp", False),
    _T.CHAR: ("char", False),
    _T.NCHAR: ("char", False),
    _T.VARCHAR: ("varchar", False),
    _T.NVARCHAR: ("varchar", False),
    _T.BINARY: ("binary", False),
    _T.VARBINARY: ("varbinary", False),
    _T.TINYBLOB: ("tinyblob", False),
    _T.BLOB: ("blob", False),
    _T.MEDIUMBLOB: ("mediumblob", False),
    _T.LONGBLOB: ("longblob", False),
    _T.TINYTEXT: ("tinytext", False),
    _T.TEXT: ("text", False),
    _T.MEDIUMTEXT: ("mediumtext", False),
    _T.LONGTEXT: ("longtext", False),
    _T.JSON: ("json", False),
    _T.ENUM: ("enum", False),
    _T.SET: ("set", False),
    _T.GEOMETRY: ("geometry", False),
    _T.UUID: ("uuid", False),
    _T.VECTOR: ("vector", False),
}
# Type names sqlglot does not know, kept as USERDEFINED.
_USER_TYPES = {
    "point": "point",
    "linestring": "linestring",
    "polygon": "polygon",
    "multipoint": "multipoint",
    "multilinestring": "multilinestring",
    "multipolygon": "multipolygon",
    "geometrycollection": "geometrycollection",
    "geomcollection": "geomcollection",
    "inet4": "inet4",
    "inet6": "inet6",
    "hw_ufloat": "float",  # FLOAT ... UNSIGNED, rewritten by ddl.strip_comments
}
# Max bytes per character; charsets not listed are single-byte.
_MBMAXLEN = {
    "utf8mb4": 4, "utf8mb3": 3, "utf16": 4, "utf16le": 4, "utf32": 4, "ucs2": 2,
    "big5": 2, "sjis": 2, "cp932": 2, "gbk": 2, "gb2312": 2, "euckr": 2, "ujis": 3,
    "eucjpms": 3, "gb18030": 4,
}  # fmt: skip
_LOB_LIMITS = (255, 65535, 16777215)


def _lob_type(family: tuple[str, ...], max_bytes: int) -> str:
    for limit, name in zip(_LOB_LIMITS, family, strict=False):
        if max_bytes <= limit:
            return name
    return family[3]


def _lob_bytes(data_type: str) -> int:
    family = TEXT_TYPES if data_type in TEXT_TYPES else BLOB_TYPES
    return (*_LOB_LIMITS, 4294967295)[family.index(data_type)]


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """A parsed column and the keys its own definition declares."""

    column: Column
    primary: bool = False
    unique: bool = False


def key_columns(parts: Iterable[exp.Expression]) -> list[str]:
    """Column names of a key's parts (identifiers, columns, prefixes ``a(10)``, ordered)."""
    names = []
    for part in parts:
        while isinstance(part, exp.Ordered | exp.ColumnPrefix):
            part = part.this
        names.append(part.name)
    return names


def column_from_sqlglot(cdef: exp.ColumnDef, table_charset: str, mariadb: bool) -> ColumnSpec:
    """One column of CREATE TABLE / ALTER TABLE ADD / MODIFY / CHANGE."""
    kind = cdef.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise DdlError(f"column {cdef.name} without a type")
    if kind.this == _T.USERDEFINED:
        udt = str(kind.args.get("kind") or "").lower()
        if udt not in _USER_TYPES:
            raise DdlError(f"column {cdef.name}: unknown type {udt!r}")
        data_type, unsigned = _USER_TYPES[udt], udt == "hw_ufloat"
    elif kind.this in _TYPES:
        data_type, unsigned = _TYPES[kind.this]
    else:
        raise DdlError(f"column {cdef.name}: unsupported type {kind.sql(dialect='mysql')}")
    values = [e.this for e in kind.expressions if isinstance(e, exp.Literal) and e.is_string]
    params = [e.sql(dialect="mysql") for e in kind.expressions if not isinstance(e, exp.Literal)]

    nullable, primary, unique = True, kind.this == _T.SERIAL, kind.this == _T.SERIAL
    zerofill = invisible = False
    generated = charset = collation = None
    for constraint in cdef.args.get("constraints") or ():
        c = constraint.args.get("kind") if isinstance(constraint, exp.ColumnConstraint) else None
        if isinstance(c, exp.NotNullColumnConstraint):
            nullable = bool(c.args.get("allow_null"))
        elif isinstance(c, exp.PrimaryKeyColumnConstraint):
            primary = True
        elif isinstance(c, exp.UniqueColumnConstraint):
            unique = True
        elif isinstance(c, exp.ZeroFillColumnConstraint):
            zerofill = True
        elif isinstance(c, exp.ComputedColumnConstraint):
            generated = "STORED" if c.args.get("persisted") else "VIRTUAL"
        elif isinstance(c, exp.InvisibleColumnConstraint):
            invisible = True
        elif isinstance(c, exp.CharacterSetColumnConstraint):
            charset = canonical_charset(c.this.name)
        elif isinstance(c, exp.CollateColumnConstraint):
            collation = c.this.name.lower()
    if kind.this == _T.SERIAL or primary:
        nullable = False

    if data_type == "float" and len(params) == 1:  # FLOAT(p): precision in bits
        data_type, params = ("float" if int(params[0]) <= 24 else "double"), []
    if data_type == "json" and mariadb:
        data_type, charset, collation = "longtext", "utf8mb4", collation or "utf8mb4_bin"
    if data_type in CHARACTER_TYPES or data_type in ("text", "blob"):
        if charset is None and collation is not None:
            charset = charset_of_collation_name(collation)
        if kind.this in (_T.NCHAR, _T.NVARCHAR):
            charset = charset or "utf8mb3"
        if data_type in BLOB_TYPES:
            charset = "binary"
        charset = charset or table_charset
    if data_type in ("text", "blob") and params:  # TEXT(n), BLOB(n): the smallest that fits
        per_char = 1 if data_type == "blob" else _MBMAXLEN.get(charset or "", 1)
        family = TEXT_TYPES if data_type == "text" else BLOB_TYPES
        data_type, params = _lob_type(family, int(params[0]) * per_char), []
    if charset == "binary" and data_type in CHARACTER_TYPES - {"enum", "set"}:
        data_type = {"char": "binary", "varchar": "varbinary"}.get(
            data_type,
            BLOB_TYPES[TEXT_TYPES.index(data_type)] if data_type in TEXT_TYPES else data_type,
        )
    if data_type in BINARY_TYPES:
        charset = "binary"
    elif data_type not in CHARACTER_TYPES:
        charset = collation = None
    unsigned = (unsigned or zerofill) and data_type in NUMERIC_TYPES
    args = values if data_type in ("enum", "set") else params
    column = Column(
        name=cdef.name,
        data_type=data_type,
        column_type=canonical_type(data_type, args, unsigned=unsigned, zerofill=zerofill),
        nullable=nullable,
        unsigned=unsigned,
        charset=charset,
        enum_values=tuple(values) if data_type == "enum" else None,
        set_values=tuple(values) if data_type == "set" else None,
        generated=generated,
        invisible=invisible,
        collation=collation,
    )
    return ColumnSpec(column, primary, unique)


class TableBuilder:
    """A table being edited by one statement; :meth:`build` freezes it."""

    def __init__(
        self,
        database: str,
        table: str,
        columns: list[Column],
        *,
        primary_key: Iterable[str] = (),
        unique_keys: Iterable[tuple[str, tuple[str, ...]]] = (),
        charset: str | None = None,
        collation: str | None = None,
    ) -> None:
        self.database = database
        self.table = table
        self.columns = columns
        self.primary_key = list(primary_key)
        self.unique_keys: dict[str, list[str]] = {n: list(c) for n, c in unique_keys}
        self.charset = charset
        self.collation = collation

    @classmethod
    def from_def(cls, tdef: TableDef) -> TableBuilder:
        return cls(
            tdef.database,
            tdef.table,
            list(tdef.columns),
            primary_key=tdef.primary_key,
            unique_keys=tdef.unique_keys,
            charset=tdef.charset,
            collation=tdef.collation,
        )

    def build(self) -> TableDef:
        pk = tuple(self._canonical(n) for n in self.primary_key)
        columns = tuple(
            replace(c, nullable=False) if c.name in pk and c.nullable else c for c in self.columns
        )
        return TableDef(
            database=self.database,
            table=self.table,
            columns=columns,
            primary_key=pk,
            unique_keys=tuple(
                sorted(
                    (n, tuple(self._canonical(c) for c in cols))
                    for n, cols in self.unique_keys.items()
                )
            ),
            charset=self.charset,
            collation=self.collation,
        )

    def _canonical(self, name: str) -> str:
        i = self.index_of(name)
        return name if i is None else self.columns[i].name

    def index_of(self, name: str) -> int | None:
        low = name.lower()
        return next((i for i, c in enumerate(self.columns) if c.name.lower() == low), None)

    def _need(self, name: str) -> int:
        i = self.index_of(name)
        if i is None:
            raise DdlError(f"{self.database}.{self.table} has no column {name!r}")
        return i

    def _insert(self, column: Column, position: exp.Expression | None) -> None:
        if self.index_of(column.name) is not None:
            raise DdlError(f"{self.database}.{self.table} already has a column {column.name!r}")
        if position is None:
            self.columns.append(column)
        elif str(position.args.get("position", "")).upper() == "FIRST":
            self.columns.insert(0, column)
        else:
            self.columns.insert(self._need(position.this.name) + 1, column)

    def add_column(self, column: Column, position: exp.Expression | None) -> None:
        self._insert(column, position)

    def modify_column(self, old: str, column: Column, position: exp.Expression | None) -> None:
        i = self._need(old)
        old_name = self.columns[i].name
        if position is None:
            if column.name.lower() != old_name.lower() and self.index_of(column.name) is not None:
                raise DdlError(f"{self.database}.{self.table} already has {column.name!r}")
            self.columns[i] = column
        else:
            del self.columns[i]
            self._insert(column, position)
        self._rename_in_keys(old_name, column.name)

    def rename_column(self, old: str, new: str) -> None:
        i = self._need(old)
        old_name = self.columns[i].name
        self.columns[i] = replace(self.columns[i], name=new)
        self._rename_in_keys(old_name, new)

    def set_invisible(self, name: str, invisible: bool) -> None:
        i = self._need(name)
        self.columns[i] = replace(self.columns[i], invisible=invisible)

    def _rename_in_keys(self, old: str, new: str) -> None:
        low = old.lower()
        self.primary_key = [new if c.lower() == low else c for c in self.primary_key]
        for cols in self.unique_keys.values():
            cols[:] = [new if c.lower() == low else c for c in cols]

    def drop_column(self, name: str) -> None:
        i = self._need(name)
        low = self.columns[i].name.lower()
        del self.columns[i]
        # The servers drop the column from every index, and an index left empty with it.
        self.primary_key = [c for c in self.primary_key if c.lower() != low]
        for index, cols in list(self.unique_keys.items()):
            cols[:] = [c for c in cols if c.lower() != low]
            if not cols:
                del self.unique_keys[index]

    def set_primary_key(self, columns: list[str]) -> None:
        for c in columns:
            self._need(c)
        self.primary_key = list(columns)

    def add_unique(self, name: str | None, columns: list[str]) -> None:
        for c in columns:
            self._need(c)
        if name is None:  # named after the first column, then _2, _3 ... (both servers)
            base = self.columns[self._need(columns[0])].name
            name, n = base, 2
            while (
                name.lower() in {k.lower() for k in self.unique_keys} or name.upper() == "PRIMARY"
            ):
                name, n = f"{base}_{n}", n + 1
        self.unique_keys[name] = list(columns)

    def _unique_name(self, name: str) -> str | None:
        return next((k for k in self.unique_keys if k.lower() == name.lower()), None)

    def drop_unique(self, name: str) -> None:
        found = self._unique_name(name)
        if found is not None:  # otherwise a non-unique index, a check or a foreign key
            del self.unique_keys[found]

    def rename_unique(self, old: str, new: str) -> None:
        found = self._unique_name(old)
        if found is not None:
            self.unique_keys[new] = self.unique_keys.pop(found)


def convert_charset(builder: TableBuilder, charset: str, collation: str | None) -> None:
    """``CONVERT TO CHARACTER SET``: every character column and the table default change;
    TEXT types grow to keep their length in characters (MySQL and MariaDB both do this)."""
    new_max = _MBMAXLEN.get(charset, 1)
    for i, col in enumerate(builder.columns):
        if col.data_type not in CHARACTER_TYPES or col.charset == "binary":
            continue
        data_type = col.data_type
        if data_type in TEXT_TYPES:
            chars = _lob_bytes(data_type) // _MBMAXLEN.get(col.charset or "", 1)
            data_type = _lob_type(TEXT_TYPES, chars * new_max)
        column_type = col.column_type if data_type == col.data_type else data_type
        builder.columns[i] = replace(
            col, data_type=data_type, column_type=column_type, charset=charset, collation=collation
        )
    builder.charset, builder.collation = charset, collation
