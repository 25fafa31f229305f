"""The key-first read of a replay: last writes found on the keys alone, survivors decoded.

The state as of a point is, per primary key, the key's last write when it is a put
(:mod:`headwater.spark.lastwrite` argues why; a key-changing update removes its old key
and puts its new one, so chains, swaps and a key deleted and reinserted need nothing
more). A put's value is its after image alone (full row images), so only the after
images of the puts that are their key's last write need decoding; all others are read
for their keys only. :class:`ScanSpec` does that in each of ``parts`` tasks
(``spark.range(parts).mapInArrow``; ``headwater replay``'s typed Parquet write runs
:meth:`ScanSpec.read_part` in a plain RDD job, replay/run.py):

1. **key pass**: walk the table's rows events of the whole range in log order, and for
   every row read only the key columns' bytes (:mod:`headwater._native._lastwrite`, in
   C: no Python object per row); each key hashed to this task's part gets its last
   write (sequence, put or remove, and where a put's after image starts in its event);
2. **survivor pass**: walk the same events again (the same order, so the same event
   ordinals; the events pass 1 kept in memory, up to :data:`KEEP_BYTES`, else the range
   read again) and decode the after images of the surviving puts only, into the
   physical columns of :mod:`headwater.spark.asofread` (``_v``/``_t``, typed by the JVM
   after). When every column's values come typed (``_v``), the images are decoded in C
   straight into Arrow buffers (:mod:`headwater._native._survivors`: integers,
   FLOAT/DOUBLE, DECIMAL up to 38 digits, utf8/ascii/latin1 text), no Python value per
   row, and runs of events in one call (``Columns.add_events``: no Python step per
   event); an image shape with another column kind, or an event with a value that C
   cannot type exactly as the Python route would (out of the Arrow type's range, text
   invalid in its charset), is decoded the Python way, in batches of its own.

Why it is correct: every key is in exactly one part (its hash), and the task of that
part sees every write to it, in log order (one task reads the whole range), so its last
write is the sequential replay's (lastwrite.py). Keys compare by value as the JVM typed
them in the shuffle this replaces: integers by their value (across INT/BIGINT ALTERs),
text by its bytes in one charset class (utf8/utf8mb3/utf8mb4, or ascii), whose decoding
is one-to-one. :func:`key_scan_kinds` admits a table to this read only when every key
column is such a column in every schema version of the range, under the same names;
other tables (and base images) take the shuffle read (spark/asof.py). Reading the range
once per part costs framing, a few % of the decode (the survivors' decode, the bulk of
the work, is split between the parts).

Why hash parts that each walk the whole range, and not range slices (each task walking
1/n of the records, keeping each key's last write in its slice, then a merge): the slice
merge is sound (a key's last write is its last write in the latest slice that writes
it; a slice's survivor is final unless a later slice writes its key, whatever chains,
swaps, deletes and reinserts lie between), but it needs each task to learn the keys of
the later slices: an exchange between tasks, i.e. a second Spark stage with a shuffle
of every slice's key set (about a million keys here). What a part repeats of the others'
work is only the framing: reading the records and walking every row image to its key
and hash, 0.08 of a part's 0.28 CPU-seconds on bench/replay.py's 2.1 million changes
(measured as the key pass of one part of 64, which owns almost no keys); the hash
table's writes, the survivors' decode and the Parquet write (the rest) are split by key
already. With two parts, slices would save each task about 0.04 CPU-seconds; a shuffle
stage costs more than that on this scale (the JVM's CPU alone for a job of two trivial
tasks is 0.03-0.15 s, besides the key sets' serialization).

Invariant: the events are walked in the same order by both passes, so an event's
ordinal (its place among the table's rows events of the range) names it in both.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, cast

from headwater.binlog.codec import DECODE_ERRORS, NATIVE, row_decoder_for
from headwater.binlog.events import DecodeContext, parse_event
from headwater.binlog.rows import ROWS_EVENT_TYPES, _cached_layout, rows_event_table_id
from headwater.changes import iter_payload_events
from headwater.errors import BinlogFormatError, ConfigError, TruncatedError
from headwater.gcpause import freeze_worker_heap, gc_paused
from headwater.schema.model import TableDef
from headwater.spark.asofread import BATCH_ROWS, PARTIAL_IMAGE, ColumnSpec, _physical, _spark_of
from headwater.spark.logaccess import open_log
from headwater.spark.offsets import SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from headwater.binlog.tablemap import TableMap

__all__ = ["ScanSpec", "key_scan_kinds"]

_TABLE_MAP = 19  # TABLE_MAP_EVENT (binlog/constants.py EventType.TABLE_MAP)
_PARTIAL_UPDATE_ROWS = 39  # MySQL JSON diffs: an after image that is not a full row

_INTS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_TEXTS = frozenset({"char", "varchar"})
#: charset classes whose text decodes one-to-one from the same bytes
_CHARSETS = {"utf8": "utf8", "utf8mb3": "utf8", "utf8mb4": "utf8", "ascii": "ascii"}
#: _lastwrite key kinds by the compiled decoder's column kind (binlog/_columns.native_spec)
_KEY_KINDS = {
    **{f"i{n}": 1 for n in (8, 16, 24, 32, 64)},
    **{f"u{n}": 2 for n in (8, 16, 24, 32, 64)},
    "utf8": 3,
    "ascii": 3,
}


def key_scan_kinds(definitions: Sequence[TableDef]) -> bool:
    """Whether the key-first read may replay a table whose definitions in the range are
    ``definitions`` (module docstring): one primary key, by the same names, of integer
    or utf8/ascii CHAR/VARCHAR columns in every version, each column of one class."""
    if not definitions or not definitions[-1].primary_key:
        return False
    names = definitions[-1].primary_key
    classes: dict[str, str] = {}
    for definition in definitions:
        if definition.primary_key != names:
            return False
        by_name = {c.name: c for c in definition.columns}
        for name in names:
            column = by_name.get(name)
            if column is None:
                return False
            if column.data_type in _INTS:
                kind = "int"
            elif column.data_type in _TEXTS and column.charset in _CHARSETS:
                kind = _CHARSETS[column.charset]
            else:
                return False
            if classes.setdefault(name, kind) != kind:
                return False
    return True


@dataclass(frozen=True, slots=True)
class ScanSpec:
    """What every task of one key-first replay needs (picklable; no open handle)."""

    table: str
    options: SourceOptions
    first_seq: int
    end_seq: int
    columns: tuple[ColumnSpec, ...]
    #: the primary key's column names, in key order
    key: tuple[str, ...]
    #: (schema version, column count) of each version of the table (AsOfPlan.widths)
    widths: tuple[tuple[int, int], ...]
    parts: int

    def write_schema(self) -> StructType:
        """The Spark schema of the rows :meth:`read` yields: ``_v``/``_t`` per column."""
        from pyspark.sql import types as T

        fields = []
        for spec in self.columns:
            if spec.fast is not None:
                fields.append(T.StructField(f"_v{spec.index}", _spark_of(spec.fast)))
            fields.append(T.StructField(f"_t{spec.index}", T.StringType()))
        return T.StructType(fields)

    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        fields = []
        for spec in self.columns:
            if spec.fast is not None:
                fields.append(pa.field(f"_v{spec.index}", spec.fast))
            fields.append(pa.field(f"_t{spec.index}", pa.string()))
        return pa.schema(fields)

    @property
    def typed(self) -> bool:
        """Whether every column's values can come typed from the read (``_v``): then a
        part whose ``_t`` columns are all null needs no typing in the JVM."""
        return all(c.fast is not None for c in self.columns)

    def typed_schema(self) -> pa.Schema:
        """The table's columns as the typed view types them (when :attr:`typed`)."""
        import pyarrow as pa

        return pa.schema([pa.field(c.name, c.fast) for c in self.columns])

    def read(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``mapInArrow`` body over ``spark.range(parts)``: each id's part of the state."""
        names = self.arrow_schema().names
        with gc_paused():
            for batch in batches:
                for part in batch.column(0).to_pylist():
                    for table in self.read_part(part):
                        yield from table.select(names).to_batches()
        freeze_worker_heap()  # the daemon's full collection after the task (gcpause)

    def read_part(self, part: int) -> Iterator[pa.Table]:
        """The rows of the keys hashed to ``part``, in batches (runs on an executor)."""
        from headwater._native._lastwrite import Scanner

        log = open_log(self.options)
        try:
            if not WALK_IN_C:
                yield from self._read_part_python(log, part)
                return
            walker = _FastWalker(self, log)
            hint = walker.rows_ahead() // self.parts if SIZE_HINT else 0
            scanner = Scanner(self.parts, part, hint)
            walked = walker.scan(scanner)
            yield from walker.survivors_of(scanner, walked)
        finally:
            log.close()

    def _read_part_python(self, log: Any, part: int) -> Iterator[pa.Table]:
        """:meth:`read_part` with the events walked in Python (:data:`WALK_IN_C` off)."""
        from headwater._native._lastwrite import Scanner

        walker = _Walker(self, log)
        scanner = Scanner(self.parts, part)
        counts: list[int] = []
        # The events are kept for pass 2 while they fit KEEP_BYTES (one walk instead
        # of two); beyond, pass 2 reads the range again.
        kept: list[_Event] | None = []
        held = 0
        for event in walker.events():
            counts.append(event.scan(scanner, len(counts)))
            if kept is not None:
                held += len(event.buf)
                kept = kept if held <= KEEP_BYTES else None
                if kept is not None:
                    kept.append(event)
        yield from walker.survivors(scanner, counts, kept)


@dataclass(slots=True)
class _Shape:
    """One row image shape of one table version: its compiled shape and its mapping."""

    present: tuple[int, ...]
    compiled: Any  # _lastwrite.Shape
    #: per column of the replay's definition: its place in the image, or None
    where: tuple[int | None, ...]
    #: how _survivors decodes its after images into Arrow (None: it does not; False:
    #: not asked yet)
    plan: Any = False


class _Table:
    """What the walk knows of one TABLE_MAP at one schema version."""

    def __init__(self, spec: ScanSpec, tm: TableMap, columns: Any) -> None:
        from headwater.binlog._columns import native_spec, value_width

        self.tm = tm
        self.columns = columns
        self.decoder = row_decoder_for(tm, columns)
        if tm.column_names is not None:
            self.names: tuple[str, ...] = tm.column_names
        elif columns is not None and len(columns) == tm.column_count:
            self.names = tuple(c.name for c in columns)
        else:
            self.names = tuple(f"@{i + 1}" for i in range(tm.column_count))
        plan = self.decoder.plan
        self.widths = tuple(value_width(c) for c in plan)
        specs = [native_spec(c) or ("", 0, 0, None) for c in plan]
        self.kinds = tuple(kind for kind, _a, _b, _names in specs)
        #: (kind, a, b, charmap) of each column for _survivors (ENUM/SET names unused)
        self.sources = tuple(
            (kind, a, b, names if kind == "charmap" else None) for kind, a, b, names in specs
        )
        self.spec = spec
        self.shapes: dict[tuple[int, ...], _Shape] = {}

    def native(self, present: tuple[int, ...]) -> Any:
        """The compiled image of ``present`` (``_rowimage.Image``), or None: the
        decoder's own choice (binlog/codec.py RowDecoder), asked once per shape."""
        return self.decoder._native(present)

    def shape(self, present: tuple[int, ...]) -> _Shape:
        found = self.shapes.get(present)
        if found is not None:
            return found
        from headwater._native._lastwrite import Shape

        names = [self.names[i] for i in present]
        at = {name: i for i, name in enumerate(names)}
        keys = []
        for name in self.spec.key:
            i = at.get(name)
            kind = _KEY_KINDS.get(self.kinds[present[i]]) if i is not None else None
            if i is None or kind is None:
                raise ConfigError(
                    f"{PARTIAL_IMAGE}: {self.spec.table} key column {name!r} is not in a "
                    "row image as a key the key-first replay reads",
                    field="as_of",
                )
            keys.append((i, kind))
        compiled = Shape(tuple(self.widths[i] for i in present), tuple(keys))
        where = tuple(at.get(c.name) for c in self.spec.columns)
        found = self.shapes[present] = _Shape(present, compiled, where)
        return found

    def survivor_plan(self, shape: _Shape, targets: tuple[tuple[str, int, int], ...]) -> Any:
        """The ``_survivors.Plan`` of ``shape``'s after images, or None when a column of
        it is not one the C decoder types (then its images are decoded the Python way)."""
        if shape.plan is False:
            from headwater._native._survivors import plan

            shape.plan = plan(
                targets,
                tuple(self.widths[i] for i in shape.present),
                tuple(self.sources[i] for i in shape.present),
                tuple(-1 if i is None else i for i in shape.where),
            )
        return shape.plan


@dataclass(slots=True)
class _Event:
    """One rows event of the replayed table, its header read."""

    op: int
    table: _Table
    first: _Shape
    second: _Shape | None
    buf: bytes
    pos: int

    def scan(self, scanner: Any, ordinal: int) -> int:
        from headwater._native._lastwrite import DELETE, INSERT, UPDATE

        op = (INSERT, UPDATE, DELETE)[self.op]
        second = None if self.second is None else self.second.compiled
        try:
            return int(
                scanner.scan(op, self.first.compiled, second, self.buf, self.pos, len(self.buf),
                             ordinal)
            )  # fmt: skip
        except ValueError as exc:
            raise TruncatedError(str(exc)) from None

    def after_images(self, rows: list[int], offsets: list[int], count: int) -> list[Any]:
        """The after images of ``rows`` (row indexes; their images start at ``offsets``)."""
        decoder = self.table.decoder
        buf = self.buf
        if len(rows) * _BULK >= count:
            # Most rows survive: one call decodes the event (in C where it can).
            if self.second is None:
                every = decoder.decode_rows(buf, self.pos, len(buf), self.first.present)
                return [every[r] for r in rows]
            pairs = decoder.decode_row_pairs(
                buf, self.pos, len(buf), self.first.present, self.second.present
            )
            return [pairs[r][1] for r in rows]
        present = (self.second or self.first).present
        native = self.table.native(present) if NATIVE else None
        if native is not None:
            from headwater._native._rowimage import image

            try:
                done = [image(native, buf, off) for off in offsets]
            except IndexError:
                raise TruncatedError("row image runs past the end of the event") from None
            if None not in done:
                return [d[0] for d in done]  # type: ignore[index]
        return [decoder.decode_image(buf, off, present)[0] for off in offsets]


_OPS = {"insert": 0, "update": 1, "delete": 2}
#: Bytes of rows events a task keeps from pass 1 for pass 2 (its memory; a larger range
#: is read twice)
KEEP_BYTES = 256 << 20
#: Whether the surviving after images of typed columns are decoded by
#: headwater._native._survivors (straight into Arrow buffers; a test turns it off to
#: compare with the Python route)
SURVIVORS_IN_C = True
#: Whether pass 1 walks the events in C (headwater._native._walk; a test turns it off to
#: compare with the Python walk)
WALK_IN_C = True
#: Whether the key pass's hash table is sized up front from the records' row counts of
#: the table (Scanner's hint: no rehash as it fills; a test or bench turns it off)
SIZE_HINT = True
#: Whether pass 2 hands runs of events to C at once (``Columns.add_events``) rather than
#: one ``Columns.add`` call per event (a test turns it off to compare)
EVENTS_IN_C = True
#: An event whose surviving rows are at least 1/_BULK of its rows is decoded whole (one
#: call into C, then the survivors picked) rather than image by image.
_BULK = 8


class _Walker:
    """The table's rows events of ``[first_seq, end_seq)``, in log order."""

    def __init__(self, spec: ScanSpec, log: Any) -> None:
        self.spec = spec
        self.log = log
        #: (id of a TableMap, schema version) -> (that map, its _Table or None)
        self.known: dict[tuple[int, int], tuple[TableMap, _Table | None]] = {}
        self.maps: dict[bytes, Any] = {}

    def events(self) -> Iterator[_Event]:
        spec, log = self.spec, self.log
        want = spec.options.tables
        for rec in log.records(spec.first_seq, spec.end_seq):
            if not want.record_wanted(rec.tables):
                continue
            ctx = DecodeContext(fde=log.fde, table_map_cache=self.maps)
            size = ctx.table_id_size
            expected = _width_at(spec.widths, rec.schema_version)
            for raw in iter_payload_events(rec.payload, source=None):
                event = self._one(raw, ctx, rec, expected, size)
                if event is not None:
                    yield event

    def _one(
        self, raw: Any, ctx: DecodeContext, rec: Any, expected: int | None, size: int
    ) -> _Event | None:
        """The :class:`_Event` of one event of ``rec`` when it is a rows event of the
        table (a TABLE_MAP is parsed into ``ctx``; other events give None)."""
        code = raw.type_code
        if code == _TABLE_MAP:
            parse_event(raw, ctx)
            return None
        if code not in ROWS_EVENT_TYPES:
            return None
        tm = ctx.table_maps.get(rows_event_table_id(raw.body, table_id_size=size))
        if tm is None:
            parse_event(raw, ctx)  # raises: a rows event without its TABLE_MAP
            return None
        table = self._table(tm, rec)
        if table is None:
            return None
        if code == _PARTIAL_UPDATE_ROWS:
            raise ConfigError(
                f"{PARTIAL_IMAGE}: {self.spec.table} has a partial JSON update "
                "(binlog_row_value_options=PARTIAL_JSON); a replay needs full images",
                field="as_of",
            )
        return self._event(code, raw.body, table, rec, expected, size)

    def _table(self, tm: TableMap, rec: Any) -> _Table | None:
        """The table of ``tm`` at ``rec``'s schema version (None: another table), asked
        once: the columns depend on nothing else."""
        known = self.known
        hit = known.get((id(tm), rec.schema_version))
        if hit is None or hit[0] is not tm:
            table = None
            if self.spec.options.tables(tm.schema, tm.table):
                schema = self.log.schema
                columns = schema.columns_for(tm, rec.position) if schema else None
                table = _Table(self.spec, tm, columns)
            hit = known[(id(tm), rec.schema_version)] = (tm, table)
        return hit[1]

    def _event(
        self, code: int, body: Any, table: _Table, rec: Any, expected: int | None, size: int
    ) -> _Event:
        tm = table.tm
        try:
            kind, _f, _x, _w, first, second, buf, pos = _cached_layout(code, bytes(body), tm, size)
        except DECODE_ERRORS:
            raise TruncatedError("rows event ends early") from None
        except BinlogFormatError:
            raise
        if expected is not None and len(first) != expected:
            raise ConfigError(
                f"{PARTIAL_IMAGE}: {self.spec.table} change in store record {rec.seq} "
                "lacks columns (binlog_row_image=MINIMAL or NOBLOB); "
                "a replay needs binlog_row_image=FULL",
                field="as_of",
            )
        op = _OPS[kind]
        return _Event(
            op,
            table,
            table.shape(first),
            table.shape(second) if op == 1 else None,
            buf,
            pos,
        )

    def survivors(
        self, scanner: Any, counts: list[int], kept: list[_Event] | None = None
    ) -> Iterator[pa.Table]:
        """Pass 2: the surviving puts' after images, as physical columns (of ``kept``,
        the events of pass 1, or of the range read again)."""
        import numpy as np

        seqs_raw, offsets_raw = scanner.survivors()
        seqs = np.frombuffer(seqs_raw, dtype=np.int64)
        offsets = np.frombuffer(offsets_raw, dtype=np.int64)
        ordinals = seqs >> 32
        rows = (seqs & 0xFFFFFFFF).tolist()
        offs = offsets.tolist()
        # per ordinal: [lo, hi) of its survivors in the (sequence-ordered) arrays
        wanted = np.unique(ordinals)
        bounds = np.searchsorted(ordinals, wanted, side="left").tolist()
        ends = np.searchsorted(ordinals, wanted, side="right").tolist()
        where = dict(zip(wanted.tolist(), zip(bounds, ends, strict=True), strict=True))
        targets = _targets(self.spec)
        fast = None
        if targets is not None:
            from headwater._native._survivors import Columns

            fast = Columns(targets)
        out = _Columns(self.spec)
        for ordinal, event in enumerate(self.events() if kept is None else kept):
            span = where.get(ordinal)
            if span is None:
                continue
            lo, hi = span
            shape = event.second or event.first
            if fast is not None and targets is not None:
                plan = event.table.survivor_plan(shape, targets)
                # the batches keep sequence order: the other builder's rows go first
                if plan is not None and out.rows:
                    yield out.table()
                    out = _Columns(self.spec)
                try:
                    done = plan is not None and fast.add(plan, event.buf, offsets[lo:hi].data)
                except ValueError as exc:
                    raise TruncatedError(str(exc)) from None
                if done:
                    if fast.rows >= BATCH_ROWS:
                        yield _arrow_table(self.spec, fast.take())
                    continue
                if fast.rows:
                    yield _arrow_table(self.spec, fast.take())
            images = event.after_images(rows[lo:hi], offs[lo:hi], counts[ordinal])
            out.add(images, shape.where)
            if out.rows >= BATCH_ROWS:
                yield out.table()
                out = _Columns(self.spec)
        if out.rows:
            yield out.table()
        if fast is not None and fast.rows:
            yield _arrow_table(self.spec, fast.take())


@dataclass(slots=True)
class _Walked:
    """What :meth:`_Walker.scan` leaves for pass 2: per ordinal one row of ``events``
    (:mod:`headwater._native._walk`'s six int64s: the table's index in ``tables`` or -1
    for an event walked in Python, kept in ``slow``; op; body start; first image;
    event end; rows), the ordinal each walked record starts at, and the records'
    payloads while they fit :data:`KEEP_BYTES` (else None: read again)."""

    events: bytearray
    firsts: list[int]
    tables: list[tuple[_Table, _Shape]]
    slow: dict[int, tuple[_Event, int]]
    payloads: list[bytes] | None


class _FastWalker(_Walker):
    """The walk of :meth:`ScanSpec.read_part`: :meth:`_Walker.events` with the common
    events (an uncompressed full-image rows event of a mapped table) framed in C and fed
    to the key pass there (:mod:`headwater._native._walk`): no Python object per event.
    TABLE_MAPs, other tables' events and anything unusual go through
    :meth:`_Walker._one`, so every error is the Python walk's. Ordinals are the same as
    :meth:`_Walker.events` gives: both count the table's rows events in log order."""

    #: what :meth:`rows_ahead` read: the records read ahead, and the iterator of the rest
    _ahead: tuple[list[tuple[Any, bytes]], Iterator[tuple[Any, bytes]]] | None = None

    def _records(self) -> Iterator[tuple[Any, bytes]]:
        want = self.spec.options.tables
        for rec in self.log.records(self.spec.first_seq, self.spec.end_seq):
            if want.record_wanted(rec.tables):
                payload = rec.payload
                yield rec, payload if type(payload) is bytes else bytes(payload)

    def rows_ahead(self) -> int:
        """The table's change rows in the range's records (their headers' table lists),
        read ahead up to :data:`KEEP_BYTES` of payload (pass 1 keeps those for pass 2
        anyway; past it, the rows so far): the key pass's size hint. :meth:`scan` walks
        the records read here first."""
        table = self.spec.table
        ahead: list[tuple[Any, bytes]] = []
        rest = self._records()
        rows = held = 0
        for rec, payload in rest:
            ahead.append((rec, payload))
            rows += sum(n for name, n in rec.tables if name == table)
            held += len(payload)
            if held > KEEP_BYTES:
                break
        self._ahead = (ahead, rest)
        return rows

    def _walk_records(self) -> Iterator[tuple[Any, bytes]]:
        if self._ahead is None:
            yield from self._records()
            return
        ahead, rest = self._ahead
        self._ahead = None
        ahead.reverse()
        while ahead:  # (dropped as walked: pass 1 holds them while KEEP_BYTES allows)
            yield ahead.pop()
        yield from rest

    def scan(self, scanner: Any) -> _Walked:
        """Pass 1 over the whole range into ``scanner`` (lastwrite.c)."""
        from headwater._native._walk import DONE, TABLE_MAP, walk

        spec, log = self.spec, self.log
        walked = _Walked(bytearray(), [], [], {}, [])
        index: dict[int, int] = {}  # id(_Shape) -> its place in walked.tables
        held = 0
        ordinal = 0
        for rec, payload in self._walk_records():
            walked.firsts.append(ordinal)
            if walked.payloads is not None:
                held += len(payload)
                if held <= KEEP_BYTES:
                    walked.payloads.append(payload)
                else:
                    walked.payloads = None
            ctx = DecodeContext(fde=log.fde, table_map_cache=self.maps)
            size = ctx.table_id_size
            expected = _width_at(spec.widths, rec.schema_version)
            ids: dict[int, tuple[int, Any, int] | None] = {}
            pos = 0
            while True:
                status, pos, ordinal = walk(
                    payload, pos, size, ids, scanner, ordinal, walked.events,
                    -1 if expected is None else expected,
                )  # fmt: skip
                if status == DONE:
                    break
                # the event the C walk stopped at, framed (and refused) as before
                raw = next(iter_payload_events(memoryview(payload)[pos:], source=None))
                pos += 4 + int.from_bytes(payload[pos : pos + 4], "little")
                if status == TABLE_MAP:
                    tm = cast("TableMap", parse_event(raw, ctx))  # a TABLE_MAP parses to one
                    ids.pop(tm.table_id, None)
                    table = self._table(tm, rec)
                    if table is None:
                        ids[tm.table_id] = None
                        continue
                    try:
                        shape = table.shape(tuple(range(tm.column_count)))
                    except ConfigError:
                        continue  # its rows events go the Python way, which raises
                    at = index.get(id(shape))
                    if at is None:
                        at = index[id(shape)] = len(walked.tables)
                        walked.tables.append((table, shape))
                    ids[tm.table_id] = (at, shape.compiled, tm.column_count)
                    continue
                event = self._one(raw, ctx, rec, expected, size)
                if event is None:
                    continue
                count = event.scan(scanner, ordinal)
                walked.slow[ordinal] = (event, count)
                walked.events += _SLOW_ROW.pack(-1, event.op, 0, 0, 0, count)
                ordinal += 1
        return walked

    def survivors_of(self, scanner: Any, walked: _Walked) -> Iterator[pa.Table]:
        """Pass 2 of :meth:`scan`: the surviving puts' after images, as physical
        columns, in sequence order (as :meth:`_Walker.survivors`)."""
        import numpy as np

        seqs_raw, offsets_raw = scanner.survivors()
        targets = _targets(self.spec)
        if EVENTS_IN_C and targets is not None and walked.payloads is not None:
            yield from self._survivors_in_runs(seqs_raw, offsets_raw, walked, targets)
            return
        seqs = np.frombuffer(seqs_raw, dtype=np.int64)
        offsets = np.frombuffer(offsets_raw, dtype=np.int64)
        ordinals = seqs >> 32
        wanted = np.unique(ordinals)
        bounds = np.searchsorted(ordinals, wanted, side="left").tolist()
        ends = np.searchsorted(ordinals, wanted, side="right").tolist()
        records = (np.searchsorted(walked.firsts, wanted, side="right") - 1).tolist()
        rows_of = np.frombuffer(walked.events, dtype=np.int64).reshape(-1, 6)
        info = rows_of[wanted].tolist() if len(wanted) else []
        payloads = walked.payloads
        again = None if payloads is not None else self._records()
        at_record, payload = -1, b""
        targets = _targets(self.spec)
        fast = None
        if targets is not None:
            from headwater._native._survivors import Columns

            fast = Columns(targets)
        out = _Columns(self.spec)
        for ordinal, lo, hi, r, (t, op, body, first, end, count) in zip(
            wanted.tolist(), bounds, ends, records, info, strict=True
        ):
            if t < 0:
                event, count = walked.slow[ordinal]
                buf, shape, table, base = event.buf, event.second or event.first, event.table, 0
            else:
                if r != at_record:
                    if payloads is not None:
                        payload = payloads[r]
                    else:
                        assert again is not None
                        while at_record < r:
                            payload = next(again)[1]
                            at_record += 1
                    at_record = r
                table, shape = walked.tables[t]
                buf, base, event = payload, body, None
            if fast is not None and targets is not None:
                plan = table.survivor_plan(shape, targets)
                if plan is not None and out.rows:
                    yield out.table()
                    out = _Columns(self.spec)
                try:
                    done = plan is not None and fast.add(plan, buf, offsets[lo:hi].data)
                except ValueError as exc:
                    raise TruncatedError(str(exc)) from None
                if done:
                    if fast.rows >= BATCH_ROWS:
                        yield _arrow_table(self.spec, fast.take())
                    continue
                if fast.rows:
                    yield _arrow_table(self.spec, fast.take())
            if event is None:
                # the event as the Python walk gives it: its body, offsets in it
                event = _Event(
                    op, table, shape, shape if op == 1 else None, buf[body:end], first - body
                )
            rows = (seqs[lo:hi] & 0xFFFFFFFF).tolist()
            offs = (offsets[lo:hi] - base).tolist()
            out.add(event.after_images(rows, offs, count), shape.where)
            if out.rows >= BATCH_ROWS:
                yield out.table()
                out = _Columns(self.spec)
        if out.rows:
            yield out.table()
        if fast is not None and fast.rows:
            yield _arrow_table(self.spec, fast.take())

    def _survivors_in_runs(
        self,
        seqs_raw: bytes,
        offsets_raw: bytes,
        walked: _Walked,
        targets: tuple[tuple[str, int, int], ...],
    ) -> Iterator[pa.Table]:
        """:meth:`survivors_of` with the events whose shape has a C plan decoded in runs
        by ``Columns.add_events`` (one call per run, not a Python step per event: about
        18 000 events of survivors per task in bench/replay.py). An event that call
        leaves (walked in Python, a shape without a plan, a value C does not type) is
        done as :meth:`survivors_of` does it, and the runs go on after it. Either builder
        is emptied before the other takes rows, so the batches keep sequence order."""
        import bisect

        import numpy as np

        from headwater._native._survivors import EV_FULL, EV_ODD, Columns

        spec = self.spec
        seqs = np.frombuffer(seqs_raw, dtype=np.int64)
        offsets = np.frombuffer(offsets_raw, dtype=np.int64)
        ordinals = seqs >> 32
        n = len(seqs)
        payloads = walked.payloads
        assert payloads is not None
        firsts = np.asarray(walked.firsts, dtype=np.int64).tobytes()
        rows_of = np.frombuffer(walked.events, dtype=np.int64).reshape(-1, 6)
        # plans of the entries this scanner's survivors name only: a walk may hold other
        # tables' entries too (pipeline/netapply.py walks every table of a batch at once)
        once = ordinals[np.r_[True, ordinals[1:] != ordinals[:-1]]] if n else ordinals
        named = set(rows_of[once, 0].tolist())  # (ordinals are sorted: each event once)
        plans = tuple(
            table.survivor_plan(shape, targets) if t in named else None
            for t, (table, shape) in enumerate(walked.tables)
        )
        fast = Columns(targets)
        out = _Columns(spec)
        odd_at = -1  # the survivor whose event C refused: done the Python way
        pos = 0
        while pos < n:
            ordinal = int(ordinals[pos])
            t = int(rows_of[ordinal, 0])
            if t >= 0 and plans[t] is not None and pos != odd_at:
                if out.rows:
                    yield out.table()
                    out = _Columns(spec)
                try:
                    pos, status = fast.add_events(
                        plans, payloads, firsts, walked.events, seqs_raw, offsets_raw, pos,
                        BATCH_ROWS,
                    )  # fmt: skip
                except ValueError as exc:
                    raise TruncatedError(str(exc)) from None
                if status == EV_FULL:
                    yield _arrow_table(spec, fast.take())
                elif status == EV_ODD:
                    odd_at = pos
                continue
            hi = int(np.searchsorted(ordinals, ordinal, side="right"))
            t, op, body, first, end, count = rows_of[ordinal].tolist()
            event: _Event | None
            if t < 0:
                event, count = walked.slow[ordinal]
                table, shape, buf, base = event.table, event.second or event.first, event.buf, 0
                plan = table.survivor_plan(shape, targets) if pos != odd_at else None
                if plan is not None:
                    if out.rows:
                        yield out.table()
                        out = _Columns(spec)
                    try:
                        done = fast.add(plan, buf, offsets[pos:hi].data)
                    except ValueError as exc:
                        raise TruncatedError(str(exc)) from None
                    if done:
                        pos = hi
                        if fast.rows >= BATCH_ROWS:
                            yield _arrow_table(spec, fast.take())
                        continue
            else:
                table, shape = walked.tables[t]
                buf = payloads[bisect.bisect_right(walked.firsts, ordinal) - 1]
                base, event = body, None
            if fast.rows:
                yield _arrow_table(spec, fast.take())
            if event is None:
                # the event as the Python walk gives it: its body, offsets in it
                event = _Event(
                    op, table, shape, shape if op == 1 else None, buf[body:end], first - body
                )
            rows = (seqs[pos:hi] & 0xFFFFFFFF).tolist()
            offs = (offsets[pos:hi] - base).tolist()
            out.add(event.after_images(rows, offs, count), shape.where)
            pos = hi
            if out.rows >= BATCH_ROWS:
                yield out.table()
                out = _Columns(spec)
        if out.rows:
            yield out.table()
        if fast.rows:
            yield _arrow_table(spec, fast.take())


#: A row of _Walked.events for an event walked in Python (walk.c's six int64s)
_SLOW_ROW = struct.Struct("=6q")


def _width_at(widths: tuple[tuple[int, int], ...], version: int) -> int | None:
    """How many columns a full image has at schema ``version`` (None: unknown)."""
    if not widths:
        return None
    expected = widths[0][1]
    for v, width in widths[1:]:
        if version >= v:
            expected = width
    return expected


#: Arrow types the C survivor decoder fills (survivors.c), by their names there
_C_TARGETS = {"int8", "int16", "int32", "int64", "double"}


def _targets(spec: ScanSpec) -> tuple[tuple[str, int, int], ...] | None:
    """The columns of ``spec`` as _survivors targets, or None when one is not a type
    the C decoder fills (then every image is decoded the Python way)."""
    import pyarrow as pa

    if not SURVIVORS_IN_C:
        return None
    targets = []
    for column in spec.columns:
        kind = column.fast
        if kind is None:
            return None
        if pa.types.is_decimal128(kind):
            targets.append(("decimal", kind.precision, kind.scale))
        elif kind == pa.string():
            targets.append(("string", 0, 0))
        elif str(kind) in _C_TARGETS:
            name = "float64" if str(kind) == "double" else str(kind)
            targets.append((name, 0, 0))
        else:
            return None
    return tuple(targets)


def _arrow_table(spec: ScanSpec, taken: Any) -> pa.Table:
    """The physical columns (``_v``/``_t``) of the buffers of ``Columns.take()``."""
    import pyarrow as pa

    arrays: dict[str, pa.Array] = {}
    for column, (n, nulls, valid, data, offsets) in zip(spec.columns, taken, strict=True):
        buffers = [None if valid is None else pa.py_buffer(valid)]
        if offsets is not None:
            buffers.append(pa.py_buffer(offsets))
        buffers.append(pa.py_buffer(data))
        assert column.fast is not None
        arrays[f"_v{column.index}"] = pa.Array.from_buffers(
            column.fast, n, buffers, null_count=nulls
        )
        arrays[f"_t{column.index}"] = pa.nulls(n, pa.string())
    return pa.table(arrays)


class _Columns:
    """Surviving rows being gathered, column by column."""

    def __init__(self, spec: ScanSpec) -> None:
        self.spec = spec
        self.values: list[list[Any]] = [[] for _ in spec.columns]
        self.rows = 0

    def add(self, images: list[Any], where: tuple[int | None, ...]) -> None:
        m = len(images)
        if not m:
            return
        columns = list(zip(*images, strict=True))
        for out, i in zip(self.values, where, strict=True):
            if i is None:
                out.extend(repeat(None, m))
            else:
                out.extend(columns[i])
        self.rows += m

    def table(self) -> pa.Table:
        import pyarrow as pa

        arrays: dict[str, pa.Array] = {}
        for column, values in zip(self.spec.columns, self.values, strict=True):
            arrays.update(_physical(column, values, "_v", "_t"))
        return pa.table(arrays)
