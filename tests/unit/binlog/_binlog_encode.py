"""Test-side encoders for TABLE_MAP and rows events, written from the format descriptions
(MySQL sql/field.cc ``Field_*::pack``, strings/decimal.cc ``decimal2bin``,
sql-common/my_time.cc ``my_*_packed_to_binary``), independently of the decoders under test.

Each ``enc_*`` returns the bytes one column value takes in a row image.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal

DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def packed_int(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def enc_int(v: int, size: int, unsigned: bool = False) -> bytes:
    return v.to_bytes(size, "little", signed=not unsigned)


def enc_decimal(value: str | Decimal, precision: int, scale: int) -> bytes:
    """decimal2bin: 9-digit groups big endian, sign by inverting every byte."""
    d = Decimal(value)
    sign, digits, exp = d.as_tuple()
    text = "".join(map(str, digits))
    assert isinstance(exp, int)
    # Integer and fraction digit strings with exactly intg / scale digits.
    if exp >= 0:
        int_digits, frac_digits = text + "0" * exp, ""
    else:
        int_digits, frac_digits = text[:exp] or "0", text[exp:].rjust(-exp, "0")
    intg = precision - scale
    int_digits = int_digits.lstrip("0").rjust(intg, "0")
    frac_digits = frac_digits.ljust(scale, "0")[:scale]
    assert len(int_digits) == intg, (value, precision, scale)
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(int_digits[:lead]).to_bytes(DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(int_digits[i : i + 9]).to_bytes(4, "big")
    full = scale // 9 * 9
    for i in range(0, full, 9):
        out += int(frac_digits[i : i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac_digits[full:]).to_bytes(DIG2BYTES[scale % 9], "big")
    if sign:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


def _frac_bytes(usec: int, fsp: int) -> bytes:
    if fsp == 0:
        return b""
    if fsp <= 2:
        return (usec // 10000).to_bytes(1, "big")
    if fsp <= 4:
        return (usec // 100).to_bytes(2, "big")
    return usec.to_bytes(3, "big")


def enc_datetime2(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    usec: int = 0,
    fsp: int = 0,
) -> bytes:
    ymd = (year * 13 + month) << 5 | day
    packed = ymd << 17 | hour << 12 | minute << 6 | second
    return (packed + 0x8000000000).to_bytes(5, "big") + _frac_bytes(usec, fsp)


def enc_timestamp2(seconds: int, usec: int = 0, fsp: int = 0) -> bytes:
    return seconds.to_bytes(4, "big") + _frac_bytes(usec, fsp)


def _c_mod(a: int, b: int) -> int:
    """C's % (the remainder takes the dividend's sign)."""
    r = abs(a) % b
    return -r if a < 0 else r


def enc_time2(value: timedelta, fsp: int = 0) -> bytes:
    """my_time_packed_to_binary of a TIME value (sign, hours up to 838)."""
    total_us = value.days * 86400_000000 + value.seconds * 1000000 + value.microseconds
    neg = total_us < 0
    total_us = abs(total_us)
    secs, usec = divmod(total_us, 1000000)
    hours, rem = divmod(secs, 3600)
    minutes, seconds = divmod(rem, 60)
    nr = ((hours << 12 | minutes << 6 | seconds) << 24) + usec
    if neg:
        nr = -nr
    intpart = nr >> 24
    frac = _c_mod(nr, 1 << 24)
    if fsp == 0:
        return (intpart + 0x800000).to_bytes(3, "big")
    if fsp <= 2:
        return (intpart + 0x800000).to_bytes(3, "big") + (
            (frac // 10000 if frac >= 0 else -((-frac) // 10000)) & 0xFF
        ).to_bytes(1, "big")
    if fsp <= 4:
        f = frac // 100 if frac >= 0 else -((-frac) // 100)
        return (intpart + 0x800000).to_bytes(3, "big") + (f & 0xFFFF).to_bytes(2, "big")
    return (nr + 0x800000000000).to_bytes(6, "big")


def enc_date(year: int, month: int, day: int) -> bytes:
    return (day | month << 5 | year << 9).to_bytes(3, "little")


def enc_prefixed(data: bytes, nbytes: int) -> bytes:
    return len(data).to_bytes(nbytes, "little") + data


def enc_bit(value: int, nbytes: int) -> bytes:
    return value.to_bytes(nbytes, "big")


# --- MySQL binary JSON (just enough for tests: objects/arrays of strings, ints, literals)


def _json_value(v: object) -> tuple[int, bytes]:
    if v is None:
        return 0x04, b"\x00"
    if v is True:
        return 0x04, b"\x01"
    if v is False:
        return 0x04, b"\x02"
    if isinstance(v, int):
        return 0x09, struct.pack("<q", v)
    if isinstance(v, str):
        raw = v.encode()
        n = len(raw)
        length = bytearray()
        while True:
            b = n & 0x7F
            n >>= 7
            length.append(b | (0x80 if n else 0))
            if not n:
                break
        return 0x0C, bytes(length) + raw
    if isinstance(v, dict):
        return 0x00, _json_container(list(v.items()), True)
    if isinstance(v, list):
        return 0x02, _json_container([(None, x) for x in v], False)
    raise TypeError(v)


def _json_container(items: list[tuple[str | None, object]], is_object: bool) -> bytes:
    if is_object:
        items = sorted(items, key=lambda kv: (len(str(kv[0]).encode()), str(kv[0]).encode()))
    n = len(items)
    header = 4 + (4 * n if is_object else 0) + 3 * n
    keys = b""
    key_entries = b""
    offset = header
    if is_object:
        for k, _ in items:
            raw = str(k).encode()
            key_entries += struct.pack("<HH", offset + len(keys), len(raw))
            keys += raw
    offset = header + len(keys)
    values = b""
    value_entries = b""
    for _, v in items:
        t, data = _json_value(v)
        if t == 0x04:
            value_entries += bytes([t]) + data + b"\x00"
        else:
            value_entries += bytes([t]) + struct.pack("<H", offset + len(values))
            values += data
    size = header + len(keys) + len(values)
    return struct.pack("<HH", n, size) + key_entries + value_entries + keys + values


def enc_json(value: object) -> bytes:
    t, data = _json_value(value)
    return bytes([t]) + data


# --- events


def table_map_body(
    table_id: int,
    schema: str,
    table: str,
    types: Sequence[int],
    metas: Sequence[bytes],
    nullable: Sequence[bool] | None = None,
    optional: Sequence[tuple[int, bytes]] = (),
    flags: int = 1,
) -> bytes:
    n = len(types)
    nullable = nullable if nullable is not None else [True] * n
    meta = b"".join(metas)
    nulls = sum(1 << i for i, b in enumerate(nullable) if b).to_bytes((n + 7) // 8, "little")
    out = table_id.to_bytes(6, "little") + flags.to_bytes(2, "little")
    out += bytes([len(schema)]) + schema.encode() + b"\0"
    out += bytes([len(table)]) + table.encode() + b"\0"
    out += packed_int(n) + bytes(types) + packed_int(len(meta)) + meta + nulls
    for kind, value in optional:
        out += bytes([kind]) + packed_int(len(value)) + value
    return out


def bitmap(cols: Sequence[int], width: int) -> bytes:
    return sum(1 << i for i in cols).to_bytes((width + 7) // 8, "little")


def image(values: Sequence[bytes | None]) -> bytes:
    """A row image: null bitmap over the given present columns, then the non-NULL ones."""
    nulls = sum(1 << i for i, v in enumerate(values) if v is None)
    return nulls.to_bytes((len(values) + 7) // 8, "little") + b"".join(
        v for v in values if v is not None
    )


def rows_body(
    table_id: int,
    width: int,
    rows: bytes,
    present: Sequence[int] | None = None,
    present_after: Sequence[int] | None = None,
    *,
    v2: bool = True,
    update: bool = False,
    flags: int = 1,
    extra: bytes = b"",
) -> bytes:
    cols = list(range(width)) if present is None else present
    out = table_id.to_bytes(6, "little") + flags.to_bytes(2, "little")
    if v2:
        out += (2 + len(extra)).to_bytes(2, "little") + extra
    out += packed_int(width) + bitmap(cols, width)
    if update:
        after = list(range(width)) if present_after is None else present_after
        out += bitmap(after, width)
    return out + rows
