"""Replication commands and the fast framer of a binlog dump stream. No sockets here.

Commands a replica sends (bodies without the command byte; PyMySQL's ``_execute_command``
writes the 4-byte packet header and the command byte in front)::

    COM_REGISTER_SLAVE (0x15)          MySQL sql/rpl_source.cc, MariaDB sql/repl_failsafe.cc
        server_id    u32
        host         u8 length + bytes     (SHOW SLAVE HOSTS "Host"; report_host)
        user         u8 length + bytes     (report_user)
        password     u8 length + bytes     (report_password; headwater always sends "")
        port         u16                   (report_port)
        rank         u32                   (rpl_recovery_rank, ignored since MySQL 5.5)
        master_id    u32                   (0: the server fills in its own server_id)

    COM_BINLOG_DUMP (0x12)             MySQL sql/rpl_source.cc com_binlog_dump,
        pos          u32                   MariaDB sql/sql_parse.cc (case COM_BINLOG_DUMP)
        flags        u16   BINLOG_DUMP_NON_BLOCK (1): end with an EOF packet at the end of
                           the log instead of waiting; MariaDB BINLOG_SEND_ANNOTATE_ROWS_EVENT
                           (2): send ANNOTATE_ROWS events
        server_id    u32
        filename     rest of the packet, no terminator ("" with MariaDB GTID dumps)

    COM_BINLOG_DUMP_GTID (0x1e)        MySQL sql/rpl_source.cc com_binlog_dump_gtid
        flags        u16   NON_BLOCK (1), BINLOG_THROUGH_POSITION (2), BINLOG_THROUGH_GTID (4)
        server_id    u32
        name_size    u32 + filename
        pos          u64
        data_size    u32 + Gtid_set::encode() bytes   (only with BINLOG_THROUGH_GTID)

The dump answer is a stream of MySQL packets: a 4-byte header (u24 payload length, u8
sequence number counting from 1 after the command) then the payload. A payload is

* ``0x00`` followed by one whole binlog event (header, body, checksum) -- an event of
  16 MiB - 1 bytes or more spans several packets: every packet of exactly 0xFFFFFF payload
  bytes is continued by the next, and the continuation packets carry raw event bytes with
  no 0x00 marker (MySQL sql-common/net_serv.cc my_net_write);
* ``0xFF`` an error packet: u16 errno, ``#`` + 5-byte SQLSTATE, message -- the dump is over;
* ``0xFE`` (payload shorter than 9 bytes) an EOF packet: a NON_BLOCK dump reached the end.

:class:`EventFramer` turns that stream into :class:`ClientEvent` values with the least
Python work per event: bytes arrive by ``recv_into`` into a bytearray, each packet and
event header is one ``struct`` unpack, and an event's bytes are a ``memoryview`` of that
buffer (zero copy). A buffer is never written again once events point into it: when it
fills up, the unparsed tail moves to a fresh buffer, and the old one lives as long as some
event still refers to it (then it is reused). Buffers are 1 MiB by default
(:data:`DEFAULT_BUFFER_SIZE`): the bytes a read writes are decoded while still in the
CPU's cache, and the few buffers in turn are faulted in once. With 8 MiB buffers each
fresh one cost a zeroing pass and a page fault per 4 KiB (framing bench/decode's quick
15 MB dump, replayed from memory: 15.5 ms, against 4.0 ms with 1 MiB), and saved no reads:
a read returns what the socket holds, a few hundred KiB at most. An event larger than a
buffer gets one of its size.

Positions. Every event says where the next event of its file starts (``log_pos``), so a
real event starts at ``log_pos - event_size``. Events the server makes up for the stream
(``log_pos == 0`` or ``LOG_EVENT_ARTIFICIAL_F``) have no place in a file: the fake ROTATE
that opens every dump and follows every switch of file (it names the file and the
position the stream continues from), MariaDB's GTID_LIST at the start of a GTID dump, the
FORMAT_DESCRIPTION re-sent when the dump starts after offset 4 (MariaDB sql/sql_repl.cc
send_format_descriptor_event, fake_rotate_event; MySQL sql/rpl_binlog_sender.cc). For
those, start and next are the same place: the position where the stream goes on, which is
their ``log_pos`` when that is not 0 (MariaDB's artificial GTID_LIST of a GTID dump points
past the transactions the dump skipped). HEARTBEAT
events (type 27, MySQL 8.0.26+ also HEARTBEAT_V2 41) are not binlog events at all: the
server sends them while idle, with the current file name as body and position in
``log_pos``; they are counted, optionally yielded, and never move the position.

Checksums. Until the first FORMAT_DESCRIPTION arrives (the fake ROTATE comes before it),
events carry the checksum the replica declared with ``@master_binlog_checksum``; after it,
the algorithm that FORMAT_DESCRIPTION names (MariaDB sql/sql_repl.cc: the dump thread's
``current_checksum_alg`` follows each file's FORMAT_DESCRIPTION).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import NamedTuple

# ISA-L's CRC32: the binlog's polynomial (zlib's), several times faster than zlib's own.
from isal.isal_zlib import crc32 as _crc32

from headwater.binlog.constants import (
    CHECKSUM_ALG_CRC32,
    EVENT_HEADER,
    EVENT_HEADER_SIZE,
    LOG_EVENT_ARTIFICIAL_F,
    EventType,
)
from headwater.binlog.framing import FormatDescription, RawEvent, event_type_name
from headwater.errors import (
    BinlogFormatError,
    ChecksumError,
    ConnectionLostError,
    SourceError,
    TruncatedError,
)
from headwater.position import BinlogCoordinate, MysqlGtidSet

__all__ = [
    "BINLOG_DUMP_NON_BLOCK",
    "BINLOG_SEND_ANNOTATE_ROWS_EVENT",
    "BINLOG_THROUGH_GTID",
    "COM_BINLOG_DUMP",
    "COM_BINLOG_DUMP_GTID",
    "COM_REGISTER_SLAVE",
    "DEFAULT_BUFFER_SIZE",
    "MAX_PACKET_LEN",
    "ClientEvent",
    "EventFramer",
    "ServerErrorPacket",
    "binlog_dump",
    "binlog_dump_gtid",
    "parse_error_packet",
    "register_slave",
]

COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E

#: Dump flags (MySQL include/mysql/binlog/.../binlog_event.h enum; MariaDB sql/log_event.h).
BINLOG_DUMP_NON_BLOCK = 0x01
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02  # MariaDB only; MySQL reads bit 2 as THROUGH_POSITION
BINLOG_THROUGH_GTID = 0x04  # MySQL COM_BINLOG_DUMP_GTID: a GTID set follows

#: A packet payload of this length is continued by the next packet.
MAX_PACKET_LEN = 0xFFFFFF

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_REGISTER_TAIL = struct.Struct("<HII")  # port, rank, master_id
_DUMP_HEAD = struct.Struct("<IHI")  # pos, flags, server_id
_DUMP_GTID_HEAD = struct.Struct("<HII")  # flags, server_id, name_size

_ROTATE = int(EventType.ROTATE)
_FDE = int(EventType.FORMAT_DESCRIPTION)
_HEARTBEATS = (int(EventType.HEARTBEAT), int(EventType.HEARTBEAT_V2))

#: Packet header, the 0x00 marker and the event header, read with one unpack.
_FAST_HEAD = struct.Struct("<IB" + EVENT_HEADER.format[1:])
_FAST_HEAD_SIZE = _FAST_HEAD.size  # 24
#: CRC-32 of any message followed by its own little-endian CRC-32: checking an event
#: whole against it needs no unpack of the stored checksum.
_CRC_RESIDUE = 0x2144DF1C
#: Event types the fast path leaves to the general one (they change the stream state).
_SLOW_TYPES = bytes(1 if t in (_FDE, _ROTATE, *_HEARTBEATS) else 0 for t in range(256))

#: Bytes of a receive buffer unless told otherwise (see the module docstring).
DEFAULT_BUFFER_SIZE = 1024 * 1024
#: Smallest free space worth a ``recv_into`` before moving to a fresh buffer.
_MIN_RECV = 64 * 1024
#: Old buffers kept for reuse.
_POOL_SIZE = 3


# --- commands -------------------------------------------------------------------------------


def _lenenc_short(value: bytes, what: str) -> bytes:
    if len(value) > 255:
        raise ValueError(f"{what} longer than 255 bytes")
    return bytes((len(value),)) + value


def register_slave(
    server_id: int, *, host: str = "", user: str = "", port: int = 0, master_id: int = 0
) -> bytes:
    """Body of COM_REGISTER_SLAVE. The report password is always empty: the server shows it
    in SHOW SLAVE HOSTS with --show-slave-auth-info, and it is not needed to register."""
    _check_server_id(server_id)
    return b"".join(
        (
            _U32.pack(server_id),
            _lenenc_short(host.encode(), "report host"),
            _lenenc_short(user.encode(), "report user"),
            _lenenc_short(b"", "report password"),
            _REGISTER_TAIL.pack(port, 0, master_id),
        )
    )


def binlog_dump(file: str, position: int, server_id: int, flags: int = 0) -> bytes:
    """Body of COM_BINLOG_DUMP. The position is u32: files past 4 GiB need a GTID dump."""
    _check_server_id(server_id)
    if not 0 <= position <= 0xFFFFFFFF:
        raise ValueError(f"binlog position {position} does not fit COM_BINLOG_DUMP's u32")
    return _DUMP_HEAD.pack(position, flags, server_id) + file.encode()


def binlog_dump_gtid(
    gtids: MysqlGtidSet, server_id: int, flags: int = 0, *, file: str = "", position: int = 4
) -> bytes:
    """Body of MySQL's COM_BINLOG_DUMP_GTID, with BINLOG_THROUGH_GTID set."""
    _check_server_id(server_id)
    name = file.encode()
    data = gtids.encode()
    return b"".join(
        (
            _DUMP_GTID_HEAD.pack(flags | BINLOG_THROUGH_GTID, server_id, len(name)),
            name,
            _U64.pack(position),
            _U32.pack(len(data)),
            data,
        )
    )


