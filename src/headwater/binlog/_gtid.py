"""GTID events of both servers: MySQL GTID/ANONYMOUS_GTID/PREVIOUS_GTIDS, MariaDB GTID and
GTID_LIST.

MySQL GTID and ANONYMOUS_GTID (``Gtid_event`` reading constructor,
``libs/mysql/binlog/event/control_events.cpp``); each group after ``gno`` is present only if
the bytes are there (5.6 stops after ``gno``; 5.7 after ``sequence_number``)::

    flags                     u8    1 = may contain statement-based changes
    sid                       16    source server uuid (zero for anonymous)
    gno                       u64   1 <= gno < 2^63 for GTID, 0 for ANONYMOUS_GTID
    lt_type                   u8    2 (LOGICAL_TIMESTAMP_TYPECODE); other values (5.7.4 and
                                    earlier) end the event
    last_committed            u64
    sequence_number           u64
    immediate_commit_ts       7 bytes, microseconds since the epoch; bit 55 set means
    [original_commit_ts]      7 bytes follow, else the original equals the immediate one
    transaction_length        packed integer
    immediate_server_version  u32; bit 31 set means
    [original_server_version] u32 follows, else equal
    commit_group_ticket       u64 (8.0.27+, group replication)

GTID_TAGGED (MySQL 8.4) uses the MySQL serialization library format and is kept raw.

PREVIOUS_GTIDS: a GTID set in ``Gtid_set::encode`` form (see
:meth:`headwater.position.MysqlGtidSet.decode`).

MariaDB GTID (``Gtid_log_event``, MariaDB ``sql/log_event.cc``)::

    seq_no       u64
    domain_id    u32
    flags2       u8   1 STANDALONE, 2 GROUP_COMMIT_ID, 4 TRANSACTIONAL, 8 ALLOW_PARALLEL,
                      16 WAITED, 32 DDL, 64 PREPARED_XA, 128 COMPLETED_XA
    [commit_id]  u64  when GROUP_COMMIT_ID
    [xid]        format_id u32, gtrid_len u8, bqual_len u8, data, when PREPARED/COMPLETED_XA
    [flags_extra] u8  when bytes remain: 1 MULTI_ENGINE -> extra_engines u8;
                      4 COMMIT_ALTER | 8 ROLLBACK_ALTER -> sa_seq_no u64
    (zero padding up to the 19-byte post-header)

The server id of a MariaDB GTID is the event header's ``server_id``.

MariaDB GTID_LIST: ``count | flags << 28`` u32, then count x (domain_id u32, server_id u32,
seq_no u64).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from headwater.binlog._context import BinlogEvent, DecodeContext
from headwater.binlog._cursor import Cursor
from headwater.binlog.constants import EventType
from headwater.binlog.framing import RawEvent
from headwater.errors import BinlogFormatError, TruncatedError
from headwater.position import MariadbGtid, MysqlGtid, MysqlGtidSet

__all__ = [
    "GtidEvent",
    "MariadbGtidEvent",
    "MariadbGtidListEvent",
    "PreviousGtidsEvent",
    "parse_gtid",
    "parse_mariadb_gtid",
    "parse_mariadb_gtid_list",
    "parse_previous_gtids",
]

_LOGICAL_TIMESTAMP_TYPECODE = 2
_GNO_END = 1 << 63
_BIT55 = 1 << 55
_BIT31 = 1 << 31
UNDEFINED_SERVER_VERSION = 999999


@dataclass(frozen=True, slots=True)
class GtidEvent(BinlogEvent):
    """MySQL GTID or ANONYMOUS_GTID: the start of a transaction and its commit order.

    Fields the writing server did not have are ``None``: the logical clock before 5.7,
    commit timestamps and the rest before 8.0.1. Timestamps are microseconds since the
    epoch.
    """

    flags: int
    sid: uuid.UUID
    gno: int
    lt_type: int | None = None
    last_committed: int | None = None
    sequence_number: int | None = None
    immediate_commit_timestamp: int | None = None
    original_commit_timestamp: int | None = None
    transaction_length: int | None = None
    immediate_server_version: int | None = None
    original_server_version: int | None = None
    commit_group_ticket: int | None = None

    @property
    def is_anonymous(self) -> bool:
        return self.gno == 0

    @property
    def gtid(self) -> MysqlGtid | None:
        """``sid:gno``, or ``None`` for an anonymous transaction."""
        return None if self.gno == 0 else MysqlGtid(self.sid, self.gno)


def parse_gtid(raw: RawEvent, ctx: DecodeContext) -> GtidEvent:
    cur = Cursor(raw.body)
    flags = cur.u8("flags")
    sid = uuid.UUID(bytes=cur.take(16, "sid"))
    gno = cur.u64("gno")
    if raw.type_code == EventType.GTID:
        if not 1 <= gno < _GNO_END:
            raise BinlogFormatError(f"invalid gno {gno}")
    elif gno != 0:
        raise BinlogFormatError(f"gno {gno}, expected 0")
    if not cur.remaining:
        return GtidEvent(flags, sid, gno)
    lt_type = cur.u8("lt_type")
    if lt_type != _LOGICAL_TIMESTAMP_TYPECODE:  # 5.7.4 and earlier: ignored, as MySQL does
        return GtidEvent(flags, sid, gno, lt_type)
    last_committed = cur.u64("last_committed")
    sequence_number = cur.u64("sequence_number")
    if cur.remaining < 7:
        return GtidEvent(flags, sid, gno, lt_type, last_committed, sequence_number)
    immediate_ts = cur.uint(7, "immediate_commit_timestamp")
    original_ts = immediate_ts
    if immediate_ts & _BIT55:
        immediate_ts &= ~_BIT55
        original_ts = cur.uint(7, "original_commit_timestamp")
    tx_length = cur.packed("transaction_length") if cur.remaining else None
    immediate_version = original_version = ticket = None
    if cur.remaining >= 4:
        immediate_version = original_version = cur.u32("immediate_server_version")
        if immediate_version & _BIT31:
            immediate_version &= ~_BIT31
            original_version = cur.u32("original_server_version")
        if cur.remaining >= 8:
            ticket = cur.u64("commit_group_ticket")
    return GtidEvent(
        flags,
        sid,
        gno,
        lt_type,
        last_committed,
        sequence_number,
        immediate_ts,
        original_ts,
        tx_length,
        immediate_version,
        original_version,
        ticket,
    )


@dataclass(frozen=True, slots=True)
class PreviousGtidsEvent(BinlogEvent):
    """the GTIDs written to the binlog files before this one."""

    gtid_set: MysqlGtidSet


def parse_previous_gtids(raw: RawEvent, ctx: DecodeContext) -> PreviousGtidsEvent:
    body = raw.body
    cur = Cursor(body)
    cur.skip(ctx.post_header_length(EventType.PREVIOUS_GTIDS), "post-header")
    data = cur.rest()
    _check_gtid_set_length(data)
    try:
        gtid_set, _used = MysqlGtidSet.decode(data)
    except ValueError as e:
        raise BinlogFormatError(f"{e}") from None
    return PreviousGtidsEvent(gtid_set)


def _check_gtid_set_length(data: bytes) -> None:
    """Walk the encoded set's counts so that a short body is a TruncatedError (and a huge
    count cannot make the decoder loop) before decoding it."""
    cur = Cursor(data, "gtid set")
    n_sids = cur.u64("n_sids")
    if n_sids > len(data) // 24:
        raise TruncatedError(f"{n_sids} sids cannot fit in {len(data)} bytes")
    for i in range(n_sids):
        cur.skip(16, f"sid {i}")
        n_intervals = cur.u64(f"interval count of sid {i}")
        if n_intervals > cur.remaining // 16:
            raise TruncatedError(f"{n_intervals} intervals of sid {i} past the end")
        cur.skip(16 * n_intervals, f"intervals of sid {i}")


# MariaDB Gtid_log_event flags (sql/log_event.h)
FL_STANDALONE = 1
FL_GROUP_COMMIT_ID = 2
FL_TRANSACTIONAL = 4
FL_ALLOW_PARALLEL = 8
FL_WAITED = 16
FL_DDL = 32
FL_PREPARED_XA = 64
FL_COMPLETED_XA = 128
FL_EXTRA_MULTI_ENGINE_E1 = 1
FL_START_ALTER_E1 = 2
FL_COMMIT_ALTER_E1 = 4
FL_ROLLBACK_ALTER_E1 = 8


@dataclass(frozen=True, slots=True)
class MariadbGtidEvent(BinlogEvent):
    """MariaDB GTID: the start of an event group ``domain_id-server_id-seq_no``.

    ``xid`` is ``(format_id, gtrid, bqual)`` for XA transactions.
    """

    seq_no: int
    domain_id: int
    server_id: int
    flags2: int
    commit_id: int | None = None
    xid: tuple[int, bytes, bytes] | None = None
    flags_extra: int = 0
    extra_engines: int | None = None
    sa_seq_no: int | None = None

    @property
    def gtid(self) -> MariadbGtid:
        return MariadbGtid(self.domain_id, self.server_id, self.seq_no)

    @property
    def is_standalone(self) -> bool:
        """A group of its own (DDL, non-transactional statement), with no COMMIT/XID."""
        return bool(self.flags2 & FL_STANDALONE)


#: seq_no, domain_id, flags2, and the byte after them (flags_extra, or padding).
_MARIADB_GTID_HEAD = struct.Struct("<QIBB")
_GTID_SLOW_FLAGS2 = FL_GROUP_COMMIT_ID | FL_PREPARED_XA | FL_COMPLETED_XA
_GTID_SLOW_EXTRA = FL_EXTRA_MULTI_ENGINE_E1 | FL_COMMIT_ALTER_E1 | FL_ROLLBACK_ALTER_E1


def parse_mariadb_gtid(raw: RawEvent, ctx: DecodeContext) -> MariadbGtidEvent:
    body = raw.body
    if len(body) >= _MARIADB_GTID_HEAD.size:
        # One per transaction: the common layout (no commit id, XA or extra fields) in one
        # unpack; everything else takes the field-by-field path below.
        seq_no, domain_id, flags2, flags_extra = _MARIADB_GTID_HEAD.unpack_from(body)
        if not flags2 & _GTID_SLOW_FLAGS2 and not flags_extra & _GTID_SLOW_EXTRA:
            return MariadbGtidEvent(
                seq_no, domain_id, raw.server_id, flags2, None, None, flags_extra
            )
    cur = Cursor(body)
    seq_no = cur.u64("seq_no")
    domain_id = cur.u32("domain_id")
    flags2 = cur.u8("flags2")
    commit_id = cur.u64("commit_id") if flags2 & FL_GROUP_COMMIT_ID else None
    xid = None
    if flags2 & (FL_PREPARED_XA | FL_COMPLETED_XA):
        format_id = cur.u32("xid format_id")
        gtrid_len = cur.u8("xid gtrid_length")
        bqual_len = cur.u8("xid bqual_length")
        xid = (format_id, cur.take(gtrid_len, "xid gtrid"), cur.take(bqual_len, "xid bqual"))
    flags_extra, extra_engines, sa_seq_no = 0, None, None
    if cur.remaining:
        flags_extra = cur.u8("flags_extra")
        if flags_extra & FL_EXTRA_MULTI_ENGINE_E1:
            extra_engines = cur.u8("extra_engines")
        if flags_extra & (FL_COMMIT_ALTER_E1 | FL_ROLLBACK_ALTER_E1):
            sa_seq_no = cur.u64("sa_seq_no")
    return MariadbGtidEvent(
        seq_no,
        domain_id,
        raw.server_id,
        flags2,
        commit_id,
        xid,
        flags_extra,
        extra_engines,
        sa_seq_no,
    )


@dataclass(frozen=True, slots=True)
class MariadbGtidListEvent(BinlogEvent):
    """MariaDB GTID_LIST: the last GTID of each domain (and server) in earlier files."""

    gtids: tuple[MariadbGtid, ...]
    flags: int


def parse_mariadb_gtid_list(raw: RawEvent, ctx: DecodeContext) -> MariadbGtidListEvent:
    cur = Cursor(raw.body)
    value = cur.u32("count")
    count, flags = value & ((1 << 28) - 1), value >> 28
    cur.need(16 * count, f"{count} GTIDs")
    gtids = tuple(
        MariadbGtid(cur.u32("domain_id"), cur.u32("server_id"), cur.u64("seq_no"))
        for _ in range(count)
    )
    return MariadbGtidListEvent(gtids, flags)
