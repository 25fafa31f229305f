"""Events and row changes as JSON-able records, and the dump loop of ``headwater binlog dump``.

One record per event, except rows events, which give one record per changed row. Every
record starts with where the event is::

    file, offset, log_pos, timestamp, server_id, type

then, for a row change, ``db``, ``table``, ``op`` (``insert``/``update``/``delete``),
``before`` and ``after`` (objects keyed by column name, or ``null``); for any other event,
``data``: the event's fields by name. Events inside a TRANSACTION_PAYLOAD follow it, with
its offset.

JSON rendering of values (docs/formats.md, "binlog dump output", repeats this for users) is
lossless: every value can be turned back into the Python value the decoder produced.

================  ==========================================================================
int, float, str   JSON numbers and strings (64-bit unsigned integers stay exact)
Decimal           string, plain notation with all its digits: ``"-12.3400"``
bytes             ``{"base64": "..."}``
date, datetime    ISO 8601 strings: ``"2024-02-29"``, ``"2024-02-29T13:01:02.500000"``
                  (TIMESTAMP columns are UTC and end in ``+00:00``)
zero dates        the string MySQL prints: ``"0000-00-00 00:00:00"``
timedelta (TIME)  ``"[-]HH:MM:SS[.ffffff]"``, hours may exceed 24: ``"-838:59:59"``
SET               list of member names (the integer bitmask when names are unknown)
JSON columns      the JSON document as a string of JSON text
GTID sets, UUIDs  their text forms
text with bytes   ``{"undecodable_text_base64": "..."}``: a string holding bytes invalid in
invalid in its    its charset (kept by the decoder as surrogate escapes); the value is the
charset           string encoded as UTF-8 with ``surrogateescape``
names (keys) with a column name that is not valid UTF-8 (an object key cannot be an
bytes invalid     object): each undecodable byte is written ``\\xNN`` (:func:`printable_name`)
in UTF-8
================  ==========================================================================

The text format (without ``--json``) is one line per record: ``#offset TYPE`` and then the
same fields as ``key=value`` (fields that are ``null`` left out), values rendered as in
the JSON form.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import uuid
from collections.abc import Iterable, Iterator
from datetime import timedelta
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

import orjson

from headwater.binlog.events import (
    ROWS_EVENT_TYPES,
    DecodeContext,
    Event,
    FormatDescriptionEvent,
    QueryEvent,
    RowsEvent,
    TransactionPayloadEvent,
    UnknownEvent,
    iter_events,
    parse_expanded,
)
from headwater.binlog.framing import RawEvent
from headwater.position import MariadbGtidPos, MysqlGtidSet

if TYPE_CHECKING:
    from headwater.binlog.client import BinlogClient

__all__ = [
    "dump_files",
    "event_records",
    "format_time",
    "json_default",
    "printable_name",
    "render_json",
    "render_text",
]


def format_time(value: timedelta) -> str:
    """A TIME value as MySQL prints it: ``[-]HH:MM:SS[.ffffff]`` (hours unbounded)."""
    sign = "-" if value < timedelta(0) else ""
    total_us = abs(value) // timedelta(microseconds=1)
    seconds, micro = divmod(total_us, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{text}.{micro:06d}" if micro else text


def json_default(value: Any) -> Any:
    """``orjson`` ``default=``: the types orjson does not serialize natively."""
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, timedelta):
        return format_time(value)
    if isinstance(value, (MysqlGtidSet, MariadbGtidPos)):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def printable_name(name: str) -> str:
    """A name (database, table, column) as valid UTF-8 text: each byte that was not UTF-8
    (kept by the decoder as a surrogate escape) becomes ``\\xNN``. For keys and fields
    that must be text (JSON object keys, protobuf strings); values stay lossless."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return name


