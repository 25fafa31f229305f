"""The exactly-once apply loop every SQL sink shares; dialects supply the SQL.

One call applies one shard's changes in **one transaction** (DESIGN.md, decision 5)::

    BEGIN
      INSERT-if-missing + SELECT ... FOR UPDATE  the shard's checkpoint row per source
      drop key events with sequence <= that row's max_sequence     (already applied)
      collapse the rest to one net effect per key                  (headwater.sinks.merge)
      per table: batched DELETE ... WHERE (k1, k2) IN (...), then batched upserts
      UPDATE the checkpoint row: max_sequence, batch_id, applies + 1, rows, applied_at
    COMMIT

The checkpoint table (``<checkpoint_database>.headwater_checkpoint``, layout in
docs/formats.md, "Sinks") is keyed ``(pipeline, source, shard)``. The shard's
``max_sequence`` decides: a replayed batch (same batch id) or an older one holds only
sequences at or below it and changes nothing; ``batch_id`` and ``applies`` record which
batch advanced the row last and how many transactions ever did. Sequences of one source
grow across batches, so this holds even when Spark's batch ids restart (a new checkpoint
location) -- the reason the batch id is recorded, not compared.

Deletes run before upserts: a row that moved to another key, or a unique value freed by
a delete, must be gone before an upsert re-uses it. DDL (``op == "ddl"``) is applied
outside the data transactions, in sequence order between them, with its own checkpoint
row (shard ``-1``); see :meth:`SqlSink.apply_ddl`.

Errors: the dialect classifies driver errors. Retryable ones (deadlock, lock wait
timeout, lost connection, serialization failure) roll back, back off and redo the whole
transaction on a fresh connection, up to ``RetryPolicy.attempts``; then
:class:`~headwater.errors.TransientSinkError`. Any other database error rolls back and
raises :class:`~headwater.errors.SinkError` naming the table, the key of the first row
that fails on its own (each batched statement runs under a savepoint, so the failing
batch is re-run row by row to find it) and the statement, with the sequence to resume
from. Nothing of a failed transaction stays in the target.
"""

from __future__ import annotations

import atexit
import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Callable, Iterable, KeysView, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from headwater.errors import ConfigError, SinkError, TransientSinkError
from headwater.position import Position
from headwater.schema.model import TableDef
from headwater.sinks.base import (
    ApplyResult,
    Change,
    ConnectionOptions,
    DdlMode,
    RetryPolicy,
    SchemaSource,
    SinkCapabilities,
    as_change,
    map_database,
)
from headwater.sinks.merge import (
    DELETE,
    ChangeColumns,
    KeyEvent,
    NetEffect,
    collapse,
    collapse_columns,
    explode,
)
from headwater.sinks.values import ValueRules, column_converter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DDL_SHARD", "SqlDialect", "SqlSink", "SqlSinkConfig"]

log = logging.getLogger(__name__)

#: The checkpoint shard of DDL statements.
DDL_SHARD = -1

OnRetry = Callable[[int, BaseException], None]


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
    connection: ConnectionOptions
    schema: SchemaSource
    database_map: tuple[tuple[str, str], ...] = ()
    checkpoint_database: str = "headwater"
    shards: int = 2
    batch_rows: int = 500
    ddl: DdlMode = DdlMode.SKIP
    create_tables: bool = False
    zero_dates: str = "null"
    retry: RetryPolicy = field(default_factory=RetryPolicy)


class SqlDialect(ABC):
    """The SQL and driver specifics of one kind of target. Stateless: one instance per
    module, pickled by reference."""

    capabilities: ClassVar[SinkCapabilities]
    quote_char: ClassVar[str]
    text_bytes: ClassVar[bool]

    def ident(self, name: str) -> str:
        q = self.quote_char
        return q + name.replace(q, q + q) + q

    def table_ref(self, schema: str, table: str) -> str:
        return f"{self.ident(schema)}.{self.ident(table)}"

    @abstractmethod
    def connect(self, options: ConnectionOptions, config: SqlSinkConfig) -> Any:
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

    def ddl_statements(self, change: Change, config: SqlSinkConfig) -> list[str]:
        raise SinkError("this target cannot apply source DDL", table=change.table_name)

    def render_columns(self, cur: Any, columns: Sequence[list[Any]]) -> str | None:
        """Rows given column by column (``columns[j][i]``: column ``j`` of row ``i``) as
        SQL text ``(v1, v2), (v3, v4)`` (values as literals), or None when this dialect
        binds parameters instead (the driver's own escaping is used)."""
        return None

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


