"""DumpSplitter: a consumer takes packets off a dump before the event framer sees the rest.

The framer must see every packet the consumer leaves, whole and in order, with sequence
numbers it accepts; a wrong sequence number from the server must still be caught; an error
packet or the EOF packet reaches the framer; a transaction the consumer leaves under way
(MORE) is waited for, or handed over when it would not fit in the buffer.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from headwater.binlog._packets import EventFramer
from headwater.binlog.constants import EVENT_HEADER, EventType
from headwater.binlog.framing import DumpSplitter
from headwater.errors import BinlogFormatError, SourceError

SLOW, MORE, LIMIT = 0, 1, 2


def event(i: int, size: int = 40) -> bytes:
    """A QUERY-typed event carrying its number (CRC32 appended)."""
    body = struct.pack("<I", i) + bytes(size)
    head = EVENT_HEADER.pack(1_700_000_000, EventType.QUERY, 1, 19 + len(body) + 4, 1000 + i, 0)
    return head + body + struct.pack("<I", zlib.crc32(head + body))


def packets(events: list[bytes], *, eof: bool = True, bad_seq_at: int = -1) -> bytes:
    out = bytearray()
    payloads = [b"\0" + e for e in events] + ([b"\xfe\0\0\0\0"] if eof else [])
    for i, payload in enumerate(payloads):
        seq = (i + 1 + (1 if i == bad_seq_at else 0)) & 0xFF
        out += struct.pack("<I", len(payload) | seq << 24) + payload
    return bytes(out)


class Feed:
    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.pos = data, size, 0

    def __call__(self, view: memoryview) -> int:
        n = min(len(view), self.size, len(self.data) - self.pos)
        view[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


class TakeEvenNumbered:
    """A consumer that takes each packet whose event number is even, when whole."""

    def __init__(self) -> None:
        self.taken: list[int] = []

    def __call__(self, buf: bytearray, start: int, end: int, seq: int) -> tuple[int, int, int]:
        p = start
        while end - p >= 4:
            length = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16
            if p + 4 + length > end:
                return MORE, p, seq
            if buf[p + 3] != seq or length < 24:
                return SLOW, p, seq
            number = struct.unpack_from("<I", buf, p + 5 + 19)[0]
            if number % 2:
                return SLOW, p, seq
            self.taken.append(number)
            p += 4 + length
            seq = (seq + 1) & 0xFF
        return MORE, p, seq


def framed_numbers(framer: EventFramer) -> list[int]:
    return [struct.unpack_from("<I", raw.data, 19)[0] for *_pos, raw in framer.events()]


@pytest.mark.parametrize("read_size", [1, 7, 100, 1 << 20])
def test_the_framer_sees_every_packet_the_consumer_leaves(read_size: int) -> None:
    # 600 events: the sequence number wraps around twice on both sides of the splitter.
    data = packets([event(i) for i in range(600)])
    consumer = TakeEvenNumbered()
    splitter = DumpSplitter(
        Feed(data, read_size), consumer, ready=lambda: True, abandon=lambda: None
    )
    framer = EventFramer(splitter.recv_into, file="b.000001")
    assert framed_numbers(framer) == list(range(1, 600, 2))
    assert consumer.taken == list(range(0, 600, 2))
    assert framer.finished
    assert splitter.bytes_read == len(data)
    assert splitter.bytes_consumed + framer.bytes_received == len(data)


def test_a_wrong_sequence_number_from_the_server_is_still_caught() -> None:
    data = packets([event(i) for i in range(10)], bad_seq_at=5)
    splitter = DumpSplitter(
        Feed(data, 1 << 20), TakeEvenNumbered(), ready=lambda: True, abandon=lambda: None
    )
    framer = EventFramer(splitter.recv_into, file="b.000001")
    with pytest.raises(BinlogFormatError, match="packet sequence"):
        framed_numbers(framer)


def test_an_error_packet_reaches_the_framer() -> None:
    data = packets([event(0), event(1)], eof=False)
    err = b"\xff" + struct.pack("<H", 1236) + b"#HY000" + b"purged"
    data += struct.pack("<I", len(err) | 3 << 24) + err
    splitter = DumpSplitter(
        Feed(data, 1 << 20), TakeEvenNumbered(), ready=lambda: True, abandon=lambda: None
    )
    framer = EventFramer(splitter.recv_into, file="b.000001")
    with pytest.raises(SourceError, match=r"server error 1236.*purged"):
        framed_numbers(framer)


def test_a_transaction_too_large_for_the_buffer_is_handed_to_the_framer() -> None:
    abandoned: list[int] = []

    def large_transaction(buf: bytearray, start: int, end: int, seq: int) -> tuple[int, int, int]:
        """Events 0-9 are one transaction of 30 KB (twice the buffer), never whole."""
        if end - start < 4 or end - start < 4 + (buf[start] | buf[start + 1] << 8):
            return MORE, start, seq  # the packet is not whole
        length = buf[start] | buf[start + 1] << 8
        if length >= 24 and struct.unpack_from("<I", buf, start + 5 + 19)[0] < 10:
            return MORE, start, seq
        return SLOW, start, seq

    data = packets([event(i, size=3000) for i in range(20)])
    splitter = DumpSplitter(
        Feed(data, 1000),
        large_transaction,
        ready=lambda: True,
        abandon=lambda: abandoned.append(1),
        buffer_size=16 * 1024,
        min_read=1024,
    )
    framer = EventFramer(splitter.recv_into, file="b.000001")
    assert framed_numbers(framer) == list(range(20))
    assert abandoned  # it waited for more until half the buffer was full, then gave up


def test_nothing_is_offered_while_the_event_path_is_inside_a_transaction() -> None:
    offered: list[int] = []

    def consume(buf: bytearray, start: int, end: int, seq: int) -> tuple[int, int, int]:
        offered.append(start)
        return SLOW, start, seq

    data = packets([event(i) for i in range(5)])
    splitter = DumpSplitter(Feed(data, 1 << 20), consume, ready=lambda: False, abandon=lambda: None)
    framer = EventFramer(splitter.recv_into, file="b.000001")
    assert framed_numbers(framer) == list(range(5))
    assert offered == []
