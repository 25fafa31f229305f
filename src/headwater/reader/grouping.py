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
* DDL (``headwater.reader.ddl_records``): each statement is classified into the tables and
  databases it touches, which join ``tables`` with 0 rows (``db.table``, ``db.*`` for a
  database, ``!kind`` alone for a statement not about data: docs/formats.md), so table
  filters apply to DDL as to rows; the reader's filters keep it when one of its objects is
  kept (a statement not about data only when the reader filters no table); a statement
  carrying a credential is stored -- and shown to the schema history -- redacted;
* memory is bounded by ``chunk_bytes`` (plus one event) whatever the transaction's size:
  a chunk is appended as soon as it is full and dropped from here.

Compiled fast path: :meth:`Grouper.native_scan` hands the dump's receive buffer, at a
transaction boundary, to ``Grouper.native`` (``headwater.reader.native``: when it applies,
how it falls back), which stores the common MariaDB transactions itself, byte for byte as
this module would; the shapes it may take are those this module registers with it as it
meets them, and whatever it does not take comes here event by event.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from typing import Protocol

from headwater._native import SLOW
from headwater.binlog.constants import EventType
from headwater.binlog.events import DecodeContext, GtidEvent, QueryEvent, parse_event
from headwater.binlog.framing import FormatDescription, RawEvent
from headwater.binlog.tablemap import TableMap, parse_table_map
from headwater.changes import is_ddl
from headwater.errors import BinlogFormatError
from headwater.position import MariadbGtid, MysqlGtid, Position, binlog_file_number
from headwater.reader.committed import Committed
from headwater.reader.ddl_records import prepare_ddl, redact_annotate_event
from headwater.reader.filters import ROWS_KIND, TableFilter
from headwater.reader.native import NativeIngest, native_ingest
from headwater.reader.tablemaps import RowCounter, table_names
from headwater.schema.ddlscope import CREDENTIAL_WORDS
from headwater.store import FIRST_CHUNK, LAST_CHUNK, Record

# Committed (headwater.reader.committed) stays importable from here, where it used to live.
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
_ROWS_QUERY = _E.ROWS_QUERY
_CREDENTIAL = CREDENTIAL_WORDS
_XA_PREPARE = _E.XA_PREPARE
_ENDS = frozenset((_XID, _XA_PREPARE))
_MARIADB_GTID_HEAD = struct.Struct("<QIB")  # seq_no, domain_id, flags (after the header)
_unpack_mariadb_gtid = _MARIADB_GTID_HEAD.unpack_from
_BEGIN = (b"BEGIN", b"XA START", b"START TRANSACTION")
_END = (b"COMMIT", b"ROLLBACK", b"XA END", b"XA PREPARE")


class RecordSink(Protocol):
    """Where records go: a ``ChangeLog`` (each method returns the last record's seq)."""

    def append_nowait(self, record: Record) -> int: ...

    def append_many(self, records: Sequence[Record]) -> int: ...


