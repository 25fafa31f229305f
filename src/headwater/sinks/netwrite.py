"""Applying a micro-batch's net effect, already collapsed into typed Arrow, to a SQL sink.

The read path (issue #17) computes per shard and per table the final after images of the
keys whose last write is a put (``upserts``) and the key columns of the keys whose last
write is a delete (``removes``; not the keys the range itself created, which the target
cannot hold: :mod:`headwater.pipeline.netapply`).
:meth:`headwater.sinks.sql.SqlSink.apply_net` applies them in the sink's exactly-once
checkpoint transaction; this module holds the data type and the bulk writers.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headwater.errors import SinkError
from headwater.position import Position
from headwater.schema.model import BINARY_TYPES, Column, TableDef
from headwater.sinks.base import ApplyResult, DdlMode, map_database
from headwater.sinks.dialect import describe
from headwater.sinks.merge import DELETE, UPSERT, NetEffect
from headwater.sinks.values import ValueRules, column_converter
from headwater.sinks.writes import Write, run_write

if TYPE_CHECKING:
    from headwater.sinks.sql import SqlSink

__all__ = [
    "NetTable",
    "PartlyApplied",
    "StreamedRows",
    "apply_net",
    "copy_text",
    "mysql_literals",
]


class StreamedRows:
    """A table's upserts decoded part by part while the target loads them (issue #17).

    The net path knows how many keys survive and the table's Arrow schema once the range
    is walked; decoding their after images took 0.04-0.18 s a shard of bench/pipeline.py's
    800 000 changes (225 000 survivors a shard, 2026-11-26, load 0.9-1.3), all of it
    before ``LOAD DATA`` started, and the later of the two shards decided the round. A
    MySQL/MariaDB load of a table that takes ``LOAD DATA ... REPLACE``
    (:meth:`_Writer._mysql_streamed`) reads :meth:`parts` as they come; every other write
    takes :meth:`table`, the whole of it. The parts are kept as they are decoded, so
    :meth:`parts` and :meth:`table` can be asked again (a retried transaction, the
    statements after a refused load) and decode nothing twice. An error of the decoding
    (the net path's refusal of a value, a truncated record) is raised where the part was
    asked for, and again to whoever asks past it."""

    __slots__ = ("_error", "_kept", "_source", "num_rows", "schema")

    def __init__(self, num_rows: int, schema: pa.Schema, parts: Iterator[pa.Table]) -> None:
        #: rows of all the parts (checked when the last is decoded)
        self.num_rows = num_rows
        #: the parts' schema (target-side names, table order)
        self.schema = schema
        self._source: Iterator[pa.Table] | None = parts
        self._kept: list[pa.Table] = []
        self._error: BaseException | None = None

    def parts(self) -> Iterator[pa.Table]:
        """The parts in order: those decoded already, then the rest as they are decoded
        (by one consumer at a time)."""
        i = 0
        while True:
            while i < len(self._kept):
                yield self._kept[i]
                i += 1
            if self._error is not None:
                raise self._error
            if self._source is None:
                return
            try:
                part = next(self._source)
            except StopIteration:
                self._source = None
                got = sum(p.num_rows for p in self._kept)
                if got != self.num_rows:
                    self._error = SinkError(f"{got} rows decoded of {self.num_rows} survivors")
                continue
            except BaseException as exc:
                self._source, self._error = None, exc
                raise
            self._kept.append(part)

    def table(self) -> pa.Table:
        """All the rows (the parts not decoded yet decoded now)."""
        parts = list(self.parts())
        return pa.concat_tables(parts) if parts else self.schema.empty_table()


@dataclass(frozen=True, slots=True)
class NetTable:
    """One table's net effect over a shard's range of one micro-batch.

    ``upserts`` holds one row per key whose last write is a put (its final after image),
    ``removes`` the key columns of the keys whose last write is a remove; a key is in at
    most one of them. Names in ``columns`` and ``key`` and the Arrow field names are the
    target-side names, ``columns`` in table order.
    """

    #: Target-side names (after the pipeline's renames; the sink's database_map still applies).
    database: str
    table: str
    #: The source's names (for create_tables and schema lookups).
    source_database: str
    source_table: str
    #: The table's source definition at this range (one version).
    definition: TableDef
    #: The upserts' column names, target-side, in table order.
    columns: tuple[str, ...]
    #: Primary key column names, target-side.
    key: tuple[str, ...]
    #: One row per key whose last write is a put: typed Arrow (int8..int64/uint*,
    #: float32/64, decimal128, string/binary; nulls allowed); decoded as it is loaded
    #: when a :class:`StreamedRows`.
    upserts: pa.Table | StreamedRows
    #: Key columns only: the keys whose last write is a remove.
    removes: pa.Table
    #: Position of the first record of the range (for create_tables).
    position: Position


# -- the shard transaction ------------------------------------------------------------------


class PartlyApplied(Exception):
    """The shard's checkpoint lies inside the range: only the row path can apply the rest
    (:func:`apply_net` rolls back; the pipeline's net path hands the batch to it)."""


def apply_net(
    sink: SqlSink,
    tables: Sequence[NetTable],
    *,
    source: str,
    first_seq: int,
    last_seq: int,
    batch_id: int,
    shard: int,
    connection: Any = None,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> ApplyResult:
    """:meth:`headwater.sinks.sql.SqlSink.apply_net` (see there)."""
    work_tables = [t for t in tables if t.upserts.num_rows or t.removes.num_rows]
    if not work_tables:
        return ApplyResult(shard, batch_id, attempts=0)
    config = sink.config
    created: dict[tuple[str, str], Position] = {}
    if config.create_tables:
        for t in work_tables:
            created.setdefault((t.database, t.table), t.position)
        sink._create_tables(created, connection)

    def work(conn: Any) -> ApplyResult:
        return _transaction(sink, conn, work_tables, source, first_seq, last_seq, batch_id, shard)

    def apply() -> ApplyResult:
        result, attempts = sink._with_retries(
            work,
            what=f"apply shard {shard} of batch {batch_id} (net effect)",
            connection=connection,
            on_retry=on_retry,
            resume=first_seq,
        )
        done: ApplyResult = result
        return dataclasses.replace(done, attempts=attempts)

    if not config.create_tables:
        return apply()
    return sink._recreating(apply, lambda: sink._create_tables(created, connection))


def _transaction(
    sink: SqlSink,
    conn: Any,
    tables: Sequence[NetTable],
    source: str,
    first_seq: int,
    last_seq: int,
    batch_id: int,
    shard: int,
) -> ApplyResult:
    """The checkpoint protocol of ``SqlSink._transaction`` around the bulk writes."""
    config, dialect = sink.config, sink.dialect
    ckpt = dialect.table_ref(config.checkpoint_database, "headwater_checkpoint")
    pipeline = config.pipeline
    total = sum(t.upserts.num_rows + t.removes.num_rows for t in tables)
    with conn.cursor() as cur:
        cur.execute(dialect.insert_missing_sql(ckpt), (pipeline, source, shard))
        cur.execute(
            f"SELECT max_sequence FROM {ckpt} WHERE pipeline = %s AND source = %s"
            " AND shard = %s FOR UPDATE",
            (pipeline, source, shard),
        )
        applied = int(cur.fetchone()[0])
        if applied >= last_seq:  # this shard's transaction of the range committed already
            return ApplyResult(shard, batch_id, skipped=total, checkpoints={source: applied})
        if applied >= first_seq:
            # Inside the range: the row path applied this shard's part of it (its last row
            # is the checkpoint), or an earlier run with other batch boundaries (a new
            # checkpoint location) applied a part of it. A net effect cannot leave out
            # the applied part; the row path skips row by row.
            raise PartlyApplied(
                f"shard {shard} of batch {batch_id}: the checkpoint ({applied}) is inside "
                f"the range [{first_seq}, {last_seq}]"
            )
        writer = _Writer(sink, cur, source, first_seq, batch_id, shard)
        plans = [writer.plan(t) for t in tables]
        deletes = sum(writer.remove(p) for p in plans)
        upserts = sum(writer.upsert(p) for p in plans)
        cur.execute(
            f"UPDATE {ckpt} SET batch_id = %s, max_sequence = %s, applies = applies + 1,"
            " rows_applied = %s, applied_at = CURRENT_TIMESTAMP(6)"
            " WHERE pipeline = %s AND source = %s AND shard = %s",
            (batch_id, last_seq, total, pipeline, source, shard),
        )
    return ApplyResult(shard, batch_id, upserts, deletes, 0, {source: last_seq})


@dataclass(slots=True)
class _Plan:
    """One table's writes: target reference, definition, and the columns written."""

    net: NetTable
    ref: str
    tdef: TableDef
    columns: tuple[str, ...]  # upsert columns (those the target has under ddl: ignore)


class _Effects(Sequence[NetEffect]):
    """The rows of an Arrow table as :class:`NetEffect` values, made only when asked (the
    row-by-row narrowing of :func:`~headwater.sinks.writes.run_write` names a key)."""

    __slots__ = ("action", "first_seq", "key", "net", "rows", "source")

    def __init__(
        self, net: NetTable, rows: pa.Table, action: str, source: str, first_seq: int
    ) -> None:
        self.net, self.rows, self.action = net, rows, action
        self.source, self.first_seq = source, first_seq

    def __len__(self) -> int:
        return int(self.rows.num_rows)

    @overload
    def __getitem__(self, i: int) -> NetEffect: ...

    @overload
    def __getitem__(self, i: slice) -> list[NetEffect]: ...

    def __getitem__(self, i: int | slice) -> NetEffect | list[NetEffect]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        net = self.net
        key = {k: self.rows.column(k)[i].as_py() for k in net.key}
        return NetEffect(
            self.source,
            net.database,
            net.table,
            "",
            key,
            self.action,
            None,
            self.first_seq,
            self.first_seq,
            net.position,
        )


class _Writer:
    """The writes of one transaction on its cursor (module docstring)."""

    def __init__(
        self, sink: SqlSink, cur: Any, source: str, first_seq: int, batch_id: int, shard: int
    ) -> None:
        self.sink, self.cur, self.source = sink, cur, source
        self.first_seq, self.batch_id, self.shard = first_seq, batch_id, shard
        self.config, self.dialect = sink.config, sink.dialect
        self.rules = ValueRules(self.config.zero_dates, self.dialect.text_bytes)
        self.mysql = self.dialect.quote_char == "`"
        self._packet: int | None = None
        #: table reference -> :meth:`_mysql_plain` (asked once per transaction)
        self._plain: dict[str, bool] = {}
        #: table reference -> (stored columns, lower case; no foreign key names it):
        #: :meth:`_mysql_replaceable`
        self._replace: dict[str, tuple[frozenset[str], bool]] = {}

    # -- planning ---------------------------------------------------------------------------

    def plan(self, net: NetTable) -> _Plan:
        target = map_database(self.config.database_map, net.database)
        tdef = self._definition(net)
        columns = net.columns
        if DdlMode(self.config.ddl) is DdlMode.IGNORE:
            has = self.sink._target_has(self.cur, net.database, net.table)
            if has is not None:
                columns = tuple(c for c in columns if c in has)
        return _Plan(net, self.dialect.table_ref(target, net.table), tdef, columns)

    def _definition(self, net: NetTable) -> TableDef:
        names = {c.name for c in net.definition.columns}
        if names.issuperset(net.columns) and names.issuperset(net.key):
            return net.definition
        # Columns renamed by the pipeline's transforms: the sink's schema (the pipeline's
        # view) knows the table by its target-side names.
        found = self.config.schema.table_at(net.database, net.table, net.position)
        if found is None or not {c.name for c in found.columns}.issuperset(net.columns):
            raise SinkError(
                f"no table definition with columns {list(net.columns)} at {net.position}",
                table=f"{net.database}.{net.table}",
                shard=self.shard,
                batch_id=self.batch_id,
                resume_sequence=self.first_seq,
            )
        return found

    # -- removes and upserts -----------------------------------------------------------------

    def remove(self, plan: _Plan) -> int:
        rows = plan.net.removes
        if not rows.num_rows:
            return 0
        count: int = rows.num_rows
        key = plan.net.key
        rows = rows.select(list(key))
        if self.mysql:
            fast = _mysql_fast(plan.tdef, rows, key)
            if fast:
                rows = self._mysql_held(plan, rows)
                if rows.num_rows:
                    self._mysql_statements(plan, rows, key, delete=True)
                return count
        elif _pg_fast(plan.tdef, rows, key):
            if not self._pg_any(plan, rows, key):
                self._pg_copy(plan, rows, key, delete=True)
            return count
        return self._general(plan, rows, key, delete=True)

    def upsert(self, plan: _Plan) -> int:
        upserts = plan.net.upserts
        if not upserts.num_rows:
            return 0
        count: int = upserts.num_rows
        columns = plan.columns
        if isinstance(upserts, StreamedRows):
            done = None
            if self.mysql and _mysql_fast(plan.tdef, upserts.schema, columns):
                done = self._mysql_streamed(plan, upserts, columns)
            if done:
                return count
            upserts = upserts.table()
            if done is False:  # the load went back to its savepoint: as _mysql_direct
                self._mysql_statements(plan, upserts.select(list(columns)), columns, False)
                return count
        rows = upserts.select(list(columns))
        if self.mysql:
            if _mysql_fast(plan.tdef, rows, columns):
                rest = self._mysql_direct(plan, rows, columns)
                if rest.num_rows:
                    self._mysql_statements(plan, rest, columns, delete=False)
                return count
        elif _pg_fast(plan.tdef, rows, columns):
            self._pg_copy(plan, rows, columns, delete=False)
            return count
        return self._general(plan, rows, columns, delete=False)

    def _write(self, plan: _Plan, rows: pa.Table, columns: tuple[str, ...], delete: bool) -> Write:
        """``rows`` as a :class:`~headwater.sinks.writes.Write` of the general path: values
        converted as :func:`~headwater.sinks.writes.plan_writes` converts JSON values."""
        values = []
        for name in columns:
            convert = column_converter(plan.tdef.column(name), self.rules)  # type: ignore[arg-type]
            try:
                values.append(convert(rows.column(name).to_pylist()))
            except (ValueError, TypeError, ArithmeticError) as exc:
                raise SinkError(
                    f"cannot convert a value of {name}: {exc}",
                    table=f"{plan.net.database}.{plan.net.table}",
                    shard=self.shard,
                    batch_id=self.batch_id,
                    resume_sequence=self.first_seq,
                ) from None
        effects = _Effects(
            plan.net, rows, DELETE if delete else UPSERT, self.source, self.first_seq
        )
        return Write(
            plan.ref,
            f"{plan.net.database}.{plan.net.table}",
            plan.net.key,
            columns,
            delete,
            effects,  # type: ignore[arg-type]  # a Sequence[NetEffect], as run_write reads it
            values=values,
        )

    def _general(self, plan: _Plan, rows: pa.Table, columns: tuple[str, ...], delete: bool) -> int:
        """The existing statement path (values a Python object each): column types the
        bulk text below does not render."""
        write = self._write(plan, rows, columns, delete)
        batch_rows = max(self.config.batch_rows, 1)
        return int(run_write(self.cur, write, self.dialect, batch_rows, self.batch_id, self.shard))

    def _failed(
        self,
        plan: _Plan,
        rows: pa.Table,
        columns: tuple[str, ...],
        delete: bool,
        exc: BaseException,
        statement: str,
    ) -> SinkError:
        """A bulk statement the target refused for good (the transaction is back at the
        savepoint): the chunk again through the general path, which names the first row
        that fails on its own; if none does, the chunk's first key."""
        try:
            self._general(plan, rows, columns, delete)
        except SinkError as narrowed:
            return narrowed
        effect = _Effects(plan.net, rows, "", self.source, self.first_seq)[0]
        return SinkError(
            describe(exc),
            table=f"{plan.net.database}.{plan.net.table}",
            key=effect.key,
            statement=statement[:500],
            shard=self.shard,
            batch_id=self.batch_id,
            resume_sequence=self.first_seq,
        )

    # -- MySQL/MariaDB: multi-row statements, text built by Arrow -----------------------------

    def _mysql_statements(
        self, plan: _Plan, rows: pa.Table, columns: tuple[str, ...], delete: bool
    ) -> None:
        """Large multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` (the statement of
        :meth:`~headwater.sinks.mysql.client.MysqlDialect.upsert_rendered`) or ``DELETE ...
        WHERE (k) IN (...)``, each at most a quarter of ``max_allowed_packet``, the values
        rendered as SQL literals by Arrow compute kernels (:func:`mysql_literals`)."""
        cur, dialect = self.cur, self.dialect
        no_backslash = bool(cur.connection.server_status & _no_backslash_escapes())
        literals = [
            mysql_literals(rows.column(c), plan.tdef.column(c), no_backslash)  # type: ignore[arg-type]
            for c in columns
        ]
        if delete and len(columns) == 1:
            tuples = pc.binary_join_element_wise(literals[0], pa.scalar(b""), b",")
        else:
            inner = pc.binary_join_element_wise(*literals, b",")
            tuples = pc.binary_join_element_wise(b"(", inner, b"),", b"")
        tuples = tuples.combine_chunks() if isinstance(tuples, pa.ChunkedArray) else tuples
        marker = "\x00hw_rows\x00"
        if delete:
            sql = dialect.delete_rendered(plan.ref, columns, marker)
            if len(columns) == 1:  # ``k IN (1, 2)``, not ``(k) IN ((1), (2))``
                sql = sql.replace(
                    f"({dialect.ident(columns[0])}) IN", f"{dialect.ident(columns[0])} IN"
                )
        else:
            sql = dialect.upsert_rendered(plan.ref, columns, plan.net.key, marker)
        head, _, tail = sql.partition(marker)
        prefix, suffix = head.encode(), tail.encode()
        limit = max(1 << 16, self._max_packet() // 4)
        for start, stop, body in _chunks(tuples, limit):
            statement = prefix + body[:-1] + suffix  # the last row's "," dropped
            cur.execute("SAVEPOINT hw_batch")
            try:
                cur.execute(statement)
            except Exception as exc:
                if dialect.retryable(exc) is not False:
                    raise
                cur.execute("ROLLBACK TO SAVEPOINT hw_batch")
                text = statement[:500].decode("utf-8", "replace")
                raise self._failed(
                    plan, rows.slice(start, stop - start), columns, delete, exc, text
                ) from exc

    def _mysql_direct(self, plan: _Plan, rows: pa.Table, columns: tuple[str, ...]) -> pa.Table:
        """Upserts of keys the target does not hold: ``LOAD DATA LOCAL INFILE`` straight
        into the table (the server's own bulk insert: one parse of a text stream instead
        of the statements' SQL parse and duplicate-key handling). Returns the rows left
        for the upsert statements (none when all were loaded; all of them when the load
        cannot be exact).

        The values must be finite (a text cannot carry NaN or an infinity), the table
        plain (below). When every stored column of the target is written and no foreign
        key names the table (:meth:`_mysql_replaceable`), all the rows go by ``LOAD DATA
        ... REPLACE``: a row whose key the target holds replaces it, which is what the
        upsert statement leaves, and no probe is needed. Measured on ``bench/pipeline.py``
        (a catch-up whose second batch updates the first batch's keys): the statements
        took 250 000 updates in about a second of the batch's 2 s apply.

        Otherwise the first key column must be an integer without NULLs. The target is
        asked which of the first key column's values it holds (:meth:`_mysql_present`:
        consistent reads of the primary key, which wait on no lock; other shards write
        disjoint keys). None: all rows are loaded. Some: the rows with such a value run
        as statements first (a key the target holds is an update), the others are loaded
        after them. A catch-up meets this case at once: its first micro-batch is often one
        small transaction, applied by the driver path, whose rows fall inside the next
        batch's key range, and a probe of the range alone (whether it holds any row) sent
        the whole next batch to the statements (measured on ``bench/pipeline.py``: 450 000
        rows by statements for 1 000 rows in the range).
        When more than half of a first slice of values is held, the batch is mostly
        updates: the statements take all of it without asking further.

        Only on a plain table (:meth:`_mysql_plain`: the primary key is the net key, no
        other unique key, no trigger, no foreign key): there no row's outcome depends on
        another row's, so loading some rows after the statements of the others leaves
        what the statements alone leave. On any other table the statements take all.

        The text is :func:`copy_text`'s (``LOAD DATA`` reads the same escapes: MySQL
        manual "LOAD DATA", "Field and Line Handling": ``\\N`` NULL, ``\\\\``, ``\\t``,
        ``\\n``, ``\\r``), loaded ``CHARACTER SET binary`` (``utf8mb4`` without a
        column of bytes: :func:`_load_sql`) with the text columns set
        through ``CONVERT(@v USING utf8mb4)`` (the Arrow strings are UTF-8, as the
        statements' literals on the utf8mb4 connection; the server converts to the
        column's charset as it does for them), ``ESCAPED BY``/``TERMINATED BY`` given as
        hex literals so ``NO_BACKSLASH_ESCAPES`` cannot change them.

        With ``LOCAL`` the server turns duplicate keys and data errors into warnings and
        skips or clips the row ("Duplicate-Key and Error Handling": LOCAL has the effect
        of IGNORE, unless REPLACE is given: then a data error in strict mode is an error).
        So the load runs under a savepoint and any warning (a key another writer inserted
        since the probe, a value the column clips), a row count other than the rows sent
        (the OK packet's ``Records`` less ``Skipped``), or an error that is not retryable
        goes back to it; the statements then run for those rows (and raise what they
        raise). A target that
        refuses LOCAL (``local_infile`` off: :data:`_LOCAL_REFUSED`) is remembered for
        the sink and not asked again. The bytes never touch a file: :func:`_load_local`
        sends them from memory, and only when the server asks for the name this
        statement gave (see there for the connection's ``local_infile``)."""
        sink: Any = self.sink
        first = plan.net.key[0]
        values = rows.column(first)
        if getattr(sink, "_no_local_infile", False) or first not in columns:
            return rows
        for name in columns:
            v = rows.column(name)
            if pa.types.is_floating(v.type) and pc.any(pc.invert(pc.is_finite(v))).as_py():
                return rows
        if not self._mysql_plain(plan):
            return rows
        if self._mysql_replaceable(plan, columns):
            return rows.slice(0, 0) if self._mysql_load(plan, rows, columns, True) else rows
        if not pa.types.is_integer(values.type) or values.null_count:
            return rows
        held = self._mysql_present(plan, values, give_up=True)
        if held is None:
            return rows
        if not pc.any(held).as_py():
            return rows.slice(0, 0) if self._mysql_load(plan, rows, columns) else rows
        new = rows.filter(pc.invert(held))
        if new.num_rows < _LOAD_MIN_ROWS:
            return rows
        old = rows.filter(held)
        if old.num_rows:
            self._mysql_statements(plan, old, columns, delete=False)
        return new.slice(0, 0) if self._mysql_load(plan, new, columns) else new

    def _mysql_load(
        self,
        plan: _Plan,
        rows: pa.Table | StreamedRows,
        columns: tuple[str, ...],
        replace: bool = False,
    ) -> bool:
        """``rows`` by ``LOAD DATA LOCAL`` (``... REPLACE`` with ``replace``) under a
        savepoint (:meth:`_mysql_direct`, :meth:`_mysql_streamed`); True when every row
        was written without a warning, else rolled back."""
        sink: Any = self.sink
        cur, dialect = self.cur, self.dialect
        name = f"headwater-net-{next(_STAGES)}"
        schema = rows.schema
        statement = _load_sql(name, plan.ref, plan.tdef, schema, columns, dialect.ident, replace)
        if isinstance(rows, StreamedRows):
            texts = _part_texts(rows.parts(), columns)
        else:
            texts = _texts(rows, columns)
        cur.execute("SAVEPOINT hw_direct")
        try:
            loaded, warnings = _load_local(
                cur.connection, statement, name, texts, min(1 << 20, self._max_packet() // 2)
            )
        except _NotFinite:
            cur.execute("ROLLBACK TO SAVEPOINT hw_direct")
            return False
        except Exception as exc:
            if dialect.retryable(exc) is not False:
                raise  # a decoding's error too: the transaction rolls back
            cur.execute("ROLLBACK TO SAVEPOINT hw_direct")
            code = exc.args[0] if exc.args else None
            if code in _LOCAL_REFUSED:
                sink._no_local_infile = True
            return False
        if warnings or loaded != rows.num_rows:
            cur.execute("ROLLBACK TO SAVEPOINT hw_direct")
            return False
        return True

    def _mysql_streamed(
        self, plan: _Plan, upserts: StreamedRows, columns: tuple[str, ...]
    ) -> bool | None:
        """``upserts`` by ``LOAD DATA LOCAL ... REPLACE`` as they are decoded, each part's
        text sent while the next is decoded and rendered (:class:`StreamedRows`), where
        :meth:`_mysql_direct` would load them all by ``REPLACE``: a plain table
        (:meth:`_mysql_plain`) whose every stored column is written
        (:meth:`_mysql_replaceable`). Then the order of the rows cannot change what the
        load leaves (one row a key, no other unique key, no trigger, no foreign key), so
        parts loaded as they come leave what one table would. True when all were loaded
        without a warning; False when the load went back to its savepoint (a part holding
        a float the text cannot carry, a warning, a row count other than the rows sent, a
        refusal that is not retryable): the statements then take the rows (``upsert``).
        None: the table does not take this load (:meth:`_mysql_direct` decides on all
        the rows). An error of the decoding is raised as it is: the shard's transaction
        rolls back whole (nothing of the shard applied; the net path then hands the
        batch to the row path, :mod:`headwater.pipeline.netapply`).

        Measured on bench/pipeline.py's batched rounds (2026-11-26, load 0.9-1.7): before,
        the later shard's ``LOAD DATA`` started up to 0.16 s after the earlier's (its
        survivors decoded, 0.04-0.18 s, while the other shard loaded), and the later load
        decided the round; streamed, the two start 0.01-0.14 s apart (what is left is
        the walks' difference). The two loads themselves, 0.8-1.1 s, are most of a
        round: the same two alone (two sessions, the same rows from files) take
        0.76-0.86 s at 1.2-1.4 CPU-s of the server, and one session loading both shards'
        rows 0.9 s at 0.9 CPU-s (the shards' keys interleave in the one B-tree). Rounds
        were no shorter there (alternating runs, one-batch rounds: median 1.59 s before,
        1.60 after, docs/operations.md): on its 2 cores the decode moved into the loads'
        time takes the cores the server would use. Kept for a target on a host of its
        own, where it overlaps the server's work (not measured)."""
        sink: Any = self.sink
        if getattr(sink, "_no_local_infile", False) or plan.net.key[0] not in columns:
            return None
        if not (self._mysql_plain(plan) and self._mysql_replaceable(plan, columns)):
            return None
        return self._mysql_load(plan, upserts, columns, True)

    def _mysql_plain(self, plan: _Plan) -> bool:
        """Whether the target table's rows are independent of each other for a write:
        its primary key is the net key (in order), it has no other unique key, no
        trigger, and no foreign key of its own (one catalog query per table and
        transaction: the target may change between batches). A unique secondary key
        can make one row's write depend on another's (a value moving between keys); a
        trigger or a foreign key of the table to itself can see the order of the rows."""
        cached = self._plain.get(plan.ref)
        if cached is not None:
            return cached
        db = map_database(self.config.database_map, plan.net.database)
        table = plan.net.table
        cur = self.cur
        cur.execute(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (db, table),
        )
        primary: list[str] = []
        other_unique = False
        for index, non_unique, column in cur.fetchall():
            if index == "PRIMARY":
                primary.append(str(column).lower())
            elif not int(non_unique):
                other_unique = True
        cur.execute(
            "SELECT (SELECT COUNT(*) FROM information_schema.TRIGGERS"
            " WHERE EVENT_OBJECT_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s),"
            " (SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS"
            " WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s)",
            (db, table, db, table),
        )
        triggers, foreign = (int(x) for x in cur.fetchone())
        plain = (
            primary == [k.lower() for k in plan.net.key]
            and not other_unique
            and not triggers
            and not foreign
        )
        self._plain[plan.ref] = plain
        return plain

    def _mysql_replaceable(self, plan: _Plan, columns: tuple[str, ...]) -> bool:
        """Whether ``LOAD DATA ... REPLACE`` of ``columns`` leaves what the upsert
        statements leave, on a table :meth:`_mysql_plain` admits: no foreign key of
        another table names it, and ``columns`` are all of its columns but generated
        ones (one catalog query per table and transaction).

        REPLACE deletes the row holding a new row's key, then inserts the new row
        (MariaDB manual, "REPLACE"; MariaDB's ``write_record`` updates the row in place
        instead when the duplicate is on the table's only unique key and no foreign key
        or delete trigger could see the difference, as here). The statements' ``ON
        DUPLICATE KEY UPDATE`` sets the written columns and leaves the others: the two
        agree when every stored column is written (the net effect's after image is the
        whole row) and no child table's ``ON DELETE`` action could see a delete."""
        cached = self._replace.get(plan.ref)
        if cached is None:
            db = map_database(self.config.database_map, plan.net.database)
            cur = self.cur
            cur.execute(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS"
                " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
                " AND COALESCE(GENERATION_EXPRESSION, '') = ''",
                (db, plan.net.table),
            )
            stored = frozenset(str(r[0]).lower() for r in cur.fetchall())
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS"
                " WHERE UNIQUE_CONSTRAINT_SCHEMA = %s AND REFERENCED_TABLE_NAME = %s",
                (db, plan.net.table),
            )
            referenced = int(cur.fetchone()[0])
            cached = self._replace[plan.ref] = (stored, not referenced)
        stored, unreferenced = cached
        return unreferenced and bool(stored) and stored <= {c.lower() for c in columns}

    def _mysql_present(
        self, plan: _Plan, values: pa.Array | pa.ChunkedArray, give_up: bool = False
    ) -> pa.Array | None:
        """A mask of ``values`` (the first key column's, integers without NULLs): True
        where the target holds a row with that value. First the rows in the values'
        range, up to as many as there are distinct values: fewer, and they are all the
        target holds there (one range read: an empty range, or a catch-up's few earlier
        rows; counted in the server first, so a full range sends no row). Otherwise, in
        slices of :data:`_PROBE_KEYS` distinct values, ``SELECT COUNT(DISTINCT k) ...
        WHERE k IN (...)``, and the values held (``SELECT DISTINCT k``) only for a slice
        held in part. Both are consistent reads (the committed
        rows and this transaction's own), which take no lock and wait on none. Only this
        shard writes its keys, so what it finds holds until the writes that follow. With
        ``give_up``, None when more than half of the first slice is held (mostly updates:
        the caller takes its other path)."""
        cur, dialect = self.cur, self.dialect
        name = dialect.ident(plan.net.key[0])
        distinct = pc.unique(values)
        if isinstance(distinct, pa.ChunkedArray):
            distinct = distinct.combine_chunks()
        bounds = pc.min_max(distinct).as_py()
        within = (bounds["min"], bounds["max"], len(distinct))
        # Counted first, in the server: a full range (the previous batch's keys) would
        # send as many rows as there are values only to be dropped (measured on
        # bench/pipeline.py, py-spy: PyMySQL's parsing of 25,000 such rows a shard was
        # about half of the workers' apply samples in a catch-up split in two batches).
        cur.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {plan.ref} WHERE {name} BETWEEN %s AND %s"
            " LIMIT %s) AS hw_range",
            within,
        )
        if int(cur.fetchone()[0]) < len(distinct):
            cur.execute(
                f"SELECT {name} FROM {plan.ref} WHERE {name} BETWEEN %s AND %s LIMIT %s", within
            )
            in_range = [int(r[0]) for r in cur.fetchall()]
            if len(in_range) < len(distinct):  # every row in the range: all the values held
                return pc.is_in(values, value_set=pa.array(in_range, values.type))
        # Each slice counted first: when the target holds every value (a split catch-up's
        # second batch removes the first batch's keys), no value comes back to be parsed
        # (bench/pipeline.py, 25,000 held removes a shard, two sessions alone: the probe
        # was 0.12-0.19 s against the DELETE's 0.07-0.11, 2026-11-26).
        found: list[pa.Array] = []
        for start in range(0, len(distinct), _PROBE_KEYS):
            part = distinct.slice(start, _PROBE_KEYS)
            listed = ",".join(map(str, part.to_pylist()))
            cur.execute(f"SELECT COUNT(DISTINCT {name}) FROM {plan.ref} WHERE {name} IN ({listed})")
            held = int(cur.fetchone()[0])
            if give_up and start == 0 and 2 * held > len(part):
                return None
            if held == len(part):
                found.append(part)
            elif held:
                cur.execute(f"SELECT DISTINCT {name} FROM {plan.ref} WHERE {name} IN ({listed})")
                found.append(pa.array([int(r[0]) for r in cur.fetchall()], values.type))
        held_values = pa.concat_arrays(found) if found else pa.array([], values.type)
        return pc.is_in(values, value_set=held_values)

    def _mysql_held(self, plan: _Plan, rows: pa.Table) -> pa.Table:
        """The removes whose first key value the target holds (:meth:`_mysql_present`);
        all of them when the first key column is not an integer without NULLs. Deleting
        a key the target does not hold changes nothing (no row: no trigger, no cascade),
        so leaving it out is exact. A net effect's removes were often keys inserted and
        deleted within the batch (measured on ``bench/pipeline.py``: a ``DELETE ... IN``
        of 25 000 such keys planned as a table scan waited for the other shard's
        transaction, whose rows it had to read locked); the key pass now leaves those
        out (:mod:`headwater.pipeline.netapply`: ``removes(existing=True)``), and the
        probe stays for a target that lacks keys the source held (a pipeline started at
        a ``startingPosition`` into an empty target)."""
        values = rows.column(plan.net.key[0])
        if not pa.types.is_integer(values.type) or values.null_count:
            return rows
        held = self._mysql_present(plan, values)
        assert held is not None
        return rows.filter(held)

    def _max_packet(self) -> int:
        if self._packet is None:
            self.cur.execute("SELECT @@max_allowed_packet")
            self._packet = int(self.cur.fetchone()[0])
        return self._packet

    # -- PostgreSQL: COPY of text built by Arrow ------------------------------------------------

    def _pg_copy(self, plan: _Plan, rows: pa.Table, columns: tuple[str, ...], delete: bool) -> None:
        """``COPY ... FROM STDIN`` (text format, rendered by Arrow: :func:`copy_text`) into
        a temporary table of the target's column types dropped at commit, then ``INSERT
        ... SELECT ... ON CONFLICT`` (:meth:`PostgresDialect.upsert_rendered`'s) or
        ``DELETE ... USING`` -- the statements of ``PostgresDialect.bulk_write``."""
        cur, dialect = self.cur, self.dialect
        stage = dialect.ident(f"hw_net_{next(_STAGES)}")
        cols = ", ".join(dialect.ident(c) for c in columns)
        if delete:
            match = " AND ".join(f"t.{dialect.ident(c)} = s.{dialect.ident(c)}" for c in columns)
            statement = f"DELETE FROM {plan.ref} AS t USING {stage} AS s WHERE {match}"
        else:
            marker = "\x00hw_rows\x00"
            values = dialect.upsert_rendered(plan.ref, columns, plan.net.key, marker)
            statement = values.replace(f"VALUES {marker}", f"SELECT {cols} FROM {stage}")
        if not delete and self._pg_direct(plan, rows, cols):
            return
        cur.execute("SAVEPOINT hw_batch")
        try:
            cur.execute(
                f"CREATE TEMPORARY TABLE {stage} ON COMMIT DROP AS SELECT {cols} FROM {plan.ref}"
                " WITH NO DATA"
            )
            with cur.copy(f"COPY {stage} ({cols}) FROM STDIN") as copy:
                for text in _texts(rows, columns):
                    copy.write(text)
            cur.execute(statement)
        except Exception as exc:
            if dialect.retryable(exc) is not False:
                raise
            cur.execute("ROLLBACK TO SAVEPOINT hw_batch")
            raise self._failed(plan, rows, columns, delete, exc, statement) from exc

    def _pg_any(self, plan: _Plan, rows: pa.Table, key: tuple[str, ...]) -> bool:
        """Removes of a one-column integer key: ``DELETE ... WHERE k = ANY(%s)`` with the
        keys as one array parameter (psycopg sends a Python ``int`` list as ``smallint[]``
        .. ``bigint[]``, ``numeric[]`` past bigint, by the largest value; the index's
        cross-type integer operators take any of the first three), instead of the temporary
        table, its ``COPY`` and the ``DELETE ... USING`` join. True when done."""
        values = rows.column(key[0])
        if len(key) != 1 or not pa.types.is_integer(values.type) or values.null_count:
            return False
        if values.type == pa.uint64() and pc.max(values).as_py() >= 1 << 63:
            return False  # numeric[]: the index would not serve it
        cur, dialect = self.cur, self.dialect
        statement = f"DELETE FROM {plan.ref} WHERE {dialect.ident(key[0])} = ANY(%s)"
        cur.execute("SAVEPOINT hw_batch")
        try:
            cur.execute(statement, (values.to_pylist(),))
        except Exception as exc:
            if dialect.retryable(exc) is not False:
                raise
            cur.execute("ROLLBACK TO SAVEPOINT hw_batch")
            raise self._failed(plan, rows, key, True, exc, statement) from exc
        return True

    def _pg_direct(self, plan: _Plan, rows: pa.Table, cols: str) -> bool:
        """Upserts of keys the target cannot hold yet: ``COPY`` straight into the table
        (PostgreSQL's own bulk load, one write of each row instead of two), when the
        first key column is an integer and the table has no row in its range of the
        upserts (one index probe). Under a savepoint: a unique violation all the same (a
        concurrent writer) goes back to it and the staged upsert runs; False then."""
        first = plan.net.key[0]
        values = rows.column(first)
        if not pa.types.is_integer(values.type) or values.null_count:
            return False
        bounds = pc.min_max(values).as_py()
        cur, dialect = self.cur, self.dialect
        name = dialect.ident(first)
        cur.execute(
            f"SELECT 1 FROM {plan.ref} WHERE {name} BETWEEN %s AND %s LIMIT 1",
            (bounds["min"], bounds["max"]),
        )
        if cur.fetchone() is not None:
            return False
        cur.execute("SAVEPOINT hw_direct")
        try:
            with cur.copy(f"COPY {plan.ref} ({cols}) FROM STDIN") as copy:
                for text in _texts(rows, columns=rows.column_names):
                    copy.write(text)
        except Exception as exc:
            if dialect.retryable(exc) is not False:
                raise
            cur.execute("ROLLBACK TO SAVEPOINT hw_direct")
            return False
        return True


#: Names of the temporary tables of :meth:`_Writer._pg_copy` (unique in a process).
_STAGES = itertools.count()


def _chunks(tuples: pa.Array, limit: int) -> Iterator[tuple[int, int, bytes]]:
    """``(first row, end row, bytes)`` of consecutive runs of ``tuples`` (a binary array
    without nulls) of at most ``limit`` bytes each (at least one row)."""
    n = len(tuples)
    offsets = np.frombuffer(
        tuples.buffers()[1], dtype=np.int32, count=n + 1, offset=tuples.offset * 4
    )
    data = tuples.buffers()[2]
    start = 0
    while start < n:
        base = int(offsets[start])
        stop = int(np.searchsorted(offsets, base + limit, side="right")) - 1
        stop = min(n, max(stop, start + 1))
        yield start, stop, data[base : int(offsets[stop])].to_pybytes()
        start = stop


# -- MySQL/MariaDB: LOAD DATA LOCAL from memory ------------------------------------------------

#: ``LOAD DATA LOCAL`` refused by the server's setting: ER_NOT_ALLOWED_COMMAND (1148,
#: MySQL 5.7, older MariaDB), ER_CLIENT_LOCAL_FILES_DISABLED (3948, MySQL 8.0),
#: ER_LOAD_INFILE_CAPABILITY_DISABLED (4166, MariaDB 10.5+: "The used command is not
#: allowed because the MariaDB server or client has disabled the local infile
#: capability", seen with ``SET GLOBAL local_infile = 0``).
_LOCAL_REFUSED = frozenset({1148, 3948, 4166})

#: The OK packet's message of a ``LOAD DATA`` (ER_LOAD_INFO, MySQL and MariaDB: "Records:
#: %ld  Deleted: %ld  Skipped: %ld  Warnings: %ld"): rows read, rows replaced, duplicates
#: skipped.
_LOAD_INFO = re.compile(rb"Records: (?P<records>\d+)\s+Deleted: \d+\s+Skipped: (?P<skipped>\d+)")

#: Distinct key values per probe statement (:meth:`_Writer._mysql_present`): about 80 KB
#: of SQL text for 32-bit keys.
_PROBE_KEYS = 10_000

#: Fewer new rows than this after a probe that found held keys: the statements take all
#: (a load's own round trips and savepoint would cost more than they save).
_LOAD_MIN_ROWS = 1_000


def _load_sql(
    name: str,
    ref: str,
    tdef: TableDef,
    rows: pa.Table | pa.Schema,
    columns: Sequence[str],
    ident: Callable[[str], str],
    replace: bool = False,
) -> bytes:
    """The ``LOAD DATA LOCAL INFILE`` statement of :func:`copy_text`'s text of ``rows``
    (or rows of that schema: :meth:`_Writer._mysql_direct`); ``... REPLACE INTO`` with
    ``replace``.

    The Arrow strings are UTF-8. Without a column of bytes the text is read ``CHARACTER
    SET utf8mb4`` into the columns themselves (MariaDB KB "LOAD DATA INFILE": the clause
    names the file's character set; the server converts each value to its column's, as
    for a utf8mb4 literal, and a byte sequence that is not utf8mb4 is a warning, or an
    error in strict mode, either of which sends the rows to the statements). With one,
    the text must be read ``CHARACTER SET binary`` (the bytes as they are) and the text
    columns go through ``CONVERT(@v USING utf8mb4)``: a user variable and an expression
    a row, about 7% of the server's CPU for bench/pipeline.py's table of one text column
    in five (one session loading 450 000 rows ``REPLACE`` into an empty table,
    alternating, load 0.7: 0.84-0.90 CPU-s against 0.85-1.03, 2026-11-26)."""
    schema = rows if isinstance(rows, pa.Schema) else rows.schema
    kinds = [_kind(tdef.column(c), schema.field(c).type) for c in columns]  # type: ignore[arg-type]
    binary = "bytes" in kinds
    targets: list[str] = []
    sets: list[str] = []
    for i, (c, kind) in enumerate(zip(columns, kinds, strict=True)):
        if kind == "text" and binary:
            targets.append(f"@hw{i}")
            sets.append(f"{ident(c)} = CONVERT(@hw{i} USING utf8mb4)")
        else:
            targets.append(ident(c))
    sql = (
        f"LOAD DATA LOCAL INFILE '{name}'{' REPLACE' if replace else ''} INTO TABLE {ref}"
        f" CHARACTER SET {'binary' if binary else 'utf8mb4'}"
        " FIELDS TERMINATED BY x'09' ESCAPED BY x'5c' LINES TERMINATED BY x'0a'"
        f" ({', '.join(targets)})"
    )
    return (sql + (f" SET {', '.join(sets)}" if sets else "")).encode()


def _load_local(
    conn: Any, statement: bytes, name: str, data: Iterable[bytes], packet: int
) -> tuple[int, int]:
    """Run ``statement`` (a ``LOAD DATA LOCAL INFILE '<name>'``) on the PyMySQL
    connection ``conn`` and answer the server's request for the file with the chunks of
    ``data``, in packets of at most ``packet`` bytes. Returns the rows written (read from
    the text less those skipped as duplicates, from the OK packet's message: a replaced
    row counts once) and the warning count.

    Security: PyMySQL's own handler (``local_infile=True``) opens and sends *whatever
    file the server names* in its request, on any statement (``_send_local_file`` of
    ``pymysql.connections``: no check against the statement), so a hostile or
    compromised target could read any file the worker can. The sink's connections
    therefore announce ``CLIENT_LOCAL_FILES`` (the server refuses ``LOCAL`` otherwise)
    but keep PyMySQL's handler off (``MysqlDialect.connect``): a request on any other
    statement gets PyMySQL's error. This function reads the result of its own
    statement only, sends ``data`` from memory when the request names ``name``, and
    sends nothing (an empty file, then an error) for any other name; no file is ever
    opened."""
    from pymysql.connections import MySQLResult
    from pymysql.constants import COMMAND
    from pymysql.protocol import LoadLocalPacketWrapper

    asked: list[bytes] = []

    class _Result(MySQLResult):  # type: ignore[misc]
        def _read_load_local_packet(self, first_packet: Any) -> None:
            conn = self.connection
            filename = LoadLocalPacketWrapper(first_packet).filename
            asked.append(filename)
            try:
                if filename == name.encode():
                    for chunk in data:
                        view = memoryview(chunk)
                        for start in range(0, len(view), packet):
                            conn.write_packet(bytes(view[start : start + packet]))
            finally:
                conn.write_packet(b"")  # end of the file
                ok = conn._read_packet()  # raises the server's error
            self._read_ok_packet(ok)

    conn._execute_command(COMMAND.COM_QUERY, statement)
    result = _Result(conn)
    conn._result = None
    result.read()
    conn._result = result
    if result.server_status is not None:
        conn.server_status = result.server_status
    conn._affected_rows = result.affected_rows
    if asked != [name.encode()]:
        raise SinkError(f"the target asked for the local file {asked!r}, not {name!r}")
    loaded = int(result.affected_rows or 0)
    info = _LOAD_INFO.search(result.message or b"")
    if info is not None:  # REPLACE counts a replaced row twice in affected_rows
        loaded = int(info["records"]) - int(info["skipped"])
    return loaded, int(result.warning_count or 0)


# -- rendering --------------------------------------------------------------------------------

_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"})
_FLOAT_TYPES = frozenset({"float", "double", "real"})
_DECIMAL_TYPES = frozenset({"decimal", "numeric"})
_TEXT_TYPES = frozenset(
    {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
)


def _kind(col: Column, arrow: pa.DataType) -> str | None:
    """How a column's Arrow values are rendered as text: ``int``, ``float``, ``decimal``,
    ``text``, ``bytes``, ``null`` (all NULL); None: not at all (the general path)."""
    t = col.data_type
    if pa.types.is_null(arrow):
        return "null"
    if t in _INTEGER_TYPES and pa.types.is_integer(arrow):
        return "int"
    if t in _FLOAT_TYPES and pa.types.is_floating(arrow):
        return "float"
    if t in _DECIMAL_TYPES and pa.types.is_decimal(arrow):
        return "decimal"
    if col.charset == "binary" or t in BINARY_TYPES:
        return "bytes" if (pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow)) else None
    if t in _TEXT_TYPES and (pa.types.is_string(arrow) or pa.types.is_large_string(arrow)):
        return "text"
    return None


def _mysql_fast(tdef: TableDef, rows: pa.Table | pa.Schema, columns: Sequence[str]) -> bool:
    schema = rows if isinstance(rows, pa.Schema) else rows.schema
    for name in columns:
        col = tdef.column(name)
        if col is None or _kind(col, schema.field(name).type) is None:
            return False
    return True


def _pg_fast(tdef: TableDef, rows: pa.Table, columns: Sequence[str]) -> bool:
    for name in columns:
        col = tdef.column(name)
        if col is None or _kind(col, rows.schema.field(name).type) in (None, "bytes"):
            return False
    return True


def _as_binary(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Text as binary (the same bytes), large types made regular."""
    if (
        pa.types.is_large_string(values.type)
        or pa.types.is_large_binary(values.type)
        or pa.types.is_string(values.type)
    ):
        values = values.cast(pa.binary())
    return values


def _number_text(values: pa.Array | pa.ChunkedArray, kind: str) -> pa.Array | pa.ChunkedArray:
    """Numbers as their text: integers in decimal, floats as the shortest text that reads
    back to the same double (float32 values widened first, as JSON gives them to the
    general path), decimals exactly (Arrow may use an exponent: ``0E-10``)."""
    if kind == "float" and values.type != pa.float64():
        values = values.cast(pa.float64())
    return values.cast(pa.string()).cast(pa.binary())


def mysql_literals(
    values: pa.Array | pa.ChunkedArray, col: Column, no_backslash: bool
) -> pa.Array | pa.ChunkedArray:
    """A column's values as MySQL SQL literals (binary array, no nulls), as PyMySQL
    renders them for the general path: integers as they are; floats with an exponent
    (``escape_float``: a double literal, not a DECIMAL one); decimals as quoted text
    (MySQL converts text to DECIMAL exactly, exponent included); text quoted with
    ``escape_string``'s backslash escapes (or only ``'`` doubled under
    ``NO_BACKSLASH_ESCAPES``); bytes as ``_binary'...'``; NULL."""
    kind = _kind(col, values.type)
    if kind == "null":
        return pa.array([b"NULL"] * len(values), pa.binary())
    if kind == "int":
        out = _number_text(values, kind)
    elif kind == "float":
        finite = pc.is_finite(values)
        if pc.any(pc.invert(finite)).as_py():
            # PyMySQL refuses them too (MySQL cannot store NaN or infinities).
            raise ValueError("a float column holds NaN or an infinity")
        text = _number_text(values, kind)
        out = pc.if_else(
            pc.match_substring(text, b"e"), text, pc.binary_join_element_wise(text, b"e0", b"")
        )
    elif kind == "decimal":
        out = pc.binary_join_element_wise(b"'", _number_text(values, kind), b"'", b"")
    else:
        text = _as_binary(values)
        if no_backslash:
            text = pc.replace_substring(text, b"'", b"''")
        else:
            for char, escaped in _MYSQL_ESCAPES:
                text = pc.replace_substring(text, char, escaped)
        out = pc.binary_join_element_wise(b"_binary'" if kind == "bytes" else b"'", text, b"'", b"")
    return pc.fill_null(out, b"NULL")


#: PyMySQL's ``escape_string`` (``pymysql.converters``), backslash first.
_MYSQL_ESCAPES = (
    (b"\\", b"\\\\"),
    (b"\x00", b"\\0"),
    (b"\n", b"\\n"),
    (b"\r", b"\\r"),
    (b"\x1a", b"\\Z"),
    (b"'", b"\\'"),
    (b'"', b'\\"'),
)

#: PostgreSQL ``COPY`` text format escapes (PostgreSQL manual, COPY, "Text Format"):
#: backslash, newline, carriage return and the delimiter (tab); NULL is ``\N``.
_COPY_ESCAPES = ((b"\\", b"\\\\"), (b"\n", b"\\n"), (b"\r", b"\\r"), (b"\t", b"\\t"))


def _texts(rows: pa.Table, columns: Sequence[str], per: int = 1 << 16) -> Iterator[bytes]:
    """:func:`copy_text` of ``rows`` in slices of ``per`` rows, the next slice's text built
    on a thread (Arrow's kernels run without the GIL) while the caller sends the current
    one to the server."""
    starts = range(0, rows.num_rows, per)
    if len(starts) <= 1:
        yield copy_text(rows, columns)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="hw-net-text") as pool:
        pending = pool.submit(copy_text, rows.slice(0, per), columns)
        for start in starts[1:]:
            done = pending.result()
            pending = pool.submit(copy_text, rows.slice(start, per), columns)
            yield done
        yield pending.result()


class _NotFinite(Exception):
    """A part of a streamed load holds NaN or an infinity (:func:`_part_texts`)."""


def _part_texts(parts: Iterator[pa.Table], columns: Sequence[str]) -> Iterator[bytes]:
    """:func:`copy_text` of each of ``parts`` (:meth:`StreamedRows.parts`), the next part
    decoded and rendered on a thread (in a copy of the caller's context) while the
    caller sends the current one to the server. Raises :class:`_NotFinite` at a part
    with a float the text cannot carry (the load then goes back to its savepoint)."""
    floats = None

    def render() -> bytes | None:
        nonlocal floats
        part = next(parts, None)
        if part is None:
            return None
        part = part.select(list(columns))
        if floats is None:
            floats = [c for c in columns if pa.types.is_floating(part.schema.field(c).type)]
        for c in floats:
            if pc.any(pc.invert(pc.is_finite(part.column(c)))).as_py():
                raise _NotFinite(c)
        return copy_text(part, columns)

    context = contextvars.copy_context()
    with ThreadPoolExecutor(1, thread_name_prefix="hw-net-text") as pool:
        pending = pool.submit(context.run, render)
        while True:
            text = pending.result()
            if text is None:
                return
            pending = pool.submit(context.run, render)
            yield text


def copy_text(rows: pa.Table, columns: Sequence[str]) -> bytes:
    """``rows`` as PostgreSQL ``COPY`` text: one line a row, fields tab-separated, ``\\N``
    for NULL, text escaped (:data:`_COPY_ESCAPES`), numbers as :func:`_number_text`
    gives them (PostgreSQL reads ``inf``, ``nan`` and exponents)."""
    fields = []
    for name in columns:
        values = rows.column(name)
        if pa.types.is_null(values.type):
            fields.append(pa.array([b"\\N"] * rows.num_rows, pa.binary()))
            continue
        if pa.types.is_integer(values.type) or pa.types.is_decimal(values.type):
            text = _number_text(values, "int")
        elif pa.types.is_floating(values.type):
            text = _number_text(values, "float")
        else:
            text = _as_binary(values)
            for char, escaped in _COPY_ESCAPES:
                text = pc.replace_substring(text, char, escaped)
        fields.append(pc.fill_null(text, b"\\N"))
    lines = pc.binary_join_element_wise(*fields, b"\t") if len(fields) > 1 else fields[0]
    lines = pc.binary_join_element_wise(lines, b"", b"\n")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    offsets = np.frombuffer(
        lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4
    )
    return bytes(lines.buffers()[2][int(offsets[0]) : int(offsets[-1])].to_pybytes())


@functools.cache
def _no_backslash_escapes() -> int:
    from pymysql.constants import SERVER_STATUS

    return int(SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES)
