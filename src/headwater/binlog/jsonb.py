"""MySQL binary JSON to JSON text (the JSON diffs of partial updates are in ``jsondiff``).

A JSON column value in a row event is MySQL's binary JSON (``sql-common/json_binary.h``)::

    doc          ::= type value            (a value of length 0 is JSON null)
    type         ::= 0x00 small object | 0x01 large object | 0x02 small array
                   | 0x03 large array  | 0x04 literal (0x00 null, 0x01 true, 0x02 false)
                   | 0x05 int16 | 0x06 uint16 | 0x07 int32 | 0x08 uint32 | 0x09 int64
                   | 0x0a uint64 | 0x0b double | 0x0c utf8mb4 string | 0x0f opaque
    object       ::= count size key-entry* value-entry* key* value*
    array        ::= count size value-entry* value*
    count, size  ::= uint16 (small) | uint32 (large), little-endian
    key-entry    ::= key-offset (uint16 | uint32) key-length (uint16)
    value-entry  ::= type (offset (uint16 | uint32) | inlined value)
    string       ::= data-length utf8mb4-bytes
    opaque       ::= field-type (uint8) data-length bytes
    data-length  ::= 7 bits per byte, low bits first, high bit set = more bytes follow

Offsets are relative to the start of the enclosing object or array (after its type
byte). Literals and 16-bit integers are always inlined in the value entry, 32-bit integers
only in large containers. Object keys are stored sorted by length, then bytewise.

The text is what MySQL prints for ``CAST(col AS CHAR)`` (``Json_wrapper::to_string`` in
``sql-common/json_dom.cc``): ``", "`` and ``": "`` separators, keys in stored order,
strings escaped by ``double_quote``, doubles by ``my_gcvt`` plus ``.0`` when the result
looks like an integer, DECIMAL opaque values as bare numbers, DATE/TIME/DATETIME/TIMESTAMP
opaque values as quoted strings with six fraction digits, other opaque values as
``"base64:type<N>:<base64>"``.

Every function here is pure and raises :class:`~headwater.errors.BinlogFormatError` (and
nothing else) on bytes that do not parse; the caller adds file and offset.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from decimal import Decimal
from functools import lru_cache
from typing import NoReturn

from headwater.binlog.constants import ColumnType
from headwater.errors import BinlogFormatError

__all__ = [
    "JsonDiff",
    "JsonDiffOperation",
    "apply_json_diffs",
    "decode_json",
    "decode_json_value",
    "parse_json_diffs",
]

#: JSON_DOCUMENT_MAX_DEPTH (sql-common/json_syntax_check.h): nesting deeper than this is
#: refused by MySQL when it prints a document, so it is refused here too.
MAX_DEPTH = 100

_T_SMALL_OBJECT, _T_LARGE_OBJECT, _T_SMALL_ARRAY, _T_LARGE_ARRAY = 0x00, 0x01, 0x02, 0x03
_T_LITERAL, _T_INT16, _T_UINT16, _T_INT32, _T_UINT32 = 0x04, 0x05, 0x06, 0x07, 0x08
_T_INT64, _T_UINT64, _T_DOUBLE, _T_STRING, _T_OPAQUE = 0x09, 0x0A, 0x0B, 0x0C, 0x0F

_HEADER = (struct.Struct("<HH"), struct.Struct("<II"))  # count, size; small / large
_FIXED = {
    _T_INT16: struct.Struct("<h"),
    _T_UINT16: struct.Struct("<H"),
    _T_INT32: struct.Struct("<i"),
    _T_UINT32: struct.Struct("<I"),
    _T_INT64: struct.Struct("<q"),
    _T_UINT64: struct.Struct("<Q"),
    _T_DOUBLE: struct.Struct("<d"),
}
_UINT16 = struct.Struct("<H")
_UINT32 = struct.Struct("<I")
_UINT64 = struct.Struct("<Q")

_LITERAL_TEXT = ("null", "true", "false")
_LITERAL_VALUE = (None, True, False)

# Scalar types the value entry holds in place of an offset (json_binary.cc inlined_type).
_INLINED_SMALL = frozenset((_T_LITERAL, _T_INT16, _T_UINT16))
_INLINED_LARGE = frozenset((_T_LITERAL, _T_INT16, _T_UINT16, _T_INT32, _T_UINT32))


def _fail(message: str) -> NoReturn:
    raise BinlogFormatError(f"binary JSON: {message}")


# --- containers ---------------------------------------------------------------------


@lru_cache(maxsize=512)
def _entries_struct(large: bool, count: int, keys: bool) -> struct.Struct:
    """All key entries (offset, length) or value entries (type, offset) of a container."""
    if keys:
        return struct.Struct("<" + ("IH" if large else "HH") * count)
    return struct.Struct("<" + ("BI" if large else "BH") * count)


def _layout(
    buf: bytes, t: int, pos: int, end: int
) -> tuple[bool, int, int, tuple[int, ...], tuple[int, ...]]:
    """Check a container header: (large, size, header size, key entries, value entries).

    Mirrors the checks of json_binary.cc parse_array_or_object: the size fits the
    available bytes and the entries fit the size.
    """
    large = bool(t & 1)
    osz = 4 if large else 2
    if end - pos < 2 * osz:
        _fail("container header is truncated")
    count, size = _HEADER[large].unpack_from(buf, pos)
    if size > end - pos:
        _fail(f"container size {size} exceeds the {end - pos} bytes available")
    is_object = t < _T_SMALL_ARRAY
    header = 2 * osz + count * ((osz + 2 if is_object else 0) + 1 + osz)
    if header > size:
        _fail(f"{count} entries do not fit in a container of {size} bytes")
    at = pos + 2 * osz
    keys: tuple[int, ...] = ()
    if is_object:
        key_struct = _entries_struct(large, count, True)
        keys = key_struct.unpack_from(buf, at)
        at += key_struct.size
    values = _entries_struct(large, count, False).unpack_from(buf, at)
    return large, size, header, keys, values


def _key(buf: bytes, pos: int, header: int, size: int, offset: int, length: int) -> str:
    if offset < header or offset + length > size:
        _fail(f"key at offset {offset} length {length} is outside its object")
    return buf[pos + offset : pos + offset + length].decode()


def _inlined(t: int, raw: int, large: bool) -> int | bool | None:
    """The value of an inlined scalar from the raw little-endian offset field."""
    if t == _T_LITERAL:
        literal = raw & 0xFF
        if literal > 2:
            _fail(f"bad literal {literal:#x}")
        return _LITERAL_VALUE[literal]
    if t == _T_INT16:
        raw &= 0xFFFF
        return raw - 0x10000 if raw & 0x8000 else raw
    if t == _T_UINT16:
        return raw & 0xFFFF
    if t == _T_INT32:
        return raw - 0x100000000 if raw & 0x80000000 else raw
    return raw  # uint32, large containers only


def _value_offset(offset: int, header: int, size: int) -> int:
    # json_binary.cc Value::element: the value must lie after the entries, inside the
    # container.
    if offset < header or offset >= size:
        _fail(f"value offset {offset} is outside its container")
    return offset


# --- scalars ------------------------------------------------------------------------


def _varlen(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A data-length (json_binary.cc read_variable_length): at most 5 bytes, < 2**32."""
    length = 0
    for i in range(5):
        if pos + i >= end:
            _fail("length is truncated")
        b = buf[pos + i]
        length |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            if length > 0xFFFFFFFF:
                break
            return length, pos + i + 1
    _fail("length is too long")


