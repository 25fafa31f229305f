"""What a SQL target supplies to the shared apply loop, and the options of a SQL sink.

:class:`SqlDialect` is the whole interface between :class:`~headwater.sinks.sql.SqlSink`
and one kind of target (``mysql/client.py``, ``postgres/client.py``): connecting, telling
retryable driver errors from the rest, and the text of every statement the loop runs
(upserts, deletes, checkpoint table, ``CREATE``, source DDL). :class:`SqlSinkConfig` is the
one options object of every SQL sink; each target subclasses it only to change defaults.

Invariants: a dialect holds no state (one instance per module, pickled by reference):
what it needs comes in its arguments. The config is frozen plain data, picklable and free
of secrets, because Spark ships it to the executors. Statements take ``%s`` placeholders,
or literals rendered by :meth:`SqlDialect.render_columns`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from headwater.changes import ChangeRow
from headwater.connections import TargetConnection
from headwater.errors import SinkError
from headwater.schema.model import TableDef
from headwater.sinks.base import (
    DdlMode,
    RetryPolicy,
    SchemaSource,
    SinkCapabilities,
)
from headwater.sinks.schemachange import Step, TargetColumns

__all__ = ["SqlDialect", "SqlSinkConfig", "describe"]


@dataclass(frozen=True, slots=True)
class SqlSinkConfig:
    """Options of a SQL sink (plain data: picklable, no secrets).

    ``pipeline`` names the pipeline in the checkpoint table (two pipelines into one target
    keep separate checkpoints). ``database_map`` pairs ``(source database, target
    database)`` (PostgreSQL: target schema). ``shards`` is how many partitions the Spark
    glue applies in parallel (fixed for a pipeline's life: checkpoints are per shard).
    ``batch_rows`` caps the rows of one statement. ``zero_dates``: ``keep``, ``null`` or
    ``fail`` (the dialect's capabilities say which it accepts).
    """

    pipeline: str
    connection: TargetConnection
    schema: SchemaSource
    database_map: tuple[tuple[str, str], ...] = ()
    checkpoint_database: str = "headwater"
    shards: int = 2
    batch_rows: int = 500
    ddl: DdlMode = DdlMode.LENIENT
    create_tables: bool = False
    zero_dates: str = "null"
    retry: RetryPolicy = field(default_factory=RetryPolicy)


class SqlDialect(ABC):
    """The SQL and driver specifics of one kind of target. Stateless: one instance per
    module, pickled by reference."""

    capabilities: ClassVar[SinkCapabilities]
    quote_char: ClassVar[str]
    text_bytes: ClassVar[bool]
    #: The target runs MySQL's DDL text (for statements with no table definition).
    runs_mysql_ddl: ClassVar[bool] = False
    #: A statement group of at least this many rows goes through :meth:`bulk_write`
    #: (0: this dialect has no bulk path; every group runs as batched statements).
    bulk_rows: ClassVar[int] = 0

    def ident(self, name: str) -> str:
        q = self.quote_char
        return q + name.replace(q, q + q) + q

    def table_ref(self, schema: str, table: str) -> str:
        return f"{self.ident(schema)}.{self.ident(table)}"

    @abstractmethod
    def connect(self, options: TargetConnection, config: SqlSinkConfig) -> Any:
        """A DB-API connection, autocommit off, session in UTC."""

    @abstractmethod
    def retryable(self, exc: BaseException) -> bool | None:
        """True: retry; False: a database error that retrying cannot fix; None: not a
        database error at all."""

    @abstractmethod
    def upsert_rendered(
        self, table: str, columns: Sequence[str], key: Sequence[str], rows: str
    ) -> str:
        """An insert-or-update of the rows ``rows`` (SQL text ``(...), (...)``: literals
        from :meth:`render_columns`, or ``%s`` placeholders)."""

    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str], rows: int) -> str:
        """An insert-or-update of ``rows`` rows with ``%s`` placeholders."""
        one = "(" + ", ".join(["%s"] * len(columns)) + ")"
        return self.upsert_rendered(table, columns, key, ", ".join([one] * rows))

    @abstractmethod
    def create_table_sql(self, schema: str, tdef: TableDef) -> list[str]:
        """``CREATE ... IF NOT EXISTS`` statements for the target schema and table."""

    @abstractmethod
    def checkpoint_setup_sql(self, schema: str) -> list[str]:
        """Statements creating the checkpoint table if missing."""

    @abstractmethod
    def insert_missing_sql(self, table: str) -> str:
        """Insert a checkpoint row ``(pipeline, source, shard)`` unless it exists."""

    def setup_lock_sql(self) -> list[str]:
        """Statements run first in a transaction that creates schemas or tables, so that
        concurrent creators (the shards) take turns; none when ``IF NOT EXISTS`` is safe
        under concurrency on this target."""
        return []

    def lost_create_race(self, exc: BaseException) -> bool:
        """Whether ``exc`` is what ``CREATE ... IF NOT EXISTS`` raises when a concurrent
        creator won (the object now exists)."""
        return False

    def missing_table(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a table does not exist on the target."""
        return False

    def ddl_statements(self, change: ChangeRow, config: SqlSinkConfig) -> list[str]:
        raise SinkError("this target cannot apply source DDL", table=change.table_name)

    # -- schema changes (headwater.sinks.schemachange) -------------------------------------

    @abstractmethod
    def create_schema_sql(self, schema: str) -> str:
        """``CREATE DATABASE``/``SCHEMA IF NOT EXISTS`` (run only when it is missing)."""

    def schema_exists(self, cur: Any, schema: str) -> bool:
        """Whether the target has the database (PostgreSQL: schema) ``schema``."""
        cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,))
        return cur.fetchone() is not None

    def target_columns(self, cur: Any, schema: str, table: str) -> TargetColumns:
        """The target table's columns (name -> (type, nullable)); None: no such table."""
        cur.execute(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (schema, table),
        )
        found = {str(n): (str(t), str(null).upper() == "YES") for n, t, null in cur.fetchall()}
        return found or None

    def render_step(self, step: Step, config: SqlSinkConfig) -> list[str]:
        """The statements of one schema-change step on this target (names mapped)."""
        raise SinkError(f"this target cannot apply schema changes ({step.op})")

    def render_columns(self, cur: Any, columns: Sequence[list[Any]]) -> str | None:
        """Rows given column by column (``columns[j][i]``: column ``j`` of row ``i``) as
        SQL text ``(v1, v2), (v3, v4)`` (values as literals), or None when this dialect
        binds parameters instead (the driver's own escaping is used)."""
        return None

    def bulk_write(
        self,
        cur: Any,
        table: str,
        columns: Sequence[str],
        key: Sequence[str],
        delete: bool,
        values: Sequence[list[Any]],
    ) -> None:
        """Write a whole statement group set-based, in the caller's transaction: delete
        the keys (``delete``: ``columns`` are the key's), or upsert the rows, given column
        by column (``values[j][i]``). The target's state afterwards is the one the batched
        statements give (tests/integration/test_sink_bulk.py compares them). Only called
        when :attr:`bulk_rows` is set."""
        raise NotImplementedError(f"{type(self).__name__} has no bulk path")

    def delete_rendered(self, table: str, key: Sequence[str], rows: str) -> str:
        """:meth:`delete_sql` around rows from :meth:`render_columns`."""
        cols = ", ".join(self.ident(c) for c in key)
        return f"DELETE FROM {table} WHERE ({cols}) IN ({rows})"

    def delete_sql(self, table: str, key: Sequence[str], rows: int) -> str:
        cols = ", ".join(self.ident(c) for c in key)
        if len(key) == 1:
            return f"DELETE FROM {table} WHERE {cols} IN ({', '.join(['%s'] * rows)})"
        one = "(" + ", ".join(["%s"] * len(key)) + ")"
        return f"DELETE FROM {table} WHERE ({cols}) IN ({', '.join([one] * rows)})"


def describe(exc: BaseException) -> str:
    """A driver error as message text: its class and its message."""
    return f"{type(exc).__name__}: {exc}".strip()
