"""From framed binlog events to committed transactions, to change log records.

:class:`Grouper` is fed the events of one dump in order (``feed``) and appends one store
record per committed transaction, or a run of bounded chunks for a large one. It decodes
no rows: it reads event headers and type codes, the few control events that frame a
transaction (GTID, QUERY ``BEGIN``/``COMMIT``/DDL, XID) and the names in TABLE_MAPs.

Transaction boundaries:

* start: a GTID event (MariaDB ``MARIADB_GTID``, MySQL ``GTID``/``ANONYMOUS_GTID``), or, in
  a log without GTIDs, a ``BEGIN`` QUERY (or any other event outside a transaction);
* end: XID, a ``COMMIT``/``ROLLBACK`` QUERY, MySQL's XA_PREPARE; a DDL statement is a
  transaction of its own (MariaDB flags its GTID *standalone*; MySQL's GTID is followed by
  the DDL QUERY instead of ``BEGIN``);
* control events between transactions (ROTATE, FORMAT_DESCRIPTION, GTID lists,
  checkpoints, heartbeats) are never stored.

Record invariants (``headwater.changes`` describes the payload):

* ``position`` is (change_id, number of the binlog file holding the transaction's first
  event, offset of that event, index of the record's first event among the transaction's
  *stored* events); every chunk after the first repeats, at its start, the TABLE_MAPs of
  the transaction seen so far, and its ``event_index`` is the index of its first real
  event minus the number of TABLE_MAPs it repeats, so that index + position in the payload
  is each real event's index in the transaction (``headwater.changes``);
* ``ts_us``: MySQL 8's ``immediate_commit_timestamp`` when the GTID event carries it,
  else the header timestamp (seconds) of the event that ends the transaction times 10**6;
  chunks appended before the end is seen carry the first event's header time instead (the
  commit time is not known yet; the last chunk has the commit time);
* ``tables``: ``(db.table, n)`` where ``n`` counts the rows of the table kept in the
  record (an UPDATE's before/after pair is one row), counted by walking the row images'
  value lengths without decoding a value (``headwater.binlog.rows.count_rows``); the
  chunks of a transaction each count their own, so they add up to the transaction's;
* filtered tables cost no decoding: their TABLE_MAP and rows events are dropped on the
  table id; a transaction left without rows events or DDL is not stored, but it is still
  reported (``Committed.stored`` False) so the resume position advances past it;
* memory is bounded by ``chunk_bytes`` (plus one event) whatever the transaction's size:
  a chunk is appended as soon as it is full and dropped from here.

Compiled fast path: :meth:`Grouper.native_scan` hands the dump's receive buffer, at a
transaction boundary, to :class:`headwater._native.Scanner`, which builds the records of
the common MariaDB transactions (GTID, TABLE_MAPs of registered shapes, rows events, XID)
itself, byte for byte as this module would, and appends them with
``ChangeLog.append_frames``; a run of them is reported as one :class:`Committed` (the
last transaction's, ``transactions`` counting them). A TABLE_MAP shape is registered the
first time this module sees it (kept, not watched, its row images countable); whatever
the scanner does not take -- DDL, QUERY-framed transactions, new shapes, filtered tables,
chunked transactions, transactions the resume checks may skip -- comes here event by
event, as before. ``HEADWATER_NATIVE=0`` in the environment turns the fast path off.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from headwater._native import SHAPE, SLOW, Scanner
from headwater.binlog._columns import value_width
from headwater.binlog.codec import row_decoder_for
from headwater.binlog.constants import EventType
from headwater.binlog.events import DecodeContext, GtidEvent, QueryEvent, parse_event
from headwater.binlog.framing import FormatDescription, RawEvent
from headwater.binlog.rows import count_rows, row_counter
from headwater.binlog.tablemap import TableMap, parse_table_map
from headwater.changes import is_ddl
from headwater.errors import BinlogFormatError
from headwater.position import MariadbGtid, MysqlGtid, Position, binlog_file_number
from headwater.reader.filters import ROWS_KIND, TableFilter
from headwater.store import FIRST_CHUNK, LAST_CHUNK, Record

__all__ = ["Committed", "Grouper", "RecordSink"]

log = logging.getLogger(__name__)

_E = EventType
_LEN = struct.Struct("<I")
_pack_len = _LEN.pack
_MARIADB_GTID = _E.MARIADB_GTID
_GTID_TYPES = frozenset((_E.GTID, _E.ANONYMOUS_GTID, _E.GTID_TAGGED))
_XID = _E.XID
_QUERY = _E.QUERY
_TABLE_MAP = _E.TABLE_MAP
_FDE = _E.FORMAT_DESCRIPTION
_ROWS = frozenset(ROWS_KIND)
#: Events that are never part of a transaction.
_CONTROL = frozenset(
    (
        _E.ROTATE,
        _E.FORMAT_DESCRIPTION,
        _E.STOP,
        _E.HEARTBEAT,
        _E.HEARTBEAT_V2,
        _E.PREVIOUS_GTIDS,
        _E.MARIADB_GTID_LIST,
        _E.BINLOG_CHECKPOINT,
        _E.START_ENCRYPTION,
    )
)
_FL_STANDALONE = 1
_ANNOTATE = _E.ANNOTATE_ROWS
_XA_PREPARE = _E.XA_PREPARE
_ENDS = frozenset((_XID, _XA_PREPARE))
_MARIADB_GTID_HEAD = struct.Struct("<QIB")  # seq_no, domain_id, flags (after the header)
_unpack_mariadb_gtid = _MARIADB_GTID_HEAD.unpack_from
_BEGIN = (b"BEGIN", b"XA START", b"START TRANSACTION")
#: frame buffers kept for reuse (about 4 MiB each, Grouper._out_buffer): enough to cycle
#: past the store's memory tail (32 MiB by default) without pinning much more
_OUT_POOL = 16
_END = (b"COMMIT", b"ROLLBACK", b"XA END", b"XA PREPARE")


class RecordSink(Protocol):
    """Where records go: a ``ChangeLog`` (each method returns the last record's seq)."""

    def append_nowait(self, record: Record) -> int: ...

    def append_many(self, records: Sequence[Record]) -> int: ...


class FrameSink(RecordSink, Protocol):
    """A sink that also takes the native scanner's frames (``ChangeLog``)."""

    def append_frames(self, frames: memoryview, gtids: list[str] | None = None) -> int: ...

    @property
    def next_seq(self) -> int: ...


@dataclass(slots=True)
class Committed:
    """One transaction the grouper finished (stored or dropped by the filters)."""

    position: Position
    gtid: str
    gtid_obj: MariadbGtid | MysqlGtid | None
    ts_us: int
    stored: bool
    last_seq: int
    records: int
    next_file: str
    next_offset: int
    is_ddl: bool
    #: raw (TABLE_MAP, rows event) pairs of the watched table (heartbeats)
    watched: list[tuple[bytes, bytes]] = field(default_factory=list)
    #: the transaction was skipped (``skip`` said it is already stored or before the start)
    skipped: bool = False
    #: transactions this reports: more than 1 for a run of the native scanner, whose
    #: fields are those of its last transaction (all stored, none DDL or watched)
    transactions: int = 1


def _table_names(body: memoryview, id_size: int) -> tuple[int, str, str]:
    """Table id, database and table of a TABLE_MAP body, without parsing the rest."""
    table_id = int.from_bytes(body[:id_size], "little")
    p = id_size + 2
    n = body[p]
    db = bytes(body[p + 1 : p + 1 + n]).decode("utf-8", "replace")
    p += n + 2
    m = body[p]
    table = bytes(body[p + 1 : p + 1 + m]).decode("utf-8", "replace")
    return table_id, db, table


@dataclass(slots=True)
class _Counter:
    """Row counting for one TABLE_MAP shape: the parsed map and the count function of
    the last rows header seen (``type_code`` -1: none)."""

    table_map: TableMap
    type_code: int = -1
    prefix: bytes = b""
    fn: Callable[[memoryview | bytes, int, int], int] = lambda _b, _p, _e: 0


class Grouper:
    """Groups one stream's events into records (see the module docstring).

    ``on_ddl(query, position) -> schema version`` is called for every DDL statement before
    its record is built; ``schema_version`` is stored in each record. ``accept(committed)``
    may veto storing a finished transaction (resume de-duplication, start-time filter):
    it is asked before the last record is appended, only for transactions that fit in one
    record; a chunked transaction is always new (vetoed transactions are checked at their
    GTID/first event through ``skip_at_start``).

    ``batch``: the record that ends a transaction is kept in :attr:`pending` (and
    ``Committed.last_seq`` is 0) until :meth:`flush` appends them all with one
    ``append_many``; the task flushes before each socket read and before saving its
    state. A chunk appended mid-transaction flushes the pending records first.
    """

    def __init__(
        self,
        sink: RecordSink,
        *,
        table_filter: TableFilter | None = None,
        chunk_bytes: int = 8 * 1024 * 1024,
        change_id: int = 0,
        on_ddl: Callable[[QueryEvent, Position], int] | None = None,
        skip: Callable[[Position, str, MariadbGtid | MysqlGtid | None, int], bool] | None = None,
        watch: tuple[str, str] | None = None,
        on_table_map: Callable[[bytes, Position], int | None] | None = None,
        batch: bool = False,
    ) -> None:
        self.sink = sink
        self.batch = batch
        #: whole records not appended yet (``batch``): appended by :meth:`flush`
        self.pending: list[Record] = []
        self.filter = table_filter or TableFilter()
        self.chunk_bytes = chunk_bytes
        self.change_id = change_id
        self.on_ddl = on_ddl
        self.skip = skip
        self.watch = watch
        self.on_table_map = on_table_map
        self._seen_maps: set[bytes] = set()
        # TABLE_MAP body -> (table id, db.table, kept, counter, watched)
        self._map_info: dict[bytes, tuple[int, str, bool, _Counter | None, bool]] = {}
        self.count_errors = 0
        self.schema_version = 0
        self.fde_raw = b""
        self.ctx = DecodeContext()
        self.fde: FormatDescription | None = None
        self._id_size = 6
        self._file_nums: dict[str, int] = {}
        self._in_txn = False
        self.skipped = 0
        self.chunks = 0
        self._dropped_rows = self.filter.dropped_rows_types
        #: the compiled fast path (None: the sink cannot take frames)
        native = hasattr(sink, "append_frames") and os.environ.get("HEADWATER_NATIVE") != "0"
        self.scanner: Scanner | None = Scanner() if native else None
        self._dropped_mask = bytes(t in self._dropped_rows for t in range(256))
        self.native_transactions = 0
        self._registered: set[bytes] = set()  # shapes the scanner knows
        self._outs: list[bytearray] = []  # frame buffers (_out_buffer)
        self._reset()

    # -- state of the transaction under way ----------------------------------------------------

    def _reset(self) -> None:
        """Forget the transaction under way (a new one begins, or the stream broke)."""
        self._in_txn = False
        self._parts: list[bytes | memoryview] = []
        self._size = 0
        self._n_events = 0  # stored events of the transaction so far
        self._chunk_first = 0  # index of the current chunk's first real event
        self._chunk_repeated = 0  # TABLE_MAPs repeated at the start of the current chunk
        self._chunk_no = 0
        self._content = False  # a kept rows event or DDL
        self._tables: dict[str, int] = {}
        # table id -> (name, kept, raw event, row counter or None, watched)
        self._maps: dict[int, tuple[str, bool, bytes, _Counter | None, bool]] = {}
        self._gtid = ""
        self._gtid_obj: MariadbGtid | MysqlGtid | None = None
        self._commit_ts_us = 0
        self._first_ts_us = 0
        self._standalone = False
        self._expect_begin = False
        self._skipping = False
        self._ddl = False
        self._watched: list[tuple[bytes, bytes]] = []
        self._last_seq = 0
        self._records = 0

    @property
    def in_transaction(self) -> bool:
        return self._in_txn

    def _begin(self, file: str, offset: int) -> None:
        self._reset()
        self._in_txn = True
        num = self._file_nums.get(file)
        if num is None:
            num = self._file_nums[file] = binlog_file_number(file)
        self._pos = Position(self.change_id, num, offset)

    # -- feeding ---------------------------------------------------------------------------

    def feed(
        self, file: str, offset: int, next_file: str, next_offset: int, raw: RawEvent
    ) -> Committed | None:
        """Process one event; returns the transaction it finished, if any.

        The hot path of the reader: the common events (rows, TABLE_MAP, XID, GTID,
        ANNOTATE_ROWS) are told apart by their type code alone and read with one slice or
        one unpack; nothing is built per event but the parts of the record."""
        tc = raw[2]  # RawEvent.type_code
        if self._in_txn:
            if self._skipping:
                return self._skip_event(tc, raw, next_file, next_offset)
            data = raw[6]  # RawEvent.data
            if tc in _ROWS:
                entry = self._maps.get(int.from_bytes(data[19 : 19 + self._id_size], "little"))
                if entry is None or not entry[1] or tc in self._dropped_rows:
                    return None
                counter = entry[3]
                if counter is not None:
                    # The rows header (type, flags, width, bitmaps) of the table's last
                    # event: when it repeats, its count function is reused as it is.
                    prefix = counter.prefix
                    if counter.type_code == tc and data[19 : 19 + len(prefix)] == prefix:
                        self._tables[entry[0]] += self._count_known(counter, data)
                    else:
                        self._tables[entry[0]] += self._count(tc, data, counter)
                self._content = True
                if entry[4]:
                    self._watched.append((entry[2], bytes(data)))
                self._add(data)
                if self._size >= self.chunk_bytes:
                    self._flush_chunk()
                return None
            if tc == _TABLE_MAP:
                self._table_map(data)
                return None
            if tc in _ENDS:
                self._add(data)
                return self._commit(raw, next_file, next_offset)
            if tc == _ANNOTATE:
                self._add(data)  # the statement's text, kept as it came
                return None
            if tc == _QUERY or tc == _E.QUERY_COMPRESSED:
                return self._query(raw, next_file, next_offset)
            if tc in _CONTROL:
                return None  # e.g. a heartbeat or rotate inside a group: not part of it
            self._add(data)  # INTVAR, USER_VAR, ... kept as they came
            return None
        if tc in _CONTROL:
            if tc == _FDE:
                self.fde = FormatDescription.parse(raw.data)
                self.fde_raw = bytes(raw.data)
                self.ctx.fde = self.fde
                if self._id_size != self.fde.table_id_size and self.scanner is not None:
                    self.scanner = Scanner(self.fde.table_id_size)  # shapes read anew
                    self._map_info.clear()
                    self._registered.clear()
                self._id_size = self.fde.table_id_size
            return None
        self._begin(file, offset)
        self._first_ts_us = raw[1] * 1_000_000
        if tc == _MARIADB_GTID:
            seq_no, domain, flags = _unpack_mariadb_gtid(raw[6], 19)
            sid = raw[3]
            self._gtid_obj = MariadbGtid(domain, sid, seq_no)
            self._gtid = f"{domain}-{sid}-{seq_no}"
            self._standalone = bool(flags & _FL_STANDALONE)
            self._gtid_started(raw)
            return None
        if tc in _GTID_TYPES:
            ev = parse_event(raw, self.ctx)
            assert isinstance(ev, GtidEvent)
            gtid = ev.gtid
            if gtid is not None:
                self._gtid_obj = gtid
                self._gtid = str(gtid)
            if ev.immediate_commit_timestamp:
                self._commit_ts_us = ev.immediate_commit_timestamp
            self._expect_begin = True
            self._gtid_started(raw)
            return None
        # No GTID: a BEGIN, a lone DDL statement, or events of an implicit group.
        if self.skip is not None and self.skip(self._pos, "", None, raw.timestamp):
            self._skipping = True
            return self._skip_event(tc, raw, next_file, next_offset)
        return self.feed(file, offset, next_file, next_offset, raw)

    def _table_map(self, data: memoryview) -> None:
        """Remember a TABLE_MAP (kept or not: rows events find it by table id)."""
        shape = bytes(data[19:])  # the body: the header's time and log_pos vary
        info = self._map_info.get(shape)
        if info is None:
            info = self._new_shape(shape)
        table_id, name, kept, tm, watched = info
        event = bytes(data)
        self._maps[table_id] = (name, kept, event, tm, watched)
        if kept:
            if name not in self._tables:
                self._tables[name] = 0
            self._add(event)

    def _new_shape(self, shape: bytes) -> tuple[int, str, bool, _Counter | None, bool]:
        """A TABLE_MAP body not seen before: filter, parse (row counting), cross-check."""
        table_id, db, table = _table_names(memoryview(shape), self._id_size)
        name = f"{db}.{table}"
        kept = self.filter.wants(db, table)
        tm = self._parse_map(shape) if kept else None
        watched = self.watch is not None and (db, table) == self.watch
        info = (table_id, name, kept, None if tm is None else _Counter(tm), watched)
        if len(self._map_info) > 10_000:
            self._map_info.clear()
            if self.scanner is not None:
                self.scanner.clear()
                self._registered.clear()
        self._map_info[shape] = info
        if self.scanner is not None and tm is not None and not watched:
            self._register(shape, name, tm)
        if kept and self.on_table_map is not None:
            # A new TABLE_MAP shape for the schema history's cross-check.
            version = self.on_table_map(b"\0" * 19 + shape, self._pos)
            if version is not None:
                self.schema_version = version
        return info

    def _register(self, shape: bytes, name: str, tm: TableMap) -> None:
        """Let the scanner count this shape's rows: each column's value width (fixed, or
        the bytes of its length), as the generated Python counter walks them."""
        assert self.scanner is not None
        try:
            widths = [value_width(c) for c in row_decoder_for(tm).plan]
        except BinlogFormatError:
            return  # a column the counter does not frame: this shape stays with Python
        if len(widths) != tm.column_count or not all(-4 <= w <= 127 for w in widths):
            return
        self.scanner.add_shape(shape, name.encode("utf-8"), bytes(w & 0xFF for w in widths))
        self._registered.add(shape)

    def native_scan(
        self,
        buf: bytearray,
        start: int,
        end: int,
        seq: int,
        *,
        file: str,
        crc: bool,
        verify: bool,
        after: tuple[int, int] | None,
        gtid_floor: tuple[int, int] | None,
        max_out: int = 4 * 1024 * 1024,
    ) -> tuple[int, int, int, Committed | None, int]:
        """Run the compiled scanner over ``buf[start:end]`` (packets of the dump, ``start``
        a transaction boundary, ``seq`` the packet sequence number there) and append what
        it builds. Returns ``(status, stop, seq, committed, events)``: the scanner's status
        (``headwater._native`` SLOW, MORE, LIMIT), where it stopped and the sequence number
        there, the :class:`Committed` of the run (None if empty) and the events it held.

        ``after``: (file number, offset) of the last transaction processed in this
        change_id, ``gtid_floor``: (domain, seq_no) of the GTID position (seq_no -1: none
        of the domain yet) or None (no GTIDs seen): transactions the scanner cannot tell
        are new are left to the event path, which asks ``skip``.
        """
        scanner = self.scanner
        fde = self.fde
        if scanner is None or fde is None or not fde.is_mariadb or self._in_txn:
            if scanner is not None:
                scanner.reset()
            return SLOW, start, seq, None, 0
        num = self._file_nums.get(file)
        if num is None:
            num = self._file_nums[file] = binlog_file_number(file)
        n = events = 0
        last_seq = 0
        last: tuple[int, int, int, int, int, int] | None = None
        if self.pending:
            self.flush()  # records keep their order (and the seqs of the frames hold)
        sink: FrameSink = self.sink  # type: ignore[assignment]  # checked in __init__
        while True:
            out = self._out_buffer()
            status, start, seq, size, count, got, run = scanner.scan(
                buf,
                start,
                end,
                seq,
                crc=crc,
                verify=verify,
                change_id=self.change_id,
                file_num=num,
                schema_version=self.schema_version,
                chunk_bytes=self.chunk_bytes,
                after_file=-1 if after is None else after[0],
                after_offset=-1 if after is None else after[1],
                gtid_domain=-1 if gtid_floor is None else gtid_floor[0],
                gtid_floor=-1 if gtid_floor is None else gtid_floor[1],
                dropped=self._dropped_mask,
                max_out=max_out,
                out=out,
                seq0=sink.next_seq,
            )
            if run is not None:
                last_seq = sink.append_frames(memoryview(out)[:size])
                n += count
                events += got
                last = run
                gtid_floor = (run[3], run[5])  # as the scan itself goes on (ingest.c)
                after = (num, run[0])
            if status != SHAPE:
                break
            if not self._learn_shape(buf, start, num):
                scanner.reset()
                status = SLOW
                break
        if last is None:
            return status, start, seq, None, 0
        offset, log_pos, ts_s, domain, server_id, seq_no = last
        self.native_transactions += n
        done = Committed(
            Position(self.change_id, num, offset),
            f"{domain}-{server_id}-{seq_no}",
            MariadbGtid(domain, server_id, seq_no),
            ts_s * 1_000_000,
            True,
            last_seq,
            n,
            file,
            log_pos,
            False,
            transactions=n,
        )
        return status, start, seq, done, events

    def _out_buffer(self) -> bytearray:
        """A buffer for the scanner's frames that nothing points into any more (the
        store's memory tail and write buffer hold views of the ones in use): reused, its
        pages are already mapped -- fresh memory costs a page fault per 4 KiB."""
        pool = self._outs
        for buf in pool:
            if not buf:
                return buf
            try:
                last = buf.pop()  # fails while a view of it is alive (never reallocates)
            except BufferError:
                continue
            buf.append(last)
            return buf
        buf = bytearray()
        if len(pool) < _OUT_POOL:
            pool.append(buf)
        return buf

    def _learn_shape(self, buf: bytearray, start: int, file_num: int) -> bool:
        """The scanner stopped at a TABLE_MAP it does not know (``start`` + its ``resume``):
        look at it as :meth:`_table_map` would; whether the scanner can go on with it."""
        assert self.scanner is not None
        p = start + self.scanner.resume
        length = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16
        size = length - 1 - (self.fde.checksum_size if self.fde is not None else 0)
        shape = bytes(buf[p + 5 + 19 : p + 5 + size])
        info = self._map_info.get(shape)
        if info is None:
            self._pos = Position(self.change_id, file_num, self.scanner.txn_offset)
            info = self._new_shape(shape)
        return self.scanner.in_transaction and shape in self._registered

    def _parse_map(self, shape: bytes) -> TableMap | None:
        mariadb = self.fde is None or self.fde.is_mariadb
        try:
            return parse_table_map(shape, table_id_size=self._id_size, mariadb=mariadb)
        except BinlogFormatError as e:
            log.warning("TABLE_MAP at %s does not parse (rows not counted): %s", self._pos, e)
            return None

    def _count(self, tc: int, data: memoryview | bytes, counter: _Counter) -> int:
        """Rows in a rows event whose header differs from the table's last one (0,
        reported, if its images do not frame)."""
        body = data[19:]
        try:
            known = row_counter(tc, body, table_map=counter.table_map, table_id_size=self._id_size)
            if known is None:
                counter.type_code = -1
                return count_rows(
                    tc, body, table_map=counter.table_map, table_id_size=self._id_size
                )
            start, fn = known
            counter.type_code, counter.prefix, counter.fn = tc, bytes(body[:start]), fn
            return int(fn(body, start, len(body)))
        except BinlogFormatError as e:
            self.count_errors += 1
            log.warning("rows event at %s: rows not counted: %s", self._pos, e)
            return 0

    def _count_known(self, counter: _Counter, data: memoryview | bytes) -> int:
        start = 19 + len(counter.prefix)
        try:
            return int(counter.fn(data, start, len(data)))
        except (IndexError, ValueError, BinlogFormatError) as e:
            self.count_errors += 1
            log.warning("rows event at %s: rows not counted: %s", self._pos, e)
            return 0

    def _gtid_started(self, raw: RawEvent) -> None:
        if self.skip is not None and self.skip(
            self._pos, self._gtid, self._gtid_obj, raw.timestamp
        ):
            self._skipping = True
            return None
        self._add(raw.data)
        return None

    def _skip_event(
        self, tc: int, raw: RawEvent, next_file: str, next_offset: int
    ) -> Committed | None:
        """Inside a transaction already stored: find its end, store nothing."""
        end = tc == _XID or tc == _E.XA_PREPARE
        if not end and tc in (_QUERY, _E.QUERY_COMPRESSED):
            q = parse_event(raw, self.ctx)
            assert isinstance(q, QueryEvent)
            head = q.query_bytes.lstrip()[:16].upper()
            if head.startswith(_BEGIN):
                end = False
            elif (
                head.startswith(_END)
                or self._standalone
                or self._expect_begin
                or (not self._gtid and is_ddl(q))
            ):
                end = True
            self._expect_begin = False
        if not end:
            return None
        self.skipped += 1
        pos, gtid, gobj = self._pos, self._gtid, self._gtid_obj
        self._reset()
        return Committed(
            pos, gtid, gobj, 0, False, 0, 0, next_file, next_offset, False, skipped=True
        )

    def _query(self, raw: RawEvent, next_file: str, next_offset: int) -> Committed | None:
        q = parse_event(raw, self.ctx)
        assert isinstance(q, QueryEvent)
        head = q.query_bytes.lstrip()[:16].upper()
        expect_begin, self._expect_begin = self._expect_begin, False
        if head.startswith(_BEGIN):
            self._add(raw.data)
            return None
        if head.startswith(_END):
            self._add(raw.data)
            return self._commit(raw, next_file, next_offset)
        if is_ddl(q):
            if self.on_ddl is not None:
                self.schema_version = self.on_ddl(q, self._pos)
            if self.filter.keep_ddl:
                self._content = True
                self._ddl = True
            self._add(raw.data)
            if self._standalone or expect_begin or not self._gtid:
                # A statement of its own: MariaDB's standalone GTID, MySQL's GTID not
                # followed by BEGIN, or a DDL outside any transaction.
                return self._commit(raw, next_file, next_offset)
            return None
        self._add(raw.data)
        return None

    # -- building records ------------------------------------------------------------------

    def _add(self, data: bytes | memoryview) -> None:
        n = len(data)
        self._parts.append(_pack_len(n))
        self._parts.append(data)
        self._size += n + 4
        self._n_events += 1

    def _flush_chunk(self) -> None:
        if not self._content:
            return
        first = self._chunk_no == 0
        self._append(self._chunk_first - self._chunk_repeated, FIRST_CHUNK if first else 0)
        self.chunks += 1
        self._chunk_no += 1
        self._chunk_first = self._n_events
        self._tables = dict.fromkeys(self._tables, 0)  # counts are per chunk
        # The next chunk starts with the TABLE_MAPs its rows events may need.
        self._parts = []
        self._size = 0
        self._chunk_repeated = 0
        for _name, kept, data, _tm, _w in self._maps.values():
            if kept:
                self._parts.append(_pack_len(len(data)))
                self._parts.append(data)
                self._size += len(data) + 4
                self._chunk_repeated += 1

    def _append(self, event_index: int, flags: int) -> None:
        pos = (
            self._pos
            if event_index == 0
            else Position(self._pos.change_id, self._pos.file_num, self._pos.offset, event_index)
        )
        record = Record(
            pos,
            b"".join(self._parts),
            self._commit_ts_us or self._first_ts_us,
            self._gtid,
            tuple(self._tables.items()),
            self.schema_version,
            flags,
            self._chunk_no,
        )
        if self.batch and flags & LAST_CHUNK:
            self.pending.append(record)
        else:
            if self.pending:
                self.flush()  # records keep their order
            self._last_seq = self.sink.append_nowait(record)
        self._records += 1

    def flush(self) -> int | None:
        """Append the pending records (``batch``); the last one's seq, or None if none."""
        pending = self.pending
        if not pending:
            return None
        self.pending = []
        return self.sink.append_many(pending)

    def _commit(self, raw: RawEvent, next_file: str, next_offset: int) -> Committed:
        if not self._commit_ts_us:
            self._commit_ts_us = raw.timestamp * 1_000_000
        stored = self._content
        if stored:
            self._append(
                self._chunk_first - self._chunk_repeated,
                LAST_CHUNK | (FIRST_CHUNK if self._chunk_no == 0 else 0),
            )
        done = Committed(
            self._pos,
            self._gtid,
            self._gtid_obj,
            self._commit_ts_us,
            stored,
            self._last_seq,
            self._records,
            next_file,
            next_offset,
            self._ddl,
            self._watched,
        )
        self._in_txn = False
        self._parts = []  # holds views of the stream's buffer: let them go
        self._maps = {}
        return done

    def abort(self) -> None:
        """Forget the transaction under way (the stream broke; it will be read again).

        Chunks of it already appended stay unacknowledged in the store until the next
        transaction starts, which the store refuses: call ``ChangeLog`` recovery (reopen)
        or never abort after a chunk -- the task reopens the store in that case.
        """
        self._reset()
        if self.scanner is not None:
            self.scanner.reset()

    @property
    def open_chunks(self) -> int:
        """Chunks of the transaction under way already appended (0 when none)."""
        return self._chunk_no