def _scalar(buf: bytes, t: int, pos: int, end: int) -> object:
    """A scalar stored at buf[pos:end] (not inlined): str, int, float, bool, None, Decimal.

    Opaque values come back as the ``str`` MySQL prints for them (dates, base64), except
    DECIMAL, which is a :class:`~decimal.Decimal` printed bare.
    """
    if t == _T_STRING:
        length, pos = _varlen(buf, pos, end)
        if pos + length > end:
            _fail("string is truncated")
        return buf[pos : pos + length].decode()
    fixed = _FIXED.get(t)
    if fixed is not None:
        if end - pos < fixed.size:
            _fail(f"number of type {t:#x} is truncated")
        return fixed.unpack_from(buf, pos)[0]
    if t == _T_LITERAL:
        if pos >= end or buf[pos] > 2:
            _fail("bad literal")
        return _LITERAL_VALUE[buf[pos]]
    if t == _T_OPAQUE:
        if pos >= end:
            _fail("opaque value is truncated")
        field_type = buf[pos]
        length, pos = _varlen(buf, pos + 1, end)
        if pos + length > end:
            _fail("opaque value is truncated")
        return _opaque(field_type, buf[pos : pos + length])
    _fail(f"unknown value type {t:#x}")


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal_text(data: bytes) -> str:
    """DECIMAL opaque data: precision, scale, then strings/decimal.cc bin2decimal format.

    Printed as decimal2string does with no fixed precision: all ``scale`` fraction
    digits, no leading zeros, ``0`` before the point when the integer part is zero.
    """
    if len(data) < 2:
        _fail("DECIMAL is truncated")
    precision, scale = data[0], data[1]
    if not 0 < precision <= 65 or scale > 30 or scale > precision:
        _fail(f"bad DECIMAL({precision},{scale})")
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    size = (intg0 + frac0) * 4 + _DIG2BYTES[intg0x] + _DIG2BYTES[frac0x]
    if len(data) - 2 != size:
        _fail(f"DECIMAL({precision},{scale}) needs {size} bytes, has {len(data) - 2}")
    raw = bytearray(data[2:])
    # The top bit is the sign, set for positive numbers; negative numbers have every
    # bit inverted so that the bytes compare like the numbers.
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    groups: list[str] = []
    pos = 0
    for digits in [intg0x] * (intg0x > 0) + [9] * intg0 + [9] * frac0 + [frac0x] * (frac0x > 0):
        n = _DIG2BYTES[digits]
        value = int.from_bytes(raw[pos : pos + n], "big")
        pos += n
        if value >= 10**digits:
            _fail("DECIMAL digit group out of range")
        groups.append(f"{value:0{digits}d}")
    digits_text = "".join(groups)
    int_len = len(digits_text) - scale
    int_text = digits_text[:int_len].lstrip("0") or "0"
    text = int_text + "." + digits_text[int_len:] if scale else int_text
    # A negative zero is printed without its sign.
    return "-" + text if negative and digits_text.strip("0") else text


