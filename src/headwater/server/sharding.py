"""Which shard a change row belongs to: a stable hash of its table and shard key.

As in Ptubes' SDK, a consumer group splits one task's stream into ``count`` shards and each
member fetches only the shards it owns; changes to one row (same database, table and key)
always land in the same shard, so they stay in log order for whoever consumes that shard.

The hash is specified here so that any client can compute it (never Python's ``hash()``,
which is salted per process)::

    shard = crc32c(part(database) + part(table) + part(v1) + ... + part(vn)) % count
    part(b) = u32 little-endian len(b), then the bytes b

``v1..vn`` are the shard key's values in key order: the table's primary key columns by
default (``ChangeRow.key``, in primary key order), or the columns a subscription names for
that table, read from the ``after`` image (``before`` for deletes). The bytes of a value are
its canonical text, the way the JSON format writes it:

=============================  ===============================================
value                          bytes
=============================  ===============================================
NULL, or a column the image     ``null``
lacks (MINIMAL images)
integer                        decimal digits, ``-`` for negatives (``-12``)
string                         its UTF-8 bytes (undecodable text: the stored bytes)
binary string                  the raw bytes (in JSON: the ``base64`` payload decoded)
DECIMAL                        plain notation with all digits (``"10.50"``)
float                          Python's ``repr`` (shortest round-trip text)
dates, times, ENUM, SET, ...   the JSON text of the value without quotes
=============================  ===============================================

A row whose key is unknown (a table without primary key and no configured key, or a DDL
statement, whose table is ``""``) hashes with no value parts: all such changes of one table
go to one shard, which keeps them ordered. An update that changes the key moves the row to
the shard of its new key. Every row goes to exactly one shard.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import orjson
from crc32c import crc32c

from headwater.binlog.dump import json_default
from headwater.changes import ChangeRow

__all__ = ["ShardFilter", "key_values", "shard_of", "stable_hash"]

_LEN = struct.Struct("<I")
_NULL = b"null"


def _canonical(value: Any) -> bytes:
    if value is None:
        return _NULL
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int):
        return str(value).encode("ascii")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, Decimal):
        return (format(value, "f") if value.is_finite() else str(value)).encode("ascii")
    if isinstance(value, float):
        return repr(value).encode("ascii")
    text = orjson.dumps(value, default=json_default)
    if text.startswith(b'"') and text.endswith(b'"'):
        return text[1:-1]
    return text


def stable_hash(database: str, table: str, values: Iterable[Any]) -> int:
    """The CRC32C of the canonical encoding of ``(database, table, values...)``."""
    parts: list[bytes] = []
    for text in (database.encode("utf-8", "surrogateescape"), table.encode("utf-8")):
        parts.append(_LEN.pack(len(text)))
        parts.append(text)
    for value in values:
        text = _canonical(value)
        parts.append(_LEN.pack(len(text)))
        parts.append(text)
    return int(crc32c(b"".join(parts)))


def key_values(row: ChangeRow, columns: Sequence[str] | None) -> list[Any]:
    """The shard key values of ``row``: ``columns`` from its image, else its primary key."""
    if columns is None:
        return [] if row.key is None else list(row.key.values())
    image = row.after if row.after is not None else row.before
    if image is None:
        return []
    return [image.get(c) for c in columns]


def shard_of(row: ChangeRow, count: int, columns: Sequence[str] | None = None) -> int:
    """The shard (``0 <= shard < count``) of ``row``."""
    return stable_hash(row.database, row.table, key_values(row, columns)) % count


class ShardFilter:
    """Keeps the rows of the shards a consumer owns.

    ``keys`` maps ``"db.table"`` to the columns of that table's shard key (tables not in
    it use their primary key). With ``count == 1`` every row is kept.
    """

    def __init__(
        self, count: int, owned: Iterable[int], keys: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        self.count = count
        self.owned = frozenset(owned)
        self.keys = {k: tuple(v) for k, v in (keys or {}).items()}

    @property
    def everything(self) -> bool:
        return self.count == 1 or len(self.owned) == self.count

    def wants(self, row: ChangeRow) -> bool:
        if self.everything:
            return True
        columns = self.keys.get(f"{row.database}.{row.table}")
        return shard_of(row, self.count, columns) in self.owned
