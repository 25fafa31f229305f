"""Large micro-batches applied as their net effect, read key-first (issue #17, throughput).

The Spark path of a micro-batch moves every change row from the log through Arrow into
the JVM, a shuffle, back to Python, where the SQL sinks collapse it per key
(:mod:`headwater.sinks.merge`) into the key's last write. This module computes that last
write directly, the way the replay does (:mod:`headwater.spark.asofscan`): a key pass in C
that reads only the key columns' bytes of each row image and keeps each key's last write
(``_native/lastwrite.c``), then a decode of the surviving after images only, straight
into typed Arrow (``_native/survivors.c``), part by part as the sink loads them (a
:class:`~headwater.sinks.netwrite.StreamedRows`: a MySQL/MariaDB ``LOAD DATA`` starts
when the walk ends; a value the decode refuses then rolls the shard's transaction back).
A key's last write in the batch's range is a put (upsert its after image: FULL row
images) or a remove (a delete, or the old key of a
key-changing update not put again); applying those gives the state the sinks' collapse
gives. As that collapse does ("created in this batch and gone again: nothing"), a key
whose first write in the range created it (an insert, or the new key of a key-changing
update) and whose last write is a remove is not a remove at all (``removes(existing=
True)``): the shard's target holds the source's state at the range's start, when the
key did not exist, so there is nothing to probe or delete. Each table's net effect is a
:class:`~headwater.sinks.netwrite.NetTable`, applied by :meth:`SqlSink.apply_net` in the
shard's exactly-once transaction.

The Spark job: ``spark.range(n, numPartitions=n).mapInArrow`` for a sink of ``n`` shards,
a task per shard, each walking the whole range for its own shard's keys. (For some hours
of 2026-11-25 it was one task for every shard, below, taken back: with it
tests/integration/test_snapshot_consistency.py left a target table different from its
source in about a third of its runs under load, not yet explained; the walk is the small
part of a task's read, so one walk saved little.) One task for every shard, which
:func:`apply_shards` still does when handed several,
opens the log itself (:func:`~headwater.spark.logaccess.open_log`, as the
replay's tasks do: it works on a cluster), walks the range once, each key going to the
key pass of the shard the SQL sinks' glue routes it to (``_native/lastwrite.c``'s
fan-out), then runs the shards' transactions one after another on a thread of their
own, each while the next shard's survivors are decoded (:func:`apply_shards`). A task
per shard's walk costs 0.2-0.5 CPU-s on bench/pipeline.py's 800 000 changes, the tasks
at once on 2 cores. The routing is
``pmod(xxhash64(database, table, key), n)`` over
the post-transform names and the change row's ``key`` text, rendered in C exactly as the
change rows carry it; tests/unit/test_netapply_native.py holds it equal to
:func:`headwater.pipeline.direct.spark_shard`): the glue's routing, and the sink
skips a shard whose checkpoint already holds the batch (``max_sequence >= first``, one
transaction per shard per batch, then ``max_sequence = last``), so a batch replayed after
a crash may take either path, shard by shard.

Which batches: :class:`NetApply` takes a batch the driver path does not (over
``driverApplyMaxRows``) when the pipeline allows it (:func:`unsupported`: SQL sinks only,
the ``headwater`` source, no snapshot signals, transforms that only rename or
include/exclude, ``netApply`` not false), the batch's offsets start and end at record
boundaries, and every table it touches has one schema version in the range, a primary
key that :func:`~headwater.spark.asofscan.key_scan_kinds` admits and columns the typed
read carries (checked in the driver from the record headers and the schema history).
What only the bytes tell is checked by the tasks before they apply anything: a DDL
statement in the range, an image that is not FULL, a key text the decoder keeps as
surrogate escapes, a value that does not convert exactly into its Arrow type. A task that
finds one reports it as data (:class:`NetRefused`); the driver then runs the existing path
for the whole batch, whose per-shard checkpoints skip the shards another task applied.
All these depend on the range and the configuration only, so a replay decides alike.
"""

from __future__ import annotations

import contextvars
import logging
import pickle
import time
import warnings
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from headwater.changes.sequence import ROW_BITS, ROW_LIMIT
from headwater.errors import ConfigError, SinkError, TruncatedError
from headwater.gcpause import freeze_worker_heap, gc_paused
from headwater.pipeline.direct import DirectBatch, offset_at
from headwater.sinks.base import pinned_schemas
from headwater.sinks.failfast import is_terminal
from headwater.sinks.netwrite import PartlyApplied
from headwater.sinks.sql import SqlSink

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from headwater.binlog.tablemap import TableMap
    from headwater.pipeline.config import PipelineConfig
    from headwater.schema.model import TableDef
    from headwater.sinks.netwrite import NetTable
    from headwater.spark.asofscan import _Walked
    from headwater.spark.offsets import SourceOptions
    from headwater.spark.transforms import TransformSpec

__all__ = [
    "NetApply",
    "NetPlan",
    "NetRead",
    "NetRefused",
    "apply_shards",
    "net_reads",
    "net_tables",
    "unsupported",
]

