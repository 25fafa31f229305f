"""Chunk keys: how key values are stored, bound, compared and classified into chunks.

A table is split along one *chunk key*: its primary key, or a chosen unique key of NOT
NULL columns. Chunk ``i`` of a table holds the keys ``k`` with ``b[i] <= k < b[i+1]``
(tuple order over the key columns), ``b[0] = -inf`` and ``b[n] = +inf``: the chunks
partition the key space, so every row belongs to exactly one chunk at every moment.

Order is the server's: string keys sort by their collation (``'a' = 'A'`` in a ``_ci``
collation, trailing spaces ignored by PAD SPACE collations). Python cannot reproduce
every collation, so :class:`KeyOrder` compares in Python only when every key column is
an integer type (exact), and otherwise asks the source server to compare: key values and
boundaries are bound as literals converted to the column's type (``CONVERT(%s USING cs)
COLLATE coll`` for text, ``CAST(%s AS DECIMAL(65,30))``, ``CAST(%s AS DATETIME(6))``, ...),
so the server compares them exactly as it orders the column. ENUM and SET key columns
(ordered by index) are refused.

Boundaries are stored in the state file as JSON: ints and strings as is, other values
tagged (:func:`encode_value` / :func:`decode_value`).
"""

from __future__ import annotations

import base64
import bisect
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from headwater.errors import ConfigError
from headwater.schema.model import TableDef

__all__ = [
    "INT_TYPES",
    "KeyColumn",
    "KeyOrder",
    "choose_key",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

INT_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"})
_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_DECIMAL = frozenset({"decimal", "numeric", "float", "double", "real"})
_TEMPORAL = {
    "date": "DATE",
    "datetime": "DATETIME(6)",
    "timestamp": "DATETIME(6)",
    "time": "TIME(6)",
}


@dataclass(frozen=True, slots=True)
class KeyColumn:
    """One chunk key column: its name, lower-case base type and (text) charset/collation."""

    name: str
    data_type: str
    charset: str | None = None
    collation: str | None = None

    @property
    def is_int(self) -> bool:
        return self.data_type in INT_TYPES

    def literal(self) -> str:
        """A ``%s`` placeholder converted so the server compares it like the column."""
        t = self.data_type
        if t in INT_TYPES:
            return "%s"
        if t in _TEXT:
            cs = self.charset or "utf8mb4"
            coll = f" COLLATE {self.collation}" if self.collation else ""
            return f"CONVERT(%s USING {cs}){coll}"
        if t in _BINARY:
            return "CAST(%s AS BINARY)"
        if t in _DECIMAL:
            return "CAST(%s AS DECIMAL(65,30))" if t in ("decimal", "numeric") else "(%s + 0e0)"
        if t in _TEMPORAL:
            return f"CAST(%s AS {_TEMPORAL[t]})"
        raise ConfigError(
            f"column {self.name!r} of type {t} cannot be a chunk key", field=self.name
        )


def choose_key(tdef: TableDef, key: Sequence[str] | None = None) -> tuple[str, ...]:
    """The chunk key of a table: ``key`` if given (it must be the primary key or a unique
    key), else the primary key, else the first unique key whose columns are NOT NULL.
    Raises :class:`ConfigError` naming the table when there is none."""
    name = f"{tdef.database}.{tdef.table}"
    uniques = [cols for _, cols in tdef.unique_keys]
    if key:
        wanted = tuple(key)
        if wanted != tuple(tdef.primary_key) and wanted not in [tuple(u) for u in uniques]:
            raise ConfigError(
                f"{name}: {list(wanted)} is neither the primary key nor a unique key",
                field="key",
            )
        return wanted
    if tdef.primary_key:
        return tuple(tdef.primary_key)
    for cols in uniques:
        if all(not (c := tdef.column(n)) or not c.nullable for n in cols):
            return tuple(cols)
    raise ConfigError(
        f"{name} has no primary key and no unique key of NOT NULL columns; it cannot be "
        "chunked (add a key, or name a unique key for it)",
        field="tables",
    )


def encode_value(value: Any) -> Any:
    """A key value as JSON (module docstring)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, Decimal):
        return {"dec": str(value)}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"td_us": (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds}
    raise TypeError(f"cannot store a key value of type {type(value).__name__}")


def decode_value(doc: Any) -> Any:
    """The inverse of :func:`encode_value`."""
    if not isinstance(doc, dict):
        return doc
    ((tag, v),) = doc.items()
    if tag == "b64":
        return base64.b64decode(v)
    if tag == "dec":
        return Decimal(v)
    if tag == "float":
        return float(v)
    if tag == "datetime":
        return dt.datetime.fromisoformat(v)
    if tag == "date":
        return dt.date.fromisoformat(v)
    if tag == "td_us":
        return dt.timedelta(microseconds=int(v))
    raise ValueError(f"unknown key value tag {tag!r}")


def encode_key(key: Sequence[Any] | None) -> list[Any] | None:
    return None if key is None else [encode_value(v) for v in key]


def decode_key(doc: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if doc is None else tuple(decode_value(v) for v in doc)


@dataclass(frozen=True, slots=True)
class KeyOrder:
    """Compares chunk keys in the server's order (module docstring). Picklable."""

    columns: tuple[KeyColumn, ...]

    @property
    def python_exact(self) -> bool:
        """Whether Python tuple order equals the server's (all integer columns)."""
        return all(c.is_int for c in self.columns)

    def classify(
        self,
        keys: Sequence[tuple[Any, ...]],
        boundaries: Sequence[tuple[Any, ...]],
        conn: Any = None,
    ) -> list[int]:
        """For each key, the number of ``boundaries`` (ascending) at or below it: the index
        of its chunk when the boundaries are ``b[1..n-1]``. ``conn`` (a source connection)
        is needed unless :attr:`python_exact`."""
        if not keys:
            return []
        if not boundaries:
            return [0] * len(keys)
        if self.python_exact:
            return [bisect.bisect_right(boundaries, k) for k in keys]
        if conn is None:
            raise ValueError("comparing non-integer keys needs a source connection")
        out: list[int] = []
        for i in range(0, len(keys), 200):
            out.extend(self._classify_sql(conn, keys[i : i + 200], boundaries))
        return out

    def _rows_sql(self, n: int, alias: str, with_index: bool) -> str:
        cols = ", ".join(f"{c.literal()} AS c{j}" for j, c in enumerate(self.columns))
        first = f"SELECT {'%s AS i, ' if with_index else ''}{cols}"
        rest = f"SELECT {'%s, ' if with_index else ''}" + ", ".join(
            c.literal() for c in self.columns
        )
        return f"({' UNION ALL '.join([first] + [rest] * (n - 1))}) {alias}"

    def _classify_sql(
        self, conn: Any, keys: Sequence[tuple[Any, ...]], boundaries: Sequence[tuple[Any, ...]]
    ) -> list[int]:
        width = len(self.columns)
        kcols = ", ".join(f"k.c{j}" for j in range(width))
        bcols = ", ".join(f"b.c{j}" for j in range(width))
        sql = (
            f"SELECT k.i, (SELECT COUNT(*) FROM {self._rows_sql(len(boundaries), 'b', False)}"
            f" WHERE ({kcols}) >= ({bcols})) FROM {self._rows_sql(len(keys), 'k', True)}"
        )
        params: list[Any] = [v for b in boundaries for v in b]
        for i, k in enumerate(keys):
            params.append(i)
            params.extend(k)
        with conn.cursor() as cur:
            cur.execute(sql, params)
            found = {int(i): int(n) for i, n in cur.fetchall()}
        return [found[i] for i in range(len(keys))]
