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

This module holds the loop itself (:class:`SqlSink`: retries, the checkpoint transaction,
DDL). What a target supplies and the sink's options are in :mod:`headwater.sinks.dialect`
(re-exported here), the grouping, conversion and batched running of the statements in
:mod:`headwater.sinks.writes`, the reuse of idle connections in :mod:`headwater.sinks.pool`.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from headwater.changes import ChangeRow
from headwater.errors import ConfigError, SinkError, TransientSinkError
from headwater.position import Position
from headwater.schema.model import TableDef
from headwater.sinks.base import (
    ApplyResult,
    DdlMode,
    SinkCapabilities,
    as_change,
    map_database,
)
from headwater.sinks.definitions import row_definitions
from headwater.sinks.dialect import SqlDialect, SqlSinkConfig, describe
from headwater.sinks.merge import (
    ChangeColumns,
    ColumnEffect,
    KeyEvent,
    NetEffect,
    collapse,
    collapse_column_rows,
    explode,
)
from headwater.sinks.pool import POOL, close_quietly, rollback_quietly
from headwater.sinks.schemachange import FORGETS, plan_schema_change, position_before, scope_of
from headwater.sinks.writes import plan_column_writes, plan_writes, run_write

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from headwater.sinks.netwrite import NetTable

__all__ = ["DDL_SHARD", "SqlDialect", "SqlSink", "SqlSinkConfig"]

log = logging.getLogger(__name__)

#: The checkpoint shard of DDL statements.
DDL_SHARD = -1

OnRetry = Callable[[int, BaseException], None]


@dataclass(frozen=True, slots=True)
class _Selected:
    """What a shard transaction applies, chosen once the checkpoints are read: how many
    events were already applied, the net effects of the rest (NetEffects, or
    ColumnEffects of ``columns``), and per source the last sequence and the number of
    events applied."""

    skipped: int
    effects: list[NetEffect] | list[ColumnEffect]
    progress: dict[str, tuple[int, int]]
    columns: ChangeColumns | None = None
    #: With ``columns``: the table definition at each selected row (row_definitions).
    definitions: dict[int, TableDef | None] | None = None