@dataclass(frozen=True, slots=True)
class _Selected:
    """What a shard transaction applies, chosen once the checkpoints are read: how many
    events were already applied, the net effects of the rest, and per source the last
    sequence and the number of events applied."""

    skipped: int
    effects: list[NetEffect]
    progress: dict[str, tuple[int, int]]


def _progress(items: Iterable[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for source, seq in items:
        last, count = out.get(source, (seq, 0))
        out[source] = (max(last, seq), count + 1)
    return out


class _Shape(NamedTuple):
    """How the net effects of one table definition and column set are written: the
    statement's columns (the key's for a delete, the image's in table order for an upsert)
    and a column converter for each."""

    delete: bool
    columns: tuple[str, ...]
    convert: list[Callable[[list[Any]], list[Any]]]


@dataclass(slots=True)
class _Write:
    """The net effects of one statement shape: a table's deletes, or its upserts of one
    column set. ``values[j][i]`` is column ``j`` of effect ``i``, converted for the driver
    a column at a time (:func:`~headwater.sinks.values.column_converter`)."""

    table: str  # target reference, quoted
    name: str  # source db.table, for messages
    key: tuple[str, ...]
    columns: tuple[str, ...]
    delete: bool
    effects: list[NetEffect] = field(default_factory=list)
    #: ``(index of the first effect, shape)``: a new run starts where the table
    #: definition (the converters) changes, so effects keep their order.
    runs: list[tuple[int, _Shape]] = field(default_factory=list)
    values: list[list[Any]] = field(default_factory=list)

    def row(self, i: int) -> list[Any]:
        return [column[i] for column in self.values]

    def convert(self) -> None:
        """Fill :attr:`values` (raises what a converter raises)."""
        self.values = [[] for _ in self.columns]
        bounds = [start for start, _ in self.runs[1:]] + [len(self.effects)]
        for (start, shape), stop in zip(self.runs, bounds, strict=True):
            effects = self.effects[start:stop]
            sources = [e.key if self.delete else e.image or {} for e in effects]
            for j, name in enumerate(shape.columns):
                self.values[j].extend(shape.convert[j](list(map(itemgetter(name), sources))))


class SqlSink:
    """A SQL sink: ``config`` plus its ``dialect``. Picklable; opens connections per call."""

    dialect: ClassVar[SqlDialect]

    def __init__(self, config: SqlSinkConfig) -> None:
        caps = self.dialect.capabilities
        if config.ddl not in caps.ddl_modes:
            raise ConfigError(f"{caps.name} sinks do not support ddl: {config.ddl}", field="ddl")
        if config.zero_dates not in caps.zero_dates:
            raise ConfigError(
                f"{caps.name} sinks accept zero_dates in {sorted(caps.zero_dates)}",
                field="zero_dates",
            )
        if config.shards < 1 or config.batch_rows < 1:
            raise ConfigError("shards and batch_rows must be positive", field="shards")
        self.config = config

    def __repr__(self) -> str:
        c = self.config.connection
        return f"{type(self).__name__}({self.config.pipeline!r}, {c.host}:{c.port})"

    @property
    def capabilities(self) -> SinkCapabilities:
        return self.dialect.capabilities

    # -- connections and retries -----------------------------------------------------------

    def connect(self) -> Any:
        """A new connection to the target (autocommit off, UTC session)."""
        return self.dialect.connect(self.config.connection, self.config)

    def _with_retries(
        self,
        work: Callable[[Any], Any],
        *,
        what: str,
        connection: Any = None,
        on_retry: OnRetry | None = None,
        resume: int | None = None,
        pooled: bool = True,
        creates: bool = False,
    ) -> tuple[Any, int]:
        policy = self.config.retry
        attempt = 0
        while True:
            attempt += 1
            reused = False
            if connection is not None:
                conn = connection
            else:
                conn = _POOL.take(self._pool_key()) if pooled else None
                reused = conn is not None
                if conn is None:
                    conn = self.connect()
            keep = False
            try:
                result = work(conn)
                conn.commit()
                keep = pooled
                return result, attempt
            except BaseException as exc:
                _rollback(conn)
                if creates and attempt < policy.attempts and self.dialect.lost_create_race(exc):
                    # A concurrent CREATE ... IF NOT EXISTS won: run ours again, it now sees
                    # the object and does nothing.
                    log.info("%s: a concurrent creator won (%s); again", what, _describe(exc))
                    continue
                verdict = self.dialect.retryable(exc)
                if not verdict:
                    raise
                if reused:  # the target restarted or dropped idle sessions: the other
                    _POOL.clear(self._pool_key())  # pooled connections are stale too
                if connection is not None or attempt >= policy.attempts:
                    raise TransientSinkError(
                        f"{what}: {_describe(exc)} (gave up after {attempt} attempts)",
                        resume_sequence=resume,
                    ) from exc
                log.warning(
                    "%s: %s; retry %d of %d", what, _describe(exc), attempt, policy.attempts
                )
                if on_retry is not None:
                    on_retry(attempt, exc)
                time.sleep(policy.delay(attempt, random.random()))
            finally:
                if connection is None:
                    if keep:
                        _POOL.give(self._pool_key(), conn)
                    else:
                        _close(conn)

    def _pool_key(self) -> tuple[Any, ...]:
        return (type(self), self.config.connection, self.config.zero_dates)

    # -- the plain Python entry point -----------------------------------------------------

    def setup(self, connection: Any = None) -> None:
        """Create the checkpoint table if missing (idempotent; ``apply_changes`` calls it)."""

        def work(conn: Any) -> None:
            with conn.cursor() as cur:
                for sql in self.dialect.setup_lock_sql():
                    cur.execute(sql)
                for sql in self.dialect.checkpoint_setup_sql(self.config.checkpoint_database):
                    cur.execute(sql)

        self._with_retries(work, what="checkpoint setup", connection=connection, creates=True)

    def apply_changes(
        self,
        rows: Iterable[Any],
        batch_id: int,
        shard: int = 0,
        *,
        connection: Any = None,
        on_retry: OnRetry | None = None,
    ) -> ApplyResult:
        """Apply one shard's change rows exactly once; DDL among them in sequence order.

        ``rows`` are change-row dicts, :class:`~headwater.changes.ChangeRow` or Spark
        ``Row`` values of the shard (see :func:`headwater.sinks.merge.route` to split a
        stream). ``connection`` (tests, or a caller's pool) is used instead of new ones and
        is not retried on; ``on_retry(attempt, error)`` is called before each retry.
        """
        changes = sorted((as_change(r) for r in rows), key=lambda c: c.sequence)
        self.setup(connection)
        result = ApplyResult(shard, batch_id)
        segment: list[KeyEvent] = []
        for change in changes:
            if change.op != "ddl":
                segment.extend(explode(change))
                continue
            result = _merge(
                result, self.apply_events(segment, batch_id, shard, connection, on_retry)
            )
            segment = []
            self.apply_ddl(change, batch_id, connection=connection)
        return _merge(result, self.apply_events(segment, batch_id, shard, connection, on_retry))

    # -- the shard transaction ------------------------------------------------------------

    def apply_events(
        self,
        events: Sequence[KeyEvent],
        batch_id: int,
        shard: int,
        connection: Any = None,
        on_retry: OnRetry | None = None,
    ) -> ApplyResult:
        """Apply key events of one shard in one transaction (module docstring)."""
        if not events:
            return ApplyResult(shard, batch_id, attempts=0)
        if self.config.create_tables:
            tables: dict[tuple[str, str], Position] = {}
            for ev in events:
                tables.setdefault((ev.database, ev.table), ev.position)
            self._create_tables(tables, connection)

        def select(applied: dict[str, int]) -> _Selected:
            todo = [e for e in events if e.sequence > applied[e.source]]
            return _Selected(
                len(events) - len(todo),
                collapse(todo) if todo else [],
                _progress((e.source, e.sequence) for e in todo),
            )

        return self._apply(
            sorted({e.source for e in events}),
            select,
            min(e.sequence for e in events),
            batch_id,
            shard,
            connection,
            on_retry,
        )

    def apply_columns(
        self,
        cols: ChangeColumns,
        rows: Sequence[int],
        batch_id: int,
        shard: int,
        connection: Any = None,
        on_retry: OnRetry | None = None,
    ) -> ApplyResult:
        """:meth:`apply_events` for the Spark glue's routed columns: ``rows`` are the
        shard's row indexes in ``cols``, in sequence order (no DDL among them)."""
        if not rows:
            return ApplyResult(shard, batch_id, attempts=0)
        seq, src = cols.sequence, cols.source
        if self.config.create_tables:
            db, tbl = cols.database, cols.table
            firsts: dict[tuple[str, str], int] = {}
            if len(set(map(db.__getitem__, rows))) == len(set(map(tbl.__getitem__, rows))) == 1:
                firsts[(db[rows[0]], tbl[rows[0]])] = rows[0]  # one table: skip the loop
            else:
                for i in rows:
                    firsts.setdefault((db[i], tbl[i]), i)
            self._create_tables({t: cols.position(i) for t, i in firsts.items()}, connection)

        sources = set(map(src.__getitem__, rows))

        def select(applied: dict[str, int]) -> _Selected:
            if len(sources) == 1:  # rows are in sequence order: the new ones are a tail
                (source,) = sources
                todo = rows[bisect_right(rows, applied[source], key=seq.__getitem__) :]
                progress = {source: (seq[todo[-1]], len(todo))} if todo else {}
            else:
                todo = [i for i in rows if seq[i] > applied[src[i]]]
                progress = _progress((src[i], seq[i]) for i in todo)
            return _Selected(
                len(rows) - len(todo),
                collapse_columns(cols, todo) if todo else [],
                progress,
            )

        return self._apply(
            sorted(sources),
            select,
            seq[rows[0]],
            batch_id,
            shard,
            connection,
            on_retry,
        )

    def _apply(
        self,
        sources: list[str],
        select: Callable[[dict[str, int]], _Selected],
        resume: int,
        batch_id: int,
        shard: int,
        connection: Any,
        on_retry: OnRetry | None,
    ) -> ApplyResult:
        def work(conn: Any) -> ApplyResult:
            return self._transaction(conn, sources, select, batch_id, shard)

        result, attempts = self._with_retries(
            work,
            what=f"apply shard {shard} of batch {batch_id}",
            connection=connection,
            on_retry=on_retry,
            resume=resume,
        )
        return ApplyResult(
            shard,
            batch_id,
            result.upserts,
            result.deletes,
            result.skipped,
            result.checkpoints,
            attempts,
        )

    def _transaction(
        self,
        conn: Any,
        sources: list[str],
        select: Callable[[dict[str, int]], _Selected],
        batch_id: int,
        shard: int,
    ) -> ApplyResult:
        ckpt = self.dialect.table_ref(self.config.checkpoint_database, "headwater_checkpoint")
        pipeline = self.config.pipeline
        applied: dict[str, int] = {}
        with conn.cursor() as cur:
            for source in sources:
                cur.execute(self.dialect.insert_missing_sql(ckpt), (pipeline, source, shard))
                cur.execute(
                    f"SELECT max_sequence FROM {ckpt} WHERE pipeline = %s AND source = %s"
                    " AND shard = %s FOR UPDATE",
                    (pipeline, source, shard),
                )
                applied[source] = int(cur.fetchone()[0])
            chosen = select(applied)
            if not chosen.progress:
                return ApplyResult(shard, batch_id, skipped=chosen.skipped, checkpoints=applied)
            writes = self._writes(chosen.effects, batch_id, shard)
            upserts = deletes = 0
            for write in writes:
                if write.delete:
                    deletes += self._run(cur, write, batch_id, shard)
            for write in writes:
                if not write.delete:
                    upserts += self._run(cur, write, batch_id, shard)
            for source, (last, count) in chosen.progress.items():
                applied[source] = last
                cur.execute(
                    f"UPDATE {ckpt} SET batch_id = %s, max_sequence = %s, applies = applies + 1,"
                    " rows_applied = %s, applied_at = CURRENT_TIMESTAMP(6)"
                    " WHERE pipeline = %s AND source = %s AND shard = %s",
                    (batch_id, last, count, pipeline, source, shard),
                )
        return ApplyResult(shard, batch_id, upserts, deletes, chosen.skipped, applied)

    def _writes(self, effects: list[NetEffect], batch_id: int, shard: int) -> list[_Write]:
        rules = ValueRules(self.config.zero_dates, self.dialect.text_bytes)
        groups: dict[tuple[str, str, bool, tuple[str, ...]], _Write] = {}
        # Rows of one binlog event share a position object: look each definition up once
        # per position (the effects hold the positions, so ids stay unique meanwhile), and
        # work out each statement shape (columns, converters) once.
        tdefs: dict[tuple[str, str, int], TableDef] = {}
        shapes: dict[tuple[int, bool, tuple[str, ...]], _Shape] = {}

        def shape_of(effect: NetEffect) -> _Shape:
            at = (effect.database, effect.table, id(effect.position))
            tdef = tdefs.get(at)
            if tdef is None:
                tdef = tdefs[at] = self._table_def(effect, batch_id, shard)
            delete = effect.action == DELETE
            names = tuple(effect.key if delete else effect.image or {})
            shape = shapes.get((id(tdef), delete, names))
            if shape is None:
                shape = shapes[(id(tdef), delete, names)] = self._shape(
                    effect, tdef, delete, names, rules, batch_id, shard
                )
            return shape

        # Consecutive effects mostly come from one event and have one column set: they
        # go where the previous one went without the lookups.
        write: _Write | None = None
        previous: NetEffect | None = None
        previous_names: KeysView[str] | None = None
        for effect in effects:
            names = (effect.key if effect.action == DELETE else effect.image or {}).keys()
            if (
                write is None
                or previous is None
                or effect.position is not previous.position
                or effect.action != previous.action
                or effect.table != previous.table
                or effect.database != previous.database
                or names != previous_names
            ):
                shape = shape_of(effect)
                gkey = (effect.database, effect.table, shape.delete, shape.columns)
                write = groups.get(gkey)
                if write is None:
                    target = map_database(self.config.database_map, effect.database)
                    write = groups[gkey] = _Write(
                        self.dialect.table_ref(target, effect.table),
                        effect.table_name,
                        tuple(effect.key),
                        shape.columns,
                        shape.delete,
                    )
                if not write.runs or write.runs[-1][1] is not shape:
                    write.runs.append((len(write.effects), shape))
            write.effects.append(effect)
            previous, previous_names = effect, names
        try:
            for write in groups.values():
                write.convert()
        except (ValueError, TypeError):
            raise _conversion_error(effects, shape_of, batch_id, shard) from None
        return list(groups.values())

    def _shape(
        self,
        effect: NetEffect,
        tdef: TableDef,
        delete: bool,
        names: tuple[str, ...],
        rules: ValueRules,
        batch_id: int,
        shard: int,
    ) -> _Shape:
        # A delete names the key's columns in key order (its statement's ``(k1, k2) IN``
        # lists them so); an upsert writes the image's columns in table order.
        known = {c.name for c in tdef.columns}
        columns = names if delete else tuple(c.name for c in tdef.columns if c.name in names)
        unknown = set(names) - known
        if unknown:
            raise SinkError(
                f"columns {sorted(unknown)} are not in the table definition",
                table=effect.table_name,
                key=effect.key,
                shard=shard,
                batch_id=batch_id,
                resume_sequence=effect.first_sequence,
            )
        convert = [column_converter(tdef.column(c), rules) for c in columns]  # type: ignore[arg-type]
        return _Shape(delete, columns, convert)

    def _table_def(self, effect: NetEffect, batch_id: int, shard: int) -> TableDef:
        tdef = self.config.schema.table_at(effect.database, effect.table, effect.position)
        if tdef is None:
            raise SinkError(
                f"no table definition at position {effect.position}",
                table=effect.table_name,
                key=effect.key,
                shard=shard,
                batch_id=batch_id,
                resume_sequence=effect.first_sequence,
            )
        return tdef

    def _run(self, cur: Any, write: _Write, batch_id: int, shard: int) -> int:
        count = len(write.effects)
        width = len(write.columns)
        size = max(1, min(self.config.batch_rows, self.dialect.capabilities.max_params // width))
        for start in range(0, count, size):
            rows = range(start, min(count, start + size))
            chunk = [column[start : rows.stop] for column in write.values]
            rendered = self.dialect.render_columns(cur, chunk)
            params: list[Any] | None = None
            if rendered is None:
                sql = self._statement(write, len(rows))
                params = [v for row in zip(*chunk, strict=True) for v in row]
            elif write.delete:
                sql = self.dialect.delete_rendered(write.table, write.columns, rendered)
            else:
                sql = self.dialect.upsert_rendered(write.table, write.columns, write.key, rendered)
            cur.execute("SAVEPOINT hw_batch")
            try:
                cur.execute(sql, params)
            except Exception as exc:
                if self.dialect.retryable(exc) is not False:
                    raise
                cur.execute("ROLLBACK TO SAVEPOINT hw_batch")
                raise self._locate(cur, write, rows, exc, batch_id, shard) from exc
        return count

    def _statement(self, write: _Write, n: int) -> str:
        if write.delete:
            return self.dialect.delete_sql(write.table, write.columns, n)
        return self.dialect.upsert_sql(write.table, write.columns, write.key, n)

    def _locate(
        self,
        cur: Any,
        write: _Write,
        rows: range,
        exc: BaseException,
        batch_id: int,
        shard: int,
    ) -> SinkError:
        """The error of the first row of a failed batch that fails on its own."""
        one = self._statement(write, 1)
        culprit, cause = write.effects[rows[0]], exc
        for i in rows:
            cur.execute("SAVEPOINT hw_row")
            try:
                cur.execute(one, write.row(i))
            except Exception as row_exc:
                if self.dialect.retryable(row_exc) is not False:
                    raise
                culprit, cause = write.effects[i], row_exc
                break
            finally:
                cur.execute("ROLLBACK TO SAVEPOINT hw_row")
        return SinkError(
            _describe(cause),
            table=write.name,
            key=culprit.key,
            statement=one,
            shard=shard,
            batch_id=batch_id,
            resume_sequence=min(write.effects[i].first_sequence for i in rows),
        )

    def _create_tables(self, tables: dict[tuple[str, str], Position], connection: Any) -> None:
        """``CREATE ... IF NOT EXISTS`` each ``(database, table)`` as defined at its
        position."""

        def work(conn: Any) -> None:
            with conn.cursor() as cur:
                for sql in self.dialect.setup_lock_sql():
                    cur.execute(sql)
                for (db, table), position in tables.items():
                    tdef = self.config.schema.table_at(db, table, position)
                    if tdef is None:
                        raise SinkError(f"no table definition at {position}", table=f"{db}.{table}")
                    target = map_database(self.config.database_map, db)
                    for sql in self.dialect.create_table_sql(target, tdef):
                        cur.execute(sql)

        self._with_retries(work, what="create tables", connection=connection, creates=True)

    # -- DDL ------------------------------------------------------------------------------

    def apply_ddl(self, change: Change, batch_id: int, *, connection: Any = None) -> bool:
        """Apply one DDL change per ``config.ddl``; True when it ran now.

        ``skip`` ignores it, ``fail`` raises :class:`SinkError`. ``apply`` runs the
        statement (database names mapped) unless the DDL checkpoint row (shard ``-1``)
        shows its sequence applied, then advances that row. DDL commits on its own in
        MySQL, so a crash between the statement and the checkpoint update replays the
        statement once: the error it then raises (such as "table exists") is reported.
        """
        mode = DdlMode(self.config.ddl)
        if mode is DdlMode.SKIP:
            return False
        if mode is DdlMode.FAIL:
            raise SinkError(
                "DDL change stopped the sink (ddl: fail)",
                table=change.table_name or change.database,
                statement=change.sql,
                batch_id=batch_id,
                resume_sequence=change.sequence,
            )
        ckpt = self.dialect.table_ref(self.config.checkpoint_database, "headwater_checkpoint")
        key = (self.config.pipeline, change.source, DDL_SHARD)

        def work(conn: Any) -> bool:
            with conn.cursor() as cur:
                cur.execute(self.dialect.insert_missing_sql(ckpt), key)
                cur.execute(
                    f"SELECT max_sequence FROM {ckpt} WHERE pipeline = %s AND source = %s"
                    " AND shard = %s",
                    key,
                )
                if int(cur.fetchone()[0]) >= change.sequence:
                    return False
                conn.commit()
                for sql in self.dialect.ddl_statements(change, self.config):
                    try:
                        cur.execute(sql)
                    except Exception as exc:
                        if self.dialect.retryable(exc) is not False:
                            raise
                        raise SinkError(
                            f"DDL failed: {_describe(exc)}",
                            table=change.table_name or change.database,
                            statement=change.sql,
                            batch_id=batch_id,
                            resume_sequence=change.sequence,
                        ) from exc
                cur.execute(
                    f"UPDATE {ckpt} SET batch_id = %s, max_sequence = %s, applies = applies + 1,"
                    " rows_applied = 1, applied_at = CURRENT_TIMESTAMP(6)"
                    " WHERE pipeline = %s AND source = %s AND shard = %s",
                    (batch_id, change.sequence, *key),
                )
                return True

        ran, _ = self._with_retries(
            work,
            what=f"DDL at sequence {change.sequence}",
            connection=connection,
            resume=change.sequence,
            pooled=False,  # DDL runs after USE: the session is not a clean one any more
        )
        return bool(ran)

    # -- Spark ----------------------------------------------------------------------------

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        """``foreachBatch`` body: route by key hash into ``config.shards`` partitions, apply
        each in parallel on the executors, DDL in order on the driver (headwater.sinks.glue)."""
        from headwater.sinks.glue import write_sql_batch

        write_sql_batch(self, df, batch_id)


class _Pool:
    """Idle connections of this process, per target and session settings.

    Connecting costs a TCP and often a TLS handshake (PyMySQL tries TLS by default and
    builds a new SSL context each time): hundreds of milliseconds that every batch of every
    shard used to pay. A connection goes back only after a successful commit (so it holds
    no transaction) and never after DDL; when one fails with a retryable error, the idle
    ones of its target are closed too (a restarted target leaves them all stale) and the
    retry connects anew.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.idle: dict[tuple[Any, ...], list[Any]] = {}
        self.lock = threading.Lock()

    def take(self, key: tuple[Any, ...]) -> Any:
        with self.lock:
            conns = self.idle.get(key)
            return conns.pop() if conns else None

    def clear(self, key: tuple[Any, ...]) -> None:
        with self.lock:
            conns = self.idle.pop(key, [])
        for conn in conns:
            _close(conn)

    def close_all(self) -> None:
        """Close every idle connection (at interpreter exit: drivers warn about, and
        servers log, connections that are only dropped)."""
        with self.lock:
            idle, self.idle = self.idle, {}
        for conns in idle.values():
            for conn in conns:
                _close(conn)

    def give(self, key: tuple[Any, ...], conn: Any) -> None:
        with self.lock:
            conns = self.idle.setdefault(key, [])
            if len(conns) < self.size:
                conns.append(conn)
                return
        _close(conn)


_POOL = _Pool()
atexit.register(_POOL.close_all)


def _merge(a: ApplyResult, b: ApplyResult) -> ApplyResult:
    return ApplyResult(
        a.shard,
        a.batch_id,
        a.upserts + b.upserts,
        a.deletes + b.deletes,
        a.skipped + b.skipped,
        {**a.checkpoints, **b.checkpoints},
        max(a.attempts, b.attempts),
    )


def _conversion_error(
    effects: list[NetEffect], shape_of: Callable[[NetEffect], _Shape], batch_id: int, shard: int
) -> SinkError:
    """The error of the first effect with a value its converter refuses (a whole column
    failed to convert: find the row, value by value)."""
    for effect in effects:
        shape = shape_of(effect)
        source = effect.key if shape.delete else effect.image or {}
        for name, convert in zip(shape.columns, shape.convert, strict=True):
            try:
                convert([source[name]])
            except (ValueError, TypeError) as exc:
                return SinkError(
                    f"cannot convert a value: {exc}",
                    table=effect.table_name,
                    key=effect.key,
                    shard=shard,
                    batch_id=batch_id,
                    resume_sequence=effect.first_sequence,
                )
    raise AssertionError("a column failed to convert, but none of its values does")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _rollback(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # a lost connection cannot roll back; the server already did
        log.debug("rollback failed", exc_info=True)


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        log.debug("close failed", exc_info=True)