log = logging.getLogger(__name__)

#: Transforms the net path applies (names only: they touch no value).
_ALLOWED = ("RenameDatabaseSpec", "RenameTableSpec", "RenameColumnsSpec", "IncludeSpec",
            "ExcludeSpec")  # fmt: skip
_QUERY = (2, 165)  # QUERY_EVENT, MariaDB's QUERY_COMPRESSED_EVENT (binlog/constants.py)
_TABLE_MAP = 19
_PARTIAL_UPDATE_ROWS = 39  # MySQL PARTIAL_UPDATE_ROWS_EVENT: JSON diffs, not a full image


class NetRefused(Exception):
    """The range holds something the net path does not apply exactly (the reason): the
    batch takes the existing path."""


def unsupported(config: PipelineConfig, sinks: Sequence[Any], options: SourceOptions) -> str | None:
    """Why ``config`` cannot take the net path (None: it can)."""
    if not options.net_apply:
        return "netApply is false"
    if config.source.logs is not None:
        return "a log-file source"
    if config.snapshot is not None:
        return "snapshot signals are counted by the Spark job"
    other = [type(t).__name__ for t in config.transforms if type(t).__name__ not in _ALLOWED]
    if other:
        return f"a {other[0]} transform"
    if not sinks or not all(isinstance(s, SqlSink) for s in sinks):
        return "a sink that is not a SQL sink"
    return None


# --- names after the transforms ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """A source table as the transforms leave it: names and the columns kept."""

    database: str
    table: str
    #: (index in the source definition, target name) of each column kept, in table order
    columns: tuple[tuple[int, str], ...]
    #: the primary key's target names, in key order (the ``key`` image's names)
    key: tuple[str, ...]


def target_of(specs: Sequence[TransformSpec], definition: TableDef) -> Target:
    """``definition`` through the name-only transforms ``specs``, as
    :class:`~headwater.spark.transforms.TransformedSchema` edits a definition and the row
    operations edit a change: renames of databases, tables and columns (the key image
    follows column renames), include/exclude of columns (refused when it would leave a
    key column out of the after image)."""
    from headwater.spark.transforms import (
        ExcludeSpec,
        IncludeSpec,
        RenameColumnsSpec,
        RenameDatabaseSpec,
        RenameTableSpec,
        _Tables,
    )

    db, table = definition.database, definition.table
    columns = [(i, c.name) for i, c in enumerate(definition.columns)]
    key = list(definition.primary_key)
    for spec in specs:
        if isinstance(spec, RenameDatabaseSpec):
            db = spec.mapping.get(db, db)
            continue
        if isinstance(spec, RenameTableSpec):
            new = spec.mapping.get(f"{db}.{table}")
            if new is not None:
                to_db, _, table = new.rpartition(".")
                db = to_db or db
            continue
        if spec.tables and not _Tables(spec.tables)({"database": db, "table": table}):
            continue
        if isinstance(spec, (IncludeSpec, ExcludeSpec)):
            # The row operations drop an excluded key column from the after image (not from
            # the key image), which the sinks' view keeps: not applied here.
            dropped = [k for k in key if (k in spec.columns) != isinstance(spec, IncludeSpec)]
            if dropped:
                raise NetRefused(f"key column {dropped[0]!r} left out of the images")
            keep = isinstance(spec, IncludeSpec)
            columns = [(i, n) for i, n in columns if (n in spec.columns) == keep]
        elif isinstance(spec, RenameColumnsSpec):
            m = spec.mapping
            columns = [(i, m.get(n, n)) for i, n in columns]
            key = [m.get(k, k) for k in key]
        else:
            raise NetRefused(f"a {type(spec).__name__} transform")
    return Target(db, table, tuple(columns), tuple(key))


# --- what a task computes ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NetPlan:
    """What every task of one batch's net apply needs (picklable; no open handle)."""

    options: SourceOptions
    #: the batch's records: ``[first_seq, end_seq)``
    first_seq: int
    end_seq: int
    transforms: tuple[TransformSpec, ...]
    shards: int
    batch_id: int
    #: change rows per source ``db.table`` in the range (the records' table lists): the
    #: key pass's size hint (Scanner's)
    rows: tuple[tuple[str, int], ...] = ()

    @property
    def first_sequence(self) -> int:
        """The lowest change sequence the range can hold (``ChangeColumns.sequence``)."""
        return self.first_seq << ROW_BITS

    @property
    def last_sequence(self) -> int:
        """The highest change sequence the range can hold: every change row of the batch
        is at or below it, every later batch's above it."""
        return ((self.end_seq - 1) << ROW_BITS) | (ROW_LIMIT - 1)


@dataclass(slots=True)
class NetRead:
    """A task's read of the range for one shard: its tables and the batch's figures
    (the same in every task: each walks the whole range)."""

    tables: list[NetTable]
    #: change rows per source ``db.table`` and per target ``db.table``
    tables_in: dict[str, int] = field(default_factory=dict)
    tables_out: dict[str, int] = field(default_factory=dict)
    newest_ts_us: int | None = None


