"""The documented shard hash (``headwater.server.sharding.stable_hash``), fast for the SDK.

The SDK hashes every row it routes, so the hash is on its hot path (with client decoding it
cost about 40 % of the decoding time). :class:`ShardHasher` gives exactly
``stable_hash(database, table, key values)`` but keeps, per table, the CRC32C of the
``part(database) + part(table)`` prefix and the table's shard key columns, continues the
CRC over the value parts (CRC32C is a running checksum: ``crc(a + b) == crc(b, crc(a))``),
and encodes the common key types (``int``, ``str``) inline; any other value goes through
``stable_hash`` itself. A unit test checks it against ``stable_hash``.

A rows block whose key is one column of only ``int`` (or only ``str``) values, the usual
primary key, is hashed a column at a time in C-level ``map`` loops: the column's values,
their texts, and each text's CRC continued from the table's CRC of ``prefix + len(text)``
(kept per table for texts shorter than :data:`_SHORT` bytes), so per row only the text's
formatting and one ``crc32c`` call remain (about 250 ns, was about 350 ns).

Where the compiled extension is built, that one-column case is one C call instead
(``headwater._native._ingest.shard_column``: the CRC32C of ``ingest.c``, continued from
the table's prefix CRC over each row's key value; ints, strs, bytes and None, any length);
a column holding anything else (bool, float, Decimal, a JSON binary, an int beyond 64 bits)
comes back None and takes the Python path above. A unit test compares the two.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from crc32c import crc32c

from headwater.changes import ChangeBlock, ChangeRow
from headwater.client.decoded import hash_values
from headwater.server.sharding import key_values, stable_hash

try:
    from headwater._native._ingest import shard_column as _shard_column
except ImportError:  # the extension is not built (or predates shard_column)
    _shard_column = None  # type: ignore[assignment]

__all__ = ["ShardHasher"]

_LEN = struct.Struct("<I")
#: Texts shorter than this are hashed from the table's CRC of ``prefix + len(text)``.
_SHORT = 64
_TEXT = b"%d".__mod__  # an int's text, as stable_hash encodes it


def _utf8(value: str) -> bytes:
    return value.encode("utf-8", "surrogateescape")


class ShardHasher:
    """``hash(row)`` == ``stable_hash`` of the row's shard key (``keys``: ``db.table`` ->
    columns; other tables use their primary key). ``native=False``: the Python path only."""

    def __init__(self, keys: Mapping[str, Sequence[str]], *, native: bool = True) -> None:
        self._native = _shard_column if native else None
        self._keys = {k: tuple(v) for k, v in keys.items()}
        self._tables: dict[tuple[str, str], tuple[int, tuple[str, ...] | None]] = {}
        # per table: the CRC of prefix + the length part of a text of each length < _SHORT
        self._states: dict[int, list[int]] = {}

    def _table(self, database: str, table: str) -> tuple[int, tuple[str, ...] | None]:
        entry = self._tables.get((database, table))
        if entry is None:
            # the prefix exactly as stable_hash encodes it (table names without escapes)
            db = database.encode("utf-8", "surrogateescape")
            tb = table.encode("utf-8")
            prefix = _LEN.pack(len(db)) + db + _LEN.pack(len(tb)) + tb
            entry = (int(crc32c(prefix)), self._keys.get(f"{database}.{table}"))
            self._tables[(database, table)] = entry
        return entry

    def __call__(self, row: ChangeRow) -> int:
        prefix, columns = self._table(row.database, row.table)
        return self._hash(prefix, key_values(row, columns), row.database, row.table)

    def _column(self, prefix: int, values: list[Any]) -> list[int] | None:
        """The hashes of one-column keys ``values`` if all are ``int`` or all ``str``
        with texts shorter than ``_SHORT`` (None otherwise: the caller goes row by row)."""
        kinds = set(map(type, values))
        if kinds == {int}:
            texts = list(map(_TEXT, values))
        elif kinds == {str}:
            texts = list(map(_utf8, values))
        else:
            return None
        lengths = list(map(len, texts))
        if max(lengths) >= _SHORT:
            return None
        states = self._states.get(prefix)
        if states is None:
            states = [crc32c(_LEN.pack(n), prefix) for n in range(_SHORT)]
            self._states[prefix] = states
        return list(map(crc32c, texts, map(states.__getitem__, lengths)))

    def block(self, block: ChangeBlock) -> list[int]:
        """``self(row)`` of each change of a rows block (not DDL), in ``block_changes``
        order, computed from the block's value tuples: no image dict is read, and the
        table's entry and the key's positions are looked up once per block."""
        database, table, op = block.database, block.table, block.op
        prefix, columns = self._table(database, table)
        if columns is None and block.key_names is None:
            return [int(prefix)] * len(block.rows)  # no key: no value parts
        # the image a row's key comes from: after (insert, update), else before; a name
        # given twice keeps its last value (as dict(zip(names, values)) does)
        names = block.before_names if op == "delete" else block.after_names
        where = {name: i for i, name in enumerate(names)}
        wanted = tuple(dict.fromkeys(block.key_names)) if columns is None else columns  # type: ignore[arg-type]
        at = [where.get(c) for c in wanted]
        images = [r[1] for r in block.rows] if op == "update" else block.rows
        if len(at) == 1 and at[0] is not None:  # one key column: the common case, inline
            i = at[0]
            if self._native is not None:
                hashes = self._native(prefix, images, i)
                if hashes is not None:
                    return hashes
            if images:
                hashes = self._column(prefix, list(map(itemgetter(i), images)))
                if hashes is not None:
                    return hashes
            out = []
            for image in images:
                value = image[i]
                kind = type(value)
                if kind is int:
                    text = b"%d" % value
                elif kind is str:
                    text = value.encode("utf-8", "surrogateescape")
                else:
                    out.append(stable_hash(database, table, hash_values([value])))
                    continue
                out.append(int(crc32c(_LEN.pack(len(text)) + text, prefix)))
            return out
        return [
            self._hash(prefix, [None if i is None else image[i] for i in at], database, table)
            for image in images
        ]

    @staticmethod
    def _hash(prefix: int, values: list[Any], database: str, table: str) -> int:
        parts: list[bytes] = []
        for value in values:
            kind = type(value)
            if kind is int:
                text = b"%d" % value
            elif kind is str:
                text = value.encode("utf-8", "surrogateescape")
            else:
                return stable_hash(database, table, hash_values(values))
            parts.append(_LEN.pack(len(text)))
            parts.append(text)
        return int(crc32c(b"".join(parts), prefix))
