"""What every sink shares: the change a sink consumes, its capabilities, its options.

Contracts:

* A sink is a plain frozen dataclass of configuration (picklable: Spark ships it to
  executors, which open their own connections). It never holds a connection or a secret
  in memory longer than one call; passwords come from a file or an environment variable
  named in :class:`~headwater.connections.TargetConnection` and never appear in
  ``repr``, logs or errors.
* :class:`~headwater.changes.ChangeRow` is the one in-memory form of a change row, from
  the decoder to every sink. :func:`as_change` accepts a ChangeRow, a dict with the
  columns of
  :mod:`headwater.changes.schema` (``key``/``before``/``after`` as JSON text or as dicts), or
  a ``pyspark.sql.Row`` with those fields.
* Capabilities are data (:class:`SinkCapabilities`): callers ask ``sink.capabilities``
  whether the sink is transactional, applies DDL or bulk-loads, never ``if kind ==
  "mysql"``. A sink whose capabilities say ``bulk_load`` has ``bulk_load(renames)``,
  which gives a :class:`BulkLoad` (snapshots load whole key ranges through it).
* Table definitions come from a :class:`SchemaSource` (picklable): :class:`StaticSchema`
  (definitions given inline) or :class:`SchemaFile` (the task's ``schema.jsonl``). A
  source returns the *same* definition object for every position of one interval
  between two schema changes of the table (views built on it, such as the transforms',
  key their caches by that object's identity). :func:`pinned_schemas` scopes one apply
  call: inside it a :class:`SchemaFile` checks its file once, not at every lookup.
"""

from __future__ import annotations

import contextvars
import enum
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from headwater.changes import ChangeRow
from headwater.position import Position
from headwater.schema.model import TableDef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "ApplyResult",
    "BulkLoad",
    "DdlMode",
    "RetryPolicy",
    "SchemaFile",
    "SchemaSource",
    "Sink",
    "SinkCapabilities",
    "StaticSchema",
    "as_change",
    "bulk_load_of",
    "map_database",
    "pinned_schemas",
]

#: Operations that carry a row image after the change.
ROW_OPS = frozenset({"insert", "update", "delete", "read"})


class DdlMode(enum.StrEnum):
    """What a sink does with a schema change of the source (the ``ddl`` setting of every
    sink; docs/configuration.md, "Schema changes"):

    ``evolve``: apply every change in the sink's own terms (tables created, dropped,
    renamed, truncated; columns added, dropped, renamed, retyped; keys).
    ``lenient``: create tables, add columns, widen types, rename; never drop data: a
    dropped column stays (made nullable, later rows leave it NULL), a dropped table stays;
    a table re-created by the source (``DROP`` then ``CREATE``) is emptied and evolved
    leniently to its new shape (its old rows are the source's deleted rows).
    ``ignore``: no schema change reaches the target.
    ``fail``: stop with an error naming the statement and this setting.

    The older values stay accepted: ``apply`` is ``evolve``, ``skip`` is ``ignore``.
    Statements not about data (accounts, privileges, servers, ...) never reach a target
    in any mode.
    """

    EVOLVE = "evolve"
    LENIENT = "lenient"
    IGNORE = "ignore"
    FAIL = "fail"
    APPLY = "evolve"  # the older name of evolve
    SKIP = "ignore"  # the older name of ignore

    @classmethod
    def _missing_(cls, value: object) -> DdlMode | None:
        return _DDL_ALIASES.get(str(value).lower()) if isinstance(value, str) else None


_DDL_ALIASES = {"apply": DdlMode.EVOLVE, "skip": DdlMode.IGNORE}


@dataclass(frozen=True, slots=True)
class SinkCapabilities:
    """What a kind of sink can do; the pipeline and the generic code read these, never the
    sink's name.

    ``transactional``: rows and the checkpoint commit together (exactly-once).
    ``applies_ddl``: schema changes of the source can be applied to the target (in its
    own terms: ``evolve`` and ``lenient``).
    ``ddl_modes``: the :class:`DdlMode` values the sink accepts.
    ``max_params``: most bind parameters one statement may carry.
    ``zero_dates``: what a zero date (``0000-00-00``) can become: ``keep`` (the literal),
    ``null`` or ``fail``.
    ``bulk_load``: the sink can load whole key ranges as its server's bulk text
    (:class:`BulkLoad`; snapshots use it).
    ``ordering``: the order the target sees changes in: ``key`` (per key, in sequence
    order: sinks that merge per key), ``table`` (each table's changes in sequence order)
    or ``none`` (rows as the batch has them; each carries its ``sequence``).
    ``shared_dir``: the section field naming a directory that the driver and every
    executor must see as the same directory (executors write files there, the driver
    publishes them); on a cluster the pipeline checks it at start
    (:mod:`headwater.pipeline.sharedpaths`). None: the sink keeps no files.
    """

    name: str
    transactional: bool
    applies_ddl: bool
    ddl_modes: frozenset[DdlMode]
    max_params: int = 65_535
    zero_dates: frozenset[str] = frozenset({"fail"})
    bulk_load: bool = False
    ordering: str = "key"
    shared_dir: str | None = None


