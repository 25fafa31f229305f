"""Event framing: the common header, FORMAT_DESCRIPTION, checksums, and file iteration.

A binlog file is ``\\xfebin`` followed by events. Every event (binlog v4, MySQL 5.0 and
later, every MariaDB) starts with the 19-byte common header (see ``EVENT_HEADER`` in
``constants``)::

    timestamp  u32   seconds since the epoch of the statement that made the event
    type_code  u8    EventType
    server_id  u32   server that first wrote the event
    event_size u32   header + body + checksum
    log_pos    u32   offset of the next event in the file (0 in artificial events)
    flags      u16

and, when the FORMAT_DESCRIPTION of the file says the checksum algorithm is CRC32, ends
with a 4-byte CRC32 (zlib polynomial) of header and body. A :class:`RawEvent` is an event
whose checksum has been verified and stripped: ``data`` holds header and body only. The
one exception is FORMAT_DESCRIPTION itself, kept whole (its footer is the checksum
algorithm byte and the CRC), so that :meth:`FormatDescription.parse` can read it again.

Nothing here decodes event bodies except FORMAT_DESCRIPTION, which says how to frame the
rest (checksum algorithm, post-header lengths, server version).

:class:`DumpSplitter` works on the packets of a dump (``headwater.binlog._packets`` frames
them into events): it lets the reader's compiled fast path take whole transactions off
the received bytes before the event framer sees the rest.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

# ISA-L's CRC32 is the zlib polynomial (the binlog's, sql/log_event.cc checksum_crc32),
# 3-7x faster than zlib's on event-sized buffers.
from isal.isal_zlib import crc32

from headwater.binlog.constants import (
    BINLOG_MAGIC,
    CHECKSUM_ALG_CRC32,
    CHECKSUM_ALG_OFF,
    CHECKSUM_ALG_UNDEF,
    EVENT_HEADER,
    EVENT_HEADER_SIZE,
    EventType,
)
from headwater.errors import BinlogFormatError, ChecksumError, TruncatedError

__all__ = [
    "DumpSplitter",
    "FormatDescription",
    "RawEvent",
    "event_type_name",
    "iter_buffer_events",
    "iter_file_events",
    "strip_checksum",
]

_unpack_header = EVENT_HEADER.unpack_from
_FDE_FIXED = struct.Struct("<H50sIB")  # binlog_version, server_version, created, header_len
_CRC = struct.Struct("<I")
_FLAGS_OFFSET = 17  # low byte of the header's flags field
LOG_EVENT_BINLOG_IN_USE_F = 0x1
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def event_type_name(type_code: int) -> str:
    """``WRITE_ROWS`` for 30, ``EVENT_TYPE_200`` for a code this version does not know."""
    try:
        return EventType(type_code).name
    except ValueError:
        return f"EVENT_TYPE_{type_code}"


class RawEvent(NamedTuple):
    """One framed event, checksum verified and stripped.

    ``offset`` is where the event starts in its binlog file (``None`` when unknown, as for
    artificial events of a dump); ``data`` is the 19-byte header followed by the body.
    """

    offset: int | None
    timestamp: int
    type_code: int
    server_id: int
    log_pos: int
    flags: int
    data: memoryview

    @property
    def body(self) -> memoryview:
        return self.data[EVENT_HEADER_SIZE:]

    @property
    def type_name(self) -> str:
        return event_type_name(self.type_code)


@dataclass(frozen=True, slots=True)
class FormatDescription:
    """What a FORMAT_DESCRIPTION event says about the events after it.

    ``post_header_len[t - 1]`` is the post-header length of event type ``t``.
    ``checksum_alg`` is ``CHECKSUM_ALG_OFF`` or ``CHECKSUM_ALG_CRC32``.
    """

    binlog_version: int
    server_version: str
    created: int
    header_len: int
    post_header_len: bytes
    checksum_alg: int
    #: Bytes of the table id in TABLE_MAP and rows events: 4 in MySQL 5.1.0-5.1.15
    #: (TABLE_MAP post-header of 6), else 6 (log_event.cc, Table_map_log_event
    #: constructor). Derived from ``post_header_len`` once: every rows event reads it.
    table_id_size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size = 4 if self.post_header_length(EventType.TABLE_MAP) == 6 else 6
        object.__setattr__(self, "table_id_size", size)

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()

    @property
    def checksum_size(self) -> int:
        return 4 if self.checksum_alg == CHECKSUM_ALG_CRC32 else 0

    def post_header_length(self, type_code: int) -> int:
        """Post-header length of ``type_code`` as this server writes it (0 if not listed)."""
        if 1 <= type_code <= len(self.post_header_len):
            return self.post_header_len[type_code - 1]
        return 0

    @classmethod
    def parse(
        cls, data: bytes | memoryview, *, source: str | None = None, offset: int | None = None
    ) -> FormatDescription:
        """Parse a whole FORMAT_DESCRIPTION event (header, body and any checksum).

        Servers that know checksums (MySQL 5.6.1+, MariaDB 5.3+) always end this event with
        the algorithm byte and 4 checksum bytes, even when the algorithm is OFF
        (Format_description_event constructor, libs/mysql/binlog/event/control_events.cpp).
        """
        view = memoryview(data)
        size = len(view)

        def fail(cls: type[BinlogFormatError], message: str) -> BinlogFormatError:
            return cls(message, source=source, offset=offset, event_type="FORMAT_DESCRIPTION")

        if size < EVENT_HEADER_SIZE + _FDE_FIXED.size:
            raise fail(TruncatedError, f"FORMAT_DESCRIPTION of {size} bytes is too short")
        version_no, raw_version, created, header_len = _FDE_FIXED.unpack_from(
            view, EVENT_HEADER_SIZE
        )
        if version_no != 4:
            raise fail(
                BinlogFormatError,
                f"binlog format version {version_no} is not supported (only v4, MySQL 5.0+)",
            )
        if header_len != EVENT_HEADER_SIZE:
            raise fail(BinlogFormatError, f"common header length {header_len}, expected 19")
        server_version = bytes(raw_version).split(b"\0", 1)[0].decode("ascii", "replace")
        rest = bytes(view[EVENT_HEADER_SIZE + _FDE_FIXED.size :])
        alg = CHECKSUM_ALG_UNDEF
        if _knows_checksums(server_version):
            if len(rest) < 5:
                raise fail(TruncatedError, "FORMAT_DESCRIPTION lacks its checksum footer")
            alg = rest[-5]
            if alg == CHECKSUM_ALG_CRC32:
                (stored,) = _CRC.unpack_from(rest, len(rest) - 4)
                # The server sets LOG_EVENT_BINLOG_IN_USE_F in this event's flags while the
                # file is open and clears it on close, without re-computing the CRC, which
                # is computed with the flag clear (Log_event_footer::event_checksum_test,
                # sql/log_event.cc). Verify the same way.
                signed = bytearray(view[: size - 4])
                signed[_FLAGS_OFFSET] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
                if crc32(signed) != stored:
                    raise fail(ChecksumError, "CRC32 mismatch")
            elif alg != CHECKSUM_ALG_OFF:
                raise fail(BinlogFormatError, f"unknown checksum algorithm {alg}")
            rest = rest[:-5]
        return cls(
            version_no,
            server_version,
            created,
            header_len,
            rest,
            CHECKSUM_ALG_OFF if alg == CHECKSUM_ALG_UNDEF else alg,
        )


def _knows_checksums(server_version: str) -> bool:
    """Checksum-aware versions: MySQL >= 5.6.1, MariaDB >= 5.3.0
    (checksum_version_split in MySQL's control_events.h; MariaDB's log_event.cc)."""
    m = _VERSION.match(server_version)
    if m is None:
        return False
    version = tuple(int(g) for g in m.groups())
    split = (5, 3, 0) if "mariadb" in server_version.lower() else (5, 6, 1)
    return version >= split


def strip_checksum(
    event: memoryview, alg: int, *, source: str | None = None, offset: int | None = None
) -> memoryview:
    """Verify and remove the trailing CRC32 of one whole event (no-op when ``alg`` is OFF)."""
    if alg != CHECKSUM_ALG_CRC32:
        return event
    end = len(event) - 4
    if end < EVENT_HEADER_SIZE:
        raise TruncatedError("event shorter than header and checksum", source=source, offset=offset)
    (stored,) = _CRC.unpack_from(event, end)
    if crc32(event[:end]) != stored:
        raise ChecksumError(
            "CRC32 mismatch", source=source, offset=offset, event_type=event_type_name(event[4])
        )
    return event[:end]


def iter_buffer_events(
    buf: bytes | memoryview | mmap.mmap,
    *,
    source: str = "<buffer>",
    start: int = 4,
    verify: bool = True,
) -> Iterator[RawEvent]:
    """Frame the events of a whole binlog file held in memory.

    The FORMAT_DESCRIPTION at offset 4 is always read first (it says whether events carry
    checksums), even when ``start`` is later; then framing jumps to ``start``, which must
    be the offset of an event (a later FORMAT_DESCRIPTION in between, as in a relay log
    after a server restart, is not seen). Events are yielded from ``start`` on; each
    ``data`` is a zero-copy view into ``buf``. A FORMAT_DESCRIPTION later in the file (after
    a server restart in a relay log) replaces the first one for the events after it.
    Raises :class:`TruncatedError` when the buffer ends inside an event and
    :class:`BinlogFormatError` when an event is malformed; both name the offset.
    """
    view = memoryview(buf)
    end = len(view)
    if end < 4 or view[:4] != BINLOG_MAGIC:
        raise BinlogFormatError(
            "not a binlog file (missing magic \\xfebin)", source=source, offset=0
        )
    fde: FormatDescription | None = None
    pos = 4
    if start < 4:
        raise ValueError(f"start offset {start} is inside the file magic")
    while pos < end:
        if end - pos < EVENT_HEADER_SIZE:
            raise TruncatedError(
                f"{end - pos} bytes left, less than an event header", source=source, offset=pos
            )
        ts, type_code, server_id, size, log_pos, flags = _unpack_header(view, pos)
        if size < EVENT_HEADER_SIZE:
            raise BinlogFormatError(
                f"event_size {size} is smaller than the header",
                source=source,
                offset=pos,
                event_type=event_type_name(type_code),
            )
        if pos + size > end:
            raise TruncatedError(
                f"event of {size} bytes but only {end - pos} left",
                source=source,
                offset=pos,
                event_type=event_type_name(type_code),
            )
        whole = view[pos : pos + size]
        # Nothing else vouches for the first event after a seek in a file without
        # checksums: in a binlog (not a relay log) log_pos is where the next event starts.
        if pos == start > 4 and fde is not None and not fde.checksum_size and log_pos != pos + size:
            raise BinlogFormatError(
                f"start offset {start} is not the start of an event "
                f"(header says event_size {size}, log_pos {log_pos})",
                source=source,
                offset=pos,
            )
        if type_code == EventType.FORMAT_DESCRIPTION:
            # Kept whole: its footer carries the checksum algorithm, and
            # FormatDescription.parse verifies the CRC itself.
            fde = FormatDescription.parse(whole, source=source, offset=pos)
            data = whole
        elif fde is None:
            if type_code == EventType.START_V3:
                raise BinlogFormatError(
                    "binlog v1/v3 (MySQL before 5.0) is not supported", source=source, offset=pos
                )
            raise BinlogFormatError(
                "first event is not FORMAT_DESCRIPTION",
                source=source,
                offset=pos,
                event_type=event_type_name(type_code),
            )
        elif verify:
            data = strip_checksum(whole, fde.checksum_alg, source=source, offset=pos)
        else:
            data = whole[: size - fde.checksum_size]
        if pos >= start:
            yield RawEvent(pos, ts, type_code, server_id, log_pos, flags, data)
            pos += size
        elif type_code == EventType.FORMAT_DESCRIPTION and start < end:
            # Seek, as mariadb-binlog --start-position does: the events in between are not
            # read. A start that is not an event boundary fails on the bytes found there.
            pos = start
        else:
            pos += size


def iter_file_events(
    path: str | os.PathLike[str], *, start: int = 4, verify: bool = True
) -> Iterator[RawEvent]:
    """Frame the events of a binlog file on disk (memory-mapped, zero-copy)."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise TruncatedError("empty file", source=name, offset=0)
        # Not closed explicitly: yielded views point into the map, which is unmapped when
        # the last of them is released.
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    yield from iter_buffer_events(mm, source=name, start=start, verify=verify)


