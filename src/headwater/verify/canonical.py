"""The canonical text of a row, the same whichever server it was read from.

Source and target are often different products (MariaDB to PostgreSQL): the same stored
value comes back from pymysql and psycopg as different Python types (``int`` and
``Decimal`` for an unsigned BIGINT, naive and aware ``datetime`` for a TIMESTAMP, ``str``
and ``dict`` for JSON). :func:`canonical` maps each value to one text so that equal
values render equally:

==========================  ==================================================
value                       canonical text
==========================  ==================================================
None                        ``None`` (kept apart from every text)
bool                        ``1`` / ``0`` (MySQL's TINYINT(1))
int, Decimal                plain decimal, no exponent, trailing fraction zeros
                            dropped (``1.50`` -> ``1.5``, ``-0`` -> ``0``)
float                       ``repr`` (shortest round-trip text)
datetime                    ``YYYY-MM-DD HH:MM:SS.ffffff``; aware values in UTC
date                        ``YYYY-MM-DD``
timedelta (TIME, interval)  total microseconds
bytes                       lower-case hex
dict, list (PostgreSQL      JSON with sorted keys and no spaces; JSON columns'
jsonb)                      text is parsed and rendered the same way
set (SET members)           members sorted, joined by ``,``
str                         itself
==========================  ==================================================

Both sides' MySQL sessions run with ``time_zone = '+00:00'`` so that TIMESTAMP columns
come back in UTC. The row digest is a 64-bit BLAKE2b of the canonical texts; a chunk's
checksum is the row count plus the XOR of its rows' digests (order-independent, so the
two servers may return a chunk in different orders).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

__all__ = ["canonical", "canonical_row", "row_digest"]

Canonical = tuple[str | None, ...]


def _decimal(value: Decimal) -> str:
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def canonical(value: Any, *, json_column: bool = False) -> str | None:
    """The canonical text of one column value (see the module docstring)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        moment: dt.datetime = value
        if moment.tzinfo is not None:
            moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
        return moment.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str((value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict | list):
        text: str = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text
    if isinstance(value, set | frozenset):
        return ",".join(sorted(str(v) for v in value))
    text = str(value)  # str, and anything else by its own text
    if json_column:
        try:
            return canonical(json.loads(text))
        except ValueError:
            return text
    return text


def canonical_row(values: Sequence[Any], json_columns: Sequence[bool]) -> Canonical:
    """The canonical texts of a row's values (``json_columns[i]``: column i holds JSON)."""
    return tuple(canonical(v, json_column=j) for v, j in zip(values, json_columns, strict=True))


def row_digest(row: Canonical) -> int:
    """A 64-bit digest of a canonical row (NULL and the text ``None`` differ)."""
    data = json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
