"""Which tables and event types a reader task keeps.

Tables are matched on their ``db.table`` name, taken from TABLE_MAP events (no row is
decoded to decide). Patterns are anchored regular expressions in Canal's syntax
(``shop\\..*``, ``.*\\.tmp_.*``): each must match the whole name. A table is kept when it
matches an ``include`` pattern (or there are none) and no ``exclude`` pattern. Event types:
``insert``/``update``/``delete`` keep or drop rows events by kind (from the type code alone);
``ddl`` keeps or drops DDL statements. A DDL statement is kept when one of the objects it
touches is (``headwater.schema.ddlscope``: a database is matched as ``db.*``); one with no
data object (accounts, privileges, servers...) only when no table is filtered.

Invariant: a decision is a pure function of the name, so it is cached per name forever.
"""

from __future__ import annotations

import re

from headwater.binlog.constants import EventType
from headwater.config import EVENT_KINDS, FilterConfig
from headwater.schema.ddlscope import DdlScope

__all__ = ["ROWS_KIND", "TableFilter"]

_E = EventType

#: Rows event type code -> its kind.
ROWS_KIND: dict[int, str] = {
    _E.WRITE_ROWS_V1: "insert",
    _E.WRITE_ROWS: "insert",
    _E.WRITE_ROWS_COMPRESSED_V1: "insert",
    _E.WRITE_ROWS_COMPRESSED: "insert",
    _E.UPDATE_ROWS_V1: "update",
    _E.UPDATE_ROWS: "update",
    _E.PARTIAL_UPDATE_ROWS: "update",
    _E.UPDATE_ROWS_COMPRESSED_V1: "update",
    _E.UPDATE_ROWS_COMPRESSED: "update",
    _E.DELETE_ROWS_V1: "delete",
    _E.DELETE_ROWS: "delete",
    _E.DELETE_ROWS_COMPRESSED_V1: "delete",
    _E.DELETE_ROWS_COMPRESSED: "delete",
}


def _union(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.DOTALL)


class TableFilter:
    """Compiled :class:`~headwater.config.FilterConfig`."""

    def __init__(self, config: FilterConfig | None = None) -> None:
        config = config or FilterConfig()
        self.config = config
        self._include = _union(config.include)
        self._exclude = _union(config.exclude)
        self._cache: dict[tuple[str, str], bool] = {}
        self.keep_ddl = "ddl" in config.events
        kinds = set(config.events)
        #: rows event type codes that are dropped by event type
        self.dropped_rows_types = frozenset(t for t, k in ROWS_KIND.items() if k not in kinds)
        self.everything = (
            self._include is None
            and self._exclude is None
            and set(EVENT_KINDS) <= set(config.events)
        )

    def wants(self, database: str, table: str) -> bool:
        """Whether changes of ``database.table`` are kept."""
        key = (database, table)
        hit = self._cache.get(key)
        if hit is None:
            name = f"{database}.{table}"
            hit = (self._include is None or self._include.fullmatch(name) is not None) and (
                self._exclude is None or self._exclude.fullmatch(name) is None
            )
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def wants_ddl(self, scope: DdlScope) -> bool:
        """Whether a DDL statement of this scope is kept (``ddl`` events aside)."""
        if not scope.objects:
            return self._include is None and self._exclude is None
        return any(self.wants(db, "*" if table is None else table) for db, table in scope.objects)