class _State:
    """One table's walk: its definition, target names, scanners and events.

    :attr:`scanner` is the one the walk scans into; :attr:`scanners` keep each shard's
    keys. For one shard they are the same routed Scanner; for every shard of the plan
    (one walk for all: :func:`net_reads`) the walk's Scanner fans each write out to the
    Scanner of its key's shard (``_native/lastwrite.c``, fan-out)."""

    def __init__(self, plan: NetPlan, shards: tuple[int, ...], definition: TableDef,
                 version: int, log: Any) -> None:  # fmt: skip
        from headwater._native._lastwrite import Scanner
        from headwater.spark import asofscan
        from headwater.spark.asofread import read_spec
        from headwater.spark.asofscan import ScanSpec, _FastWalker, _Walker, key_scan_kinds

        name = f"{definition.database}.{definition.table}"
        if not key_scan_kinds([definition]):
            raise NetRefused(f"{name}: no primary key the key-first read reads")
        columns = read_spec(name, definition, (), ((version, len(definition.columns)),)).columns
        if not all(c.fast is not None for c in columns):
            raise NetRefused(f"{name}: a column the typed read does not carry")
        self.definition = definition
        self.target = target_of(plan.transforms, definition)
        self.spec = ScanSpec(
            name, plan.options, plan.first_seq, plan.end_seq, columns,
            definition.primary_key, ((version, len(definition.columns)),), plan.shards,
        )  # fmt: skip
        self.walker = _Walker(self.spec, log)
        by_name = {c.name: c for c in definition.columns}
        ascii_only = tuple(by_name[k].charset == "ascii" for k in definition.primary_key)
        hint = dict(plan.rows).get(name, 0) // plan.shards if asofscan.SIZE_HINT else 0
        route = (self.target.database, self.target.table, self.target.key, ascii_only,
                 plan.shards)  # fmt: skip
        self.scanners: dict[int, Any] = {}
        try:
            for k in shards:
                self.scanners[k] = Scanner(1, 0, hint)
                self.scanners[k].route(*route, k)
            if len(shards) == 1:
                self.scanner = self.scanners[shards[0]]
            else:  # keeps nothing itself: hands each write to its shard's Scanner
                self.scanner = Scanner(1, 0, 0)
                self.scanner.route(*route, 0)
                self.scanner.fan(tuple(self.scanners[k] for k in range(plan.shards)))
        except UnicodeError:
            raise NetRefused(f"{name}: a name that is not UTF-8") from None
        self.fast = _FastWalker(self.spec, log)
        self.events: list[Any] = []
        self.counts: list[int] = []
        #: _Table per TABLE_MAP object seen
        self.tables: dict[int, tuple[Any, Any]] = {}
        #: with the C walk: this table's places in _Walked.tables, and the rows of its
        #: events walked in Python
        self.indexes: list[int] = []
        self.slow_rows = 0

    def table_of(self, tm: Any, rec: Any, log: Any) -> Any:
        """The asofscan ``_Table`` of ``tm`` (made once per TABLE_MAP object)."""
        from headwater.spark.asofscan import _Table

        hit = self.tables.get(id(tm))
        if hit is None or hit[0] is not tm:
            columns = log.schema.columns_for(tm, rec.position) if log.schema else None
            hit = self.tables[id(tm)] = (tm, _Table(self.spec, tm, columns))
        return hit[1]

    def add(self, code: int, body: Any, tm: Any, rec: Any, size: int, log: Any,
            ordinal: int | None = None) -> tuple[Any, int]:  # fmt: skip
        """Walks one rows event in Python into the key pass: at ``ordinal`` (the C
        walk's, then kept by the caller), or at the next of :attr:`counts`."""
        table = self.table_of(tm, rec, log)
        try:
            event = self.walker._event(code, body, table, rec,
                                       len(self.definition.columns), size)  # fmt: skip
            count = event.scan(self.scanner, len(self.counts) if ordinal is None else ordinal)
        except ConfigError as exc:  # a MINIMAL/NOBLOB image, a key column missing
            raise NetRefused(str(exc)) from None
        except TruncatedError as exc:
            if str(exc).startswith("unroutable key"):
                raise NetRefused(f"{self.spec.table}: {exc}") from None
            raise
        if ordinal is None:
            self.counts.append(count)
            self.events.append(event)
        else:
            self.slow_rows += count
        return event, count

    def entry(self, tm: Any, rec: Any, log: Any, walked: _Walked,
              index: dict[int, int]) -> tuple[int, Any, int, Any] | None:  # fmt: skip
        """The C walk's entry of ``tm`` (walk.c: its place in ``walked.tables``, the
        full image's shape, its width, this table's scanner), or None: its events go
        the Python way (a width other than the definition's, a key column the key pass
        does not read), which refuses them."""
        if tm.column_count != len(self.definition.columns):
            return None
        table = self.table_of(tm, rec, log)
        try:
            shape = table.shape(tuple(range(tm.column_count)))
        except ConfigError:
            return None
        at = index.get(id(shape))
        if at is None:
            at = index[id(shape)] = len(walked.tables)
            walked.tables.append((table, shape))
            self.indexes.append(at)
        return (at, shape.compiled, tm.column_count, self.scanner)

    def rows(self, walked: _Walked | None) -> int:
        """The change rows of this table's events in the range."""
        if walked is None:
            return sum(self.counts)
        import numpy as np

        if not self.indexes or not walked.events:
            return self.slow_rows
        events = np.frombuffer(walked.events, dtype=np.int64).reshape(-1, 6)
        mine = np.isin(events[:, 0], self.indexes)
        return self.slow_rows + int(events[mine, 5].sum())

    def net_table(self, position: Any, walked: _Walked | None, shard: int) -> NetTable:
        """Shard ``shard``'s net effect on this table: its removes, and its keys'
        surviving after images, decoded as the sink loads them (a
        :class:`~headwater.sinks.netwrite.StreamedRows`) after a walk in C, else here."""
        import pyarrow as pa

        from headwater.sinks.netwrite import NetTable, StreamedRows

        target = self.target
        scanner = self.scanners[shard]
        physical = self.spec.arrow_schema()
        schema = pa.schema([physical.field(f"_v{i}").with_name(name) for i, name in target.columns])
        upserts: pa.Table | StreamedRows
        if walked is None:
            parts = [self._upserts(p) for p in self.walker.survivors(scanner, self.counts,
                                                                      self.events)]  # fmt: skip
            upserts = pa.concat_tables(parts) if parts else schema.empty_table()
        else:
            survivors = scanner.survivors()
            count = len(survivors[0]) // 8  # int64 sequences
            once = _Survivors(survivors)
            decoded = (self._upserts(p) for p in self.fast.survivors_of(once, walked))
            upserts = StreamedRows(count, schema, decoded)
        return NetTable(
            database=target.database,
            table=target.table,
            source_database=self.definition.database,
            source_table=self.definition.table,
            definition=self.definition,
            columns=tuple(name for _i, name in target.columns),
            key=target.key,
            upserts=upserts,
            removes=self._removes(scanner),
            position=position,
        )

    def _upserts(self, physical: pa.Table) -> pa.Table:
        """A part of the survivors' physical columns as upserts (target names), or
        NetRefused when a value did not convert to its Arrow type exactly."""
        import pyarrow as pa

        for c in self.spec.columns:
            if physical.column(f"_t{c.index}").null_count != physical.num_rows:
                raise NetRefused(
                    f"{self.spec.table}.{c.name}: a value that does not convert to {c.fast} exactly"
                )
        return pa.table({name: physical.column(f"_v{i}") for i, name in self.target.columns})

    def _removes(self, scanner: Any) -> pa.Table:
        import pyarrow as pa

        # not the keys the range created (module docstring): the target cannot hold them
        count, columns = scanner.removes(existing=True)
        fast = {c.name: c.fast for c in self.spec.columns}
        by_name = {c.name: c for c in self.definition.columns}
        arrays = []
        for j, name in enumerate(self.definition.primary_key):
            kind = fast[name]
            assert kind is not None
            if not columns:
                arrays.append(pa.array([], kind))
                continue
            raw = columns[j]
            if isinstance(raw, tuple):
                offsets, data = raw
                array = pa.Array.from_buffers(
                    pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
                )
            else:
                ints = pa.uint64() if by_name[name].unsigned else pa.int64()
                array = pa.Array.from_buffers(ints, count, [None, pa.py_buffer(raw)])
            arrays.append(array.cast(kind))
        return pa.table(arrays, names=list(self.target.key))


