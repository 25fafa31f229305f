"""Slicing the change log into input partitions, and decoding slices on executors.

Planning (driver). A batch or micro-batch is the changes from offset ``start`` up to, not
including, offset ``end`` (offsets.py: ``(seq, row)`` pairs). :func:`scan_batch` walks the
records of that range once, reading their headers and payload sizes (never decoding
unless a row limit needs counting) and, with read limits, picks ``end``:
``maxBytesPerTrigger`` counts record payload bytes (whole records; the first record is
always taken, so a batch moves forward); ``maxRowsPerTrigger`` counts change rows, which
are only known by decoding, so with it the driver decodes the batch's records once more
to count (the cut may fall inside a record: ``end.row > 0``). :func:`plan_slices` then cuts
``[start, end)`` into at most ``partitions`` contiguous :class:`LogSlice` s of about equal
payload bytes, cut at record boundaries.

Reading (executors). :func:`read_slice` opens its own log (task directory or HTTP
connection), reads the slice's records one at a time, decodes each into change blocks
(:func:`headwater.changes.decode_blocks`: one per rows event, the rows as value tuples)
and yields ``pyarrow.RecordBatch`` es of the change schema
(:func:`headwater.changes.schema.change_arrow_schema`) of at most :data:`BATCH_ROWS` rows,
the same rows as :func:`headwater.changes.decode_record` would give (a differential test
holds the two equal). Memory is one record plus one batch: a large transaction is
stored as chunk records and a slice boundary may fall between its chunks (or inside one,
at a row); every row carries ``sequence`` (``seq << 24 | row``) and its position, so order
across slices is recoverable.

Invariants: slices of one batch are disjoint, contiguous and cover exactly ``[start,
end)``; a change is in the slice whose range holds its ``(seq, row)``; slices are small
picklable values (options and two offsets) holding no open handle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql.datasource import InputPartition

from headwater.binlog.dump import json_default, printable_name
from headwater.changes import ChangeBlock, ChangeRow, decode_blocks, decode_record
from headwater.changes.schema import CHANGE_COLUMNS, change_arrow_schema, image_json
from headwater.changes.sequence import sequence_of
from headwater.gcpause import gc_paused
from headwater.position import Position
from headwater.spark.logaccess import LocalLog, open_log
from headwater.spark.offsets import LogOffset, SourceOptions
from headwater.store import Record

if TYPE_CHECKING:
    import pyarrow

    from headwater.spark.logaccess import HttpLog

__all__ = ["BATCH_ROWS", "LogSlice", "Scan", "plan_slices", "read_slice", "scan_batch"]

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
) -> Scan:
    """Walk ``[start, target)`` (``target`` a record seq) and choose the batch's end.

    Without limits the end is ``(target, 0)``. With them the batch stops before the record
    that would exceed ``max_bytes`` (never before the first) or at the row that would
    exceed ``max_rows`` (at least one row is taken when there is one). An end equal to
    ``start`` means no new data. Raises what the log raises (PositionNotRetainedError).
    """
    sizes: list[tuple[int, int]] = []
    if start.seq >= target:
        return Scan(start, sizes)
    rows = nbytes = 0
    last: Position | None = start.last_position
    for rec in log.records(start.seq, target):
        if not options.tables.record_wanted(rec.tables):
            last = rec.position
            continue
        size = len(rec.payload)
        if max_bytes is not None and sizes and nbytes + size > max_bytes:
            return Scan(LogOffset(rec.seq, 0, last), sizes)
        if max_rows is not None:
            first = start.row if rec.seq == start.seq else 0
            emitted = _emitted(changes_of(rec, options, log), options, first)
            room = max_rows - rows
            if len(emitted) > room:
                sizes.append((rec.seq, size))
                return Scan(LogOffset(rec.seq, emitted[room], rec.position), sizes)
            rows += len(emitted)
        sizes.append((rec.seq, size))
        nbytes += size
        last = rec.position
    return Scan(LogOffset(target, 0, last), sizes)


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


class _Columns:
    """One Arrow record batch being built, column by column, a block of rows at a time.

    Columns that are the same for every row of a rows event (names, position, commit
    time, transaction) are extended by the block, not appended per row; images go from
    the decoder's value tuples to JSON text through one dict each (no :class:`ChangeRow`),
    and the ``commit_ts`` column is built from ``ts_us`` integers, not datetimes."""

    def __init__(self) -> None:
        self.columns: list[list[Any]] = [[] for _ in CHANGE_COLUMNS]
        self.rows = 0

    def add_block(self, block: ChangeBlock, record: Record, source: str, lo: int, hi: int) -> None:
        """Rows ``[lo, hi)`` of ``block`` (indexes within the block) of ``record``."""
        (sources, database, table, op, ts_us, commit_ts, change_id, file_num, offset,
         event_index, gtid, txn_id, sequence, key, before, after, schema_version,
         sql, old_key) = self.columns  # fmt: skip
        m = hi - lo
        p = block.position
        gtid_text: str = record.gtid
        for column, value in (
            (sources, source),
            # Arrow strings must be UTF-8: undecodable name bytes (surrogate escapes) as \xNN.
            (database, printable_name(block.database)),
            (table, printable_name(block.table)),
            (op, block.op),
            (ts_us, record.ts_us),
            (commit_ts, record.ts_us),
            (change_id, p.change_id),
            (file_num, p.file_num),
            (offset, p.offset),
            (event_index, p.event_index),
            (gtid, gtid_text),
            (txn_id, gtid_text or f"{p.file_num}:{p.offset}"),
            (schema_version, record.schema_version),
        ):
            column += [value] * m
        first = sequence_of(record.seq, block.first)
        sequence += range(first + lo, first + hi)
        if block.op == "ddl":
            key.append(None)
            before.append(None)
            after.append(None)
            old_key.append(None)
            sql.append(None if block.sql is None else printable_name(block.sql))
        else:
            sql += [None] * m
            _images(block, lo, hi, (key, before, after, old_key))
        self.rows += m

    def batch(self, schema: pyarrow.Schema) -> pyarrow.RecordBatch:
        import pyarrow as pa

        arrays = [pa.array(col, type=f.type) for col, f in zip(self.columns, schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _key_picks(key_names: tuple[str, ...] | None, names: list[str]) -> list[tuple[str, int]] | None:
    """``(name, index in the image)`` of each key column (``-1``: not in the image)."""
    if key_names is None:
        return None
    where = {name: i for i, name in enumerate(names)}
    return [(k, where.get(k, -1)) for k in key_names]


def _key_of(picks: list[tuple[str, int]], values: Sequence[Any]) -> dict[str, Any]:
    return {k: None if i < 0 else values[i] for k, i in picks}


#: A JSON column's value: the text, or None.
_Json = str | None
#: The JSON columns of a batch being built: ``key``, ``before``, ``after``, ``before_key``.
_JsonColumns = tuple[list[_Json], list[_Json], list[_Json], list[_Json]]


def _images(block: ChangeBlock, lo: int, hi: int, columns: _JsonColumns) -> None:
    """The JSON columns of rows ``[lo, hi)`` of a rows block: the same text as
    :func:`~headwater.changes.schema.image_json` of :class:`ChangeRow` images, and
    ``before_key`` as :func:`~headwater.changes.schema.before_key`.

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
    # An update: the key is the after image's; before_key is set when it changed.
    bnames, anames = block.before_names, block.after_names
    picks = _key_picks(block.key_names, anames)
    # before_key needs every key column in the before image (a MINIMAL image may lack
    # them: then it is unknown, None).
    old_picks = _key_picks(block.key_names, bnames)
    if picks and old_picks and any(i < 0 for _k, i in old_picks):
        old_picks = None
    for b, a in rows:
        before.append(dumps(dict(zip(bnames, b, strict=True))))
        after.append(dumps(dict(zip(anames, a, strict=True))))
        if picks is None:
            key.append(None)
            old_key.append(None)
            continue
        new = _key_of(picks, a)
        key.append(dumps(new))
        old = None if not new or old_picks is None else _key_of(old_picks, b)
        old_key.append(None if old is None or old == new else dumps(old))