def _progress(items: Iterable[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for source, seq in items:
        last, count = out.get(source, (seq, 0))
        out[source] = (max(last, seq), count + 1)
    return out


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
                conn = POOL.take(self._pool_key()) if pooled else None
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
                rollback_quietly(conn)
                if creates and attempt < policy.attempts and self.dialect.lost_create_race(exc):
                    # A concurrent CREATE ... IF NOT EXISTS won: run ours again, it now sees
                    # the object and does nothing.
                    log.info("%s: a concurrent creator won (%s); again", what, describe(exc))
                    continue
                verdict = self.dialect.retryable(exc)
                if not verdict:
                    raise
                if reused:  # the target restarted or dropped idle sessions: the other
                    POOL.clear(self._pool_key())  # pooled connections are stale too
                if connection is not None or attempt >= policy.attempts:
                    raise TransientSinkError(
                        f"{what}: {describe(exc)} (gave up after {attempt} attempts)",
                        resume_sequence=resume,
                    ) from exc
                log.warning("%s: %s; retry %d of %d", what, describe(exc), attempt, policy.attempts)
                if on_retry is not None:
                    on_retry(attempt, exc)
                time.sleep(policy.delay(attempt, random.random()))
            finally:
                if connection is None:
                    if keep:
                        POOL.give(self._pool_key(), conn)
                    else:
                        close_quietly(conn)

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

        def apply() -> ApplyResult:
            return self._apply(
                sorted({e.source for e in events}),
                select,
                min(e.sequence for e in events),
                batch_id,
                shard,
                connection,
                on_retry,
            )

        if not self.config.create_tables:
            return apply()
        return self._recreating(apply, lambda: self._create_tables(tables, connection))

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
            created = {t: cols.position(i) for t, i in firsts.items()}
            self._create_tables(created, connection)

        sources = set(map(src.__getitem__, rows))

        def select(applied: dict[str, int]) -> _Selected:
            if len(sources) == 1:  # rows are in sequence order: the new ones are a tail
                (source,) = sources
                todo = rows[bisect_right(rows, applied[source], key=seq.__getitem__) :]
                progress = {source: (seq[todo[-1]], len(todo))} if todo else {}
            else:
                todo = [i for i in rows if seq[i] > applied[src[i]]]
                progress = _progress((src[i], seq[i]) for i in todo)
            if not todo:
                return _Selected(len(rows), [], progress, cols)
            defs = row_definitions(cols, todo, self.config.schema)
            return _Selected(
                len(rows) - len(todo),
                collapse_column_rows(cols, todo, functools.partial(_width, defs)),
                progress,
                cols,
                defs,
            )

        def apply() -> ApplyResult:
            return self._apply(
                sorted(sources), select, seq[rows[0]], batch_id, shard, connection, on_retry
            )

        if not self.config.create_tables:
            return apply()
        return self._recreating(apply, lambda: self._create_tables(created, connection))

    def apply_net(
        self,
        tables: Sequence[NetTable],
        *,
        source: str,
        first_seq: int,
        last_seq: int,
        batch_id: int,
        shard: int,
        connection: Any = None,
        on_retry: OnRetry | None = None,
    ) -> ApplyResult:
        """Apply one shard's net effect of a range of ``source``'s changes, already
        collapsed per key into typed Arrow (:class:`~headwater.sinks.netwrite.NetTable`),
        in one transaction with the checkpoint protocol of :meth:`apply_columns`.

        ``first_seq`` and ``last_seq`` are the row sequences (``record << 24 | row``,
        :mod:`headwater.changes.sequence`; the unit of ``ChangeColumns.sequence`` and of the
        checkpoint's ``max_sequence``) of the range's first and last change. The whole call
        is skipped when the shard's ``max_sequence`` is already at or past ``last_seq``
        (this range, or a later one, committed); below ``first_seq`` the removes, then the
        upserts, are written set-based (:mod:`headwater.sinks.netwrite`) and
        ``max_sequence`` becomes ``last_seq``, so batches of this path and of
        :meth:`apply_columns` mix. Between the two (the row path applied this shard's part
        of the range, or an earlier run with other batch boundaries applied some of it)
        it raises :class:`~headwater.sinks.netwrite.PartlyApplied` and writes nothing: a
        net effect cannot leave out the applied part; the row path skips row by row.
        ``rows_applied`` records the rows written (upserts + removes), not change rows.
        """
        from headwater.sinks.netwrite import apply_net

        return apply_net(
            self,
            tables,
            source=source,
            first_seq=first_seq,
            last_seq=last_seq,
            batch_id=batch_id,
            shard=shard,
            connection=connection,
            on_retry=on_retry,
        )

    def _recreating(
        self, apply: Callable[[], ApplyResult], create: Callable[[], None]
    ) -> ApplyResult:
        """``apply()``; when it fails because a table is missing on the target, forget the
        tables this process remembered there (dropped behind its back: by hand, or a test
        that reuses a database name), create them again and apply once more. The failed
        transaction was rolled back, so the second try applies nothing twice."""
        try:
            return apply()
        except Exception as exc:
            cause: BaseException | None = exc
            while cause is not None and not self.dialect.missing_table(cause):
                cause = cause.__cause__
            if cause is None:
                raise
            key = self._pool_key()
            _ENSURED.difference_update([e for e in _ENSURED if e[0] == key])
            log.info("a table is missing on the target (%s); creating it again", describe(cause))
            create()
            return apply()

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
        pipeline, batch_rows = self.config.pipeline, self.config.batch_rows
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
            has = None
            if DdlMode(self.config.ddl) is DdlMode.IGNORE:  # rows: the target's columns

                def has(db: str, table: str) -> frozenset[str] | None:
                    return self._target_has(cur, db, table)

            if chosen.columns is not None:
                writes = plan_column_writes(
                    chosen.columns,
                    chosen.effects,  # type: ignore[arg-type]  # ColumnEffects with columns
                    self.config,
                    self.dialect,
                    batch_id,
                    shard,
                    target_has=has,
                    definitions=chosen.definitions,
                )
            else:
                writes = plan_writes(
                    chosen.effects,  # type: ignore[arg-type]  # NetEffects without
                    self.config,
                    self.dialect,
                    batch_id,
                    shard,
                    target_has=has,
                )
            upserts = deletes = 0
            for write in writes:
                if write.delete:
                    deletes += run_write(cur, write, self.dialect, batch_rows, batch_id, shard)
            for write in writes:
                if not write.delete:
                    upserts += run_write(cur, write, self.dialect, batch_rows, batch_id, shard)
            for source, (last, count) in chosen.progress.items():
                applied[source] = last
                cur.execute(
                    f"UPDATE {ckpt} SET batch_id = %s, max_sequence = %s, applies = applies + 1,"
                    " rows_applied = %s, applied_at = CURRENT_TIMESTAMP(6)"
                    " WHERE pipeline = %s AND source = %s AND shard = %s",
                    (batch_id, last, count, pipeline, source, shard),
                )
        return ApplyResult(shard, batch_id, upserts, deletes, chosen.skipped, applied)

    def _target_has(self, cur: Any, db: str, table: str) -> frozenset[str] | None:
        """The target table's column names, asked once per process (``ddl: ignore``: the
        sink never changes them)."""
        target = map_database(self.config.database_map, db)
        key = (self._pool_key(), target, table)
        if key not in _TARGET_HAS:
            found = self.dialect.target_columns(cur, target, table)
            _TARGET_HAS[key] = None if found is None else frozenset(found)
        return _TARGET_HAS[key]

    def _create_tables(self, tables: dict[tuple[str, str], Position], connection: Any) -> None:
        """Create each ``(database, table)`` as defined at its position, when missing.

        The target is asked first (its catalog), so a batch whose tables exist sends no
        DDL at all: ``CREATE ... IF NOT EXISTS`` is logged by MySQL even when it does
        nothing, an event for every replica of the target, and the source's own later
        ``CREATE DATABASE`` would meet a database the sink made. Tables seen present are
        remembered per process (by definition: a changed definition is asked again)."""
        todo: dict[tuple[str, str], TableDef] = {}
        for (db, table), position in tables.items():
            tdef = self.config.schema.table_at(db, table, position)
            if tdef is None:
                raise SinkError(f"no table definition at {position}", table=f"{db}.{table}")
            # By target name: two sinks of one server map a source database apart.
            target = map_database(self.config.database_map, db)
            if (self._pool_key(), target, table, tdef) not in _ENSURED:
                todo[(db, table)] = tdef
        if not todo:
            return

        def work(conn: Any) -> None:
            with conn.cursor() as cur:
                locked = False
                for (db, table), tdef in todo.items():
                    target = map_database(self.config.database_map, db)
                    if self.dialect.target_columns(cur, target, table) is not None:
                        continue
                    if not locked:
                        for sql in self.dialect.setup_lock_sql():
                            cur.execute(sql)
                        locked = True
                    *schema_sql, table_sql = self.dialect.create_table_sql(target, tdef)
                    if not self.dialect.schema_exists(cur, target):
                        for sql in schema_sql:
                            cur.execute(sql)
                    cur.execute(table_sql)

        self._with_retries(work, what="create tables", connection=connection, creates=True)
        _ENSURED.update(
            (self._pool_key(), map_database(self.config.database_map, db), table, tdef)
            for (db, table), tdef in todo.items()
        )

    # -- DDL ------------------------------------------------------------------------------

    def apply_ddl(self, change: ChangeRow, batch_id: int, *, connection: Any = None) -> bool:
        """Apply one schema change per ``config.ddl`` (:class:`DdlMode`); True when
        statements ran now.

        A statement not about data (accounts, privileges, ...) is never applied, in any
        mode. ``ignore`` does nothing; ``fail`` raises :class:`SinkError` naming the
        statement and the setting. ``evolve``/``lenient`` turn the change into steps
        (:mod:`headwater.sinks.schemachange`: from the source's definitions before and
        after it, by the names the pipeline's renames give) unless the DDL checkpoint row
        (shard ``-1``) shows its sequence applied, then advance that row. Steps check the
        target first, so a crash between them and the checkpoint update replays nothing
        twice.
        """
        mode = DdlMode(self.config.ddl)
        schema = self.config.schema
        scope = scope_of(change.sql or "", change.database, schema)
        if not scope.about_data:
            log.info("not applied (%s, not about data) at sequence %d", scope.kind, change.sequence)
            return False
        if mode is DdlMode.IGNORE:
            return False
        if mode is DdlMode.FAIL:
            raise SinkError(
                f"schema change ({scope.kind}) stopped the sink (ddl: fail); set ddl to"
                " lenient or evolve to apply schema changes, or ignore to skip them",
                table=change.table_name if change.table else change.database,
                statement=change.sql,
                batch_id=batch_id,
                resume_sequence=change.sequence,
            )
        ckpt = self.dialect.table_ref(self.config.checkpoint_database, "headwater_checkpoint")
        key = (self.config.pipeline, change.source, DDL_SHARD)
        after_at = change.position
        before_at = position_before(change.position)

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
                steps = plan_schema_change(
                    mode,
                    scope,
                    change.sql or "",
                    lambda db, t: schema.table_at(db, t, before_at),
                    lambda db, t: schema.table_at(db, t, after_at),
                    lambda db, t: self.dialect.target_columns(
                        cur, map_database(self.config.database_map, db), t
                    ),
                    runs_source_sql=self.dialect.runs_mysql_ddl,
                )
                for step in steps:
                    if step.op == "drop_database" and self.config.checkpoint_database == (
                        map_database(self.config.database_map, step.database)
                    ):
                        log.warning("DROP DATABASE of the checkpoint database: not applied")
                        continue
                    if step.op in ("create_table", "source_sql"):
                        target = map_database(self.config.database_map, step.database)
                        if not self.dialect.schema_exists(cur, target):
                            cur.execute(self.dialect.create_schema_sql(target))
                    for sql in self.dialect.render_step(step, self.config):
                        log.info("schema change at sequence %d: %s", change.sequence, sql)
                        try:
                            cur.execute(sql)
                        except Exception as exc:
                            if self.dialect.retryable(exc) is not False:
                                raise
                            raise SinkError(
                                f"DDL failed: {describe(exc)} (running {sql!r})",
                                table=change.table_name if change.table else change.database,
                                statement=change.sql,
                                batch_id=batch_id,
                                resume_sequence=change.sequence,
                            ) from exc
                    if any(s.op in FORGETS for s in steps):
                        _ENSURED.clear()
                cur.execute(
                    f"UPDATE {ckpt} SET batch_id = %s, max_sequence = %s, applies = applies + 1,"
                    " rows_applied = 1, applied_at = CURRENT_TIMESTAMP(6)"
                    " WHERE pipeline = %s AND source = %s AND shard = %s",
                    (batch_id, change.sequence, *key),
                )
                return bool(steps)

        ran, _ = self._with_retries(
            work,
            what=f"DDL at sequence {change.sequence}",
            connection=connection,
            resume=change.sequence,
            pooled=False,  # DDL may run after USE: the session is not a clean one any more
        )
        return bool(ran)

    # -- Spark ----------------------------------------------------------------------------

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        """``foreachBatch`` body: route by key hash into ``config.shards`` partitions, apply
        each in parallel on the executors, DDL in order on the driver (headwater.sinks.glue)."""
        from headwater.sinks.glue import write_sql_batch

        write_sql_batch(self, df, batch_id)


#: Tables this process saw on its targets (:meth:`SqlSink._create_tables`), by pool key,
#: target database, table and definition.
_ENSURED: set[tuple[Any, str, str, TableDef]] = set()

#: Column names of target tables under ``ddl: ignore`` (:meth:`SqlSink._target_has`).
_TARGET_HAS: dict[tuple[Any, str, str], frozenset[str] | None] = {}


def _width(definitions: dict[int, TableDef | None], i: int) -> int | None:
    """``width(i)`` of :func:`~headwater.sinks.merge.collapse_column_rows`: how many
    columns row ``i``'s table has at its position (None without a definition)."""
    found = definitions[i]
    return None if found is None else len(found.columns)


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