def _escape_surrogates(value: Any) -> Any:
    """Replace strings that hold surrogate escapes (undecodable bytes), recursively; keys
    become :func:`printable_name`."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raw = value.encode("utf-8", "surrogateescape")
            return {"undecodable_text_base64": base64.b64encode(raw).decode("ascii")}
        return value
    if isinstance(value, dict):
        return {
            printable_name(k) if isinstance(k, str) else k: _escape_surrogates(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_escape_surrogates(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _escape_surrogates(_fields(value))
    return value


def render_json(record: dict[str, Any]) -> bytes:
    """One record as a line of JSON (with the trailing newline)."""
    option = orjson.OPT_APPEND_NEWLINE
    try:
        return orjson.dumps(record, default=json_default, option=option)
    except TypeError:  # orjson.JSONEncodeError: only surrogates can get here
        return orjson.dumps(_escape_surrogates(record), default=json_default, option=option)


def render_text(record: dict[str, Any]) -> str:
    """One record as a compact human-readable line (without the newline)."""
    parts = [f"#{record['offset']}", str(record["type"])]
    if "op" in record:
        where = f"{printable_name(record['db'])}.{printable_name(record['table'])}"
        parts.append(f"{where} {record['op']}")
        for key in ("before", "after"):
            if record[key] is not None:
                parts.append(f"{key}={_text_value(record[key])}")
        return " ".join(parts)
    for key, value in record["data"].items():
        if value is None:
            continue
        parts.append(f"{key}={_text_value(value)}")
    return " ".join(parts)


def _text_value(value: Any) -> str:
    if isinstance(value, str):
        # repr() shows a surrogate escape as '\udcNN': still one line, never an error.
        return value if value.isprintable() and value and " " not in value else repr(value)
    return render_json(value)[:-1].decode("utf-8") if value is not None else "null"


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _event_data(event: Event) -> dict[str, Any]:
    if isinstance(event, FormatDescriptionEvent):
        fde = event.fde
        return {
            "binlog_version": fde.binlog_version,
            "server_version": fde.server_version,
            "created": fde.created,
            "checksum_alg": fde.checksum_alg,
            "post_header_len": list(fde.post_header_len),
        }
    if isinstance(event, QueryEvent):
        status = {k: v for k, v in _fields(event.status).items() if v is not None and v != b""}
        return {
            "thread_id": event.thread_id,
            "exec_time": event.exec_time,
            "error_code": event.error_code,
            "schema": event.schema,
            "query": event.query,
            "status": status,
        }
    if isinstance(event, TransactionPayloadEvent):
        return {
            "payload_size": event.payload_size,
            "compression": event.compression_name,
            "uncompressed_size": event.uncompressed_size,
        }
    data = _fields(event)
    for name, value in data.items():
        if isinstance(value, uuid.UUID):
            data[name] = str(value)
    gtid = getattr(event, "gtid", None)
    if gtid is not None and not isinstance(event, UnknownEvent):
        data["gtid"] = str(gtid)
    return data


def event_records(
    raw: RawEvent, event: Event, *, file: str | None = None
) -> Iterator[dict[str, Any]]:
    """The records of one event: one per changed row for rows events, else one."""
    head: dict[str, Any] = {
        "file": file,
        "offset": raw.offset,
        "log_pos": raw.log_pos,
        "timestamp": raw.timestamp,
        "server_id": raw.server_id,
        "type": raw.type_name,
    }
    if raw.type_code in ROWS_EVENT_TYPES:
        yield from _row_records(head, event)
        return
    yield {**head, "data": _event_data(event)}


def _row_records(head: dict[str, Any], event: Event) -> Iterator[dict[str, Any]]:
    if not isinstance(event, RowsEvent):  # a rows type code always parses to RowsEvent
        raise TypeError(f"{head['type']} decoded as {type(event).__name__}")
    table_map = event.table_map
    where = {"db": table_map.schema, "table": table_map.table, "op": event.kind}
    rows: list[Any] = event.as_dicts()
    for row in rows:
        if event.kind == "update":
            before, after = row
        elif event.kind == "insert":
            before, after = None, row
        else:
            before, after = row, None
        yield {**head, **where, "before": before, "after": after}


def dump_files(
    paths: Iterable[str | os.PathLike[str]], out: IO[bytes], *, start: int = 4, as_json: bool = True
) -> int:
    """Write the records of ``paths`` (in order; ``start`` applies to the first) to ``out``.

    Returns the number of records written. Errors are
    :class:`~headwater.errors.BinlogFormatError` (naming file, offset and event type) or
    ``OSError``; what was written before an error stays written.
    """
    written = 0
    first = True
    for path in paths:
        name = os.fspath(path)
        ctx = DecodeContext(source=name)
        begin = start if first else 4
        first = False
        for raw, event in iter_events(name, begin, ctx=ctx):
            for record in event_records(raw, event, file=name):
                if as_json:
                    out.write(render_json(record))
                else:
                    out.write(render_text(record).encode("utf-8", "backslashreplace") + b"\n")
                written += 1
    out.flush()
    return written


def dump_live(
    client: BinlogClient, out: IO[bytes], *, as_json: bool = True, limit: int | None = None
) -> int:
    """Write the records of a live dump to ``out``, as :func:`dump_files` does for files.

    Heartbeats are not printed; artificial events (the fake ROTATE and FORMAT_DESCRIPTION
    the server sends first) are, with ``offset`` null. Stops at the end of the log unless
    the client is blocking, or after ``limit`` records. Output is flushed after each event
    so that a follower sees changes as they come.
    """
    written = 0
    ctx = DecodeContext(source=client.options.address)
    for ev in client.events():
        for raw, event in parse_expanded(ev.raw, ctx):
            for record in event_records(raw, event, file=ev.file):
                if as_json:
                    out.write(render_json(record))
                else:
                    out.write(render_text(record).encode("utf-8", "backslashreplace") + b"\n")
                written += 1
                if limit is not None and written >= limit:
                    out.flush()
                    return written
        out.flush()
    out.flush()
    return written
