"""The schema history: every table's definitions over the log, keyed by position.

DESIGN.md decision 2: where TABLE_MAP metadata is MINIMAL, column names, signedness and
charsets come from here; decoding an old event uses the definitions in force at its position.

Versions. Each change (bootstrap, DDL, TABLE_MAP correction, repair) gets the next schema
*version number* and starts at a :class:`~headwater.position.Position`; it holds the new
definition of each table it changed (``None``: the table no longer exists). A table's
definition at position ``p`` is the last of its versions starting at or before ``p``
(binary search). Changes must come in position order; several may share a position (the
latest wins). Memory is proportional to the number of versions, not of events.

TABLE_MAP cross-check. With ``binlog_row_metadata=FULL`` the TABLE_MAP is the truth: its
column names, count, signedness, charsets, ENUM/SET names and primary key are compared with
the definition in force and, on a difference, a corrected definition is recorded (with a
warning). With MINIMAL metadata a column-count difference only marks the table for a
re-read (:meth:`SchemaHistory.needs_reread`, :meth:`SchemaHistory.repair`). A DDL that could
not be applied marks the tables it names the same way.

File format (``SchemaHistory.open(path)``; beside the change log). UTF-8 JSON, one object
per line, appended and fsynced once per change, never rewritten::

    {"v": 1, "kind": K, "version": N, "pos": {"change_id":..,"file":..,"offset":..,"event":..},
     "tables": [{"db": D, "table": T, "def": TABLEDEF-or-null}, ...],
     "databases": {"db": "charset" | null, ...},        # optional
     "reread": [[D, T], ...],                           # optional: tables now stale
     ...}

``K`` is ``bootstrap`` (also carries ``"server_charset"`` and ``"mariadb"``; replaces every
definition: tables it does not list are gone), ``ddl`` (also ``"sql"``, ``"db"``,
``"ddl_kind"``, ``"parsed"``), ``table_map`` or ``repair``. ``TABLEDEF`` is
:meth:`~headwater.schema.model.TableDef.to_json`. Loading replays the records without
parsing any SQL. A last line without its newline, or that does not parse, is the torn write
of a crash: it is ignored with a warning and cut off before the next append. A bad line
before the last is corruption (:class:`~headwater.errors.SchemaError`).
"""

from __future__ import annotations

import bisect
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from headwater.binlog.charsets import charset_of_collation
from headwater.binlog.codec import ColumnDef
from headwater.binlog.constants import ColumnType
from headwater.binlog.tablemap import TableMap
from headwater.errors import SchemaError
from headwater.position import Position
from headwater.schema.ddl import DdlResult, apply_ddl
from headwater.schema.model import (
    CHARACTER_TYPES,
    NUMERIC_TYPES,
    Column,
    TableDef,
    TableKey,
    canonical_charset,
    canonical_type,
)

__all__ = ["SchemaHistory", "definition_from_table_map"]

log = logging.getLogger(__name__)
_FORMAT = 1


@dataclass(slots=True)
class _Version:
    position: Position
    version: int
    definition: TableDef | None
    decoder_columns: tuple[ColumnDef, ...] | None = None