def read_slice(part: LogSlice) -> Iterator[pyarrow.RecordBatch]:
    """Decode one slice into Arrow record batches (runs on an executor; opens its own log).

    The cyclic GC is paused meanwhile (:mod:`headwater.gcpause`: decoding allocates a
    few dicts and strings per row and no cycles; about a quarter of the time otherwise)."""
    with gc_paused():
        yield from _read_slice(part)


def _read_slice(part: LogSlice) -> Iterator[pyarrow.RecordBatch]:
    options = part.options
    (lo_seq, lo_row), (hi_seq, hi_row) = part.lo, part.hi
    schema = change_arrow_schema()
    log = open_log(options)
    try:
        rows = _Columns()
        end = hi_seq + 1 if hi_row > 0 else hi_seq
        want = None if options.tables.patterns is None else options.tables
        for rec in log.records(lo_seq, end):
            if not options.tables.record_wanted(rec.tables):
                continue
            blocks = decode_blocks(
                rec,
                source=options.source_name,
                fde=log.fde,
                schema=log.schema,
                want=want,
                want_ddl=options.tables.wants_ddl,
            )
            first = lo_row if rec.seq == lo_seq else 0
            stop = hi_row if rec.seq == hi_seq else None
            for block in blocks:
                # The block's rows in [first, stop) of the record's changes (_emitted).
                if block.op == "ddl" and not options.ddl:
                    continue
                lo = max(first - block.first, 0)
                hi = len(block) if stop is None else min(stop - block.first, len(block))
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
        log.close()
