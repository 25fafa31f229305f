"""Change rows decoded by the server (``/v1/fetch`` formats ``json`` and ``protobuf``) as
:class:`~headwater.changes.ChangeRow` objects for the SDK's handlers.

``json``: values stay as the JSON format renders them (docs/formats.md, "Values": binary
strings as ``{"base64": ...}``, DECIMAL as a string, dates and times as ISO text).
``protobuf``: the ``Value`` oneof of ``headwater.proto`` says the kind, so values come back
typed: ``int``, ``float``, ``Decimal``, ``bytes``, ``datetime.date``, ``datetime.datetime``
(naive for DATETIME, aware for TIMESTAMP), ``str`` (TIME keeps its text: it spans
-838:59:59..838:59:59, no Python type), SET as a list of names, VECTOR as a tuple of floats.
Undecodable text comes back as the ``str`` the decoder made of it (``surrogateescape``).

Invariant: for either format the shard hash of a row (``headwater.server.sharding``) is the
one the server computed, so the SDK's earlier-generation filter agrees with the server.
"""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any

from headwater.changes import ChangeRow
from headwater.position import Position

__all__ = ["FetchAnswer", "answer_of", "hash_values", "row_of", "row_of_proto"]


class FetchAnswer:
    """The parts of a fetch response the SDK uses, whatever its format."""

    __slots__ = ("checkpoint", "more", "next_row", "next_seq", "rows")

    def __init__(
        self, rows: list[ChangeRow], checkpoint: str, next_seq: int, next_row: int, more: bool
    ) -> None:
        self.rows = rows
        self.checkpoint = checkpoint
        self.next_seq = next_seq
        self.next_row = next_row
        self.more = more  # the batch was cut: the reader has more at once


def answer_of(answer: Any) -> FetchAnswer:
    """A ``json`` (dict) or ``protobuf`` (``pb.FetchResponse``) fetch answer of rows."""
    if isinstance(answer, dict):
        nxt = answer["next"]
        rows = [row_of(doc) for doc in answer["rows"]]
        more = bool(answer.get("more", True))
        return FetchAnswer(rows, answer["checkpoint"], int(nxt["seq"]), int(nxt["row"]), more)
    rows = [row_of_proto(msg) for msg in answer.rows]
    return FetchAnswer(
        rows, answer.checkpoint, int(answer.next.seq), int(answer.next.row), bool(answer.more)
    )


def row_of(doc: Any) -> ChangeRow:
    """A JSON change row (format ``json``) as a :class:`ChangeRow` (values as JSON renders
    them, docs/formats.md)."""
    pos = doc["position"]
    return ChangeRow(
        doc["source"], doc["database"], doc["table"], doc["op"], doc["ts_us"],
        Position(pos["change_id"], pos["file"], pos["offset"], pos.get("event", 0)),
        doc["gtid"], doc["txn_id"], doc["sequence"], doc["key"], doc["before"], doc["after"],
        doc["schema_version"], doc.get("sql"),
    )  # fmt: skip


def _value(v: Any) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null":
        return None
    if kind in ("int", "uint", "float", "text", "binary", "time"):
        return getattr(v, kind)
    if kind == "decimal":
        return Decimal(v.decimal)
    if kind == "date":
        return _date(v.date)
    if kind in ("datetime", "timestamp"):
        return _datetime(getattr(v, kind))
    if kind == "set":
        return list(v.set.values)
    if kind == "vector":
        return tuple(v.vector.values)
    # undecodable_text: the bytes the server stored for a str decoded with surrogateescape
    return bytes(v.undecodable_text).decode("utf-8", "surrogateescape")


def _date(text: str) -> Any:
    # MariaDB allows zero dates (0000-00-00) that Python cannot hold: keep the text.
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return text


def _datetime(text: str) -> Any:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return text


def _image(msg: Any, present: bool) -> dict[str, Any] | None:
    if not present:
        return None
    return {col.name: _value(col.value) for col in msg.columns}


def row_of_proto(msg: Any) -> ChangeRow:
    """A protobuf ``ChangeRow`` (format ``protobuf``) with typed values (module docstring)."""
    p = msg.position
    return ChangeRow(
        msg.source, msg.database, msg.table, msg.op, msg.ts_us,
        Position(p.change_id, p.file, p.offset, p.event),
        msg.gtid, msg.txn_id, msg.sequence,
        _image(msg.key, msg.HasField("key")), _image(msg.before, msg.HasField("before")),
        _image(msg.after, msg.HasField("after")), msg.schema_version,
        msg.sql if msg.HasField("sql") else None,
    )  # fmt: skip


def hash_values(values: list[Any]) -> list[Any]:
    """Key values as the shard hash reads them (JSON's binary strings come as base64)."""
    return [
        base64.b64decode(v["base64"]) if isinstance(v, dict) and "base64" in v else v
        for v in values
    ]
