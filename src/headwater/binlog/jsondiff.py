"""The JSON diffs of PARTIAL_UPDATE_ROWS events (MySQL 8 ``binlog_row_value_options=PARTIAL_JSON``).

A partially updated JSON column (``binlog_row_value_options=PARTIAL_JSON``) holds a diff
vector instead (``sql/json_diff.cc``, ``Json_diff_vector::write_binary``)::

    diff-vector  ::= length (uint32, bytes that follow) diff*
    diff         ::= operation (uint8: 0 REPLACE, 1 INSERT, 2 REMOVE)
                     path-length (net_field_length) path (JSON path text)
                     [value-length (net_field_length) value (binary JSON)]  -- not for REMOVE

Applying diffs follows ``sql/json_diff.cc`` (``apply_json_diffs``): REPLACE needs the path
to exist, INSERT into an object needs the key absent, INSERT past the end of an array
appends. Every function raises :class:`~headwater.errors.BinlogFormatError` and nothing
else on input that does not parse or apply.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import IntEnum
from typing import NoReturn

from headwater.binlog.jsonb import (
    _UINT32,
    _as_bytes,
    _fail,
    _quote,
    _RawNumber,
    _scalar_text,
    _text,
)

__all__ = ["JsonDiff", "JsonDiffOperation", "apply_json_diffs", "parse_json_diffs"]


class JsonDiffOperation(IntEnum):
    """enum_json_diff_operation (sql/json_diff.h)."""

    REPLACE = 0  # like JSON_REPLACE(col, path, value)
    INSERT = 1  # like JSON_ARRAY_INSERT / JSON_INSERT(col, path, value)
    REMOVE = 2  # like JSON_REMOVE(col, path)


@dataclass(frozen=True)
class JsonDiff:
    """One logical change of a partially updated JSON column."""

    operation: JsonDiffOperation
    path: str  #: a MySQL JSON path of member and array-cell legs, e.g. ``$.a[2]."b c"``
    value: str | None  #: the new value as JSON text; None for REMOVE


def _net_length(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A net_field_length (sql/log_event.h net_field_length_checked); 251 (NULL) is bad."""
    if pos >= end:
        _fail("JSON diff length is truncated")
    first = buf[pos]
    if first < 251:
        return first, pos + 1
    width = {252: 2, 253: 3, 254: 8}.get(first)
    if width is None:
        _fail(f"bad JSON diff length prefix {first:#x}")
    if pos + 1 + width > end:
        _fail("JSON diff length is truncated")
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def parse_json_diffs(data: bytes | bytearray | memoryview) -> tuple[list[JsonDiff], int]:
    """The diff vector of a partially updated JSON column -> (diffs, bytes consumed).

    ``data`` starts at the vector's 4-byte length, which is also the column's length
    prefix in the row image (Json_diff_vector::read_binary); trailing bytes (the next
    columns) are left alone.
    """
    buf = _as_bytes(data)
    if len(buf) < 4:
        _fail("JSON diff vector length is truncated")
    end = 4 + _UINT32.unpack_from(buf, 0)[0]
    if end > len(buf):
        _fail(f"JSON diff vector of {end - 4} bytes, only {len(buf) - 4} available")
    pos = 4
    diffs: list[JsonDiff] = []
    try:
        while pos < end:
            operation = buf[pos]
            if operation > JsonDiffOperation.REMOVE:
                _fail(f"unknown JSON diff operation {operation}")
            length, pos = _net_length(buf, pos + 1, end)
            if pos + length > end:
                _fail("JSON diff path is truncated")
            path = buf[pos : pos + length].decode()
            _parse_path(path)  # read_binary refuses a diff whose path does not parse
            pos += length
            value = None
            if operation != JsonDiffOperation.REMOVE:
                length, pos = _net_length(buf, pos, end)
                if length == 0 or pos + length > end:
                    _fail("JSON diff value is empty or truncated")
                out: list[str] = []
                _text(buf, buf[pos], pos + 1, pos + length, 0, out)
                value = "".join(out)
                pos += length
            diffs.append(JsonDiff(JsonDiffOperation(operation), path, value))
    except UnicodeDecodeError as exc:
        _fail(f"JSON diff text is not UTF-8: {exc.reason}")
    return diffs, end


# A path leg: a member name, or an array index counted from the start (int) or, as
# ("last", n), from the end ([last-n]).
_Leg = str | int | tuple[str, int]
_LAST = re.compile(r"last\s*(?:-\s*(\d+))?\Z")


