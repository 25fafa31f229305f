"""The encodings of a fetch response: decoded change rows or raw records, JSON or protobuf.

An :class:`Encoder` turns each item (a change row or a store record) into bytes on its own,
so the batch builder knows every item's size before it accepts it (the ``max_bytes``
limit), then wraps the items in the response envelope without re-encoding them.

JSON (``application/json``)::

    {"rows": [ROW, ...],            format "json"   (or "records": [RECORD, ...] for "raw")
     "task": "orders", "checkpoint": "<token>", "next": {"seq": 43, "row": 0},
     "latest_seq": 57, "more": false}

    ROW = {"source", "database", "table", "op", "ts_us",
           "position": {"change_id", "file", "offset", "event"}, "gtid", "txn_id",
           "sequence", "key", "before", "after", "schema_version", "sql"}
    RECORD = {"seq", "position", "ts_us", "gtid", "tables": [{"name", "rows"}],
              "schema_version", "flags", "chunk_no", "payload": {"base64": "..."}}

Column values render exactly as ``headwater binlog dump --json`` renders them
(``headwater.binlog.dump.render_json``; docs/formats.md, "Values").

Protobuf (``application/x-protobuf``): one ``FetchResponse`` of ``headwater.proto``. It is
assembled as the concatenation of each item, already serialized, behind its field tag
(``rows`` = field 2, ``records`` = field 3, length-delimited) followed by the serialized
envelope fields: exactly the bytes a protobuf runtime would produce for the whole message,
up to field order, which parsers accept in any order.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Protocol

import orjson

from headwater.binlog.dump import format_time, printable_name, render_json
from headwater.changes import ChangeRow
from headwater.position import Position
from headwater.server import pb
from headwater.store import Record

__all__ = [
    "Encoder",
    "JsonEncoder",
    "ProtobufEncoder",
    "encoder_for",
    "proto_value",
    "row_json",
]

JSON = "application/json"
PROTOBUF = "application/x-protobuf"


class Encoder(Protocol):
    content_type: str

    def row(self, change: ChangeRow) -> bytes: ...

    def record(self, record: Record) -> bytes: ...

    def envelope(
        self, task: str, items: list[bytes], raw: bool, tail: dict[str, Any]
    ) -> list[bytes]:
        """The response body as pieces. ``tail``: ``checkpoint``, ``next`` {seq, row},
        ``latest_seq``, ``more``."""
        ...


def row_json(change: ChangeRow) -> dict[str, Any]:
    """A change row as the JSON object of the API (field names documented above)."""
    return {
        "source": change.source,
        "database": change.database,
        "table": change.table,
        "op": change.op,
        "ts_us": change.ts_us,
        "position": change.position.to_json(),
        "gtid": change.gtid,
        "txn_id": change.txn_id,
        "sequence": change.sequence,
        "key": change.key,
        "before": change.before,
        "after": change.after,
        "schema_version": change.schema_version,
        "sql": change.sql,
    }


class JsonEncoder:
    content_type = JSON

    def row(self, change: ChangeRow) -> bytes:
        return render_json(row_json(change))[:-1]

    def record(self, record: Record) -> bytes:
        return render_json(
            {
                "seq": record.seq,
                "position": record.position.to_json(),
                "ts_us": record.ts_us,
                "gtid": record.gtid,
                "tables": [{"name": n, "rows": r} for n, r in record.tables],
                "schema_version": record.schema_version,
                "flags": record.flags,
                "chunk_no": record.chunk_no,
                "payload": record.payload,
            }
        )[:-1]

    def envelope(
        self, task: str, items: list[bytes], raw: bool, tail: dict[str, Any]
    ) -> list[bytes]:
        rest = orjson.dumps({"task": task, **tail})
        head = b'{"records":[' if raw else b'{"rows":['
        return [head, b",".join(items), b"],", rest[1:]]


# --- protobuf -------------------------------------------------------------------------------

_INT64_MAX = (1 << 63) - 1


def proto_value(value: Any, out: Any) -> None:
    """Set ``out`` (a ``pb.Value``) to ``value`` (a decoded column value)."""
    if value is None:
        out.null = True
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
            out.text = value
        except UnicodeEncodeError:
            out.undecodable_text = value.encode("utf-8", "surrogateescape")
    elif isinstance(value, bool):
        out.int = int(value)
    elif isinstance(value, int):
        if value > _INT64_MAX:
            out.uint = value
        else:
            out.int = value
    elif isinstance(value, float):
        out.float = value
    elif isinstance(value, Decimal):
        out.decimal = format(value, "f") if value.is_finite() else str(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.binary = bytes(value)
    elif isinstance(value, dt.datetime):
        if value.tzinfo is None:
            out.datetime = value.isoformat()
        else:
            out.timestamp = value.isoformat()
    elif isinstance(value, dt.date):
        out.date = value.isoformat()
    elif isinstance(value, dt.timedelta):
        out.time = format_time(value)
    elif isinstance(value, tuple) and value and all(isinstance(v, float) for v in value):
        out.vector.values.extend(value)
    elif isinstance(value, (tuple, list, set, frozenset)):
        out.set.values.extend(value if isinstance(value, (tuple, list)) else sorted(value))
    else:
        out.text = str(value)


def _image(values: dict[str, Any], out: Any) -> None:
    columns = out.columns
    for name, value in values.items():
        col = columns.add()
        col.name = printable_name(name)
        proto_value(value, col.value)


def _position(p: Position, out: Any) -> None:
    out.change_id = p.change_id
    out.file = p.file_num
    out.offset = p.offset
    out.event = p.event_index


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_TAG_ROWS = b"\x12"  # field 2, wire type 2 (length-delimited)
_TAG_RECORDS = b"\x1a"  # field 3, wire type 2


class ProtobufEncoder:
    content_type = PROTOBUF

    def row(self, change: ChangeRow) -> bytes:
        msg = pb.ChangeRow(
            source=change.source,
            # Protobuf strings must be UTF-8: names with undecodable bytes show them as \xNN.
            database=printable_name(change.database),
            table=printable_name(change.table),
            op=change.op,
            ts_us=change.ts_us,
            gtid=change.gtid,
            txn_id=change.txn_id,
            sequence=change.sequence,
            schema_version=change.schema_version,
        )
        _position(change.position, msg.position)
        if change.key is not None:
            _image(change.key, msg.key)
        if change.before is not None:
            _image(change.before, msg.before)
        if change.after is not None:
            _image(change.after, msg.after)
        if change.sql is not None:
            msg.sql = printable_name(change.sql)
        data: bytes = msg.SerializeToString()
        return _TAG_ROWS + _varint(len(data)) + data

    def record(self, record: Record) -> bytes:
        msg = pb.RawRecord(
            seq=record.seq,
            ts_us=record.ts_us,
            gtid=record.gtid,
            schema_version=record.schema_version,
            flags=record.flags,
            chunk_no=record.chunk_no,
            payload=bytes(record.payload),
        )
        _position(record.position, msg.position)
        for name, rows in record.tables:
            msg.tables.add(name=printable_name(name), rows=rows)
        data: bytes = msg.SerializeToString()
        return _TAG_RECORDS + _varint(len(data)) + data

    def envelope(
        self, task: str, items: list[bytes], raw: bool, tail: dict[str, Any]
    ) -> list[bytes]:
        msg = pb.FetchResponse(
            task=task,
            checkpoint=tail["checkpoint"],
            latest_seq=tail["latest_seq"],
            more=tail["more"],
        )
        msg.next.seq = tail["next"]["seq"]
        msg.next.row = tail["next"]["row"]
        return [*items, msg.SerializeToString()]


def encoder_for(fmt: str) -> Encoder:
    return ProtobufEncoder() if fmt in ("protobuf", "raw+protobuf") else JsonEncoder()