def _check_server_id(server_id: int) -> None:
    if not 1 <= server_id <= 0xFFFFFFFF:
        raise ValueError(f"server_id must be in 1..4294967295, got {server_id}")


class ServerErrorPacket(NamedTuple):
    errno: int
    sqlstate: str
    message: str


def parse_error_packet(payload: bytes | memoryview) -> ServerErrorPacket:
    """An ERR packet payload (starting at the 0xFF marker): errno, SQLSTATE, message."""
    data = bytes(payload)
    if len(data) < 3 or data[0] != 0xFF:
        raise BinlogFormatError(f"not an error packet: {data[:16].hex()}")
    (errno,) = _U16.unpack_from(data, 1)
    rest = data[3:]
    sqlstate = ""
    if rest[:1] == b"#":
        sqlstate, rest = rest[1:6].decode("ascii", "replace"), rest[6:]
    return ServerErrorPacket(errno, sqlstate, rest.decode("utf-8", "replace"))


# --- events ---------------------------------------------------------------------------------


class ClientEvent(NamedTuple):
    """One event of a dump and where it sits in the server's binary log.

    ``file``/``offset``: where the event starts (for an artificial event, the place where
    the stream continues). ``next_file``/``next_offset``: where the event after it starts,
    i.e. where to resume once this event is processed. ``raw.offset`` is the same start
    offset for real events and ``None`` for artificial ones and heartbeats.
    """

    file: str
    offset: int
    next_file: str
    next_offset: int
    raw: RawEvent

    @property
    def type_code(self) -> int:
        return self.raw.type_code

    @property
    def artificial(self) -> bool:
        return self.raw.offset is None

    @property
    def is_heartbeat(self) -> bool:
        return self.raw.type_code in _HEARTBEATS

    @property
    def coordinate(self) -> BinlogCoordinate:
        return BinlogCoordinate(self.file, self.offset)

    @property
    def next_coordinate(self) -> BinlogCoordinate:
        return BinlogCoordinate(self.next_file, self.next_offset)


