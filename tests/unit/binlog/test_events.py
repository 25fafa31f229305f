"""Event body parsers on bodies built here, field by field, from the layouts in the MySQL and
MariaDB sources cited in each module's docstring."""

from __future__ import annotations

import struct
import uuid
import zlib
from decimal import Decimal

import pytest
import zstandard

from headwater.binlog.constants import LOG_EVENT_ARTIFICIAL_F, EventType
from headwater.binlog.events import (
    DecodeContext,
    GtidEvent,
    HeartbeatEvent,
    IncidentEvent,
    IntvarEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RandEvent,
    RotateEvent,
    RowsQueryEvent,
    TransactionPayloadEvent,
    UnknownEvent,
    UserVarEvent,
    XaPrepareEvent,
    XidEvent,
    iter_payload_events,
    parse_event,
)
from headwater.binlog.framing import RawEvent
from headwater.errors import BinlogFormatError, TruncatedError
from headwater.position import MariadbGtid, MysqlGtid, MysqlGtidSet

SID = uuid.UUID("3e11fa47-71ca-11e1-9e33-c80aa9429562")


def raw_event(
    type_code: int,
    body: bytes,
    *,
    offset: int = 1000,
    log_pos: int = 2000,
    timestamp: int = 1700000000,
    server_id: int = 7,
    flags: int = 0,
) -> RawEvent:
    size = 19 + len(body)
    header = struct.pack("<IBIIIH", timestamp, type_code, server_id, size, log_pos, flags)
    return RawEvent(
        offset, timestamp, type_code, server_id, log_pos, flags, memoryview(header + body)
    )


def parse(type_code: int, body: bytes, **kw: int) -> object:
    return parse_event(raw_event(type_code, body, **kw), DecodeContext(source="built"))