@dataclass(frozen=True, slots=True)
class _Survivors:
    """A Scanner's survivors, asked once (their count sizes the StreamedRows before
    :meth:`_FastWalker.survivors_of` asks for them)."""

    pairs: tuple[bytes, bytes]

    def survivors(self) -> tuple[bytes, bytes]:
        return self.pairs


def net_tables(plan: NetPlan, shard: int, log: Any) -> NetRead:
    """The net effect of ``plan``'s range on the keys of ``shard`` (raises
    :class:`NetRefused`): :func:`net_reads` of that shard alone."""
    walk = _walk(plan, (shard,), log)
    return walk.read(shard)


def net_reads(plan: NetPlan, log: Any) -> dict[int, NetRead]:
    """The net effect of ``plan``'s range on the keys of every shard, from one walk of
    the range (raises :class:`NetRefused`)."""
    walk = _walk(plan, tuple(range(plan.shards)), log)
    return {k: walk.read(k) for k in range(plan.shards)}


@dataclass(slots=True)
class _Walk:
    """One walk of a range: each table's key pass filled for the shards walked for."""

    order: list[_State]
    walked: _Walked | None
    first_position: Any
    figures: NetRead

    def read(self, shard: int) -> NetRead:
        """Shard ``shard``'s tables (its survivors decoded) with the batch's figures."""
        f = self.figures
        tables = [s.net_table(self.first_position, self.walked, shard) for s in self.order]
        return NetRead(tables, dict(f.tables_in), dict(f.tables_out), f.newest_ts_us)


