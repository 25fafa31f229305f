"""The task's link to its schema history (``headwater.schema``), kept beside its change log.

On the first connection the history is bootstrapped from information_schema (the tables
the filters keep), recorded at the task's start position; then every DDL statement of the
stream is applied at its transaction's position before the DDL's record is stored, and new
TABLE_MAP shapes are cross-checked. The record's ``schema_version`` is the history's version
after these. Invariant: the schema history never stops the task -- a statement the history
cannot follow is recorded there as such (tables marked for a re-read) and logged here.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from headwater.binlog.tablemap import parse_table_map
from headwater.config import HostConfig, SourceConfig
from headwater.errors import HeadwaterError
from headwater.position import Position
from headwater.reader.filters import TableFilter
from headwater.reader.source import connect

__all__ = ["SchemaLink"]

log = logging.getLogger(__name__)


class SchemaLink:
    """Owns the task's :class:`~headwater.schema.history.SchemaHistory` (opened lazily,
    once the source's flavor is known)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.history: Any = None
        self.mariadb = True
        self.failures = 0

    @property
    def version(self) -> int:
        return 0 if self.history is None else int(self.history.version)

    def ensure_bootstrapped(
        self,
        source: SourceConfig,
        host: HostConfig,
        table_filter: TableFilter,
        at: Position,
        *,
        mariadb: bool = True,
    ) -> None:
        """Open the history; bootstrap it from the server if it has no version yet."""
        from headwater.schema.history import SchemaHistory
        from headwater.schema.introspect import read_tables

        self.mariadb = mariadb
        if self.history is None:
            self.history = SchemaHistory.open(self.path, mariadb=mariadb)
        if self.history.version > 0:
            return
        conn = connect(source, host)
        try:
            tables = read_tables(conn, table_filter=table_filter.wants)
        finally:
            with contextlib.suppress(Exception):
                conn.close()
        version = self.history.bootstrap(tables, at)
        log.info(
            "%s: schema history bootstrapped with %d tables (version %d)",
            source.name,
            len(tables),
            version,
        )

    def apply_ddl(self, sql: str, default_db: str, at: Position) -> int:
        """Apply one DDL statement; returns the schema version after it."""
        if self.history is None:
            return 0
        try:
            result = self.history.apply_ddl(sql, default_db, at)
        except (HeadwaterError, ValueError) as e:
            self.failures += 1
            log.warning("schema history: %s at %s: %s", sql[:200], at, e)
            return self.version
        if result.is_ddl and not result.parsed:
            log.warning("schema history could not follow %r: %s", sql[:200], result.error)
        return self.version

    def observe(self, table_map_event: bytes, at: Position) -> int | None:
        """Cross-check a new TABLE_MAP shape; returns the new version if it changed one."""
        if self.history is None:
            return None
        try:
            tm = parse_table_map(memoryview(table_map_event)[19:], mariadb=self.mariadb)
            corrected = self.history.observe_table_map(tm, at)
        except (HeadwaterError, ValueError) as e:
            self.failures += 1
            log.warning("schema history: TABLE_MAP at %s: %s", at, e)
            return None
        return None if corrected is None else self.version

    def close(self) -> None:
        if self.history is not None:
            self.history.close()
            self.history = None