def _two(value: int) -> str:
    # my_time.cc format_two_digits: values outside 0..99 print as 00.
    return f"{value:02d}" if 0 <= value < 100 else "00"


def _temporal_text(field_type: int, data: bytes) -> str:
    """Packed temporal (sql-common/my_time.cc TIME_from_longlong_*_packed), printed by
    my_TIME_to_str with 6 fraction digits; DATE without a time part."""
    if len(data) != 8:
        _fail(f"temporal value of {len(data)} bytes, expected 8")
    packed = int.from_bytes(data, "little", signed=True)
    negative = packed < 0
    packed = abs(packed)
    micros = (packed % (1 << 24)) % 1_000_000
    whole = packed >> 24
    if field_type == ColumnType.TIME:
        hour = (whole >> 12) % (1 << 10)
        sign = "-" if negative else ""
        return f"{sign}{hour:02d}:{(whole >> 6) % 64:02d}:{whole % 64:02d}.{micros:06d}"
    ymd = whole >> 17
    year_month = ymd >> 5
    year = year_month // 13
    date = f"{_two(year // 100)}{_two(year % 100)}-{year_month % 13:02d}-{ymd % 32:02d}"
    if field_type == ColumnType.DATE:
        return date
    hms = whole % (1 << 17)
    return f"{date} {_two(hms >> 12)}:{(hms >> 6) % 64:02d}:{hms % 64:02d}.{micros:06d}"