def _walk(plan: NetPlan, shards: tuple[int, ...], log: Any) -> _Walk:
    """One walk of the range for ``shards`` (one of them, or all of the plan's): every
    wanted table's rows events go through its key pass (walked in C,
    ``_native/walk.c``, as the replay's key pass, when
    :data:`headwater.spark.asofscan.WALK_IN_C`; anything unusual, and every TABLE_MAP and
    QUERY event, the Python way). The survivors are decoded by :meth:`_Walk.read`."""
    from headwater.binlog.events import DecodeContext, QueryEvent, parse_event
    from headwater.binlog.rows import ROWS_EVENT_TYPES, rows_event_table_id
    from headwater.changes import is_ddl, iter_payload_events
    from headwater.spark import asofscan

    want = plan.options.tables
    schema = log.schema
    if schema is None:
        raise NetRefused("no schema history")
    maps: dict[bytes, Any] = {}
    states: dict[tuple[str, str], _State | None] = {}
    order: list[_State] = []
    out = NetRead([])
    version: int | None = None
    first_position = None
    walked = asofscan._Walked(bytearray(), [], [], {}, []) if asofscan.WALK_IN_C else None
    index: dict[int, int] = {}  # id(_Shape) -> its place in walked.tables
    ordinal = 0  # the C walk's: every table's rows events counted in log order
    held = 0

    def one(raw: Any, ctx: DecodeContext, rec: Any, size: int,
            ordinal: int) -> tuple[Any, _State | None, int]:  # fmt: skip
        """One event the Python way, at ``ordinal`` with the C walk: ``(its TableMap,
        its table's state, the next ordinal)``, the first two None for an event of no
        wanted table."""
        code = raw.type_code
        if code == _TABLE_MAP:
            parse_event(raw, ctx)
            return None, None, ordinal
        if code in _QUERY:
            event = parse_event(raw, ctx)
            if isinstance(event, QueryEvent) and is_ddl(event):
                raise NetRefused(f"a DDL statement in store record {rec.seq}")
            return None, None, ordinal
        if code not in ROWS_EVENT_TYPES:
            return None, None, ordinal
        tm = ctx.table_maps.get(rows_event_table_id(raw.body, table_id_size=size))
        if tm is None:
            parse_event(raw, ctx)  # raises: a rows event without its TABLE_MAP
            return None, None, ordinal
        name = (tm.schema, tm.table)
        if name not in states:
            state = None
            if want(*name):
                definition = schema.table_at(tm.schema, tm.table, rec.position)
                if definition is None:
                    raise NetRefused(f"{tm.schema}.{tm.table}: no definition")
                state = _State(plan, shards, definition, rec.schema_version, log)
                order.append(state)
            states[name] = state
        state = states[name]
        if state is None:
            return tm, None, ordinal
        if code == _PARTIAL_UPDATE_ROWS:
            raise NetRefused(f"{tm.schema}.{tm.table}: a partial JSON update")
        if walked is None:
            state.add(code, raw.body, tm, rec, size, log)
        else:
            event, count = state.add(code, raw.body, tm, rec, size, log, ordinal)
            walked.slow[ordinal] = (event, count)
            walked.events += asofscan._SLOW_ROW.pack(-1, event.op, 0, 0, 0, count)
            ordinal += 1
        return tm, state, ordinal

    for rec in log.records(plan.first_seq, plan.end_seq):
        if not want.record_wanted(rec.tables):
            continue
        if first_position is None:
            first_position = rec.position
        if version is None:
            version = rec.schema_version
        elif rec.schema_version != version:
            raise NetRefused("the schema changes in the range")
        if out.newest_ts_us is None or rec.ts_us > out.newest_ts_us:
            out.newest_ts_us = rec.ts_us
        ctx = DecodeContext(fde=log.fde, table_map_cache=maps)
        size = ctx.table_id_size
        if walked is None:
            for raw in iter_payload_events(rec.payload, source=None):
                one(raw, ctx, rec, size, 0)
            continue
        ordinal = _walk_record(rec, ctx, size, walked, ordinal, one, states, index, log)
        if walked.payloads is not None:
            held += len(walked.payloads[-1])
            if held > asofscan.KEEP_BYTES:
                walked.payloads = None
    for state in order:
        rows = state.rows(walked)
        source = f"{state.definition.database}.{state.definition.table}"
        target = f"{state.target.database}.{state.target.table}"
        if rows:
            out.tables_in[source] = out.tables_in.get(source, 0) + rows
            out.tables_out[target] = out.tables_out.get(target, 0) + rows
    return _Walk(order, walked, first_position, out)


