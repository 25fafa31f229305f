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

GTID_TAGGED (type 42, MySQL 8.3+, written for ``SET GTID_NEXT='AUTOMATIC:tag'`` or
``'uuid:tag:n'``) carries the same fields as one message of the MySQL serialization library
(``Gtid_event::define_fields`` in ``libs/mysql/binlog/event/control_events.h``, decoded by
``Gtid_event::read_gtid_tagged_log_event`` in ``control_events.cpp``; the message format is
``libs/mysql/serialization/readme.md`` and ``serializer_default_impl.hpp``). Every integer is
a variable-length integer (:mod:`headwater._varlen`)::

    format version   varlen   1 (``serialization_format_version``)
    message size     varlen   bytes of the whole message, from the version byte on
    last non-ignorable field id  varlen  0 when every field may be skipped; a decoder that
                                 knows fields 0..11 rejects a value above 12
    then per field present: field id (varlen), value
      0 gtid_flags               unsigned
      1 uuid                     16 array elements, each an unsigned varlen (1-2 bytes)
      2 gno                      signed (zig-zag)
      3 tag                      string: varlen length (<= 32), bytes
      4 last_committed           signed
      5 sequence_number          signed
      6 immediate_commit_ts      unsigned, microseconds
      7 original_commit_ts       unsigned; absent when equal to the immediate one
      8 transaction_length       unsigned
      9 immediate_server_version unsigned
     10 original_server_version  unsigned; absent when equal to the immediate one
     11 commit_group_ticket      unsigned; absent when unset (0)

A field whose id is not the next expected one is missing (its default applies); fields with
ids above 11 (a newer server) are skipped to the message's end.

PREVIOUS_GTIDS: a GTID set in ``Gtid_set::encode`` form, untagged or (MySQL 8.3+) tagged
(see :meth:`headwater.position.MysqlGtidSet.decode`).

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

from headwater._varlen import VarlenError, read_int, read_uint
from headwater.binlog._context import BinlogEvent, DecodeContext
from headwater.binlog._cursor import Cursor
from headwater.binlog._frozen import maker
from headwater.binlog.constants import EventType
from headwater.binlog.framing import RawEvent
from headwater.errors import BinlogFormatError, TruncatedError
from headwater.position import MariadbGtid, MysqlGtid, MysqlGtidSet, normalize_gtid_tag

