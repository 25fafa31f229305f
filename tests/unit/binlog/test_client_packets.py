"""Replication commands and the dump framer, on bytes built here (no server).

Command layouts are checked field by field against the server code that reads them:
COM_REGISTER_SLAVE in MariaDB sql/repl_failsafe.cc ``register_slave`` (MySQL
sql/rpl_source.cc ``register_replica``), COM_BINLOG_DUMP in MariaDB sql/sql_parse.cc
(``case COM_BINLOG_DUMP``) and MySQL sql/rpl_source.cc ``com_binlog_dump``,
COM_BINLOG_DUMP_GTID in MySQL sql/rpl_source.cc ``com_binlog_dump_gtid``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from headwater.binlog._packets import (
    BINLOG_DUMP_NON_BLOCK,
    BINLOG_SEND_ANNOTATE_ROWS_EVENT,
    MAX_PACKET_LEN,
    ClientEvent,
    EventFramer,
    ServerErrorPacket,
    binlog_dump,
    binlog_dump_gtid,
    parse_error_packet,
    register_slave,
)
from headwater.binlog.client import PASSWORD_ENV, ClientOptions, options_from_url
from headwater.binlog.constants import CHECKSUM_ALG_CRC32, CHECKSUM_ALG_OFF, EventType
from headwater.errors import (
    BinlogFormatError,
    ChecksumError,
    ConfigError,
    ConnectionLostError,
    SourceError,
)
from headwater.position import BinlogCoordinate, MysqlGtidSet

# --- commands -------------------------------------------------------------------------------


def test_register_slave_layout() -> None:
    body = register_slave(4242, host="reader-1", user="repl", port=3307)
    # server_id u32, then host, user, password each as u8 length + bytes.
    assert struct.unpack_from("<I", body, 0) == (4242,)
    assert body[4] == 8 and body[5:13] == b"reader-1"
    assert body[13] == 4 and body[14:18] == b"repl"
    assert body[18] == 0  # report password: always empty
    # port u16, replication rank u32 (ignored), master_id u32 (0: the server's own).
    assert struct.unpack_from("<HII", body, 19) == (3307, 0, 0)
    assert len(body) == 19 + 10


def test_register_slave_rejects_long_report_host() -> None:
    with pytest.raises(ValueError, match="report host"):
        register_slave(1, host="h" * 256)


def test_binlog_dump_layout() -> None:
    flags = BINLOG_DUMP_NON_BLOCK | BINLOG_SEND_ANNOTATE_ROWS_EVENT
    body = binlog_dump("mysql-bin.000042", 1234567, 77, flags)
    # pos u32, flags u16, server_id u32, then the file name to the end of the packet.
    assert struct.unpack_from("<IHI", body, 0) == (1234567, 3, 77)
    assert body[10:] == b"mysql-bin.000042"


def test_binlog_dump_with_empty_file_name_for_mariadb_gtid() -> None:
    assert binlog_dump("", 4, 9) == struct.pack("<IHI", 4, 0, 9)


def test_binlog_dump_position_must_fit_u32() -> None:
    with pytest.raises(ValueError, match="u32"):
        binlog_dump("f.000001", 1 << 32, 1)


def test_binlog_dump_gtid_layout() -> None:
    gtids = MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7")
    body = binlog_dump_gtid(gtids, 99, BINLOG_DUMP_NON_BLOCK)
    # flags u16 (BINLOG_THROUGH_GTID = 4 added), server_id u32, name_size u32, name,
    # pos u64, data_size u32, data = Gtid_set::encode().
    flags, server_id, name_size = struct.unpack_from("<HII", body, 0)
    assert (flags, server_id, name_size) == (BINLOG_DUMP_NON_BLOCK | 4, 99, 0)
    (pos,) = struct.unpack_from("<Q", body, 10)
    assert pos == 4
    (data_size,) = struct.unpack_from("<I", body, 18)
    data = body[22:]
    assert data_size == len(data) == 8 + 16 + 8 + 2 * 16
    assert MysqlGtidSet.decode(data) == (gtids, data_size)


def test_binlog_dump_gtid_with_file_name() -> None:
    body = binlog_dump_gtid(MysqlGtidSet(), 5, file="binlog.000003", position=120)
    assert struct.unpack_from("<HII", body, 0) == (4, 5, 13)
    assert body[10:23] == b"binlog.000003"
    assert struct.unpack_from("<QI", body, 23) == (120, 8)
    assert body[35:] == struct.pack("<Q", 0)


@pytest.mark.parametrize("server_id", [0, -1, 1 << 32])
def test_commands_refuse_server_id_out_of_range(server_id: int) -> None:
    with pytest.raises(ValueError, match="server_id"):
        binlog_dump("f.000001", 4, server_id)


def test_parse_error_packet() -> None:
    payload = b"\xff" + struct.pack("<H", 1236) + b"#HY000" + b"Could not find first log file"
    assert parse_error_packet(payload) == ServerErrorPacket(
        1236, "HY000", "Could not find first log file"
    )


# --- building a dump stream -----------------------------------------------------------------

VERSION = b"10.11.19-MariaDB-log"
POST_HEADER_LENGTHS = bytes(range(1, 42))  # values do not matter to framing


def event(
    type_code: int,
    body: bytes,
    *,
    log_pos: int,
    flags: int = 0,
    timestamp: int = 1_700_000_000,
    crc: bool = True,
) -> bytes:
    """One event as the server sends it: header, body and (``crc``) its CRC32."""
    size = 19 + len(body) + (4 if crc else 0)
    data = struct.pack("<IBIIIH", timestamp, type_code, 1, size, log_pos, flags) + body
    return data + struct.pack("<I", zlib.crc32(data)) if crc else data


def fde(*, offset: int | None, alg: int = CHECKSUM_ALG_CRC32) -> bytes:
    """A FORMAT_DESCRIPTION (always ends with the algorithm byte and 4 checksum bytes)."""
    body = struct.pack("<H50sIB", 4, VERSION, 0, 19) + POST_HEADER_LENGTHS + bytes((alg,))
    size = 19 + len(body) + 4
    log_pos = 0 if offset is None else offset + size
    data = struct.pack("<IBIIIH", 1_700_000_000, EventType.FORMAT_DESCRIPTION, 1, size, log_pos, 0)
    data += body
    return data + struct.pack("<I", zlib.crc32(data) if alg == CHECKSUM_ALG_CRC32 else 0)


def rotate(file: str, position: int, *, log_pos: int = 0, crc: bool = True) -> bytes:
    flags = 0x20 if log_pos == 0 else 0
    ts = 0 if log_pos == 0 else 1_700_000_000
    body = struct.pack("<Q", position) + file.encode()
    return event(EventType.ROTATE, body, log_pos=log_pos, flags=flags, timestamp=ts, crc=crc)


def packets(payloads: list[bytes], first_seq: int = 1, *, eof: bool = False) -> bytes:
    """MySQL packets: u24 length, u8 sequence; payloads over 16 MiB - 1 are split.
    ``eof`` ends the stream with the EOF packet of a non-blocking dump."""
    if eof:
        payloads = [*payloads, EOF_PAYLOAD]
    out = bytearray()
    seq = first_seq
    for payload in payloads:
        rest = payload
        while True:
            chunk, rest = rest[:MAX_PACKET_LEN], rest[MAX_PACKET_LEN:]
            out += struct.pack("<I", len(chunk) | (seq << 24)) + chunk
            seq = (seq + 1) & 0xFF
            if len(chunk) < MAX_PACKET_LEN:
                break
    return bytes(out)


EOF_PAYLOAD = b"\xfe\x00\x00\x02\x00"  # 0xFE, warnings u16, status u16


def ok(ev: bytes) -> bytes:
    return b"\x00" + ev


class Stream:
    """A ``recv_into`` that hands out ``data`` in the chunk sizes given (then closes)."""

    def __init__(self, data: bytes, chunks: Callable[[int], int] | None = None) -> None:
        self.data = data
        self.pos = 0
        self.chunks = chunks or (lambda _: len(data))

    def __call__(self, view: memoryview) -> int:
        n = min(len(view), self.chunks(self.pos), len(self.data) - self.pos)
        view[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


def file_events() -> list[bytes]:
    """A binlog file's worth of events (offsets from 4) and the file's real ROTATE."""
    out = []
    pos = 4
    first = fde(offset=4)
    out.append(first)
    pos += len(first)
    for type_code, body in (
        (EventType.MARIADB_GTID, b"g" * 13),
        (EventType.QUERY, b"q" * 40),
        (EventType.TABLE_MAP, b"t" * 30),
        (EventType.WRITE_ROWS, b"w" * 300),
        (EventType.XID, b"x" * 8),
    ):
        ev = event(type_code, body, log_pos=pos + 19 + len(body) + 4)
        out.append(ev)
        pos += len(ev)
    out.append(rotate("mysql-bin.000002", 4, log_pos=pos + 19 + 8 + 16 + 4))
    return out


def dump_stream() -> tuple[bytes, list[tuple[str, str, int, str, int]]]:
    """Payloads of a dump from mysql-bin.000001:4 across a rotation, and what the framer
    must report for each event: (type, file, offset, next_file, next_offset)."""
    evs = file_events()
    heartbeat = event(EventType.HEARTBEAT, b"mysql-bin.000002", log_pos=290, timestamp=0)
    second_fde = fde(offset=4)
    query = event(EventType.QUERY, b"Q" * 20, log_pos=4 + len(second_fde) + 43)
    assert 4 + len(second_fde) + len(query) == 169
    payloads = [rotate("mysql-bin.000001", 4), *evs, rotate("mysql-bin.000002", 4)]
    payloads += [second_fde, heartbeat, query]
    expected = [("ROTATE", "mysql-bin.000001", 4, "mysql-bin.000001", 4)]
    offset = 4
    for ev in evs:
        name = EventType(ev[4]).name
        (log_pos,) = struct.unpack_from("<I", ev, 13)
        if name == "ROTATE":
            expected.append((name, "mysql-bin.000001", offset, "mysql-bin.000002", 4))
        else:
            expected.append((name, "mysql-bin.000001", offset, "mysql-bin.000001", log_pos))
        offset = log_pos
    expected += [
        ("ROTATE", "mysql-bin.000002", 4, "mysql-bin.000002", 4),
        ("FORMAT_DESCRIPTION", "mysql-bin.000002", 4, "mysql-bin.000002", 4 + len(second_fde)),
        ("QUERY", "mysql-bin.000002", 4 + len(second_fde), "mysql-bin.000002", 169),
    ]
    return packets([ok(p) for p in payloads], eof=True), expected


def frame(data: bytes, chunks: Callable[[int], int] | None = None, **kw: object) -> EventFramer:
    return EventFramer(Stream(data, chunks), buffer_size=64 * 1024, **kw)  # type: ignore[arg-type]


def summary(events: Iterator[ClientEvent]) -> list[tuple[str, str, int, str, int]]:
    return [(e.raw.type_name, e.file, e.offset, e.next_file, e.next_offset) for e in events]


# --- framing --------------------------------------------------------------------------------


def test_frames_a_dump_with_coordinates() -> None:
    data, expected = dump_stream()
    framer = frame(data, file="mysql-bin.000001", position=4)
    got = list(framer.events())
    assert summary(iter(got)) == expected
    assert framer.finished
    assert framer.heartbeats == 1
    assert framer.last_heartbeat == BinlogCoordinate("mysql-bin.000002", 290)
    assert framer.format_description is not None
    assert framer.format_description.server_version == VERSION.decode()
    # checksums stripped, FORMAT_DESCRIPTION kept whole, offsets only on real events
    evs = file_events()
    assert [bytes(e.raw.data) for e in got[1:8]] == [evs[0]] + [ev[:-4] for ev in evs[1:]]
    assert got[0].raw.offset is None and got[0].artificial
    assert [e.raw.offset for e in got[1:3]] == [4, got[1].next_offset]


def test_frames_identically_when_split_at_every_byte_offset() -> None:
    data, expected = dump_stream()
    for cut in range(1, len(data)):
        framer = frame(data, lambda pos, cut=cut: cut - pos if pos < cut else len(data))
        assert summary(framer.events()) == expected, f"split at byte {cut}"


def test_frames_identically_one_byte_at_a_time() -> None:
    data, expected = dump_stream()
    assert summary(frame(data, lambda _: 1).events()) == expected


def test_events_stay_valid_after_the_buffer_is_replaced() -> None:
    # 2000 events of ~1 KiB through a 64 KiB buffer: many fresh buffers; every event
    # yielded earlier must still hold its own bytes at the end.
    first = fde(offset=4)
    payloads = [rotate("f.000001", 4), first]
    pos = 4 + len(first)
    for i in range(2000):
        ev = event(EventType.WRITE_ROWS, bytes([i % 251]) * (1000 + i % 97), log_pos=0)
        ev = event(EventType.WRITE_ROWS, ev[19:-4], log_pos=pos + len(ev))
        payloads.append(ev)
        pos += len(ev)
    framer = frame(packets([ok(p) for p in payloads], eof=True), lambda _: 5000)
    got = list(framer.events())
    assert [bytes(e.raw.data) for e in got[2:]] == [p[:-4] for p in payloads[2:]]
    assert got[-1].next_offset == pos
    assert framer.buffers_allocated > 20  # none could be reused: the list holds them all


def test_buffers_are_reused_once_the_consumer_drops_their_events() -> None:
    first = fde(offset=4)
    payloads = [rotate("f.000001", 4), first]
    pos = 4 + len(first)
    for i in range(2000):
        ev = event(EventType.WRITE_ROWS, bytes([i % 251]) * 1000, log_pos=pos + 1023)
        payloads.append(ev)
        pos += len(ev)
    framer = frame(packets([ok(p) for p in payloads], eof=True), lambda _: 5000)
    expected = iter(payloads)
    for e in framer.events():  # each event checked, then dropped
        whole = next(expected)
        assert e.raw.data == (
            whole if e.raw.type_code == EventType.FORMAT_DESCRIPTION else whole[:-4]
        )
    # ~2 MB through 64 KiB buffers: without reuse that would take ~32 of them
    assert framer.buffers_allocated <= 3


@pytest.mark.parametrize("body_size", [2 * MAX_PACKET_LEN + 1000, MAX_PACKET_LEN - 1 - 19 - 4])
def test_event_spanning_several_packets(body_size: int) -> None:
    # The second size makes 0x00 + event exactly 16 MiB - 1: one full packet, then an
    # empty one that ends the event (MySQL sql-common/net_serv.cc my_net_write).
    first = fde(offset=4)
    big = event(EventType.WRITE_ROWS, b"\xab" * body_size, log_pos=4 + len(first) + body_size + 23)
    tail = event(EventType.XID, b"x" * 8, log_pos=4 + len(first) + len(big) + 31)
    data = packets([ok(rotate("f.000001", 4)), ok(first), ok(big), ok(tail)], eof=True)
    framer = EventFramer(Stream(data, lambda _: 1 << 20), buffer_size=4 << 20)
    got = list(framer.events())
    assert [e.raw.type_name for e in got] == ["ROTATE", "FORMAT_DESCRIPTION", "WRITE_ROWS", "XID"]
    assert got[2].raw.data == big[:-4]
    assert (got[2].offset, got[2].next_offset) == (4 + len(first), 4 + len(first) + len(big))
    assert got[3].offset == got[2].next_offset
    assert framer.finished


def test_crc_mismatch_raises_checksum_error_naming_the_offset() -> None:
    first = fde(offset=4)
    good = event(EventType.QUERY, b"q" * 40, log_pos=4 + len(first) + 63)
    bad = bytearray(good)
    bad[30] ^= 0x01
    data = packets([ok(rotate("f.000001", 4)), ok(first), ok(bytes(bad))])
    framer = frame(data)
    events = framer.events()
    assert [e.raw.type_name for e in (next(events), next(events))] == [
        "ROTATE",
        "FORMAT_DESCRIPTION",
    ]
    with pytest.raises(ChecksumError, match=f"offset {4 + len(first)}, QUERY: CRC32 mismatch"):
        next(events)


def test_unverified_framing_still_strips_checksums() -> None:
    first = fde(offset=4)
    bad = bytearray(event(EventType.QUERY, b"q" * 40, log_pos=4 + len(first) + 63))
    bad[30] ^= 0x01
    data = packets([ok(rotate("f.000001", 4)), ok(first), ok(bytes(bad))], eof=True)
    got = list(frame(data, verify=False).events())
    assert got[2].raw.data == bytes(bad[:-4])


def test_checksum_none_stream() -> None:
    first = fde(offset=4, alg=CHECKSUM_ALG_OFF)
    query = event(EventType.QUERY, b"q" * 40, log_pos=4 + len(first) + 59, crc=False)
    payloads = [rotate("f.000001", 4, crc=False), first, query]
    data = packets([ok(p) for p in payloads], eof=True)
    got = list(frame(data, checksum_alg=CHECKSUM_ALG_OFF).events())
    assert [bytes(e.raw.data) for e in got] == [payloads[0], first, query]
    assert got[2].coordinate == BinlogCoordinate("f.000001", 4 + len(first))


def test_artificial_event_with_log_pos_moves_the_position() -> None:
    # MariaDB's GTID_LIST at the start of a GTID dump: artificial, log_pos = resume point.
    first = fde(offset=4)
    gtid_list = event(EventType.MARIADB_GTID_LIST, b"l" * 16, log_pos=451, flags=0x20)
    data = packets([ok(rotate("f.000001", 4)), ok(first), ok(gtid_list)], eof=True)
    got = list(frame(data).events())
    assert (got[2].coordinate, got[2].next_coordinate, got[2].raw.offset) == (
        BinlogCoordinate("f.000001", 451),
        BinlogCoordinate("f.000001", 451),
        None,
    )


def test_heartbeats_are_yielded_only_on_request_and_never_move_the_position() -> None:
    first = fde(offset=4)
    heartbeat = event(EventType.HEARTBEAT, b"f.000001", log_pos=999, timestamp=0)
    data = packets([ok(rotate("f.000001", 4)), ok(first), ok(heartbeat)], eof=True)
    plain = frame(data)
    assert [e.raw.type_name for e in plain.events()] == ["ROTATE", "FORMAT_DESCRIPTION"]
    assert plain.heartbeats == 1
    shown = frame(data, include_heartbeats=True)
    got = list(shown.events())
    assert got[2].is_heartbeat and got[2].raw.offset is None
    assert (
        got[2].coordinate == got[2].next_coordinate == BinlogCoordinate("f.000001", 4 + len(first))
    )
    assert shown.position == 4 + len(first)


def test_error_packet_ends_the_dump_through_on_error() -> None:
    err = b"\xff" + struct.pack("<H", 1236) + b"#HY000Could not find first log file name"
    data = packets([ok(rotate("f.000009", 4)), err])
    seen: list[ServerErrorPacket] = []

    def on_error(packet: ServerErrorPacket) -> Exception:
        seen.append(packet)
        return SourceError("mapped")

    events = frame(data, on_error=on_error).events()
    assert next(events).file == "f.000009"
    with pytest.raises(SourceError, match="mapped"):
        next(events)
    assert seen == [ServerErrorPacket(1236, "HY000", "Could not find first log file name")]


def test_error_packet_with_sequence_zero_is_still_an_error() -> None:
    # MariaDB sends ER_SERVER_SHUTDOWN with sequence number 0 when it shuts down.
    err = b"\xff" + struct.pack("<H", 1053) + b"#08S01Server shutdown in progress"
    data = packets([ok(rotate("f.000001", 4))]) + packets([err], first_seq=0)
    with pytest.raises(SourceError, match="1053"):
        list(frame(data).events())


def test_wrong_sequence_number_is_a_format_error() -> None:
    data = packets([ok(rotate("f.000001", 4))], first_seq=3)
    with pytest.raises(BinlogFormatError, match="packet sequence 3, expected 1"):
        list(frame(data).events())


def test_event_size_must_match_the_packet() -> None:
    ev = bytearray(rotate("f.000001", 4))
    ev[9] += 1
    with pytest.raises(BinlogFormatError, match="event_size"):
        list(frame(packets([ok(bytes(ev))])).events())


def test_closed_connection_is_connection_lost() -> None:
    data = packets([ok(rotate("f.000001", 4))])
    framer = frame(data[:-3])
    with pytest.raises(ConnectionLostError, match="closed the connection"):
        list(framer.events())


def test_silent_connection_is_connection_lost() -> None:
    def recv_into(view: memoryview) -> int:
        raise TimeoutError

    with pytest.raises(ConnectionLostError, match="no event or heartbeat"):
        list(EventFramer(recv_into).events())


# --- options --------------------------------------------------------------------------------


def test_options_require_a_valid_server_id() -> None:
    with pytest.raises(TypeError):
        ClientOptions()  # type: ignore[call-arg]
    for bad in (0, -5, 1 << 32, True):
        with pytest.raises(ConfigError, match="server_id"):
            ClientOptions(server_id=bad)
    assert ClientOptions(server_id=(1 << 32) - 1).server_id == 4294967295


def test_options_hide_the_password() -> None:
    options = ClientOptions(server_id=3, password="s3cret-pw")
    assert "s3cret-pw" not in repr(options)


def test_silence_timeout_follows_the_heartbeat() -> None:
    assert ClientOptions(server_id=1, heartbeat_period=0.5).silence_timeout == 2.0
    assert ClientOptions(server_id=1, heartbeat_period=10).silence_timeout == 25.0
    assert ClientOptions(server_id=1, heartbeat_period=0).silence_timeout is None
    assert ClientOptions(server_id=1, read_timeout=3).silence_timeout == 3


def test_options_from_url_takes_the_password_from_arg_file_or_env(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    env = {PASSWORD_ENV: "from-env"}
    url = "mysql://repl@db.example:3307"
    by_arg = options_from_url(url, server_id=9, password="from-arg", env=env)
    by_file = options_from_url(url, server_id=9, password_file=secret, env=env)
    by_env = options_from_url(url, server_id=9, env=env, blocking=False)
    assert (by_arg.host, by_arg.port, by_arg.user) == ("db.example", 3307, "repl")
    assert (by_arg.password, by_file.password, by_env.password) == (
        "from-arg",
        "from-file",
        "from-env",
    )
    assert by_env.blocking is False
    assert options_from_url("mariadb://u@h", server_id=1, env={}).port == 3306


def test_options_from_url_refuses_a_password_in_the_url() -> None:
    with pytest.raises(ConfigError, match=PASSWORD_ENV) as info:
        options_from_url("mysql://repl:hunter2@h:3306", server_id=1, env={})
    assert "hunter2" not in str(info.value)


def test_options_from_url_needs_a_user() -> None:
    with pytest.raises(ConfigError, match="no user"):
        options_from_url("mysql://h:3306", server_id=1, env={})
