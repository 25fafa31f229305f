"""What every sink shares: the change a sink consumes, its capabilities, its options.

Contracts:

* A sink is a plain frozen dataclass of configuration (picklable: Spark ships it to
  executors, which open their own connections). It never holds a connection or a secret
  in memory longer than one call; passwords come from a file or an environment variable
  named in :class:`ConnectionOptions` and never appear in ``repr``, logs or errors.
* :class:`Change` is the one in-memory form of a change row. :func:`as_change` accepts a
  :class:`~headwater.changes.ChangeRow`, a dict with the columns of
  :mod:`headwater.spark.schema` (``key``/``before``/``after`` as JSON text or as dicts), or
  a ``pyspark.sql.Row`` with those fields.
* Capabilities are data (:class:`SinkCapabilities`): callers ask ``sink.capabilities``
  whether the sink is transactional or applies DDL, never ``if kind == "mysql"``.
* Table definitions come from a :class:`SchemaSource` (picklable): :class:`StaticSchema`
  (definitions given inline) or :class:`SchemaFile` (the task's ``schema.jsonl``).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from headwater.changes import ChangeRow
from headwater.errors import ConfigError
from headwater.position import Position
from headwater.schema.model import TableDef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "ApplyResult",
    "Change",
    "ConnectionOptions",
    "DdlMode",
    "RetryPolicy",
    "SchemaFile",
    "SchemaSource",
    "Sink",
    "SinkCapabilities",
    "StaticSchema",
    "as_change",
    "map_database",
]

#: Operations that carry a row image after the change.
ROW_OPS = frozenset({"insert", "update", "delete", "read"})


class DdlMode(enum.StrEnum):
    """What a sink does with a DDL change: run it on the target, ignore it, or stop."""

    APPLY = "apply"
    SKIP = "skip"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class SinkCapabilities:
    """What a kind of sink can do; the pipeline and the generic code read these, never the
    sink's name.

    ``transactional``: rows and the checkpoint commit together (exactly-once).
    ``applies_ddl``: DDL of the source can run on the target as is.
    ``ddl_modes``: the :class:`DdlMode` values the sink accepts.
    ``max_params``: most bind parameters one statement may carry.
    ``zero_dates``: what a zero date (``0000-00-00``) can become: ``keep`` (the literal),
    ``null`` or ``fail``.
    """

    name: str
    transactional: bool
    applies_ddl: bool
    ddl_modes: frozenset[DdlMode]
    max_params: int = 65_535
    zero_dates: frozenset[str] = frozenset({"fail"})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries of retryable errors: ``attempts`` tries in all, exponential back-off from
    ``base_delay_s`` doubling up to ``max_delay_s`` (plus up to 10 % jitter)."""

    attempts: int = 5
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0

    def delay(self, attempt: int, jitter: float) -> float:
        """Seconds to wait before try ``attempt + 1`` (``attempt`` counts from 1)."""
        grown: float = self.base_delay_s * 2.0 ** (attempt - 1)
        return min(self.max_delay_s, grown) * (1 + 0.1 * jitter)


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """Where a SQL target is and how to log in. The password is read when connecting, from
    ``password_file`` (first line) or the environment variable ``password_env``; with
    neither, no password. ``repr`` never shows it (it is not even stored)."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password_file: str | None = None
    password_env: str | None = None
    database: str | None = None
    connect_timeout_s: float = 10.0
    #: Extra session settings, ``name -> value`` (e.g. ``innodb_lock_wait_timeout: 5``).
    session: tuple[tuple[str, str | int], ...] = ()

    def password(self) -> str:
        """The password, read now. Raises :class:`ConfigError` naming the file or variable
        (never the value) when it cannot be read."""
        if self.password_file:
            try:
                with open(self.password_file, encoding="utf-8") as f:
                    return f.readline().rstrip("\r\n")
            except OSError as exc:
                raise ConfigError(
                    f"cannot read the password file: {exc.strerror}", field="password_file"
                ) from None
        if self.password_env:
            value = os.environ.get(self.password_env)
            if value is None:
                raise ConfigError(
                    f"environment variable {self.password_env} is not set", field="password_env"
                )
            return value
        return ""


def map_database(mapping: Iterable[tuple[str, str]], database: str) -> str:
    """The target database (or PostgreSQL schema) of a source database: ``mapping`` pairs
    ``(source, target)``; unmapped databases keep their name."""
    for source, target in mapping:
        if source == database:
            return target
    return database


@runtime_checkable
class SchemaSource(Protocol):
    """Table definitions in force at a position (``headwater.schema.SchemaHistory``-like)."""

    def table_at(self, database: str, table: str, position: Position) -> TableDef | None: ...


@dataclass(frozen=True, slots=True)
class StaticSchema:
    """Fixed table definitions, whatever the position (tests, or targets of one shape)."""

    tables: tuple[TableDef, ...]

    def table_at(self, database: str, table: str, position: Position) -> TableDef | None:
        for tdef in self.tables:
            if tdef.database == database and tdef.table == table:
                return tdef
        return None


@dataclass(frozen=True, slots=True)
class SchemaFile:
    """The reader task's schema history file (``schema.jsonl``), read-only.

    Each process loads it once (cached by path and modification time), read-only: the
    reader may be appending to it.
    """

    path: str
    mariadb: bool = True

    def table_at(self, database: str, table: str, position: Position) -> TableDef | None:
        history = _load_history(self.path, os.stat(self.path).st_mtime_ns, self.mariadb)
        found: TableDef | None = history.table_at(database, table, position)
        return found


@lru_cache(maxsize=8)
def _load_history(path: str, mtime_ns: int, mariadb: bool) -> Any:
    from headwater.schema.history import SchemaHistory

    return SchemaHistory.open(path, mariadb=mariadb, read_only=True)


@dataclass(frozen=True, slots=True)
class Change:
    """One change, decoded from whatever form it came in (see :func:`as_change`)."""

    source: str
    database: str
    table: str
    op: str
    sequence: int
    position: Position
    key: dict[str, Any] | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    sql: str | None = None
    ts_us: int = 0

    @property
    def table_name(self) -> str:
        return f"{self.database}.{self.table}"


def _json(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        decoded = orjson.loads(value)
        return None if decoded is None else dict(decoded)
    return dict(value)


def as_change(row: Any) -> Change:
    """A :class:`Change` from a ChangeRow, a change-row dict or a Spark ``Row``."""
    if isinstance(row, Change):
        return row
    if isinstance(row, ChangeRow):
        return Change(
            row.source,
            row.database,
            row.table,
            row.op,
            row.sequence,
            row.position,
            row.key,
            row.before,
            row.after,
            row.sql,
            row.ts_us,
        )
    get: Mapping[str, Any] = row if isinstance(row, Mapping) else row.asDict()
    position = Position(
        int(get.get("change_id") or 0),
        int(get.get("file_num") or 0),
        int(get.get("offset") or 0),
        int(get.get("event_index") or 0),
    )
    return Change(
        source=str(get.get("source") or ""),
        database=str(get["database"] or ""),
        table=str(get.get("table") or ""),
        op=str(get["op"]),
        sequence=int(get["sequence"]),
        position=position,
        key=_json(get.get("key")),
        before=_json(get.get("before")),
        after=_json(get.get("after")),
        sql=get.get("sql"),
        ts_us=int(get.get("ts_us") or 0),
    )


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What one :meth:`Sink.apply_changes` call did for its shard."""

    shard: int
    batch_id: int
    upserts: int = 0
    deletes: int = 0
    skipped: int = 0
    #: Per source, the shard's checkpoint sequence after the call.
    checkpoints: dict[str, int] = field(default_factory=dict)
    attempts: int = 1


class Sink(Protocol):
    """The small interface every sink implements.

    ``write_batch`` is what a Spark ``foreachBatch(df, batch_id)`` calls: ``df`` has the
    change-row schema. ``apply_changes`` is the same without Spark, for one shard's rows
    (dicts, ChangeRows or Rows, in any order: sinks order by ``sequence``).
    """

    @property
    def capabilities(self) -> SinkCapabilities: ...

    def write_batch(self, df: DataFrame, batch_id: int) -> None: ...

    def apply_changes(self, rows: Iterable[Any], batch_id: int, shard: int = 0) -> ApplyResult: ...
