"""Splitting a table into chunks along its chunk key (primary key or a unique key).

Two ways, chosen per table (:func:`plan_boundaries`):

* **even ranges** for a *dense* single integer key: with ``n = ceil(count / chunk_rows)``
  and the span ``max - min + 1`` at most ``DENSE_SPAN`` times the row count, boundaries
  are ``min + i * ceil(span / n)``. One ``SELECT MIN, MAX, COUNT`` plans the table;
* **seek boundaries** for everything else (composite keys, strings, dates, and integer
  keys with a skewed distribution): boundary ``b[i+1]`` is the key at offset
  ``chunk_rows`` of ``WHERE key >= b[i] ORDER BY key``, so every chunk but the last holds
  exactly ``chunk_rows`` rows at planning time, however the keys are spread. Planning reads
  each index entry once (``LIMIT 1 OFFSET n`` from the previous boundary).

Boundaries are lower bounds: chunk ``i`` is ``[b[i], b[i+1])`` with ``b[0] = -inf`` and the
last chunk unbounded above (see :mod:`headwater.snapshot.keys`), so rows inserted while
the snapshot runs, below the minimum or above the maximum, still fall in a chunk.

Key spaces: :class:`SqlKeySpace` asks the source; :class:`SortedKeys` is an in-memory key
list with the same answers (unit tests, and what the planner's contract means).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "DENSE_SPAN",
    "KeySpace",
    "SortedKeys",
    "SqlKeySpace",
    "plan_boundaries",
    "range_predicate",
]

#: A single integer key is "dense" when ``max - min + 1 <= DENSE_SPAN * count``.
DENSE_SPAN = 1.1

Key = tuple[Any, ...]


class KeySpace(Protocol):
    """The ordered keys of one table, as the planner needs them."""

    def int_stats(self) -> tuple[int, int, int] | None:
        """``(min, max, count)`` of a single integer key (None for other keys or no rows)."""

    def seek(self, start: Key | None, offset: int) -> Key | None:
        """The key at ``offset`` (0-based) of the keys ``>= start`` in order (all keys when
        ``start`` is None), or None when there are not that many."""


def plan_boundaries(space: KeySpace, chunk_rows: int) -> tuple[str, list[Key]]:
    """``(method, boundaries)``: ``"even"`` or ``"seek"`` and the ascending lower bounds
    ``b[1..n-1]`` of chunks 1..n-1 (module docstring). No boundary: one chunk."""
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be at least 1")
    stats = space.int_stats()
    if stats is not None:
        lo, hi, count = stats
        span = hi - lo + 1
        if count <= chunk_rows:
            return "even", []
        if span <= DENSE_SPAN * count:
            n = math.ceil(count / chunk_rows)
            width = math.ceil(span / n)
            return "even", [(lo + i * width,) for i in range(1, n) if lo + i * width <= hi]
    bounds: list[Key] = []
    start: Key | None = None
    while True:
        nxt = space.seek(start, chunk_rows)
        if nxt is None:
            return "seek", bounds
        bounds.append(nxt)
        start = nxt


@dataclass(frozen=True, slots=True)
class SortedKeys:
    """An in-memory :class:`KeySpace` over keys already in the server's order."""

    keys: Sequence[Key]

    def int_stats(self) -> tuple[int, int, int] | None:
        if not self.keys or len(self.keys[0]) != 1 or not isinstance(self.keys[0][0], int):
            return None
        return self.keys[0][0], self.keys[-1][0], len(self.keys)

    def seek(self, start: Key | None, offset: int) -> Key | None:
        import bisect

        i = 0 if start is None else bisect.bisect_left(self.keys, start)
        j = i + offset
        return tuple(self.keys[j]) if j < len(self.keys) else None


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def range_predicate(
    columns: Sequence[str],
    lo: Key | None,
    hi: Key | None,
    *,
    literals: Sequence[str] | None = None,
) -> tuple[str, list[Any]]:
    """SQL ``lo <= key < hi`` in lexicographic order over ``columns``, written as
    ``a > x OR (a = x AND b >= y)`` (which MariaDB and MySQL turn into index ranges,
    unlike row constructors); ``TRUE`` when unbounded. ``literals``: per column, the
    placeholder to compare with (default ``%s``; e.g. :meth:`KeyColumn.literal`, so that
    another server compares in the source's collation)."""
    marks = list(literals) if literals is not None else ["%s"] * len(columns)
    parts: list[str] = []
    params: list[Any] = []
    if lo is not None:
        sql, p = _compare(columns, lo, ">", inclusive=True, marks=marks)
        parts.append(sql)
        params.extend(p)
    if hi is not None:
        sql, p = _compare(columns, hi, "<", inclusive=False, marks=marks)
        parts.append(sql)
        params.extend(p)
    return (" AND ".join(f"({p})" for p in parts) or "TRUE"), params


def _compare(
    columns: Sequence[str], key: Key, op: str, *, inclusive: bool, marks: Sequence[str]
) -> tuple[str, list[Any]]:
    ors: list[str] = []
    params: list[Any] = []
    for i, col in enumerate(columns):
        last = i == len(columns) - 1
        eqs = [f"{_ident(c)} = {m}" for c, m in zip(columns[:i], marks, strict=False)]
        cmp = op + ("=" if last and inclusive else "")
        ors.append(" AND ".join([*eqs, f"{_ident(col)} {cmp} {marks[i]}"]))
        params.extend(key[: i + 1])
    return " OR ".join(f"({o})" for o in ors), params


class SqlKeySpace:
    """The keys of ``db.table`` on the source (a PyMySQL connection)."""

    def __init__(self, conn: Any, database: str, table: str, columns: Sequence[str], int_key: bool):
        self.conn = conn
        self.ref = f"{_ident(database)}.{_ident(table)}"
        self.columns = tuple(columns)
        self.int_key = int_key and len(self.columns) == 1
        self.order = ", ".join(_ident(c) for c in self.columns)

    def int_stats(self) -> tuple[int, int, int] | None:
        if not self.int_key:
            return None
        col = _ident(self.columns[0])
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT MIN({col}), MAX({col}), COUNT(*) FROM {self.ref}")
            lo, hi, count = cur.fetchone()
        if not count:
            return None
        return int(lo), int(hi), int(count)

    def seek(self, start: Key | None, offset: int) -> Key | None:
        where, params = range_predicate(self.columns, start, None)
        with self.conn.cursor() as cur:
            cur.execute(
                f"SELECT {self.order} FROM {self.ref} WHERE {where} ORDER BY {self.order}"
                f" LIMIT 1 OFFSET {int(offset)}",
                params,
            )
            row = cur.fetchone()
        return None if row is None else tuple(row)