class Grouper:
    """Groups one stream's events into records (see the module docstring).

    ``on_ddl(query, position) -> schema version`` is called for every DDL statement before
    its record is built; ``schema_version`` is stored in each record.
    ``skip(position, gtid text, gtid, timestamp)`` is asked when a transaction starts (at
    its GTID event, or its first event when it has none) and drops the whole transaction
    when true (resume de-duplication, start-time filter).

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
        self._map_info: dict[bytes, tuple[int, str, bool, RowCounter | None, bool]] = {}
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
        #: the compiled fast path (None: the sink cannot take frames, or it is turned off)
        self.native: NativeIngest | None = native_ingest(sink, self._dropped_rows, chunk_bytes)
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
        self._maps: dict[int, tuple[str, bool, bytes, RowCounter | None, bool]] = {}
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
        self._pos = Position(self.change_id, self._file_number(file), offset)

    def _file_number(self, file: str) -> int:
        num = self._file_nums.get(file)
        if num is None:
            num = self._file_nums[file] = binlog_file_number(file)
        return num

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
                # the statement's text, kept as it came unless it carries a credential
                if _CREDENTIAL.search(data, 19) is not None:
                    self._add(redact_annotate_event(data))
                else:
                    self._add(data)
                return None
            if tc == _QUERY or tc == _E.QUERY_COMPRESSED:
                return self._query(raw, next_file, next_offset)
            if tc in _CONTROL:
                return None  # e.g. a heartbeat or rotate inside a group: not part of it
            if tc == _ROWS_QUERY and _CREDENTIAL.search(data, 20) is not None:
                self._add(redact_annotate_event(data, rows_query=True))  # MySQL's annotation
                return None
            self._add(data)  # INTVAR, USER_VAR, ... kept as they came
            return None
        if tc in _CONTROL:
            if tc == _FDE:
                self.fde = FormatDescription.parse(raw.data)
                self.fde_raw = bytes(raw.data)
                self.ctx.fde = self.fde
                if self._id_size != self.fde.table_id_size and self.native is not None:
                    self.native.restart(self.fde.table_id_size)  # shapes read anew
                    self._map_info.clear()
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

    def _new_shape(self, shape: bytes) -> tuple[int, str, bool, RowCounter | None, bool]:
        """A TABLE_MAP body not seen before: filter, parse (row counting), cross-check."""
        table_id, db, table = table_names(memoryview(shape), self._id_size)
        name = f"{db}.{table}"
        kept = self.filter.wants(db, table)
        tm = self._parse_map(shape) if kept else None
        watched = self.watch is not None and (db, table) == self.watch
        info = (table_id, name, kept, None if tm is None else RowCounter(tm), watched)
        if len(self._map_info) > 10_000:
            self._map_info.clear()
            if self.native is not None:
                self.native.forget_shapes()
        self._map_info[shape] = info
        if self.native is not None and tm is not None and not watched:
            self.native.register(shape, name, tm)
        if kept and self.on_table_map is not None:
            # A new TABLE_MAP shape for the schema history's cross-check.
            version = self.on_table_map(b"\0" * 19 + shape, self._pos)
            if version is not None:
                self.schema_version = version
        return info

    # -- the compiled path -------------------------------------------------------------------

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
        """Offer ``buf[start:end]`` to the compiled path (arguments and result:
        :meth:`NativeIngest.scan`) if it may start there: a MariaDB stream, no transaction
        under way here; else SLOW (the scanner let go of what it held of a transaction)."""
        native = self.native
        fde = self.fde
        if native is None or fde is None or not fde.is_mariadb or self._in_txn:
            if native is not None:
                native.reset()
            return SLOW, start, seq, None, 0
        num = self._file_number(file)
        if self.pending:
            self.flush()  # records keep their order (and the seqs of the frames hold)

        def learn(shape: bytes, txn_offset: int) -> int:
            """Look at a TABLE_MAP the scanner stopped at as :meth:`_table_map` would."""
            if shape not in self._map_info:
                self._pos = Position(self.change_id, num, txn_offset)
                self._new_shape(shape)
            return self.schema_version

        return native.scan(
            buf,
            start,
            end,
            seq,
            file=file,
            file_num=num,
            change_id=self.change_id,
            schema_version=self.schema_version,
            checksum_size=fde.checksum_size,
            crc=crc,
            verify=verify,
            after=after,
            gtid_floor=gtid_floor,
            max_out=max_out,
            learn=learn,
        )

    @property
    def native_transactions(self) -> int:
        """Transactions the compiled path stored (0 without it)."""
        return 0 if self.native is None else self.native.transactions

    def _parse_map(self, shape: bytes) -> TableMap | None:
        mariadb = self.fde is None or self.fde.is_mariadb
        try:
            return parse_table_map(shape, table_id_size=self._id_size, mariadb=mariadb)
        except BinlogFormatError as e:
            log.warning("TABLE_MAP at %s does not parse (rows not counted): %s", self._pos, e)
            return None

    def _count(self, tc: int, data: memoryview | bytes, counter: RowCounter) -> int:
        """Rows in a rows event whose header differs from the table's last one (0,
        reported, if its images do not frame)."""
        try:
            return counter.count(tc, data, self._id_size)
        except BinlogFormatError as e:
            self.count_errors += 1
            log.warning("rows event at %s: rows not counted: %s", self._pos, e)
            return 0

    def _count_known(self, counter: RowCounter, data: memoryview | bytes) -> int:
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
        tc = raw.type_code
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
            # Classified, and redacted when it carries a credential, before anything --
            # the schema history included -- sees it (headwater.reader.ddl_records).
            ddl = prepare_ddl(q, raw.data, tc, self.ctx.post_header_length(tc))
            scope = ddl.scope
            if scope.about_data and self.on_ddl is not None:
                self.schema_version = self.on_ddl(ddl.query, self._pos)
            if self.filter.keep_ddl and self.filter.wants_ddl(scope):
                self._content = True
                self._ddl = True
                tables = self._tables
                for name in scope.names():
                    if name not in tables:
                        tables[name] = 0
                self._add(ddl.data)
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
        if self.native is not None:
            self.native.reset()

    @property
    def open_chunks(self) -> int:
        """Chunks of the transaction under way already appended (0 when none)."""
        return self._chunk_no