__all__ = [
    "GtidEvent",
    "MariadbGtidEvent",
    "MariadbGtidListEvent",
    "PreviousGtidsEvent",
    "parse_gtid",
    "parse_gtid_tagged",
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
    tag: str = ""

    @property
    def is_anonymous(self) -> bool:
        return self.gno == 0

    @property
    def gtid(self) -> MysqlGtid | None:
        """``sid:gno`` (``sid:tag:gno`` when tagged), or ``None`` when anonymous."""
        return None if self.gno == 0 else MysqlGtid(self.sid, self.gno, self.tag)


#: GtidEvent(...) at the cost of a plain class: one per transaction (see _frozen).
_make_gtid = maker(GtidEvent)


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
    return _make_gtid(
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
        "",
    )


_SERIALIZATION_FORMAT_VERSION = 1
_TAGGED_FIELDS = (
    "gtid_flags",
    "uuid",
    "gno",
    "tag",
    "last_committed",
    "sequence_number",
    "immediate_commit_timestamp",
    "original_commit_timestamp",
    "transaction_length",
    "immediate_server_version",
    "original_server_version",
    "commit_group_ticket",
)
_SIGNED_FIELDS = frozenset({"gno", "last_committed", "sequence_number"})
_FIELD_MAX = {"gtid_flags": 0xFF, "immediate_server_version": 0xFFFFFFFF}
_FIELD_MAX["original_server_version"] = 0xFFFFFFFF
_TAG_MAX = 32


def parse_gtid_tagged(raw: RawEvent, ctx: DecodeContext) -> GtidEvent:
    """GTID_TAGGED: the serialization-library message of the module docstring."""
    body = bytes(raw.body)
    try:
        values = _read_tagged_message(body)
    except VarlenError as e:
        raise TruncatedError(f"GTID_TAGGED message: {e}", event_type="GTID_TAGGED") from None
    sid = values.get("uuid")
    gno = values.get("gno")
    if not isinstance(sid, uuid.UUID) or not isinstance(gno, int):
        raise BinlogFormatError(
            "GTID_TAGGED without its uuid or gno field", event_type="GTID_TAGGED"
        )
    if not 1 <= gno < _GNO_END - 1:  # MIN_GNO .. GNO_END (INT64_MAX), control_events.h
        raise BinlogFormatError(f"GTID_TAGGED gno {gno} out of range", event_type="GTID_TAGGED")

    def num(name: str) -> int | None:
        v = values.get(name)
        return v if isinstance(v, int) else None

    immediate_ts = num("immediate_commit_timestamp")
    original_ts = num("original_commit_timestamp")
    immediate_version = num("immediate_server_version")
    original_version = num("original_server_version")
    tag = values.get("tag", "")
    return GtidEvent(
        flags=num("gtid_flags") or 0,
        sid=sid,
        gno=gno,
        lt_type=None,
        last_committed=num("last_committed"),
        sequence_number=num("sequence_number"),
        immediate_commit_timestamp=immediate_ts,
        original_commit_timestamp=immediate_ts if original_ts is None else original_ts,
        transaction_length=num("transaction_length"),
        immediate_server_version=immediate_version,
        original_server_version=immediate_version if original_version is None else original_version,
        commit_group_ticket=num("commit_group_ticket"),
        tag=tag if isinstance(tag, str) else "",
    )


def _read_tagged_message(body: bytes) -> dict[str, object]:
    """The fields present in a GTID_TAGGED message, by name (see the module docstring)."""
    where = "GTID_TAGGED"
    version, pos = read_uint(body, 0)
    if version != _SERIALIZATION_FORMAT_VERSION:
        raise BinlogFormatError(
            f"GTID_TAGGED serialization format version {version}, expected 1", event_type=where
        )
    size, pos = read_uint(body, pos)
    if size > len(body):
        raise TruncatedError(
            f"GTID_TAGGED message of {size} bytes in a {len(body)}-byte event", event_type=where
        )
    last_non_ignorable, pos = read_uint(body, pos)
    if last_non_ignorable > len(_TAGGED_FIELDS):
        raise BinlogFormatError(
            f"GTID_TAGGED has unknown fields that may not be ignored (up to id"
            f" {last_non_ignorable - 1}; this decoder knows 0-{len(_TAGGED_FIELDS) - 1})",
            event_type=where,
        )
    if size < pos:
        raise BinlogFormatError(f"GTID_TAGGED message size {size} is smaller than its header")
    msg = body[:size]
    values: dict[str, object] = {}
    for field_id, name in enumerate(_TAGGED_FIELDS):
        if pos >= size:
            break
        found, after_id = read_uint(msg, pos)
        if found != field_id:
            continue  # missing: MySQL's decode_field_id runs the field-missing default
        pos = after_id
        if name == "uuid":
            raw = bytearray()
            for i in range(16):
                byte, pos = read_uint(msg, pos)
                if byte > 0xFF:
                    raise BinlogFormatError(
                        f"GTID_TAGGED uuid byte {i} is {byte}", event_type=where
                    )
                raw.append(byte)
            values[name] = uuid.UUID(bytes=bytes(raw))
        elif name == "tag":
            length, pos = read_uint(msg, pos)
            text = msg[pos : pos + length]
            if length > _TAG_MAX or len(text) < length:
                raise BinlogFormatError(
                    f"GTID_TAGGED tag of {length} bytes (at most {_TAG_MAX}, {size - pos} left)",
                    event_type=where,
                )
            try:
                values[name] = normalize_gtid_tag(text.decode("ascii"), "GTID_TAGGED")
            except (UnicodeDecodeError, ValueError):
                raise BinlogFormatError(
                    f"GTID_TAGGED tag {text!r} is not a valid tag", event_type=where
                ) from None
            pos += length
        else:
            value, pos = (read_int if name in _SIGNED_FIELDS else read_uint)(msg, pos)
            if value > _FIELD_MAX.get(name, value):
                raise BinlogFormatError(f"GTID_TAGGED {name} {value} too large", event_type=where)
            values[name] = value
    return values


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
    count cannot make the decoder loop) before decoding it. The header's top byte is the
    format (0 untagged, 1 tagged: count in bits 8-55, a tag after each uuid;
    ``decode_nsids_format`` in MySQL sql/rpl_gtid_set.cc)."""
    cur = Cursor(data, "gtid set")
    head = cur.u64("n_sids")
    fmt = head >> 56
    if fmt > 1:
        raise BinlogFormatError(f"GTID set header {head:#018x}: unknown format byte {fmt}")
    n_sids = (head & 0x00FFFFFFFFFFFF00) >> 8 if fmt else head
    min_entry = 25 if fmt else 24
    if n_sids > len(data) // min_entry:
        raise TruncatedError(f"{n_sids} sids cannot fit in {len(data)} bytes")
    for i in range(n_sids):
        cur.skip(16, f"sid {i}")
        if fmt:
            try:
                tag_len, after = read_uint(data, cur.pos)
            except VarlenError as e:
                raise TruncatedError(f"tag of sid {i}: {e}") from None
            cur.skip(after - cur.pos + tag_len, f"tag of sid {i}")
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


#: MariadbGtidEvent(...) at the cost of a plain class: one per transaction (see _frozen).
_make_mariadb_gtid = maker(MariadbGtidEvent)


def parse_mariadb_gtid(raw: RawEvent, ctx: DecodeContext) -> MariadbGtidEvent:
    body = raw.body
    if len(body) >= _MARIADB_GTID_HEAD.size:
        # One per transaction: the common layout (no commit id, XA or extra fields) in one
        # unpack; everything else takes the field-by-field path below.
        seq_no, domain_id, flags2, flags_extra = _MARIADB_GTID_HEAD.unpack_from(body)
        if not flags2 & _GTID_SLOW_FLAGS2 and not flags_extra & _GTID_SLOW_EXTRA:
            return _make_mariadb_gtid(
                seq_no, domain_id, raw.server_id, flags2, None, None, flags_extra, None, None
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
