"""MySQL's variable-length integers (the ``mysql::serialization`` library, MySQL 8.3+).

No I/O and no imports from headwater: :mod:`headwater.position` (tags in encoded GTID sets)
and :mod:`headwater.binlog._serialization` (GTID_TAGGED events) both use it.

The format (MySQL ``libs/mysql/serialization/variable_length_integers.h`` and the library's
``readme.md``): 1 to 9 bytes, little-endian. The number of trailing one bits of the first
byte, plus one, is the number of bytes. With 1-8 bytes the value is the whole little-endian
word shifted right by that count; with 9 bytes (first byte 0xff) the value is the 8 bytes
after the first. Signed integers are zig-zag encoded first: ``x >= 0 -> x << 1``,
``x < 0 -> ((-(x + 1)) << 1) | 1``.

Invariant: :func:`read_uint` accepts exactly what MySQL's ``read_varlen_bytes_unsigned``
accepts for a 64-bit value, and :func:`encode_uint` writes what ``write_varlen_bytes``
writes (the shortest form), so encode/read round-trip byte for byte.
"""

from __future__ import annotations

__all__ = ["VarlenError", "encode_int", "encode_uint", "read_int", "read_uint"]

_U64 = (1 << 64) - 1


class VarlenError(ValueError):
    """The bytes end inside a variable-length integer."""


def read_uint(data: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """The unsigned integer at ``pos`` and the position after it."""
    if pos >= len(data):
        raise VarlenError(f"variable-length integer expected at byte {pos}, found the end")
    first = data[pos]
    n = 1
    while n < 9 and first & (1 << (n - 1)):
        n += 1
    if pos + n > len(data):
        raise VarlenError(
            f"variable-length integer of {n} bytes at byte {pos} runs past the end"
            f" ({len(data) - pos} bytes left)"
        )
    if n == 1:
        return first >> 1, pos + 1
    rest = int.from_bytes(bytes(data[pos + 1 : pos + n]), "little")
    if n == 9:
        return rest, pos + 9
    return (first >> n) | (rest << (8 - n)), pos + n


def read_int(data: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """The signed (zig-zag) integer at ``pos`` and the position after it."""
    raw, end = read_uint(data, pos)
    value = raw >> 1
    return (~value if raw & 1 else value), end


def encode_uint(value: int) -> bytes:
    """The shortest encoding of ``0 <= value < 2**64``."""
    if not 0 <= value <= _U64:
        raise ValueError(f"{value} does not fit in an unsigned 64-bit integer")
    bits = value.bit_length()
    n = ((bits * 575) >> 12) + 1  # MySQL's get_size_integer_varlen_unsigned
    if n == 9:
        return b"\xff" + value.to_bytes(8, "little")
    word = (value << n) | ((1 << (n - 1)) - 1)
    return word.to_bytes(n, "little")


def encode_int(value: int) -> bytes:
    """The shortest encoding of a signed 64-bit integer (zig-zag, then unsigned)."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"{value} does not fit in a signed 64-bit integer")
    return encode_uint((value << 1) if value >= 0 else (((-(value + 1)) << 1) | 1))