ErrorMapper = Callable[[ServerErrorPacket], Exception]


def _default_error(packet: ServerErrorPacket) -> Exception:
    return SourceError(f"server error {packet.errno} ({packet.sqlstate}): {packet.message}")


def _default_close(message: str) -> Exception:
    return ConnectionLostError(message)


class EventFramer:
    """Frames the packets of one dump answer into :class:`ClientEvent` values.

    ``recv_into(view) -> int`` reads from the connection (0 means the peer closed it; a
    ``TimeoutError`` or ``OSError`` means it is lost). ``file``/``position`` is where the
    dump was asked to start (the fake ROTATE corrects it); ``checksum_alg`` the algorithm
    the replica declared. ``verify=False`` skips CRC checks (checksums are still stripped).
    ``on_error`` makes the exception for an error packet, ``on_close`` the one for a
    connection the server closed (default :class:`ConnectionLostError`). ``blocking``
    says the dump was asked to wait for new events: an EOF packet then means the server
    ended it (``on_close``) rather than the end of the log.
    """

    def __init__(
        self,
        recv_into: Callable[[memoryview], int],
        *,
        file: str = "",
        position: int = 4,
        checksum_alg: int = CHECKSUM_ALG_CRC32,
        verify: bool = True,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        source: str = "<stream>",
        include_heartbeats: bool = False,
        blocking: bool = False,
        on_error: ErrorMapper = _default_error,
        on_close: Callable[[str], Exception] = _default_close,
    ) -> None:
        if buffer_size < _MIN_RECV:
            raise ValueError(f"buffer_size must be at least {_MIN_RECV}")
        self._recv_into = recv_into
        self.file = file
        self.position = position
        self.checksum_alg = checksum_alg
        self.verify = verify
        self.buffer_size = buffer_size
        self.source = source
        self.include_heartbeats = include_heartbeats
        self.blocking = blocking
        self.on_error = on_error
        self.on_close = on_close
        self.format_description: FormatDescription | None = None
        self.heartbeats = 0
        self.last_heartbeat: BinlogCoordinate | None = None
        self.bytes_received = 0
        self.reads = 0  # recv_into calls that returned data
        self.finished = False  # an EOF packet ended a NON_BLOCK dump
        self._pool: list[bytearray] = []
        self.buffers_allocated = 1

    # The hot loop is one function on purpose: locals are fast, attribute look-ups are not.
    def events(self) -> Iterator[ClientEvent]:
        size = self.buffer_size
        buf = bytearray(size)
        view = memoryview(buf)
        start = 0  # first byte not yet framed
        end = 0  # end of the bytes received
        seq = 1
        unpack_u32 = _U32.unpack_from
        unpack_header = EVENT_HEADER.unpack_from
        crc32 = _crc32
        alg = self.checksum_alg
        verify = self.verify
        source = self.source
        file = self.file
        pos = self.position
        include_heartbeats = self.include_heartbeats
        blocking = self.blocking
        pending: bytearray | None = None  # event bytes of a multi-packet event so far
        unpack_fast = _FAST_HEAD.unpack_from
        new_tuple = tuple.__new__  # NamedTuple construction without the Python __new__
        slow_types = _SLOW_TYPES
        crc_on = alg == CHECKSUM_ALG_CRC32
        while True:
            # Frame every complete packet in buf[start:end].
            while end - start >= 4:
                if end - start >= _FAST_HEAD_SIZE:
                    # Fast path: the common event, whole in one packet, no bookkeeping
                    # beyond its position. Anything else takes the general path below.
                    word, marker, ts, tc, sid, ev_size, log_pos, flags = unpack_fast(buf, start)
                    length = word & 0xFFFFFF
                    stop = start + 4 + length
                    if stop > end:
                        break
                    if (
                        ev_size == length - 1
                        and word >> 24 == seq
                        and not marker
                        and length < MAX_PACKET_LEN
                        and pending is None
                        and not slow_types[tc]
                        and log_pos >= ev_size >= 23
                        and not flags & LOG_EVENT_ARTIFICIAL_F
                    ):
                        p = start + 5
                        start = stop
                        seq = (seq + 1) & 0xFF
                        offset = log_pos - ev_size
                        if crc_on:
                            if verify and crc32(view[p:stop]) != _CRC_RESIDUE:
                                raise ChecksumError(
                                    "CRC32 mismatch",
                                    source=source,
                                    offset=offset,
                                    event_type=event_type_name(tc),
                                )
                            data = view[p : stop - 4]
                        else:
                            data = view[p:stop]
                        pos = self.position = log_pos
                        yield new_tuple(
                            ClientEvent,
                            (
                                file,
                                offset,
                                file,
                                log_pos,
                                new_tuple(RawEvent, (offset, ts, tc, sid, log_pos, flags, data)),
                            ),
                        )
                        continue
                (word,) = unpack_u32(buf, start)
                length = word & 0xFFFFFF
                p = start + 4
                stop = p + length
                if stop > end:
                    break
                start = stop
                if word >> 24 != seq:
                    if length and buf[p] == 0xFF:
                        # MariaDB sends the ER_SERVER_SHUTDOWN/ER_CONNECTION_KILLED error
                        # with sequence 0 (see PyMySQL connections.py _read_packet).
                        raise self.on_error(parse_error_packet(view[p:stop]))
                    raise BinlogFormatError(
                        f"packet sequence {word >> 24}, expected {seq}", source=source
                    )
                seq = (seq + 1) & 0xFF
                if pending is not None or length == MAX_PACKET_LEN:
                    if pending is None:
                        if buf[p] != 0:
                            raise BinlogFormatError(
                                f"packet of 16 MiB starts with 0x{buf[p]:02x}", source=source
                            )
                        pending = bytearray(view[p + 1 : stop])
                    else:
                        pending += view[p:stop]
                    if length == MAX_PACKET_LEN:
                        continue
                    ev = memoryview(pending)
                    pending = None
                else:
                    if length == 0:
                        raise BinlogFormatError("empty packet in a dump", source=source)
                    marker = buf[p]
                    if marker != 0:
                        if marker == 0xFE and length < 9:
                            self._save(file, pos, alg)
                            if blocking:
                                # A blocking dump never ends by itself: the server ended
                                # it (MariaDB does so when it shuts down).
                                raise self.on_close(f"{source}: the server ended the dump")
                            self.finished = True
                            return
                        if marker == 0xFF:
                            self._save(file, pos, alg)
                            raise self.on_error(parse_error_packet(view[p:stop]))
                        raise BinlogFormatError(
                            f"packet starts with 0x{marker:02x}, expected 0x00", source=source
                        )
                    ev = view[p + 1 : stop]
                n = len(ev)
                if n < EVENT_HEADER_SIZE:
                    raise TruncatedError(
                        f"event of {n} bytes, shorter than its header", source=source
                    )
                ts, tc, sid, ev_size, log_pos, flags = unpack_header(ev)
                if ev_size != n:
                    raise BinlogFormatError(
                        f"event_size {ev_size} but the packet holds {n} bytes",
                        source=source,
                        event_type=event_type_name(tc),
                    )
                artificial = log_pos == 0 or flags & LOG_EVENT_ARTIFICIAL_F
                offset = None if artificial or log_pos < n else log_pos - n
                if tc == _FDE:
                    try:
                        fde = FormatDescription.parse(ev, source=source, offset=offset)
                    except BinlogFormatError as e:
                        raise e.located(source=source, offset=offset) from None
                    self.format_description = fde
                    alg = fde.checksum_alg
                    crc_on = alg == CHECKSUM_ALG_CRC32
                    data = ev
                elif alg == CHECKSUM_ALG_CRC32:
                    n -= 4
                    if n < EVENT_HEADER_SIZE:
                        raise TruncatedError(
                            "event shorter than header and checksum",
                            source=source,
                            offset=offset,
                            event_type=event_type_name(tc),
                        )
                    data = ev[:n]
                    if verify and crc32(data) != unpack_u32(ev, n)[0]:
                        raise ChecksumError(
                            "CRC32 mismatch",
                            source=source,
                            offset=offset,
                            event_type=event_type_name(tc),
                        )
                else:
                    data = ev
                if tc in _HEARTBEATS:
                    self.heartbeats += 1
                    self.last_heartbeat = BinlogCoordinate(
                        bytes(data[EVENT_HEADER_SIZE:]).decode("utf-8", "replace")
                        if tc == _HEARTBEATS[0]
                        else file,
                        log_pos,
                    )
                    if include_heartbeats:
                        raw = RawEvent(None, ts, tc, sid, log_pos, flags, data)
                        yield ClientEvent(file, pos, file, pos, raw)
                    continue
                raw = RawEvent(offset, ts, tc, sid, log_pos, flags, data)
                if tc == _ROTATE:
                    if n < EVENT_HEADER_SIZE + 8:
                        raise TruncatedError("ROTATE without its position", source=source)
                    (new_pos,) = _U64.unpack_from(data, EVENT_HEADER_SIZE)
                    new_file = bytes(data[EVENT_HEADER_SIZE + 8 :]).decode("utf-8", "replace")
                    if offset is None:
                        file, pos = new_file, new_pos
                        item = ClientEvent(file, pos, file, pos, raw)
                    else:
                        item = ClientEvent(file, offset, new_file, new_pos, raw)
                        file, pos = new_file, new_pos
                elif offset is None:
                    if artificial and log_pos:
                        # MariaDB's GTID_LIST at the start of a GTID dump says where the
                        # stream resumes after the skipped transactions (sql/sql_repl.cc).
                        pos = log_pos
                    item = ClientEvent(file, pos, file, pos, raw)
                else:
                    pos = log_pos
                    item = ClientEvent(file, offset, file, pos, raw)
                self.file = file
                self.position = pos
                yield item

            # Need more bytes. Move the unframed tail to another buffer when the free space
            # is small or the packet under way cannot fit (never overwrite bytes that
            # yielded events may still point into).
            need = 4
            if end - start >= 4:
                need = 4 + (unpack_u32(buf, start)[0] & 0xFFFFFF)
            if size - end < _MIN_RECV or start + need > size:
                fresh = self._spare(max(self.buffer_size, need + _MIN_RECV))
                fresh[: end - start] = view[start:end]
                # Drop every reference of ours into the old buffer, so that it can be
                # reused as soon as the consumer has dropped the events that point into it.
                ev = data = view = raw = item = None  # type: ignore[assignment]
                self._pool.append(buf)
                buf, view, size = fresh, memoryview(fresh), len(fresh)
                end -= start
                start = 0
            try:
                got = self._recv_into(view[end:])
            except TimeoutError:
                self._save(file, pos, alg)
                raise ConnectionLostError(
                    f"{source}: no event or heartbeat within the read timeout"
                ) from None
            except OSError as e:
                self._save(file, pos, alg)
                raise ConnectionLostError(f"{source}: connection lost: {e}") from None
            if got == 0:
                self._save(file, pos, alg)
                raise self.on_close(f"{source}: the server closed the connection")
            end += got
            self.bytes_received += got
            self.reads += 1

    def _spare(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes that no event points into any more.

        Fresh memory costs a page fault and the kernel's zeroing per page -- a full extra
        pass over the stream -- so buffers are reused once nothing exports them. A
        bytearray cannot change size while a memoryview of it is alive: shrinking one
        by a byte (and restoring it) is the test.
        """
        pool = self._pool
        for i, candidate in enumerate(pool):
            if len(candidate) < size:
                continue
            try:
                last = candidate.pop()
            except BufferError:
                continue  # some event still points into it
            candidate.append(last)
            del pool[i]
            return candidate
        if len(pool) > _POOL_SIZE:
            del pool[0]  # still exported: the events that hold it keep it alive
        self.buffers_allocated += 1
        return bytearray(size)

    def _save(self, file: str, pos: int, alg: int) -> None:
        self.file = file
        self.position = pos
        self.checksum_alg = alg
