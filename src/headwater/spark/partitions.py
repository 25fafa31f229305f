"""Slicing the change log into input partitions, and decoding slices on executors.

Planning (driver). A batch or micro-batch is the changes from offset ``start`` up to, not
including, offset ``end`` (offsets.py: ``(seq, row)`` pairs). :func:`scan_batch` walks the
records of that range once, reading their headers and payload sizes (never decoding
unless a row limit needs counting; without one, the log's ``heads``: the store checks
each frame's CRC in its read window and builds no payload and no Record, about 2.5 us a
record instead of 5-8, which a catch-up of 15,000 one-row transactions pays once per
batch in the source's process) and, with read limits, picks ``end``:
``maxBytesPerTrigger`` counts record payload bytes (whole records; the first record is
always taken, so a batch moves forward); ``maxRowsPerTrigger`` counts change rows, which
are only known by decoding, so with it the driver decodes the batch's records once more
to count (the cut may fall inside a record: ``end.row > 0``). :func:`plan_slices` then cuts
``[start, end)`` into at most ``partitions`` contiguous :class:`LogSlice` s of about equal
payload bytes, cut at record boundaries.

Reading (executors). :func:`read_slice` opens its own log (task directory or HTTP
connection), reads the slice's records one at a time, decodes each into change blocks
(:func:`headwater.changes.decode_blocks`: one per rows event; with ``raw``, the rows of a
plain rows event whose columns ``render_raw`` covers are kept as the event's bytes and
only counted, other rows as value tuples) and yields ``pyarrow.RecordBatch`` es of the
change schema
(:func:`headwater.changes.schema.change_arrow_schema`; with the ``columns`` option only
those columns, :func:`slice_schema`) of at most :data:`BATCH_ROWS` rows,
the same rows as :func:`headwater.changes.decode_record` would give (a differential test
holds the two equal). The JSON images are rendered in C straight into the batch's Arrow
buffers (``headwater._native._imagejson``, the same text as the Python path, which runs
where the extension is not built; tests/unit/spark/test_imagejson.py): from the rows
event's bytes, with no Python object per value, where ``render_raw`` can (integers,
floats, DECIMAL, temporals, bytes and utf8/ascii/latin1 text; it declines wherever its
text could differ, and the rows are then decoded; tests/unit/spark/test_rowjson.py),
else from the decoded value tuples (``render_block``). Memory is one
record plus one batch: a large transaction is stored as chunk records and a slice
boundary may fall between its chunks (or inside one, at a row); every row carries
``sequence`` (``seq << 24 | row``) and its position, so order across slices is
recoverable.

Invariants: slices of one batch are disjoint, contiguous and cover exactly ``[start,
end)``; a change is in the slice whose range holds its ``(seq, row)``; slices are small
picklable values (options and two offsets) holding no open handle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import orjson
from pyspark.sql.datasource import InputPartition

from headwater.binlog.dump import _escape_surrogates, json_default, printable_name
from headwater.binlog.framing import FormatDescription
from headwater.changes import ChangeBlock, ChangeRow, SchemaLookup, decode_blocks, decode_record
from headwater.changes.schema import CHANGE_COLUMNS, change_arrow_schema, image_json
from headwater.changes.sequence import sequence_of
from headwater.gcpause import gc_paused
from headwater.position import Position
from headwater.spark.logaccess import LocalLog, open_log
from headwater.spark.offsets import LogOffset, SourceOptions
from headwater.store import Record
from headwater.store.record import RecordHead

if TYPE_CHECKING:
    import pyarrow

    from headwater._native._imagejson import JsonColumns
    from headwater.spark.logaccess import HttpLog

try:  # the C image renderer (setup.py builds it with the package)
    from headwater._native._imagejson import (
        JsonColumns as _JsonBuilder,
        render_block as _render_block,
        render_raw as _render_raw,
    )
except ImportError:  # pragma: no cover - a build without the extension
    _render_block = None  # type: ignore[assignment]
    _render_raw = None  # type: ignore[assignment]
    _JsonBuilder = None  # type: ignore[assignment,misc]

__all__ = [
    "BATCH_ROWS",
    "LogSlice",
    "Scan",
    "SliceLog",
    "plan_slices",
    "read_slice",
    "scan_batch",
    "slice_blocks",
    "slice_schema",
]

#: Rows per Arrow record batch yielded by :func:`read_slice`.
BATCH_ROWS = 4096


class LogSlice(InputPartition):
    """One input partition: the changes from ``lo`` up to, not including, ``hi``.

    ``lo``/``hi`` are ``(seq, row)``; ``index`` is the slice's place in its batch.
    """

    def __init__(
        self, options: SourceOptions, index: int, lo: tuple[int, int], hi: tuple[int, int]
    ) -> None:
        super().__init__((lo, hi))
        self.options = options
        self.index = index
        self.lo = lo
        self.hi = hi


@dataclass(slots=True)
class Scan:
    """What :func:`scan_batch` found: the batch's end, and the payload size of each wanted
    record in ``[start, end)`` (``(seq, bytes)``, in order) for balancing slices."""

    end: LogOffset
    sizes: list[tuple[int, int]]
    #: a read limit ended the batch before the scan's target
    cut: bool = False


def changes_of(record: Record, options: SourceOptions, log: LocalLog | HttpLog) -> list[ChangeRow]:
    """The record's changes, indexed as offsets count them (before the ``ddl`` option)."""
    want = None if options.tables.patterns is None else options.tables
    return decode_record(
        record,
        source=options.source_name,
        fde=log.fde,
        schema=log.schema,
        want=want,
        want_ddl=options.tables.wants_ddl,
    )