#: Name-only transforms as bulk loads see them, in order: ``("database", ((old, new),
#: ...))`` or ``("table", (("db.t", "t2" | "db2.t2"), ...))``.
Renames = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]


class BulkLoad(Protocol):
    """A sink's bulk-load capability (picklable, no connection): the *source* server
    formats a key range as the text :meth:`line_sql` describes and the target loads it
    (``headwater.snapshot.bulk``)."""

    def line_sql(self, tdef: TableDef) -> str | None:
        """The source-side SQL of one row's text line; None: a column type has no bulk
        form (the table takes the general path)."""
        ...

    def probe(self) -> bool:
        """Whether the target accepts bulk loads now."""
        ...

    def create_table(self, database: str, table: str, position: Any) -> None: ...

    def connect(self) -> Any: ...

    def load(
        self,
        path: str,
        database: str,
        table: str,
        tdef: TableDef,
        where: tuple[str, Sequence[Any]],
        conn: Any = None,
    ) -> int: ...


def bulk_load_of(sink: Any, renames: Renames) -> BulkLoad | None:
    """The bulk-load capability of ``sink`` behind ``renames``, or None when it has none
    (by its capabilities, or by its configuration: ``bulk_load`` says)."""
    caps = getattr(sink, "capabilities", None)
    if not isinstance(caps, SinkCapabilities) or not caps.bulk_load:
        return None
    found: BulkLoad | None = sink.bulk_load(renames)
    return found


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

    Each process loads it once and again only when the file changed: the reader appends
    to it (every append changes its size) and a new task's file is another file (another
    inode). A lookup checks the file with ``os.stat`` first (so it sees every schema change
    recorded before it), except inside :func:`pinned_schemas`, where the first lookup of
    the scope checks it and the others use what it found.

    Why a check per apply call is enough: the reader records a DDL in the history before
    it acknowledges the log record that carries it, and the pipeline reads only
    acknowledged records, so the history as it is when a micro-batch is applied holds
    every schema change up to the batch's last position.
    """

    path: str
    mariadb: bool = True

    def table_at(self, database: str, table: str, position: Position) -> TableDef | None:
        pinned = _PINNED.get()
        key = (self.path, self.mariadb)
        history = None if pinned is None else pinned.get(key)
        if history is None:
            history = _load_history(self.path, self.mariadb)
            if pinned is not None:
                pinned[key] = history
        found: TableDef | None = history.table_at(database, table, position)
        return found


#: Inside :func:`pinned_schemas`: the histories the scope's first lookups loaded.
_PINNED: contextvars.ContextVar[dict[tuple[str, bool], Any] | None] = contextvars.ContextVar(
    "headwater_pinned_schemas", default=None
)
#: Per process: (path, mariadb) -> (the file's identity when read, its history).
_HISTORIES: dict[tuple[str, bool], tuple[tuple[int, ...], Any]] = {}
_HISTORIES_LOCK = threading.Lock()


def _load_history(path: str, mariadb: bool) -> Any:
    """The history in ``path`` as the file is now: read again when its device, inode,
    size or modification time differ from the copy's (an append grows the file; a
    replaced file is another inode)."""
    st = os.stat(path)  # before the read: an append after it makes the next check read again
    seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _HISTORIES.get((path, mariadb))
    if cached is not None and cached[0] == seen:
        return cached[1]
    from headwater.schema.history import SchemaHistory

    with _HISTORIES_LOCK:
        history = SchemaHistory.open(path, mariadb=mariadb, read_only=True)
        _HISTORIES[(path, mariadb)] = (seen, history)
    return history


@contextmanager
def pinned_schemas() -> Iterator[None]:
    """One apply call's view of :class:`SchemaFile` histories: within it, each file is
    checked (``os.stat``, read again if it changed) at its first lookup only, and every
    later lookup of the scope uses that copy. Scopes nest (an inner one checks again)
    and belong to their thread (a context variable)."""
    token = _PINNED.set({})
    try:
        yield
    finally:
        _PINNED.reset(token)


def _json(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        decoded = orjson.loads(value)
        return None if decoded is None else dict(decoded)
    return dict(value)


def as_change(row: Any) -> ChangeRow:
    """A :class:`~headwater.changes.ChangeRow` from a ChangeRow (itself), a change-row
    dict or a Spark ``Row`` (images as JSON text or as dicts)."""
    if isinstance(row, ChangeRow):
        return row
    get: Mapping[str, Any] = row if isinstance(row, Mapping) else row.asDict()
    position = Position(
        int(get.get("change_id") or 0),
        int(get.get("file_num") or 0),
        int(get.get("offset") or 0),
        int(get.get("event_index") or 0),
    )
    return ChangeRow(
        source=str(get.get("source") or ""),
        database=str(get["database"] or ""),
        table=str(get.get("table") or ""),
        op=str(get["op"]),
        ts_us=int(get.get("ts_us") or 0),
        position=position,
        gtid=str(get.get("gtid") or ""),
        txn_id=str(get.get("txn_id") or ""),
        sequence=int(get["sequence"]),
        key=_json(get.get("key")),
        before=_json(get.get("before")),
        after=_json(get.get("after")),
        schema_version=int(get.get("schema_version") or 0),
        sql=get.get("sql"),
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