def _parse_path(path: str) -> list[_Leg]:
    """The legs of a JSON path as Json_path::to_string writes them into diffs
    (sql/json_path.cc): ``$``, ``.name`` or ``."quoted name"``, ``[n]``, ``[last-n]``.
    Wildcards and ranges never occur in diffs and are refused."""
    text = path.strip()
    if not text.startswith("$"):
        _fail(f"JSON path {path!r} does not start with $")
    legs: list[_Leg] = []
    i, n = 1, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c == ".":
            i += 1
            while i < n and text[i].isspace():
                i += 1
            if i < n and text[i] == '"':
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                if j >= n:
                    _fail(f"unterminated member name in JSON path {path!r}")
                try:
                    legs.append(json.loads(text[i : j + 1]))
                except ValueError:
                    _fail(f"bad quoted member name in JSON path {path!r}")
                i = j + 1
            else:
                j = i
                while j < n and text[j] not in '.[ \t\n\r"*':
                    j += 1
                if j == i:
                    _fail(f"missing member name in JSON path {path!r}")
                legs.append(text[i:j])
                i = j
        elif c == "[":
            j = text.find("]", i)
            if j < 0:
                _fail(f"unterminated array index in JSON path {path!r}")
            cell = text[i + 1 : j].strip()
            last = _LAST.match(cell)
            if cell.isdigit() and cell.isascii():
                legs.append(int(cell))
            elif last:
                legs.append(("last", int(last.group(1) or 0)))
            else:
                _fail(f"unsupported array index [{cell}] in JSON path {path!r}")
            i = j + 1
        else:
            _fail(f"unsupported JSON path {path!r}")
    return legs


def _no_constant(name: str) -> NoReturn:
    _fail(f"{name} is not JSON")


def _parse_text(text: str) -> object:
    try:
        return json.loads(
            text, parse_int=_RawNumber, parse_float=_RawNumber, parse_constant=_no_constant
        )
    except ValueError as exc:
        _fail(f"JSON text does not parse: {exc}")


def _index(leg: int | tuple[str, int], size: int) -> int:
    # Json_path_leg::first_array_index: [n] counts from the start, [last-n] from the end.
    return size - 1 - leg[1] if isinstance(leg, tuple) else leg


def _seek(doc: object, legs: list[_Leg]) -> object:
    """json_diff.cc seek_exact_path: members of objects, cells of arrays, no auto-wrap."""
    for leg in legs:
        if isinstance(doc, dict) and isinstance(leg, str):
            if leg not in doc:
                return _MISSING
            doc = doc[leg]
        elif isinstance(doc, list) and not isinstance(leg, str):
            position = _index(leg, len(doc))
            if not 0 <= position < len(doc):
                return _MISSING
            doc = doc[position]
        else:
            return _MISSING
    return doc


_MISSING = object()


def _apply(doc: object, diff: JsonDiff) -> None:
    """One diff, as apply_json_diffs in sql/json_diff.cc does it on the DOM."""
    legs = _parse_path(diff.path)
    if not legs:
        _fail(f"JSON diff on the document root: {diff.path}")
    parent = _seek(doc, legs[:-1])
    last = legs[-1]
    value = None if diff.value is None else _parse_text(diff.value)
    if isinstance(parent, dict) and isinstance(last, str):
        present = last in parent
        if diff.operation == JsonDiffOperation.INSERT and not present:
            parent[last] = value
            return
        if diff.operation == JsonDiffOperation.REPLACE and present:
            parent[last] = value
            return
        if diff.operation == JsonDiffOperation.REMOVE and present:
            del parent[last]
            return
    elif isinstance(parent, list) and not isinstance(last, str):
        position = _index(last, len(parent))
        if diff.operation == JsonDiffOperation.INSERT:
            # Json_array::insert_alias appends when the position is past the end.
            parent.insert(min(max(position, 0), len(parent)), value)
            return
        if 0 <= position < len(parent):
            if diff.operation == JsonDiffOperation.REPLACE:
                parent[position] = value
            else:
                del parent[position]
            return
    _fail(f"JSON diff {diff.operation.name} {diff.path} does not fit the document")


def _key_order(item: tuple[str, object]) -> tuple[int, bytes]:
    # Json_key_comparator: shorter keys first, then bytewise on utf8mb4.
    key = item[0].encode()
    return len(key), key


def _dump(value: object, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(sorted(value.items(), key=_key_order)):
            out.append(", " if i else "")
            out.append(_quote(key))
            out.append(": ")
            _dump(item, out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            out.append(", " if i else "")
            _dump(item, out)
        out.append("]")
    else:
        out.append(_scalar_text(value))


def apply_json_diffs(before_text: str, diffs: list[JsonDiff]) -> str:
    """Apply the diffs of a PARTIAL_UPDATE_ROWS after image to the before image's JSON
    text (as :func:`decode_json` printed it) and return the after image's text.

    Numbers keep their printed form; object keys come out in MySQL's stored order.
    A diff that does not fit the document raises BinlogFormatError.
    """
    doc = _parse_text(before_text)
    for diff in diffs:
        _apply(doc, diff)
    out: list[str] = []
    _dump(doc, out)
    return "".join(out)