def _emitted(
    changes: Sequence[ChangeRow], options: SourceOptions, lo: int, hi: int | None = None
) -> list[int]:
    """Indexes in ``[lo, hi)`` of the changes the source delivers (the ``ddl`` option)."""
    stop = len(changes) if hi is None else min(hi, len(changes))
    return [i for i in range(lo, stop) if options.ddl or changes[i].op != "ddl"]


def scan_batch(
    log: LocalLog | HttpLog,
    options: SourceOptions,
    start: LogOffset,
    target: int,
    *,
    max_rows: int | None = None,
    max_bytes: int | None = None,
    resume: Scan | None = None,
) -> Scan:
    """Walk ``[start, target)`` (``target`` a record seq) and choose the batch's end.

    Without limits the end is ``(target, 0)``. With them the batch stops before the record
    that would exceed ``max_bytes`` (never before the first) or at the row that would
    exceed ``max_rows`` (at least one row is taken when there is one). An end equal to
    ``start`` means no new data. Raises what the log raises (PositionNotRetainedError).

    ``resume`` (no row limit): this function's earlier result for the same ``start`` and
    ``max_bytes`` and a nearer target; the walk goes on from where it stopped (the source
    plans a burst while it lands: module docstring of source.py, "Bursts").
    """
    sizes: list[tuple[int, int]] = []
    if start.seq >= target:
        return Scan(start, sizes)
    if max_rows is None:
        return _scan_heads(log, options, start, target, max_bytes, resume)
    rows = nbytes = 0
    last: Position | None = start.last_position
    for rec in log.records(start.seq, target):
        if not options.tables.record_wanted(rec.tables):
            last = rec.position
            continue
        size = len(rec.payload)
        if max_bytes is not None and sizes and nbytes + size > max_bytes:
            return Scan(LogOffset(rec.seq, 0, last), sizes, cut=True)
        if max_rows is not None:
            first = start.row if rec.seq == start.seq else 0
            emitted = _emitted(changes_of(rec, options, log), options, first)
            room = max_rows - rows
            if len(emitted) > room:
                sizes.append((rec.seq, size))
                return Scan(LogOffset(rec.seq, emitted[room], rec.position), sizes, cut=True)
            rows += len(emitted)
        sizes.append((rec.seq, size))
        nbytes += size
        last = rec.position
    return Scan(LogOffset(target, 0, last), sizes)