def packed(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + struct.pack("<Q", n)


def query_body(
    query: bytes,
    *,
    db: bytes = b"test",
    status: bytes = b"",
    thread_id: int = 42,
    exec_time: int = 3,
    error_code: int = 0,
) -> bytes:
    head = struct.pack("<IIBHH", thread_id, exec_time, len(db), error_code, len(status))
    return head + status + db + b"\0" + query


# --- QUERY -------------------------------------------------------------------------------


def test_query_fields_without_status_vars() -> None:
    ev = parse(EventType.QUERY, query_body(b"INSERT INTO t VALUES (1)"))
    assert isinstance(ev, QueryEvent)
    assert (ev.thread_id, ev.exec_time, ev.error_code) == (42, 3, 0)
    assert ev.schema == "test"
    assert ev.query == "INSERT INTO t VALUES (1)"
    assert ev.query_bytes == b"INSERT INTO t VALUES (1)"
    assert ev.status.flags2 is None and ev.status.unparsed == b""


def test_query_every_mysql_status_var() -> None:
    status = (
        b"\x00"
        + struct.pack("<I", 0x4000)  # FLAGS2
        + b"\x01"
        + struct.pack("<Q", 1168113696)  # SQL_MODE
        + b"\x03"
        + struct.pack("<HH", 2, 1)  # AUTO_INCREMENT
        + b"\x04"
        + struct.pack("<HHH", 255, 255, 8)  # CHARSET
        + b"\x05\x06+02:00"  # TIME_ZONE
        + b"\x06\x03std"  # CATALOG_NZ
        + b"\x07"
        + struct.pack("<H", 3)  # LC_TIME_NAMES
        + b"\x08"
        + struct.pack("<H", 33)  # CHARSET_DATABASE
        + b"\x09"
        + struct.pack("<Q", 5)  # TABLE_MAP_FOR_UPDATE
        + b"\x0a"
        + struct.pack("<I", 99)  # MASTER_DATA_WRITTEN
        + b"\x0b\x04root\x09localhost"  # INVOKER
        + b"\x0c\x02db1\0db2\0"  # UPDATED_DB_NAMES
        + b"\x0d"
        + (123456).to_bytes(3, "little")  # MICROSECONDS
        + b"\x10\x01"  # EXPLICIT_DEFAULTS_FOR_TIMESTAMP
        + b"\x11"
        + struct.pack("<Q", 77)  # DDL_LOGGED_WITH_XID
        + b"\x12"
        + struct.pack("<H", 255)  # DEFAULT_COLLATION_FOR_UTF8MB4
        + b"\x13\x01"  # SQL_REQUIRE_PRIMARY_KEY
        + b"\x14\x00"  # DEFAULT_TABLE_ENCRYPTION
    )
    ev = parse(EventType.QUERY, query_body(b"CREATE TABLE t (a INT)", status=status))
    assert isinstance(ev, QueryEvent)
    s = ev.status
    assert s.flags2 == 0x4000
    assert s.sql_mode == 1168113696
    assert (s.auto_increment_increment, s.auto_increment_offset) == (2, 1)
    assert (s.charset_client, s.collation_connection, s.collation_server) == (255, 255, 8)
    assert s.time_zone == "+02:00"
    assert s.catalog == "std"
    assert s.lc_time_names == 3
    assert s.charset_database == 33
    assert s.table_map_for_update == 5
    assert s.master_data_written == 99
    assert (s.invoker_user, s.invoker_host) == ("root", "localhost")
    assert s.updated_db_names == ("db1", "db2")
    assert s.microseconds == 123456
    assert s.explicit_defaults_for_timestamp is True
    assert s.ddl_xid == 77
    assert s.default_collation_for_utf8mb4 == 255
    assert s.sql_require_primary_key == 1
    assert s.default_table_encryption == 0
    assert s.unknown_code is None
    assert ev.query == "CREATE TABLE t (a INT)"


def test_query_mariadb_status_vars() -> None:
    status = (
        b"\x80"
        + (999).to_bytes(3, "little")  # HRNOW
        + b"\x81"
        + struct.pack("<Q", 31337)  # XID
        + b"\x82\x04"
        + struct.pack("<Q", 12)  # GTID_FLAGS3 with COMMIT_ALTER -> sa_seq_no
        + b"\x83\x02"
        + struct.pack("<HHHH", 33, 83, 45, 46)  # CHARACTER_SET_COLLATIONS
    )
    ev = parse(EventType.QUERY, query_body(b"ALTER TABLE t ADD b INT", status=status))
    assert isinstance(ev, QueryEvent)
    assert ev.status.microseconds == 999
    assert ev.status.xid == 31337
    assert (ev.status.gtid_flags3, ev.status.sa_seq_no) == (4, 12)
    assert ev.status.character_set_collations == ((33, 83), (45, 46))


def test_query_old_catalog_code_with_terminator() -> None:
    ev = parse(EventType.QUERY, query_body(b"BEGIN", status=b"\x02\x03std\x00\x00\x00\x00\x00\x00"))
    assert isinstance(ev, QueryEvent)
    assert ev.status.catalog == "std"
    assert ev.status.flags2 == 0


def test_query_unknown_status_var_stops_parsing_and_keeps_the_rest() -> None:
    status = b"\x00" + struct.pack("<I", 1) + b"\x7f\x01\x02\x03" + b"\x01" + bytes(8)
    ev = parse(EventType.QUERY, query_body(b"COMMIT", status=status))
    assert isinstance(ev, QueryEvent)
    assert ev.status.flags2 == 1
    assert ev.status.sql_mode is None
    assert ev.status.unknown_code == 0x7F
    assert ev.status.unparsed == b"\x7f\x01\x02\x03\x01" + bytes(8)
    assert ev.query == "COMMIT"


def test_query_commit_ts_codes_are_not_parsed_like_mysql() -> None:
    ev = parse(EventType.QUERY, query_body(b"BEGIN", status=b"\x0e\x01\x02"))
    assert isinstance(ev, QueryEvent)
    assert ev.status.unknown_code == 14


def test_query_updated_db_names_over_max_has_no_names() -> None:
    ev = parse(EventType.QUERY, query_body(b"BEGIN", status=b"\x0c\xfe"))
    assert isinstance(ev, QueryEvent)
    assert ev.status.updated_db_names == ()


def test_query_status_var_running_past_its_block_is_truncated() -> None:
    with pytest.raises(TruncatedError, match="sql_mode"):
        parse(EventType.QUERY, query_body(b"BEGIN", status=b"\x01\x00\x00"))


def test_query_status_vars_len_beyond_body_is_truncated() -> None:
    body = struct.pack("<IIBHH", 1, 0, 0, 0, 5000) + b"\0BEGIN"
    with pytest.raises(TruncatedError, match="status_vars_len 5000") as info:
        parse(EventType.QUERY, body, offset=4242)
    assert info.value.source == "built"
    assert info.value.offset == 4242
    assert info.value.event_type == "QUERY"


def test_query_db_name_without_terminator_is_an_error() -> None:
    body = struct.pack("<IIBHH", 1, 0, 4, 0, 0) + b"testXBEGIN"
    with pytest.raises(BinlogFormatError, match="NUL"):
        parse(EventType.QUERY, body)


def test_query_text_decoded_in_client_charset() -> None:
    status = b"\x04" + struct.pack("<HHH", 8, 8, 8)  # latin1_swedish_ci
    ev = parse(EventType.QUERY, query_body(b"SELECT '\xe9'", status=status))
    assert isinstance(ev, QueryEvent)
    assert ev.query == "SELECT 'é'"


def test_query_compressed_mariadb() -> None:
    text = b"INSERT INTO t VALUES " + b",".join(b"(%d)" % i for i in range(200))
    compressed = bytes([0x80 | 2]) + len(text).to_bytes(2, "big") + zlib.compress(text)
    ev = parse(EventType.QUERY_COMPRESSED, query_body(compressed))
    assert isinstance(ev, QueryEvent)
    assert ev.query_bytes == text


def test_query_compressed_over_the_cap_is_refused() -> None:
    compressed = bytes([0x80 | 4]) + (10**9).to_bytes(4, "big") + zlib.compress(b"x")
    ctx = DecodeContext(max_uncompressed=1 << 20)
    with pytest.raises(BinlogFormatError, match="exceeds the limit"):
        parse_event(raw_event(EventType.QUERY_COMPRESSED, query_body(compressed)), ctx)


# --- small control events ------------------------------------------------------------------


def test_rotate() -> None:
    ev = parse(EventType.ROTATE, struct.pack("<Q", 4) + b"mysql-bin.000002")
    assert ev == RotateEvent(4, "mysql-bin.000002", is_artificial=False)


@pytest.mark.parametrize(
    ("log_pos", "timestamp", "flags"),
    [(0, 1700000000, 0), (120, 0, 0), (120, 1700000000, LOG_EVENT_ARTIFICIAL_F)],
)
def test_rotate_artificial(log_pos: int, timestamp: int, flags: int) -> None:
    ev = parse(
        EventType.ROTATE,
        struct.pack("<Q", 120) + b"binlog.000009",
        log_pos=log_pos,
        timestamp=timestamp,
        flags=flags,
    )
    assert ev == RotateEvent(120, "binlog.000009", is_artificial=True)


def test_rotate_without_name_is_an_error() -> None:
    with pytest.raises(BinlogFormatError, match="no file name"):
        parse(EventType.ROTATE, struct.pack("<Q", 4))


def test_xid_intvar_rand() -> None:
    assert parse(EventType.XID, struct.pack("<Q", 2**64 - 1)) == XidEvent(2**64 - 1)
    intvar = parse(EventType.INTVAR, b"\x02" + struct.pack("<Q", 539886539))
    assert intvar == IntvarEvent(2, 539886539)
    assert isinstance(intvar, IntvarEvent) and intvar.type_name == "INSERT_ID"
    assert parse(EventType.RAND, struct.pack("<QQ", 1, 2)) == RandEvent(1, 2)


@pytest.mark.parametrize("type_code", [EventType.XID, EventType.INTVAR, EventType.RAND])
def test_short_fixed_bodies_are_truncated(type_code: int) -> None:
    with pytest.raises(TruncatedError):
        parse(type_code, b"\x01\x02\x03")


def user_var(name: bytes, tail: bytes) -> bytes:
    return struct.pack("<I", len(name)) + name + tail


def test_user_var_values() -> None:
    null = parse(EventType.USER_VAR, user_var(b"a", b"\x01"))
    assert isinstance(null, UserVarEvent) and null.is_null and null.value is None
    text = parse(
        EventType.USER_VAR, user_var(b"s", b"\x00\x00" + struct.pack("<II", 33, 3) + b"abc\x00")
    )
    assert isinstance(text, UserVarEvent)
    assert (text.name, text.value, text.flags) == ("s", "abc", 0)
    real = parse(
        EventType.USER_VAR,
        user_var(b"r", b"\x00\x01" + struct.pack("<II", 63, 8) + struct.pack("<d", 2.5)),
    )
    assert isinstance(real, UserVarEvent) and real.value == 2.5 and real.flags is None
    signed = parse(
        EventType.USER_VAR,
        user_var(b"i", b"\x00\x02" + struct.pack("<II", 63, 8) + struct.pack("<q", -5) + b"\x00"),
    )
    assert isinstance(signed, UserVarEvent) and signed.value == -5
    unsigned = parse(
        EventType.USER_VAR,
        user_var(
            b"u", b"\x00\x02" + struct.pack("<II", 63, 8) + struct.pack("<Q", 2**64 - 1) + b"\x01"
        ),
    )
    assert isinstance(unsigned, UserVarEvent) and unsigned.value == 2**64 - 1
    binary = parse(
        EventType.USER_VAR, user_var(b"b", b"\x00\x00" + struct.pack("<II", 63, 2) + b"\xff\x00")
    )
    assert isinstance(binary, UserVarEvent) and binary.value == b"\xff\x00"


def test_user_var_decimal() -> None:
    # precision 5, scale 2, then decimal2bin of 123.45 (an int group of 2 bytes, one frac byte)
    raw = bytes([5, 2]) + bytes([0x80, 0x7B, 0x2D])
    ev = parse(EventType.USER_VAR, user_var(b"d", b"\x00\x04" + struct.pack("<II", 63, 5) + raw))
    assert isinstance(ev, UserVarEvent)
    assert ev.raw_value == raw
    assert ev.value == Decimal("123.45")
    with pytest.raises(BinlogFormatError, match="precision/scale 5/6"):
        parse(
            EventType.USER_VAR,
            user_var(b"d", b"\x00\x04" + struct.pack("<II", 63, 5) + bytes([5, 6, 0, 0, 0])),
        )


def test_user_var_unknown_type_is_an_error() -> None:
    with pytest.raises(BinlogFormatError, match="unknown value type 9"):
        parse(EventType.USER_VAR, user_var(b"x", b"\x00\x09" + struct.pack("<II", 63, 0)))


def test_incident_heartbeats_rows_query() -> None:
    assert parse(EventType.INCIDENT, b"\x01\x00\x0bLOST_EVENTS") == IncidentEvent(1, "LOST_EVENTS")
    assert parse(EventType.HEARTBEAT, b"binlog.000003", log_pos=4567) == HeartbeatEvent(
        "binlog.000003", 4567
    )
    v2 = b"\x01" + packed(13) + b"binlog.000003" + b"\x02\x03" + packed(70000) + b"\x00"
    assert parse(EventType.HEARTBEAT_V2, v2) == HeartbeatEvent("binlog.000003", 70000)
    assert parse(EventType.ROWS_QUERY, b"\x05" + b"x" * 300) == RowsQueryEvent("x" * 300)


def test_xa_prepare() -> None:
    body = b"\x00" + struct.pack("<III", 1, 3, 2) + b"abcde"
    assert parse(EventType.XA_PREPARE, body) == XaPrepareEvent(False, 1, b"abc", b"de")
    with pytest.raises(BinlogFormatError, match="exceed 64"):
        parse(EventType.XA_PREPARE, b"\x00" + struct.pack("<III", 1, 65, 0))


def test_unknown_type_codes_are_kept_raw() -> None:
    assert parse(200, b"\x01\x02") == UnknownEvent(200, b"\x01\x02")
    assert parse(EventType.IGNORABLE, b"pad") == UnknownEvent(EventType.IGNORABLE, b"pad")


# --- GTIDs ---------------------------------------------------------------------------------


def gtid_body(gno: int, tail: bytes = b"") -> bytes:
    return b"\x01" + SID.bytes + struct.pack("<Q", gno) + tail


def test_gtid_mysql_56_has_no_logical_clock() -> None:
    ev = parse(EventType.GTID, gtid_body(7))
    assert ev == GtidEvent(1, SID, 7)
    assert isinstance(ev, GtidEvent) and ev.gtid == MysqlGtid(SID, 7)


def test_gtid_mysql_80_with_original_timestamp_and_versions() -> None:
    immediate, original = 1714534357425326, 1714534357000000
    tail = (
        b"\x02"
        + struct.pack("<QQ", 5, 6)
        + (immediate | 1 << 55).to_bytes(7, "little")
        + original.to_bytes(7, "little")
        + packed(300)
        + struct.pack("<I", 80036 | 1 << 31)
        + struct.pack("<I", 80035)
    )
    ev = parse(EventType.GTID, gtid_body(9, tail))
    assert ev == GtidEvent(1, SID, 9, 2, 5, 6, immediate, original, 300, 80036, 80035, None)


def test_gtid_same_timestamps_when_high_bit_clear() -> None:
    tail = b"\x02" + struct.pack("<QQ", 0, 1) + (1000).to_bytes(7, "little") + packed(250)
    ev = parse(EventType.ANONYMOUS_GTID, b"\x00" + bytes(16) + bytes(8) + tail)
    assert isinstance(ev, GtidEvent)
    assert ev.is_anonymous and ev.gtid is None
    assert (ev.immediate_commit_timestamp, ev.original_commit_timestamp) == (1000, 1000)
    assert ev.transaction_length == 250
    assert ev.immediate_server_version is None


def test_gtid_invalid_gnos() -> None:
    with pytest.raises(BinlogFormatError, match="invalid gno 0"):
        parse(EventType.GTID, gtid_body(0))
    with pytest.raises(BinlogFormatError, match="expected 0"):
        parse(EventType.ANONYMOUS_GTID, gtid_body(3))


def test_gtid_cut_inside_the_logical_clock_is_truncated() -> None:
    with pytest.raises(TruncatedError, match="sequence_number"):
        parse(EventType.GTID, gtid_body(1, b"\x02" + bytes(10)))


def test_previous_gtids() -> None:
    gtids = MysqlGtidSet.parse(f"{SID}:1-5:7")
    ev = parse(EventType.PREVIOUS_GTIDS, gtids.encode())
    assert ev == PreviousGtidsEvent(gtids)
    with pytest.raises(TruncatedError):
        parse(EventType.PREVIOUS_GTIDS, gtids.encode()[:-3])
    with pytest.raises(TruncatedError):
        parse(EventType.PREVIOUS_GTIDS, struct.pack("<Q", 2**40))


def test_mariadb_gtid_plain_and_with_commit_id_and_xa() -> None:
    plain = parse(EventType.MARIADB_GTID, struct.pack("<QIB", 12, 0, 0x0C) + bytes(6), server_id=3)
    assert plain == MariadbGtidEvent(12, 0, 3, 0x0C, flags_extra=0)
    assert isinstance(plain, MariadbGtidEvent) and plain.gtid == MariadbGtid(0, 3, 12)
    assert not plain.is_standalone
    grouped = parse(
        EventType.MARIADB_GTID, struct.pack("<QIBQ", 13, 1, 0x03, 99) + b"\x00\x00", server_id=3
    )
    assert isinstance(grouped, MariadbGtidEvent)
    assert grouped.commit_id == 99 and grouped.is_standalone
    xa = parse(
        EventType.MARIADB_GTID,
        struct.pack("<QIB", 14, 0, 0x40)
        + struct.pack("<IBB", 1, 2, 1)
        + b"abc"
        + b"\x05\x02"
        + struct.pack("<Q", 8),
    )
    assert isinstance(xa, MariadbGtidEvent)
    assert xa.xid == (1, b"ab", b"c")
    assert (xa.flags_extra, xa.extra_engines, xa.sa_seq_no) == (5, 2, 8)


def test_mariadb_gtid_list() -> None:
    body = (
        struct.pack("<I", 2 | 1 << 28)
        + struct.pack("<IIQ", 0, 1, 100)
        + struct.pack("<IIQ", 5, 2, 7)
    )
    ev = parse(EventType.MARIADB_GTID_LIST, body)
    assert ev == MariadbGtidListEvent((MariadbGtid(0, 1, 100), MariadbGtid(5, 2, 7)), 1)
    with pytest.raises(TruncatedError, match="3 GTIDs"):
        parse(EventType.MARIADB_GTID_LIST, struct.pack("<I", 3) + bytes(16))


# --- TRANSACTION_PAYLOAD -------------------------------------------------------------------


def inner_event(type_code: int, body: bytes, log_pos: int) -> bytes:
    return struct.pack("<IBIIIH", 1700000000, type_code, 1, 19 + len(body), log_pos, 0) + body


def payload_body(payload: bytes, compression: int, uncompressed: int | None) -> bytes:
    fields = b"\x02" + packed(len(packed(compression))) + packed(compression)
    if uncompressed is not None:
        fields += b"\x03" + packed(len(packed(uncompressed))) + packed(uncompressed)
    fields += b"\x01" + packed(len(packed(len(payload)))) + packed(len(payload)) + b"\x00"
    return fields + payload


def test_transaction_payload_zstd_and_inner_events() -> None:
    inner = inner_event(EventType.QUERY, query_body(b"BEGIN"), 0) + inner_event(
        EventType.XID, struct.pack("<Q", 55), 0
    )
    compressed = zstandard.ZstdCompressor().compress(inner)
    outer = raw_event(
        EventType.TRANSACTION_PAYLOAD, payload_body(compressed, 0, len(inner)), offset=274
    )
    ctx = DecodeContext()
    ev = parse_event(outer, ctx)
    assert isinstance(ev, TransactionPayloadEvent)
    assert (ev.compression_name, ev.uncompressed_size) == ("ZSTD", len(inner))
    events = [(r.offset, parse_event(r, ctx)) for r in iter_payload_events(outer, ev)]
    assert [o for o, _ in events] == [274, 274]
    assert isinstance(events[0][1], QueryEvent) and events[0][1].query == "BEGIN"
    assert events[1][1] == XidEvent(55)


def test_transaction_payload_uncompressed() -> None:
    inner = inner_event(EventType.XID, struct.pack("<Q", 1), 0)
    outer = raw_event(EventType.TRANSACTION_PAYLOAD, payload_body(inner, 255, None))
    ev = parse_event(outer, DecodeContext())
    assert isinstance(ev, TransactionPayloadEvent)
    assert [bytes(r.body) for r in iter_payload_events(outer, ev)] == [struct.pack("<Q", 1)]


def test_transaction_payload_over_the_cap_is_refused() -> None:
    big = bytes(1 << 16)
    compressed = zstandard.ZstdCompressor().compress(big)
    outer = raw_event(
        EventType.TRANSACTION_PAYLOAD, payload_body(compressed, 0, len(big)), offset=9
    )
    ev = parse_event(outer, DecodeContext())
    assert isinstance(ev, TransactionPayloadEvent)
    with pytest.raises(BinlogFormatError, match="exceeds the limit") as info:
        list(iter_payload_events(outer, ev, max_size=1024, source="f"))
    assert (info.value.source, info.value.offset) == ("f", 9)
    # a payload that lies about its size is stopped at the cap too
    lying = raw_event(EventType.TRANSACTION_PAYLOAD, payload_body(compressed, 0, 10))
    ev = parse_event(lying, DecodeContext())
    assert isinstance(ev, TransactionPayloadEvent)
    with pytest.raises(BinlogFormatError, match="exceeds the limit"):
        ev.decompress(max_size=1024)


def test_transaction_payload_bad_bytes() -> None:
    with pytest.raises(BinlogFormatError, match="lacks"):
        parse(EventType.TRANSACTION_PAYLOAD, b"\x00")
    with pytest.raises(BinlogFormatError, match="compression type 7"):
        parse(EventType.TRANSACTION_PAYLOAD, payload_body(b"x", 7, None))
    outer = raw_event(EventType.TRANSACTION_PAYLOAD, payload_body(b"not zstd", 0, 8))
    ev = parse_event(outer, DecodeContext())
    assert isinstance(ev, TransactionPayloadEvent)
    with pytest.raises(BinlogFormatError, match="zstd"):
        list(iter_payload_events(outer, ev))
    cut = raw_event(EventType.TRANSACTION_PAYLOAD, payload_body(b"\x01" * 10, 255, None))
    ev = parse_event(cut, DecodeContext())
    assert isinstance(ev, TransactionPayloadEvent)
    with pytest.raises(TruncatedError, match="less than an event header"):
        list(iter_payload_events(cut, ev))


# --- dispatch ------------------------------------------------------------------------------


def test_dispatch_turns_helper_errors_into_typed_errors() -> None:
    # TABLE_MAP is parsed by tablemap.py; the dispatch adds the location to its error.
    with pytest.raises(TruncatedError) as info:
        parse(EventType.TABLE_MAP, b"\x01\x00\x00", offset=77)
    assert (info.value.source, info.value.offset, info.value.event_type) == (
        "built",
        77,
        "TABLE_MAP",
    )


def test_table_map_is_remembered_by_id() -> None:
    body = (
        struct.pack("<Q", 42)[:6]
        + b"\x01\x00"
        + b"\x02db\x00"
        + b"\x01t\x00"
        + b"\x01\x03"
        + b"\x00"
        + b"\x00"
    )
    ctx = DecodeContext()
    tm = parse_event(raw_event(EventType.TABLE_MAP, body), ctx)
    assert ctx.table_maps[42] is tm


def test_rows_event_without_table_map_is_an_error() -> None:
    body = struct.pack("<Q", 42)[:6] + b"\x01\x00" + b"\x02\x00" + b"\x01\x01\x00"
    with pytest.raises(BinlogFormatError, match="table id 42 without a TABLE_MAP"):
        parse(EventType.WRITE_ROWS, body)
