"""A bounds-checked little-endian reader over one event body.

Every read checks the remaining length first and raises :class:`TruncatedError` when the
body is shorter than the field it must contain, so event parsers never let ``struct.error``
or ``IndexError`` escape. Integers are little-endian, as everywhere in the binlog format
(MySQL ``libs/mysql/binlog/event/event_reader.h``), except where a caller says otherwise.
"""

from __future__ import annotations

import struct

from headwater.errors import BinlogFormatError, TruncatedError

__all__ = ["Cursor"]

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from


class Cursor:
    """Sequential reads from ``data[pos:end]``; ``what`` names a sub-structure in errors
    (the event type is added where the error is located)."""

    __slots__ = ("data", "end", "pos", "what")

    def __init__(
        self, data: bytes | memoryview, what: str = "", pos: int = 0, end: int | None = None
    ) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.what = what

    @property
    def _prefix(self) -> str:
        return f"{self.what}: " if self.what else ""

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def need(self, n: int, field: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise TruncatedError(
                f"{self._prefix}{field} needs {n} bytes at body offset {self.pos}, "
                f"{max(self.end - self.pos, 0)} left"
            )

    def u8(self, field: str) -> int:
        self.need(1, field)
        value = self.data[self.pos]
        self.pos += 1
        return value

    def u16(self, field: str) -> int:
        self.need(2, field)
        (value,) = _U16(self.data, self.pos)
        self.pos += 2
        return int(value)

    def u24(self, field: str) -> int:
        return self.uint(3, field)

    def u32(self, field: str) -> int:
        self.need(4, field)
        (value,) = _U32(self.data, self.pos)
        self.pos += 4
        return int(value)

    def u64(self, field: str) -> int:
        self.need(8, field)
        (value,) = _U64(self.data, self.pos)
        self.pos += 8
        return int(value)

    def uint(self, n: int, field: str, *, big_endian: bool = False) -> int:
        """An unsigned integer of ``n`` bytes (3 and 7 are common in the binlog)."""
        raw = self.take(n, field)
        return int.from_bytes(raw, "big" if big_endian else "little")

    def take(self, n: int, field: str) -> bytes:
        self.need(n, field)
        raw = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return raw

    def rest(self) -> bytes:
        raw = bytes(self.data[self.pos : self.end])
        self.pos = self.end
        return raw

    def skip(self, n: int, field: str) -> None:
        self.need(n, field)
        self.pos += n

    def packed(self, field: str) -> int:
        """A packed (length-encoded) integer, ``net_field_length_ll`` in MySQL
        ``mysys/pack.cc``: < 251 is the value; 252, 253, 254 prefix 2, 3, 8 bytes.
        251 (NULL in the client protocol) is not valid here."""
        first = self.u8(field)
        if first < 251:
            return first
        if first == 252:
            return self.uint(2, field)
        if first == 253:
            return self.uint(3, field)
        if first == 254:
            return self.uint(8, field)
        raise BinlogFormatError(f"{self._prefix}{field}: invalid packed integer prefix {first}")

    def string(self, n: int, field: str) -> str:
        """``n`` bytes decoded as UTF-8 (bad bytes replaced: names are informational)."""
        return self.take(n, field).decode("utf-8", "replace")