def _scan_heads(
    log: LocalLog | HttpLog,
    options: SourceOptions,
    start: LogOffset,
    target: int,
    max_bytes: int | None,
    resume: Scan | None = None,
) -> Scan:
    """:func:`scan_batch` without a row limit: from the record headers alone
    (:meth:`~headwater.spark.logaccess.LocalLog.heads`: no payload built, one
    ``record_wanted`` per distinct table list, a Position only for the batch's end),
    from where ``resume`` stopped when it is a scan of the range's beginning."""
    first, last0 = start.seq, start.last_position
    sizes: list[tuple[int, int]] = []
    nbytes = 0
    if resume is not None and resume.end.row == 0 and first <= resume.end.seq <= target:
        if resume.cut:
            return resume
        first, last0 = resume.end.seq, resume.end.last_position
        sizes = list(resume.sizes)
        nbytes = sum(size for _seq, size in sizes)
    prev: RecordHead | None = None  # the last record before the end
    wanted: dict[tuple[tuple[str, int], ...], bool] = {}
    matcher = options.tables
    every = matcher.patterns is None
    for head in log.heads(first, target):
        tables = head.tables
        if not every:
            ok = wanted.get(tables)
            if ok is None:
                ok = wanted[tables] = matcher.record_wanted(tables)
            if not ok:
                prev = head
                continue
        size = head.size
        if max_bytes is not None and sizes and nbytes + size > max_bytes:
            last = last0 if prev is None else prev.position
            return Scan(LogOffset(head.seq, 0, last), sizes, cut=True)
        sizes.append((head.seq, size))
        nbytes += size
        prev = head
    return Scan(LogOffset(target, 0, last0 if prev is None else prev.position), sizes)