def _walk_record(rec: Any, ctx: Any, size: int, walked: _Walked, ordinal: int,
                 one: Any, states: dict[tuple[str, str], _State | None],
                 index: dict[int, int], log: Any) -> int:  # fmt: skip
    """:func:`net_tables`' walk of one record in C (walk.c, each table's events into its
    own scanner); returns the next ordinal. The record's payload is appended to
    ``walked.payloads`` while they are kept (the caller drops them past KEEP_BYTES)."""
    from headwater._native._lastwrite import UNROUTABLE
    from headwater._native._walk import DONE, TABLE_MAP, walk
    from headwater.binlog.events import parse_event
    from headwater.changes import iter_payload_events

    payload = rec.payload
    payload = payload if type(payload) is bytes else bytes(payload)
    walked.firsts.append(ordinal)
    if walked.payloads is not None:
        walked.payloads.append(payload)
    ids: dict[int, Any] = {}
    pos = 0
    while True:
        try:
            # every entry names its table's scanner: the walk's own is never used
            status, pos, ordinal = walk(payload, pos, size, ids, None, ordinal, walked.events,
                                        -1, True)  # fmt: skip
        except ValueError as exc:
            if str(exc).startswith(UNROUTABLE):
                raise NetRefused(str(exc)) from None
            raise TruncatedError(str(exc)) from None
        if status == DONE:
            return ordinal
        # the event the C walk stopped at, framed (and refused) the Python way
        raw = next(iter_payload_events(memoryview(payload)[pos:], source=None))
        pos += 4 + int.from_bytes(payload[pos : pos + 4], "little")
        if status == TABLE_MAP:
            tm = cast("TableMap", parse_event(raw, ctx))  # a TABLE_MAP parses to one
            ids.pop(tm.table_id, None)
            # a table not seen yet: its first rows event goes the Python way (which
            # makes its state, or refuses), then the id is mapped
            name = (tm.schema, tm.table)
            if name not in states:
                continue
            known = states[name]
            if known is None:
                ids[tm.table_id] = None
            else:
                entry = known.entry(tm, rec, log, walked, index)
                if entry is not None:
                    ids[tm.table_id] = entry
            continue
        tm, state, ordinal = one(raw, ctx, rec, size, ordinal)
        if tm is None or tm.table_id in ids:
            continue
        if state is None:
            ids[tm.table_id] = None
        else:
            entry = state.entry(tm, rec, log, walked, index)
            if entry is not None:
                ids[tm.table_id] = entry


# --- the Spark job -------------------------------------------------------------------------

#: The schema of a task's result: one row per shard (a pickled ``(NetRead figures,
#: ApplyResult | exception | NetRefused)``).
_RESULT = "shard int, result binary"


def _task(
    plan: NetPlan, sink: SqlSink, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over ``spark.range(shards)``: apply each id's shard (every
    shard of the plan in one task: one walk, :func:`apply_shards`)."""
    import pyarrow as pa

    shards = [int(k) for batch in batches for k in batch.column(0).to_pylist()]
    if shards:
        results = [pickle.dumps(r) for r in apply_shards(plan, sink, shards)]
        yield pa.RecordBatch.from_arrays(
            [pa.array(shards, pa.int32()), pa.array(results, pa.binary())],
            names=["shard", "result"],
        )
    freeze_worker_heap()  # the daemon's full collection after the task (headwater.gcpause)


def apply_shard(plan: NetPlan, sink: SqlSink, shard: int) -> tuple[Any, Any]:
    """Read and apply one shard (on an executor): :func:`apply_shards` of it alone."""
    return apply_shards(plan, sink, [shard])[0]


def apply_shards(plan: NetPlan, sink: SqlSink, shards: Sequence[int]) -> list[tuple[Any, Any]]:
    """Read and apply ``shards`` (on an executor), each as ``(figures, result)`` where
    ``result`` is the sink's ApplyResult, a terminal error (as data: sinks.failfast), or a
    NetRefused. Retryable errors raise (Spark retries the task).

    Every shard of the plan: one walk of the range fills every shard's key pass (the
    walk's Scanner fans the writes out), then each shard's survivors are decoded and its
    transaction runs on one applying thread while the next shard's are decoded; the
    transactions run one after another. (They ran at once, a thread each, until
    2026-11-25: tests/integration/test_snapshot_consistency.py then left a target table
    different from its source in about one run of three under load, which one applying
    thread did not do in eight; the threads share the sink object of the task, which
    the task per shard never did. Two concurrent LOAD DATA sessions cost the target 40%
    more CPU for the same wall time, docs/operations.md.) Before, a task per shard
    walked the whole range and kept its
    shard's keys: on 2 cores both walks at once, 0.2-0.5 CPU-s each a large batch of
    bench/pipeline.py. Any other set of shards: a walk per shard."""
    every = tuple(range(plan.shards))
    groups = [every] if sorted(shards) == list(every) else [(k,) for k in shards]
    out: dict[int, tuple[Any, Any]] = {}
    for group in groups:
        out.update(_apply_group(plan, sink, group))
    return [out[k] for k in shards]


def _apply_group(plan: NetPlan, sink: SqlSink, shards: tuple[int, ...]) -> dict[int, Any]:
    """:func:`apply_shards` of ``shards`` from one walk: shard -> (figures, result)."""
    from headwater.spark.logaccess import open_log

    t0 = time.monotonic()
    log_ = open_log(plan.options)
    try:
        with gc_paused(), pinned_schemas():
            try:
                walk = _walk(plan, shards, log_)
                if len(shards) == 1:
                    read = walk.read(shards[0])
            except NetRefused as exc:
                return {k: (None, exc) for k in shards}
            if len(shards) == 1:
                return {shards[0]: _apply_read(plan, sink, shards[0], read, time.monotonic() - t0)}
            # Each shard's transaction starts once its survivors are decoded and the shard
            # before it is done, while the next shard's are decoded (one applying thread, in
            # a copy of this context: pinned_schemas is a context variable). A shard that
            # refuses leaves the ones started to finish:
            # the row path skips what their checkpoints hold, as with a task per shard.
            out: dict[int, Any] = {}
            with ThreadPoolExecutor(1, thread_name_prefix="hw-net-shard") as pool:
                futures = {}
                for k in shards:
                    try:
                        read = walk.read(k)
                    except NetRefused as exc:
                        out[k] = (None, exc)
                        continue
                    run = contextvars.copy_context().run
                    futures[k] = pool.submit(
                        run, _apply_read, plan, sink, k, read, time.monotonic() - t0
                    )
                out.update((k, f.result()) for k, f in futures.items())
            return out
    finally:
        log_.close()


def _apply_read(
    plan: NetPlan, sink: SqlSink, shard: int, read: NetRead, read_s: float
) -> tuple[Any, Any]:
    """Shard ``shard``'s transaction of ``read``: ``(figures, result)`` (:func:`apply_shards`)."""
    t1 = time.monotonic()
    try:
        result: Any = sink.apply_net(
            [t for t in read.tables if t.upserts.num_rows or t.removes.num_rows],
            source=plan.options.source_name,
            first_seq=plan.first_sequence,
            last_seq=plan.last_sequence,
            batch_id=plan.batch_id,
            shard=shard,
        )
    except PartlyApplied as exc:  # the row path applies the rest of it
        return None, NetRefused(str(exc))
    except NetRefused as exc:  # found while the survivors were decoded: rolled back
        return None, exc
    except Exception as exc:  # returned, not raised: no task retry (sinks.failfast)
        if not (isinstance(exc, SinkError) or is_terminal(exc)):
            raise
        result = exc
    figures = (read.tables_in, read.tables_out, read.newest_ts_us, read_s, time.monotonic() - t1)
    return figures, result