class DumpSplitter:
    """Sits between a dump's socket and its :class:`~headwater.binlog._packets.EventFramer`
    and lets a compiled consumer take whole transactions off the stream first.

    ``recv_into(view)`` is the framer's read function: it reads the socket into its own
    buffer, and at a packet boundary where ``ready()`` is true (the event path is between
    transactions) offers the received bytes to ``consume(buf, start, end, seq)``, which
    returns ``(status, stop, seq)``: it took ``buf[start:stop]`` (``seq``, the packet
    sequence number expected at ``stop``), and ``status`` says why it stopped (the
    ``headwater._native`` codes: SLOW -- the packet at ``stop`` is for the framer; MORE --
    the transaction at ``stop`` is not whole yet, offer it again with more bytes; LIMIT --
    offer again now). Everything the consumer leaves is handed to the framer one packet per
    call, so the framer never holds a packet the consumer could have taken, with its
    sequence number shifted by the packets the consumer took (the framer checks the
    numbers it sees, 1, 2, ... 255, 0, ...; a wrong number from the server stays wrong).
    ``abandon()`` is called when a transaction left under way (MORE) is handed to the
    framer instead: it would not fit in the buffer (half of it, ``buffer_size``).
    ``before_read()`` runs before every socket read (the reader appends its batch).

    Counters: ``bytes_read`` from the socket, ``bytes_consumed`` by the consumer.
    """

    def __init__(
        self,
        recv_into: Callable[[memoryview], int],
        consume: Callable[[bytearray, int, int, int], tuple[int, int, int]],
        *,
        ready: Callable[[], bool],
        abandon: Callable[[], None],
        before_read: Callable[[], None] | None = None,
        buffer_size: int = 16 * 1024 * 1024,
        min_read: int = 256 * 1024,
    ) -> None:
        self._recv = recv_into
        self._consume = consume
        self._ready = ready
        self._abandon = abandon
        self._before_read = before_read
        self._buf = bytearray(buffer_size)
        self._view = memoryview(self._buf)
        self._min_read = min_read
        self._start = 0  # first byte not consumed nor handed over
        self._end = 0  # end of the bytes read
        self._seq = 1  # sequence number of the packet at _start, as the server sent it
        self._given = 1  # sequence number the framer expects next
        self._left = 0  # bytes of the packet being handed over still to hand over
        self.enabled = True
        self.bytes_read = 0
        self.bytes_consumed = 0

    def _fill(self) -> int:
        """Read more bytes from the socket (moving the unconsumed ones to the front when
        the free space is short); 0 when the peer closed the connection."""
        start, end, size = self._start, self._end, len(self._buf)
        if start == end:
            self._start = self._end = start = end = 0
        elif size - end < self._min_read and start:
            self._buf[: end - start] = self._view[start:end]
            self._start, self._end = 0, end - start
            start, end = 0, end - start
        if self._before_read is not None:
            self._before_read()
        got = self._recv(self._view[end:])
        self._end += got
        self.bytes_read += got
        return got

    def recv_into(self, view: memoryview) -> int:
        buf = self._buf
        while True:
            if self._left:
                avail = self._end - self._start
                if not avail:
                    if not self._fill():
                        return 0
                    continue
                n = min(self._left, avail, len(view))
                s = self._start
                view[:n] = self._view[s : s + n]
                self._start = s + n
                self._left -= n
                return n
            if self.enabled and self._start < self._end and self._ready():
                start = self._start
                status, stop, seq = self._consume(buf, start, self._end, self._seq)
                self.bytes_consumed += stop - start
                self._start, self._seq = stop, seq
                if status == 2:  # LIMIT
                    continue
                if status == 1:  # MORE
                    if (self._end - stop) * 2 < len(buf):
                        if not self._fill():
                            return 0
                        continue
                    self._abandon()
            if self._end - self._start < 4:
                if not self._fill():
                    return 0
                continue
            s = self._start
            real = buf[s + 3]
            buf[s + 3] = (real - self._seq + self._given) & 0xFF
            self._seq = (self._seq + 1) & 0xFF
            self._given = (self._given + 1) & 0xFF
            self._left = 4 + (buf[s] | buf[s + 1] << 8 | buf[s + 2] << 16)