def plan_slices(
    options: SourceOptions,
    start: LogOffset,
    end: LogOffset,
    sizes: Sequence[tuple[int, int]],
    count: int,
) -> list[LogSlice]:
    """Cut ``[start, end)`` into at most ``count`` slices of about equal payload bytes,
    each of at least ``options.min_partition_bytes`` (one slice when the range holds less).

    ``sizes`` are the wanted records of the range (:class:`Scan`); cuts fall at record
    starts strictly inside the range. No wanted record: no slice (nothing to read).
    """
    if start.key() >= end.key() or not sizes:
        return []
    total = sum(size for _seq, size in sizes)
    if options.min_partition_bytes:
        count = max(1, min(count, total // options.min_partition_bytes))
    cuts: list[tuple[int, int]] = []
    acc = 0
    for seq, size in sizes:
        share = total * (len(cuts) + 1) / count
        if acc >= share and len(cuts) < count - 1 and start.key() < (seq, 0) < end.key():
            cuts.append((seq, 0))
        acc += size
    bounds = [start.key(), *cuts, end.key()]
    return [LogSlice(options, i, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


#: The columns that hold one value per rows event (per :meth:`_Columns.add_block` call):
#: all but ``sequence`` and the four JSON images.
_RUN_COLUMNS = tuple(
    name
    for name, _kind in CHANGE_COLUMNS
    if name not in ("sequence", "key", "before", "after", "before_key")
)


class _Columns:
    """One Arrow record batch being built, a block of rows at a time.

    Columns that are the same for every row of a rows event (names, position, commit
    time, transaction, ``sql``) are kept as one value per block (a run) and expanded in
    Arrow at :meth:`batch` (``take`` of the runs' values by each row's run index), not as
    a Python list per row; ``sequence`` is one arange per run. Images go from the
    decoder's value tuples to JSON text without a dict (:func:`_images`: in C when built),
    and the ``commit_ts`` column is built from ``ts_us`` integers, not datetimes."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, ...]] = []  # _RUN_COLUMNS values of each block
        self.counts: list[int] = []  # rows of each block
        self.firsts: list[int] = []  # the sequence of each block's first row
        # key, before, after, before_key: Arrow buffers built in C, or lists of text
        self.images: _ImageOut = ([], [], [], []) if _JsonBuilder is None else _JsonBuilder()
        self.rows = 0

    def add_block(self, block: ChangeBlock, record: Record, source: str, lo: int, hi: int) -> None:
        """Rows ``[lo, hi)`` of ``block`` (indexes within the block) of ``record``."""
        p = block.position
        gtid_text: str = record.gtid
        ddl = block.op == "ddl"
        self.runs.append(
            (
                source,
                # Arrow strings must be UTF-8: undecodable name bytes (surrogate escapes)
                # as \xNN.
                printable_name(block.database),
                printable_name(block.table),
                block.op,
                record.ts_us,
                record.ts_us,
                p.change_id,
                p.file_num,
                p.offset,
                p.event_index,
                gtid_text,
                gtid_text or f"{p.file_num}:{p.offset}",
                record.schema_version,
                printable_name(block.sql) if ddl and block.sql is not None else None,
            )
        )
        self.counts.append(hi - lo)
        self.firsts.append(sequence_of(record.seq, block.first) + lo)
        if ddl:
            _append(self.images, (None, None, None, None))
        else:
            _images(block, lo, hi, self.images)
        self.rows += hi - lo

    def batch(self, schema: pyarrow.Schema) -> pyarrow.RecordBatch:
        """The batch of ``schema``'s columns (all of the change schema's, or those the
        ``columns`` option names: the others are not built)."""
        import numpy as np
        import pyarrow as pa

        wanted = set(schema.names)
        counts = np.array(self.counts, dtype=np.int64)
        which = pa.array(np.repeat(np.arange(len(counts), dtype=np.int64), counts))
        arrays: dict[str, pyarrow.Array] = dict(
            zip(("key", "before", "after", "before_key"), _arrow(self.images), strict=True)
        )
        if "sequence" in wanted:
            # Row i of run r (which starts at row s_r) has sequence first_r + i - s_r.
            starts = np.cumsum(counts) - counts
            sequence = np.repeat(np.array(self.firsts, dtype=np.int64) - starts, counts)
            sequence += np.arange(self.rows, dtype=np.int64)
            arrays["sequence"] = pa.array(sequence, type=pa.int64())
        # One value per run (zip: the runs' tuples as columns in one C loop); runs of one
        # row each (one-row transactions) are the rows already. A column of one value
        # for the whole batch (the source, a table's names, the binlog file, no sql) is
        # that value repeated in Arrow, not converted from a Python object per run.
        runs = list(zip(*self.runs, strict=True)) if self.runs else [()] * len(_RUN_COLUMNS)
        one_each = len(self.runs) == self.rows
        for j, name in enumerate(_RUN_COLUMNS):
            if name in wanted:
                column, kind = runs[j], schema.field(name).type
                if column and column.count(column[0]) == len(column):
                    first = column[0]
                    key = (name, first, self.rows)
                    repeated = _REPEATS.get(key)
                    if repeated is None:
                        if len(_REPEATS) >= 256:
                            _REPEATS.clear()
                        repeated = _REPEATS[key] = (
                            pa.nulls(self.rows, kind)
                            if first is None
                            else pa.repeat(pa.scalar(first, kind), self.rows)
                        )
                    arrays[name] = repeated
                    continue
                values = pa.array(column, type=kind)
                arrays[name] = values if one_each else values.take(which)
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)


#: A run column's one value repeated for a whole batch, by column, value and rows: the
#: same few arrays (the source, a table's names, the binlog file, no sql) for batch after
#: batch of full size, built once (Arrow arrays are immutable; about 30 us each to build).
_REPEATS: dict[tuple[str, Any, int], pyarrow.Array] = {}


def _key_picks(key_names: tuple[str, ...] | None, names: list[str]) -> list[tuple[str, int]] | None:
    """``(name, index in the image)`` of each key column (``-1``: not in the image).
    Remembered per key and column names: every rows event of a table asks the same (a
    one-row transaction per event: once per row otherwise)."""
    if key_names is None:
        return None
    at = (key_names, tuple(names))
    picks = _PICKS.get(at)
    if picks is None:
        if len(_PICKS) >= 1024:
            _PICKS.clear()
        where = {name: i for i, name in enumerate(names)}
        picks = _PICKS[at] = [(k, where.get(k, -1)) for k in key_names]
    return picks


#: :func:`_key_picks` by key names and column names (read only by the renderers).
_PICKS: dict[tuple[tuple[str, ...], tuple[str, ...]], list[tuple[str, int]]] = {}


def _key_of(picks: list[tuple[str, int]], values: Sequence[Any]) -> dict[str, Any]:
    return {k: None if i < 0 else values[i] for k, i in picks}


#: A JSON column's value: the text, or None.
_Json = str | None
#: The JSON columns of a batch being built: ``key``, ``before``, ``after``, ``before_key``.
_JsonColumns = tuple[list[_Json], list[_Json], list[_Json], list[_Json]]
#: Where :func:`_images` appends: lists, or the C builder of their Arrow buffers.
_ImageOut: TypeAlias = "_JsonColumns | JsonColumns"


def _append(out: _ImageOut, texts: tuple[_Json, _Json, _Json, _Json]) -> None:
    """One row's four texts."""
    for i, text in enumerate(texts):
        if isinstance(out, tuple):
            out[i].append(text)
        else:
            out.append(i, text)


def _arrow(out: _ImageOut) -> list[pyarrow.Array]:
    """The four columns as Arrow string arrays."""
    import pyarrow as pa

    if isinstance(out, tuple):
        return [pa.array(column, type=pa.string()) for column in out]
    return [
        pa.StringArray.from_buffers(
            n, pa.py_buffer(offsets), pa.py_buffer(data),
            None if valid is None else pa.py_buffer(valid), nulls,
        )
        for n, nulls, offsets, data, valid in out.take()
    ]  # fmt: skip


def _images(block: ChangeBlock, lo: int, hi: int, columns: _ImageOut) -> None:
    """The JSON columns of rows ``[lo, hi)`` of a rows block: the same text as
    :func:`~headwater.changes.schema.image_json` of :class:`ChangeRow` images, and
    ``before_key`` as :func:`~headwater.changes.schema.before_key`.

    Rendered in C (``headwater._native._imagejson``, the same text: a differential test
    holds them equal) when the module is built and the block's column names are distinct;
    else by :func:`_images_python`. A block still holding its rows as bytes
    (``block.raw``: :func:`read_slice`) is rendered from them (``render_raw``: no value
    objects) unless that declines; then its rows are decoded and rendered as any other."""
    if _key_from_before(block):
        block.materialize()  # (the renderers in C take an update's key from one image)
        _images_out(block, lo, hi, columns)
        return
    if block.raw is not None and _render_raw is not None:
        raw = block.raw
        picks, old = _block_picks(block)
        if _render_raw(
            block.op, raw.shapes[0], raw.shapes[1], raw.body, raw.at, raw.end, lo, hi,
            block.before_names, block.after_names, picks, old, columns,
        ):  # fmt: skip
            return
    block.materialize()
    if _render_block is not None:
        picks, old = _block_picks(block)
        if _render_block(
            block.op, block.rows, lo, hi, block.before_names, block.after_names, picks, old,
            columns, _plain_json, _escaped_json,
        ):  # fmt: skip
            return
    _images_out(block, lo, hi, columns)


def _images_out(block: ChangeBlock, lo: int, hi: int, columns: _ImageOut) -> None:
    """:func:`_images_python` into either kind of output."""
    if isinstance(columns, tuple):
        _images_python(block, lo, hi, columns)
        return
    texts: _JsonColumns = ([], [], [], [])
    _images_python(block, lo, hi, texts)
    for row in zip(*texts, strict=True):
        _append(columns, row)


def _key_from_before(block: ChangeBlock) -> bool:
    """Whether an update's after image lacks a key column its before image holds: a
    MINIMAL after image holds only the columns the statement set (MariaDB sql/table.cc,
    ``TABLE::mark_columns_per_binlog_row_image``), so an unchanged key is only in the
    before image. The key is then taken column by column (:func:`_block_json`)."""
    if block.op != "update":
        return False
    picks = _key_picks(block.key_names, block.after_names)
    if not picks or all(i >= 0 for _k, i in picks):
        return False
    before = dict(_key_picks(block.key_names, block.before_names) or ())
    return any(i < 0 and before.get(k, -1) >= 0 for k, i in picks)


def _block_picks(
    block: ChangeBlock,
) -> tuple[list[tuple[str, int]] | None, list[tuple[str, int]] | None]:
    """The key's picks in the image the key comes from, and for an update the before
    image's when ``before_key`` can be known (every key column in it), else None."""
    kind = block.op
    if kind != "update":
        names = block.after_names if kind == "insert" else block.before_names
        return _key_picks(block.key_names, names), None
    picks = _key_picks(block.key_names, block.after_names)
    old = _key_picks(block.key_names, block.before_names)
    if picks and old and any(i < 0 for _k, i in old):
        old = None
    return picks, old


def _images_python(block: ChangeBlock, lo: int, hi: int, columns: _JsonColumns) -> None:
    """:func:`_images` in Python: one dict per image through orjson.

    orjson refuses strings holding surrogate escapes (bytes invalid in the column's
    charset) with a TypeError; then the block is done again through ``image_json``,
    which renders them."""
    marks = [len(column) for column in columns]
    try:
        _block_json(block, lo, hi, columns, _fast_json)
    except TypeError:
        for column, mark in zip(columns, marks, strict=True):
            del column[mark:]
        _block_json(block, lo, hi, columns, image_json)


def _fast_json(image: dict[str, Any]) -> str:
    return orjson.dumps(image, default=json_default).decode()


def _plain_json(value: Any) -> str:
    """One value as orjson renders it inside an image (the C renderer's callback for the
    types it does not render itself)."""
    return orjson.dumps(value, default=json_default).decode()


def _escaped_json(value: Any) -> str:
    """One value as ``render_json`` renders it inside an image orjson refused (the C
    renderer's callback in that case): strings with surrogate escapes as
    ``{"undecodable_text_base64": ...}``."""
    return orjson.dumps(_escape_surrogates(value), default=json_default).decode()


def _block_json(
    block: ChangeBlock,
    lo: int,
    hi: int,
    columns: _JsonColumns,
    dumps: Callable[[dict[str, Any]], _Json],
) -> None:
    key, before, after, old_key = columns
    rows = block.rows[lo:hi]
    m = len(rows)
    kind = block.op
    if kind != "update":
        names = block.after_names if kind == "insert" else block.before_names
        picks = _key_picks(block.key_names, names)
        images = [dumps(dict(zip(names, row, strict=True))) for row in rows]
        if picks is None:
            keys: list[_Json] = [None] * m
        elif len(picks) == 1 and picks[0][1] >= 0:  # the usual one-column key
            k, i = picks[0]
            keys = [dumps({k: row[i]}) for row in rows]
        else:
            keys = [dumps(_key_of(picks, row)) for row in rows]
        key += keys
        (after if kind == "insert" else before).extend(images)
        (before if kind == "insert" else after).extend([None] * m)
        old_key += [None] * m
        return
    # An update: the key is the after image's, a column it lacks the before image's
    # (:func:`_key_from_before`); before_key is set when it changed.
    bnames, anames = block.before_names, block.after_names
    picks = _key_picks(block.key_names, anames)
    # before_key needs every key column in the before image (a MINIMAL image may lack
    # them: then it is unknown, None).
    old_picks = _key_picks(block.key_names, bnames)
    both = None
    if picks and old_picks and any(i < 0 for _k, i in picks):
        both = [(k, i, j) for (k, i), (_k, j) in zip(picks, old_picks, strict=True)]
    if picks and old_picks and any(i < 0 for _k, i in old_picks):
        old_picks = None
    for b, a in rows:
        before.append(dumps(dict(zip(bnames, b, strict=True))))
        after.append(dumps(dict(zip(anames, a, strict=True))))
        if picks is None:
            key.append(None)
            old_key.append(None)
            continue
        if both is None:
            new = _key_of(picks, a)
        else:
            new = {k: a[i] if i >= 0 else None if j < 0 else b[j] for k, i, j in both}
        key.append(dumps(new))
        old = None if not new or old_picks is None else _key_of(old_picks, b)
        old_key.append(None if old is None or old == new else dumps(old))


class SliceLog(Protocol):
    """What decoding a slice reads: the records of a seq range, the FDE and the schema
    history (:class:`~headwater.spark.logaccess.LocalLog`, ``HttpLog``, or the driver
    path's records already read)."""

    fde: FormatDescription | None
    schema: SchemaLookup | None

    def records(self, first: int, end: int) -> Iterator[Record]: ...

    def close(self) -> None: ...


def read_slice(part: LogSlice, log: SliceLog | None = None) -> Iterator[pyarrow.RecordBatch]:
    """Decode one slice into Arrow record batches (runs on an executor; opens its own log,
    unless given ``log``, which it leaves open).

    The cyclic GC is paused meanwhile (:mod:`headwater.gcpause`: decoding allocates a
    few dicts and strings per row and no cycles; about a quarter of the time otherwise)."""
    with gc_paused():
        yield from _read_slice(part, log)


def slice_blocks(
    part: LogSlice, log: SliceLog, *, ddl: bool, raw: bool = False
) -> Iterator[tuple[Record, ChangeBlock, int, int]]:
    """The slice's change blocks with the rows each holds of it: ``(record, block, lo,
    hi)``, rows ``[lo, hi)`` (indexes within the block, never empty) of the changes in
    ``[part.lo, part.hi)``; DDL blocks only with ``ddl``; with ``raw``, rows events whose
    images render from bytes keep them (``block.raw``, :func:`decode_blocks`). Shared by
    :func:`read_slice` and the replay's reader (:mod:`headwater.spark.asofread`)."""
    options = part.options
    (lo_seq, lo_row), (hi_seq, hi_row) = part.lo, part.hi
    end = hi_seq + 1 if hi_row > 0 else hi_seq
    want = None if options.tables.patterns is None else options.tables
    wanted: dict[tuple[tuple[str, int], ...], bool] = {}  # by table list (few distinct)
    for rec in log.records(lo_seq, end):
        if want is not None:
            ok = wanted.get(rec.tables)
            if ok is None:
                ok = wanted[rec.tables] = want.record_wanted(rec.tables)
            if not ok:
                continue
        blocks = decode_blocks(
            rec,
            source=options.source_name,
            fde=log.fde,
            schema=log.schema,
            want=want,
            want_ddl=options.tables.wants_ddl,
            raw=raw,
        )
        first = lo_row if rec.seq == lo_seq else 0
        stop = hi_row if rec.seq == hi_seq else None
        for block in blocks:
            # The block's rows in [first, stop) of the record's changes (_emitted).
            if block.op == "ddl" and not ddl:
                continue
            lo = max(first - block.first, 0)
            hi = len(block) if stop is None else min(stop - block.first, len(block))
            if lo < hi:
                yield rec, block, lo, hi


def slice_schema(options: SourceOptions) -> pyarrow.Schema:
    """The Arrow schema of a slice's batches: the change schema, or the columns of it that
    the ``columns`` option names (in the change schema's order)."""
    schema = change_arrow_schema()
    if options.columns is None:
        return schema
    import pyarrow as pa

    return pa.schema([f for f in schema if f.name in options.columns])


def _read_slice(part: LogSlice, given: SliceLog | None) -> Iterator[pyarrow.RecordBatch]:
    options = part.options
    schema = slice_schema(options)
    log = open_log(options) if given is None else given
    try:
        rows = _Columns()
        # The images straight from the rows events' bytes where render_raw can (_images).
        blocks = slice_blocks(part, log, ddl=options.ddl, raw=_render_raw is not None)
        for rec, block, lo, hi in blocks:
            while lo < hi:
                take = min(hi - lo, BATCH_ROWS - rows.rows)
                rows.add_block(block, rec, options.source_name, lo, lo + take)
                lo += take
                if rows.rows >= BATCH_ROWS:
                    yield rows.batch(schema)
                    rows = _Columns()
        if rows.rows:
            yield rows.batch(schema)
    finally:
        if given is None:
            log.close()