#: Sinks whose checkpoint table this process has set up.
_SET_UP: weakref.WeakSet[SqlSink] = weakref.WeakSet()


class NetApply:
    """The net path of one pipeline (module docstring)."""

    def __init__(
        self, checkpoint: Path, options: SourceOptions, sinks: Sequence[SqlSink], transforms: Any
    ) -> None:
        self.checkpoint = checkpoint
        self.options = options
        self.sinks = list(sinks)
        self.transforms: tuple[TransformSpec, ...] = tuple(transforms)
        self._log: Any = None
        #: batch id -> what the net path applied (the newest 1000 batches)
        self.batches: dict[int, DirectBatch] = {}
        #: (db.table, schema version) -> why the table cannot take the net path (None: it can)
        self._tables: dict[tuple[str, int], str | None] = {}

    @classmethod
    def of(cls, config: PipelineConfig, sinks: Sequence[Any]) -> NetApply | None:
        """The net path of ``config``, or None (logged) when it cannot take it."""
        from headwater.pipeline.columns import source_options
        from headwater.spark.offsets import parse_options

        if config.source.logs is not None:
            return None
        options = parse_options(source_options(config, sinks))
        why = unsupported(config, sinks, options)
        if why is not None:
            log.info("pipeline %s: no net-effect apply (%s)", config.name, why)
            return None
        return cls(config.checkpoint, options, sinks, config.transforms)

    def plan_of(self, batch_id: int) -> NetPlan | None:
        """Batch ``batch_id``'s plan (shards filled per sink), or None when the driver's
        look at the record headers already rules it out (module docstring)."""
        from headwater.spark.logaccess import open_log
        from headwater.spark.offsets import LogOffset
        from headwater.store import LATEST

        if self._log is None:
            self._log = open_log(self.options)
        begin = offset_at(self.checkpoint, batch_id - 1)
        if batch_id == 0 and self.options.starting != LATEST:
            # Batch 0 starts at the source's initial offset, which no offset file holds:
            # the start option resolved on the log, as the source's initialOffset does
            # (the same seq, unless retention trimmed the log in between: then only
            # records that are gone are left out). A new pipeline's first batch is often
            # its largest (the catch-up from its start). "latest" resolves to a later
            # end now, so that batch takes the Spark path.
            begin = LogOffset(self._log.resolve(self.options.starting))
        end = offset_at(self.checkpoint, batch_id)
        if begin is None or end is None or begin.row or end.row or end.seq <= begin.seq:
            return None
        schema = self._log.schema
        if schema is None:
            return None
        want = self.options.tables
        rows: dict[str, int] = {}
        for rec in self._log.records(begin.seq, end.seq):
            if not want.record_wanted(rec.tables):
                continue
            for name, n in rec.tables:
                rows[name] = rows.get(name, 0) + n
                key = (name, rec.schema_version)
                if key not in self._tables:
                    self._tables[key] = self._table_refused(name, rec.position)
                why = self._tables[key]
                if why is not None:
                    log.debug("batch %d takes the Spark path: %s", batch_id, why)
                    return None
        return NetPlan(self.options, begin.seq, end.seq, self.transforms, 1, batch_id,
                       tuple(rows.items()))  # fmt: skip

    def _table_refused(self, name: str, position: Any) -> str | None:
        from headwater.spark.asofread import read_spec
        from headwater.spark.asofscan import key_scan_kinds

        db, _, table = name.partition(".")
        if not self.options.tables(db, table):
            return None
        definition = self._log.schema.table_at(db, table, position)
        if definition is None:
            return f"{name}: no definition"
        if not key_scan_kinds([definition]):
            return f"{name}: no primary key the key-first read reads"
        columns = read_spec(name, definition, (), ()).columns
        if not all(c.fast is not None for c in columns):
            return f"{name}: a column the typed read does not carry"
        try:
            target_of(self.transforms, definition)
        except NetRefused as exc:
            return str(exc)
        return None

    def apply(self, spark: SparkSession, batch_id: int) -> DirectBatch | None:
        """Apply batch ``batch_id`` as its net effect; None: it takes the Spark path
        (nothing applied, or some shards applied and their checkpoints say so)."""
        from dataclasses import replace

        t0 = time.monotonic()
        plan = self.plan_of(batch_id)
        if plan is None:
            return None
        planned = time.monotonic()
        out: DirectBatch | None = None
        for sink in self.sinks:
            if sink not in _SET_UP:
                sink.setup()
                _SET_UP.add(sink)
            shards = sink.config.shards
            sink_plan = replace(plan, shards=shards)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # pandas 3 (see sinks.glue)
                # a task per shard, each walking the range for its own shard: one task
                # for every shard (one walk, apply_shards) left a target table different
                # from its source in test_snapshot_consistency under load (its shards'
                # transactions at once in threads; one applying thread passed 8 runs, but
                # the cause is not known), and saved little (the walk is the small part of
                # a task's read); see the module docstring
                job = spark.range(shards, numPartitions=shards).mapInArrow(
                    _Job(sink_plan, sink), _RESULT
                )
                rows = job.collect()
            results = [pickle.loads(r["result"]) for r in rows]
            refused = [r for _f, r in results if isinstance(r, NetRefused)]
            if refused:
                log.info("batch %d takes the Spark path: %s", batch_id, refused[0])
                return None
            errors = [r for _f, r in results if isinstance(r, Exception)]
            if errors:
                raise errors[0]
            if out is None and results:
                tables_in, tables_out, newest, _r, _a = results[0][0]
                out = DirectBatch(
                    rows_in=sum(tables_in.values()),
                    rows_out=sum(tables_out.values()),
                    tables_in=dict(tables_in),
                    tables_out=dict(tables_out),
                    newest_ts_us=newest,
                )
            if out is not None:  # the slowest task's read and apply
                out.read_s = max(out.read_s, *(f[3] for f, _r in results))
                out.apply_s = max(out.apply_s, *(f[4] for f, _r in results))
            for _f, result in results:
                log.debug("batch %d: %s", batch_id, result)
        if out is None:
            return None
        out.seconds = time.monotonic() - t0
        self.batches[batch_id] = out
        for gone in [b for b in self.batches if b < batch_id - 1000]:
            del self.batches[gone]
        log.info(
            "batch %d applied as its net effect: %d rows in %.3f s (plan %.3f s; the slowest "
            "task: read %.3f s, apply %.3f s)", batch_id, out.rows_in, out.seconds, planned - t0,
            out.read_s, out.apply_s,
        )  # fmt: skip
        return out

    def patch(self, reports: Iterable[Any]) -> list[Any]:
        """Spark's progress reports with the figures of the batches this path applied
        (Spark read no rows for them), as :meth:`DirectApply.patch` does."""
        from headwater.pipeline.runner import OBSERVED
        from headwater.pipeline.status import OBSERVED_IN

        out = []
        for report in reports:
            done = self.batches.get(int(report.get("batchId", -1))) if report else None
            if done is None or report.get("numInputRows"):
                out.append(report)
                continue
            patched = dict(report)
            patched["numInputRows"] = done.rows_in
            patched["processedRowsPerSecond"] = done.rows_in / max(done.seconds, 1e-3)
            observed = dict(patched.get("observedMetrics") or {})
            observed[OBSERVED_IN] = {"tables": _items(done.tables_in)}
            observed[OBSERVED] = {
                "newest_ts_us": done.newest_ts_us,
                "rows_out": done.rows_out,
                "tables": _items(done.tables_out),
            }
            patched["observedMetrics"] = observed
            out.append(patched)
        return out

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass(frozen=True, slots=True)
class _Job:
    """The picklable ``mapInArrow`` function of one sink's job."""

    plan: NetPlan
    sink: SqlSink

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _task(self.plan, self.sink, batches)


def _items(counts: dict[str, int]) -> list[dict[str, Any]]:
    return [{"item": k, "count": v} for k, v in counts.items()]