_TEMPORAL = frozenset((ColumnType.DATE, ColumnType.TIME, ColumnType.DATETIME, ColumnType.TIMESTAMP))


def _opaque(field_type: int, data: bytes) -> str | Decimal:
    # Json_wrapper::type and wrapper_to_string in json_dom.cc.
    if field_type == ColumnType.NEWDECIMAL:
        return Decimal(_decimal_text(data))
    if field_type in _TEMPORAL:
        return _temporal_text(field_type, data)
    if field_type == ColumnType.VAR_STRING:
        # "Treat strings saved in opaque as plain json strings".
        return data.decode()
    # mysys/base64.cc base64_encode breaks lines after every 76 output characters;
    # the newlines are then escaped as \n in the quoted string.
    encoded = base64.b64encode(data).decode("ascii")
    lines = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    return f"base64:type{field_type}:{lines}"


class _RawNumber(str):
    """A number kept as the exact text MySQL printed (3 vs 3.0 vs 3.00 matter)."""


# --- text -----------------------------------------------------------------------------

_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')
_ESCAPES = {chr(c): f"\\u{c:04x}" for c in range(0x20)}
_ESCAPES.update({'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n"})
_ESCAPES.update({"\r": "\\r", "\t": "\\t"})


def _quote(text: str) -> str:
    """json_dom.cc double_quote: escapes only control characters, quote and backslash."""
    if _NEEDS_ESCAPE.search(text) is None:
        return f'"{text}"'
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES[m.group()], text) + '"'


def _shortest_digits(x: float) -> tuple[str, int]:
    """Shortest round-trip digits of x > 0 and the decimal point position (dtoa mode 0).

    repr() is David Gay's shortest conversion, the same digits dtoa mode 4 yields for the
    34 significant digits my_gcvt asks for.
    """
    mantissa, _, exponent = repr(x).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = int_part + frac_part
    significant = digits.lstrip("0")
    point = len(int_part) + (int(exponent) if exponent else 0) - (len(digits) - len(significant))
    return significant.rstrip("0"), point


def _double_text(x: float) -> str:
    """A double as MySQL prints it in JSON (strings/dtoa.cc my_gcvt with width 34, then
    json_dom.cc appends ".0" when there is neither "." nor "e").

    my_gcvt uses the 'f' format when the decimal point position is within -14..15 (or 16
    with 17 digits, which fit), else 'e' with an unpadded exponent: 1e15, 1.5e-16.
    """
    if not math.isfinite(x):
        _fail(f"double {x} is not a JSON number")
    text = repr(x)
    if "e" not in text and abs(x) < 1e15:
        return text  # 'f' format in both; repr already keeps ".0" on integral values.
    if x == 0:
        return text
    digits, point = _shortest_digits(abs(x))
    sign = "-" if x < 0 else ""
    if -14 <= point <= 15 or (point == 16 and len(digits) > point):
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point < len(digits):
            return f"{sign}{digits[:point]}.{digits[point:]}"
        return f"{sign}{digits}{'0' * (point - len(digits))}.0"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{point - 1}"


def _scalar_text(value: object) -> str:
    t = type(value)
    if t is str:
        return _quote(value)  # type: ignore[arg-type]
    if t is int:
        return str(value)
    if t is float:
        return _double_text(value)  # type: ignore[arg-type]
    if t is Decimal:
        return format(value, "f")
    if value is None:
        return "null"
    if t is bool:
        return "true" if value else "false"
    if t is _RawNumber:
        return value  # type: ignore[return-value]
    raise TypeError(f"not a JSON value: {value!r}")


def _text(buf: bytes, t: int, pos: int, end: int, depth: int, out: list[str]) -> None:
    """Append the JSON text of the value of type t stored at buf[pos:end]."""
    if t > _T_LARGE_ARRAY:
        out.append(_scalar_text(_scalar(buf, t, pos, end)))
        return
    depth += 1
    if depth > MAX_DEPTH:
        _fail(f"nesting deeper than {MAX_DEPTH}")
    large, size, header, keys, values = _layout(buf, t, pos, end)
    inlined = _INLINED_LARGE if large else _INLINED_SMALL
    cend = pos + size
    is_object = t < _T_SMALL_ARRAY
    out.append("{" if is_object else "[")
    append = out.append
    for i in range(0, len(values), 2):
        if i:
            append(", ")
        if is_object:
            key_at, key_len = keys[i], keys[i + 1]
            if key_at < header or key_at + key_len > size:
                _fail(f"key at offset {key_at} length {key_len} is outside its object")
            append(_quote(buf[pos + key_at : pos + key_at + key_len].decode()) + ": ")
        vt, raw = values[i], values[i + 1]
        if vt in inlined:
            if vt == _T_LITERAL:
                if raw & 0xFF > 2:
                    _fail(f"bad literal {raw & 0xFF:#x}")
                append(_LITERAL_TEXT[raw & 0xFF])
            else:
                append(str(_inlined(vt, raw, large)))
            continue
        # json_binary.cc Value::element: the value lies after the entries, inside.
        if raw < header or raw >= size:
            _fail(f"value offset {raw} is outside its container")
        at = pos + raw
        if vt == _T_STRING:  # the common case, without the generic dispatch
            length = buf[at]
            if length < 0x80:
                at += 1
            else:
                length, at = _varlen(buf, at, cend)
            if at + length > cend:
                _fail("string is truncated")
            append(_quote(buf[at : at + length].decode()))
        else:
            _text(buf, vt, at, cend, depth, out)
    out.append("}" if is_object else "]")


def _value(buf: bytes, t: int, pos: int, end: int, depth: int) -> object:
    """The Python value of the value of type t stored at buf[pos:end]."""
    if t > _T_LARGE_ARRAY:
        return _scalar(buf, t, pos, end)
    depth += 1
    if depth > MAX_DEPTH:
        _fail(f"nesting deeper than {MAX_DEPTH}")
    large, size, header, keys, values = _layout(buf, t, pos, end)
    inlined = _INLINED_LARGE if large else _INLINED_SMALL
    items: list[object] = []
    for i in range(0, len(values), 2):
        vt = values[i]
        if vt in inlined:
            items.append(_inlined(vt, values[i + 1], large))
        else:
            at = pos + _value_offset(values[i + 1], header, size)
            items.append(_value(buf, vt, at, pos + size, depth))
    if t >= _T_SMALL_ARRAY:
        return items
    return {
        _key(buf, pos, header, size, keys[i], keys[i + 1]): item
        for i, item in zip(range(0, len(keys), 2), items, strict=True)
    }


def _as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    return data if type(data) is bytes else bytes(data)


def decode_json(data: bytes | bytearray | memoryview) -> str:
    """MySQL binary JSON (a JSON column value of a row event) to MySQL's JSON text.

    An empty value is JSON ``null``, as MySQL reads it (Field_json::val_json).
    """
    buf = _as_bytes(data)
    if not buf:
        return "null"
    out: list[str] = []
    try:
        _text(buf, buf[0], 1, len(buf), 0, out)
    except UnicodeDecodeError as exc:
        _fail(f"string is not UTF-8: {exc.reason} at byte {exc.start}")
    return "".join(out)


def decode_json_value(data: bytes | bytearray | memoryview) -> object:
    """MySQL binary JSON to Python: dict (keys in stored order), list, str, int, float,
    bool, None; DECIMAL as :class:`~decimal.Decimal`; other opaque values (dates,
    base64) as the ``str`` MySQL prints for them."""
    buf = _as_bytes(data)
    if not buf:
        return None
    try:
        return _value(buf, buf[0], 1, len(buf), 0)
    except UnicodeDecodeError as exc:
        _fail(f"string is not UTF-8: {exc.reason} at byte {exc.start}")


# Re-exported for callers that import the diff API from here (the row decoder does).
from headwater.binlog.jsondiff import (  # noqa: E402
    JsonDiff,
    JsonDiffOperation,
    apply_json_diffs,
    parse_json_diffs,
)