class SchemaHistory:
    """Versioned table definitions; in memory, or persisted with :meth:`open`."""

    def __init__(self, *, mariadb: bool = True, server_charset: str = "utf8mb4") -> None:
        self.mariadb = mariadb
        self._server_charset = server_charset
        self._tables: dict[TableKey, list[_Version]] = {}
        self._positions: list[Position] = []  # of each version number - 1
        self._databases: dict[str, str] = {}
        self._stale: set[TableKey] = set()
        self._ddl_at: dict[Position, DdlResult] = {}
        self._checked: dict[TableKey, tuple[TableMap, TableDef | None]] = {}
        self._file: Any = None
        self.path: Path | None = None

    # -- persistence ---------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, mariadb: bool = True, read_only: bool = False
    ) -> SchemaHistory:
        """Load the history at ``path`` (created if missing) and append to it from now on.

        ``read_only``: for consumers of a history another process writes (a running
        reader): a torn last line is skipped but the file is never truncated or appended
        to, and changes made to the loaded history stay in memory.
        """
        history = cls(mariadb=mariadb)
        history.path = Path(path)
        if history.path.exists():
            data = history.path.read_bytes()
            good = history._load(data, str(path))
            if good < len(data) and not read_only:
                with open(history.path, "r+b") as f:
                    f.truncate(good)
                    f.flush()
                    os.fsync(f.fileno())
        if not read_only:
            history._file = open(history.path, "ab")  # noqa: SIM115 -- kept open for appends
        return history

    @classmethod
    def loads(
        cls, data: bytes, *, mariadb: bool = True, name: str = "<schema history>"
    ) -> SchemaHistory:
        """A history from the bytes of a history file (as served by the HTTP API), in
        memory only; a torn last line is skipped as :meth:`open` does."""
        history = cls(mariadb=mariadb)
        history._load(data, name)
        return history

    def _load(self, data: bytes, name: str) -> int:
        """Replay the records of a history file; returns the length of its whole lines."""
        good = 0
        lines = data.split(b"\n")
        for n, line in enumerate(lines):
            last = n == len(lines) - 1
            if not line:
                continue
            try:
                if last:  # no newline after it: the write did not finish
                    raise ValueError("no newline at the end")
                self._replay(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                if n >= len(lines) - 2 and (last or not any(lines[n + 1 :])):
                    log.warning("%s: ignoring a torn last record (%s)", name, exc)
                    break
                raise SchemaError(f"{name}: record {n + 1} is corrupt: {exc}") from None
            good += len(line) + 1
        return good

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> SchemaHistory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        self._file.write(line.encode("utf-8", "surrogateescape"))
        self._file.flush()
        os.fsync(self._file.fileno())

    def _replay(self, record: dict[str, Any]) -> None:
        if record.get("v") != _FORMAT:
            raise ValueError(f"unknown record format {record.get('v')!r}")
        at = Position.from_json(record["pos"])
        kind = record["kind"]
        defs = {
            (str(t["db"]), str(t["table"])): None
            if t["def"] is None
            else TableDef.from_json(t["def"])
            for t in record["tables"]
        }
        if kind == "bootstrap":
            self.mariadb = bool(record.get("mariadb", self.mariadb))
            self._server_charset = str(record.get("server_charset", self._server_charset))
            self._databases.clear()
            defs = {**dict.fromkeys(self._current_keys()), **defs}
        version = self._record(at, defs, record.get("databases", {}))
        if version != record["version"]:
            raise ValueError(f"version {record['version']} out of sequence (expected {version})")
        if kind in ("bootstrap", "repair", "table_map"):
            self._stale -= set(defs)
        if kind == "bootstrap":
            self._stale.clear()
        self._stale.update((str(d), str(t)) for d, t in record.get("reread", ()))
        if kind == "ddl":
            self._ddl_at[at] = DdlResult(
                sql=str(record["sql"]),
                default_db=str(record["db"]),
                kind=record["ddl_kind"],
                parsed=bool(record["parsed"]),
                tables=tuple((str(d), str(t)) for d, t in record.get("named", ())),
                definitions=tuple(defs.items()),
                databases=tuple(record.get("databases", {}).items()),
            )

    # -- recording -----------------------------------------------------------------------

    @property
    def last_position(self) -> Position | None:
        return self._positions[-1] if self._positions else None

    @property
    def version(self) -> int:
        """The current schema version number (0 before any change)."""
        return len(self._positions)

    def _check_order(self, at: Position) -> None:
        last = self.last_position
        if last is not None and at < last:
            raise SchemaError(f"schema change at {at} is before the last one, at {last}")

    def _record(
        self,
        at: Position,
        defs: Mapping[TableKey, TableDef | None],
        databases: Mapping[str, str | None] | None = None,
    ) -> int:
        self._positions.append(at)
        version = len(self._positions)
        for key, tdef in defs.items():
            self._tables.setdefault(key, []).append(_Version(at, version, tdef))
            self._checked.pop(key, None)
        for db, charset in (databases or {}).items():
            if charset is None:
                self._databases.pop(db, None)
            else:
                self._databases[db] = charset
        return version

    def _entries(self, defs: Mapping[TableKey, TableDef | None]) -> list[dict[str, Any]]:
        return [
            {"db": k[0], "table": k[1], "def": None if d is None else d.to_json()}
            for k, d in defs.items()
        ]

    def _current_keys(self) -> list[TableKey]:
        return [k for k, vs in self._tables.items() if vs[-1].definition is not None]

    def bootstrap(
        self,
        tables: Mapping[TableKey, TableDef],
        at: Position,
        *,
        databases: Mapping[str, str] | None = None,
        server_charset: str | None = None,
    ) -> int:
        """Start from definitions read from information_schema; returns the version number.

        Replaces everything known: tables not in ``tables`` are recorded as gone.
        """
        self._check_order(at)
        if server_charset is not None:
            self._server_charset = canonical_charset(server_charset) or server_charset
        defs: dict[TableKey, TableDef | None] = dict.fromkeys(self._current_keys())
        defs.update(tables)
        self._databases.clear()
        dbs: dict[str, str | None] = dict(databases or {})
        for key in tables:
            dbs.setdefault(key[0], self._server_charset)
        version = self._record(at, defs, dbs)
        self._stale.clear()
        self._write(
            {
                "v": _FORMAT,
                "kind": "bootstrap",
                "version": version,
                "pos": at.to_json(),
                "tables": self._entries(dict(tables)),
                "databases": dbs,
                "server_charset": self._server_charset,
                "mariadb": self.mariadb,
            }
        )
        return version

    def apply_ddl(self, sql: str, default_db: str, at: Position) -> DdlResult:
        """Apply one QUERY event's statement; see :class:`~headwater.schema.ddl.DdlResult`.

        The result's ``definitions`` are the tables after the change. Applying again at a
        position already recorded (a restart replaying the log) returns the recorded result.
        """
        if at in self._ddl_at:
            return self._ddl_at[at]
        result = apply_ddl(sql, default_db, self)
        if not result.is_ddl or (result.parsed and not result.changes_schema):
            return result
        self._check_order(at)
        defs = dict(result.definitions)
        reread = [] if result.parsed else list(result.tables)
        version = self._record(at, defs, dict(result.databases))
        self._stale.update(reread)
        self._stale -= {k for k, d in defs.items() if d is None}
        self._ddl_at[at] = result
        record: dict[str, Any] = {
            "v": _FORMAT,
            "kind": "ddl",
            "version": version,
            "pos": at.to_json(),
            "sql": sql,
            "db": default_db,
            "ddl_kind": result.kind,
            "parsed": result.parsed,
            "named": [list(k) for k in result.tables],
            "tables": self._entries(defs),
        }
        if result.databases:
            record["databases"] = dict(result.databases)
        if reread:
            record["reread"] = [list(k) for k in reread]
        self._write(record)
        return result

    def repair(self, tables: Mapping[TableKey, TableDef | None], at: Position) -> int | None:
        """Record fresh definitions (``None``: the table is gone) and clear their re-read
        marks; only the ones that differ from the definition in force make a version."""
        self._check_order(at)
        changed = {k: d for k, d in tables.items() if self.table_at(*k, at) != d}
        self._stale -= set(tables)
        if not changed:
            return None
        return self._record_change("repair", changed, at)

    def _record_change(self, kind: str, defs: dict[TableKey, TableDef | None], at: Position) -> int:
        version = self._record(at, defs)
        self._write(
            {
                "v": _FORMAT,
                "kind": kind,
                "version": version,
                "pos": at.to_json(),
                "tables": self._entries(defs),
            }
        )
        return version

    # -- TABLE_MAP cross-check -----------------------------------------------------------

    def observe_table_map(self, table_map: TableMap, at: Position) -> TableDef | None:
        """Compare a TABLE_MAP with the definition in force (module docstring).

        Returns the corrected definition when one was recorded, else ``None``. Repeated
        TABLE_MAPs of a table (the same parsed object, as the decode context caches them)
        cost one dict lookup.
        """
        key = (table_map.schema, table_map.table)
        current = self._current(key)
        seen = self._checked.get(key)
        if seen is not None and seen[0] is table_map and seen[1] is current:
            return None
        self._checked[key] = (table_map, current)
        if table_map.column_names is None:
            if current is None or len(current.columns) != table_map.column_count:
                self._stale.add(key)
            return None
        problems = _differences(current, table_map)
        if not problems:
            return None
        log.warning(
            "%s.%s: definition differs from its TABLE_MAP (%s); using the TABLE_MAP",
            key[0],
            key[1],
            "; ".join(problems),
        )
        corrected = definition_from_table_map(table_map, current)
        self._check_order(at)
        self._record_change("table_map", {key: corrected}, at)
        self._stale.discard(key)
        self._checked[key] = (table_map, corrected)
        return corrected

    # -- lookups -------------------------------------------------------------------------

    def _current(self, key: TableKey) -> TableDef | None:
        versions = self._tables.get(key)
        return versions[-1].definition if versions else None

    def _version_at(self, key: TableKey, position: Position) -> _Version | None:
        versions = self._tables.get(key)
        if not versions:
            return None
        i = bisect.bisect_right(versions, position, key=lambda v: v.position)
        return versions[i - 1] if i else None

    def table_at(self, database: str, table: str, position: Position) -> TableDef | None:
        """The definition in force at ``position`` (``None``: unknown or dropped then)."""
        v = self._version_at((database, table), position)
        return None if v is None else v.definition

    def columns_for(self, table_map: TableMap, position: Position) -> Sequence[ColumnDef] | None:
        """Column definitions for :class:`~headwater.binlog.codec.RowDecoder`, or ``None``
        when the table is unknown at ``position`` or its column count differs."""
        v = self._version_at((table_map.schema, table_map.table), position)
        if v is None or v.definition is None:
            return None
        if len(v.definition.columns) != table_map.column_count:
            return None
        if v.decoder_columns is None:
            v.decoder_columns = v.definition.columns_for_decoder()
        return v.decoder_columns

    def primary_key_for(
        self, database: str, table: str, position: Position
    ) -> tuple[str, ...] | None:
        """Names of the primary key columns at ``position`` (``None``: unknown table or no
        primary key). With :meth:`columns_for` this makes the history a
        :class:`headwater.changes.SchemaLookup`."""
        definition = self.table_at(database, table, position)
        if definition is None or not definition.primary_key:
            return None
        return tuple(definition.primary_key)

    def version_at(self, position: Position) -> int:
        """The schema version number in force at ``position`` (0 before any change)."""
        return bisect.bisect_right(self._positions, position)

    def needs_reread(self) -> set[TableKey]:
        """Tables whose definition is known to be stale: re-read them and :meth:`repair`."""
        return set(self._stale)

    def tables(self) -> dict[TableKey, TableDef]:
        """The current definition of every existing table."""
        return {k: vs[-1].definition for k, vs in self._tables.items() if vs[-1].definition}

    # -- the Catalog protocol of headwater.schema.ddl ------------------------------------

    def table(self, database: str, table: str) -> TableDef | None:
        return self._current((database, table))

    def tables_in(self, database: str) -> list[TableKey]:
        return [k for k in self._current_keys() if k[0] == database]

    def database_charset(self, database: str) -> str | None:
        return self._databases.get(database)

    @property
    def server_charset(self) -> str:
        return self._server_charset


# --- TABLE_MAP -> definitions -------------------------------------------------------------

_T = ColumnType
_TYPE_NAMES: dict[int, str] = {
    _T.TINY: "tinyint", _T.SHORT: "smallint", _T.INT24: "mediumint", _T.LONG: "int",
    _T.LONGLONG: "bigint", _T.FLOAT: "float", _T.DOUBLE: "double", _T.NEWDECIMAL: "decimal",
    _T.DECIMAL: "decimal", _T.YEAR: "year", _T.DATE: "date", _T.NEWDATE: "date",
    _T.TIME: "time", _T.TIME2: "time", _T.DATETIME: "datetime", _T.DATETIME2: "datetime",
    _T.TIMESTAMP: "timestamp", _T.TIMESTAMP2: "timestamp", _T.BIT: "bit", _T.JSON: "json",
    _T.ENUM: "enum", _T.SET: "set", _T.GEOMETRY: "geometry", _T.VECTOR: "vector",
    _T.VARCHAR: "varchar", _T.VAR_STRING: "varchar", _T.STRING: "char",
}  # fmt: skip
_LOBS: dict[int, tuple[str, str]] = {
    _T.TINY_BLOB: ("tinytext", "tinyblob"), _T.BLOB: ("text", "blob"),
    _T.MEDIUM_BLOB: ("mediumtext", "mediumblob"), _T.LONG_BLOB: ("longtext", "longblob"),
}  # fmt: skip


def _charset(table_map: TableMap, i: int) -> str | None:
    if table_map.charsets is None or table_map.charsets[i] is None:
        return None
    return charset_of_collation(table_map.charsets[i])  # type: ignore[arg-type]


def _differences(current: TableDef | None, tm: TableMap) -> list[str]:
    if current is None:
        return ["table unknown"]
    names = tm.column_names or ()
    if len(current.columns) != tm.column_count:
        return [f"{len(current.columns)} columns, TABLE_MAP has {tm.column_count}"]
    out = []
    for i, col in enumerate(current.columns):
        if col.name != names[i]:
            out.append(f"column {i + 1} is {col.name!r}, TABLE_MAP says {names[i]!r}")
        signed = tm.signedness
        if signed is not None and col.data_type in NUMERIC_TYPES and col.unsigned != signed[i]:
            out.append(f"{names[i]}: unsigned={col.unsigned}, TABLE_MAP {signed[i]}")
        cs = _charset(tm, i)
        if cs is not None and col.charset is not None and cs != col.charset:
            out.append(f"{names[i]}: charset {col.charset}, TABLE_MAP {cs}")
        for attr, tm_values in (("enum_values", tm.enum_values), ("set_values", tm.set_values)):
            mine = getattr(col, attr)
            if tm_values is not None and tm_values[i] is not None and mine != tm_values[i]:
                out.append(f"{names[i]}: {attr} {mine}, TABLE_MAP {tm_values[i]}")
    if tm.primary_key is not None:
        pk = tuple(names[i] for i in tm.primary_key)
        if pk != current.primary_key:
            out.append(f"primary key {current.primary_key}, TABLE_MAP {pk}")
    return out


def definition_from_table_map(tm: TableMap, current: TableDef | None) -> TableDef:
    """A definition from a FULL-metadata TABLE_MAP: the current definition's column types
    where the column count agrees, the TABLE_MAP's names, signedness, charsets, ENUM/SET
    names and primary key everywhere."""
    names = tm.column_names or tuple(f"@{i + 1}" for i in range(tm.column_count))
    same_shape = current is not None and len(current.columns) == tm.column_count
    columns = []
    for i, name in enumerate(names):
        base = (
            current.columns[i] if same_shape and current is not None else _column_from_type(tm, i)
        )
        unsigned = base.unsigned
        if tm.signedness is not None and base.data_type in NUMERIC_TYPES:
            unsigned = tm.signedness[i]
        charset = _charset(tm, i) or base.charset
        enum = tm.enum_values[i] if tm.enum_values is not None else None
        set_ = tm.set_values[i] if tm.set_values is not None else None
        column_type = base.column_type
        if unsigned != base.unsigned:
            column_type = base.column_type.replace(" unsigned", "") + (
                " unsigned" if unsigned else ""
            )
        columns.append(
            replace(
                base,
                name=name,
                unsigned=unsigned,
                column_type=column_type,
                charset=charset
                if base.data_type in CHARACTER_TYPES or charset == "binary"
                else base.charset,
                enum_values=enum or base.enum_values,
                set_values=set_ or base.set_values,
                nullable=tm.nullable[i],
            )
        )
    pk = tuple(names[i] for i in tm.primary_key) if tm.primary_key is not None else ()
    if tm.primary_key is None and current is not None:
        pk = current.primary_key
    return TableDef(
        database=tm.schema,
        table=tm.table,
        columns=tuple(columns),
        primary_key=pk,
        unique_keys=current.unique_keys if current is not None and same_shape else (),
        charset=current.charset if current is not None else None,
    )


def _column_from_type(tm: TableMap, i: int) -> Column:
    t, meta = tm.column_types[i], tm.column_meta[i]
    charset = _charset(tm, i)
    binary = charset == "binary"
    if t == _T.GEOMETRY or t in _LOBS:
        t = t if t in _LOBS or t == _T.GEOMETRY else _T.BLOB
        data_type = "geometry" if t == _T.GEOMETRY else _LOBS[t][1 if binary else 0]
    else:
        data_type = _TYPE_NAMES.get(t, "unknown")
        if binary and data_type in ("char", "varchar"):
            data_type = "binary" if data_type == "char" else "varbinary"
    args: tuple[str, ...] = ()
    if data_type == "decimal":
        args = (str(meta >> 8), str(meta & 0xFF))
    elif data_type in ("time", "datetime", "timestamp") and t in (
        _T.TIME2,
        _T.DATETIME2,
        _T.TIMESTAMP2,
    ):
        args = (str(meta),)
    enum = tm.enum_values[i] if tm.enum_values is not None else None
    set_ = tm.set_values[i] if tm.set_values is not None else None
    if data_type in ("enum", "set"):
        args = (enum if data_type == "enum" else set_) or ()
    is_char = data_type in CHARACTER_TYPES
    return Column(
        name=f"@{i + 1}",
        data_type=data_type,
        column_type=canonical_type(data_type, args),
        charset="binary" if binary else charset if is_char else None,
        enum_values=enum,
        set_values=set_,
    )
