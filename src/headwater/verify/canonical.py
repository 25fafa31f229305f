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

A column's *kind* (:func:`column_kind`, from either side's catalog type) adjusts this
where the same value comes back differently from the two products:

==========  ===========================================================================
kind        canonical text
==========  ===========================================================================
``json``    the text parsed as JSON and rendered as above
``bit``     BIT: the unsigned integer (pymysql returns big-endian bytes, a PostgreSQL
            target a bigint or numeric)
``float``   FLOAT (single precision): 6 significant digits, as MariaDB's text protocol
            returns it (PostgreSQL's ``real`` returns the shortest float32 text)
``zero``    DATE/DATETIME/TIMESTAMP against another product: a zero or partial date
            (``0000-00-00``, ``2020-00-15``; pymysql returns such values as text) is NULL,
            the value the PostgreSQL sink stores for it (docs/formats.md)
==========  ===========================================================================

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

__all__ = ["canonical", "canonical_row", "column_kind", "row_digest"]

Canonical = tuple[str | None, ...]


def _decimal(value: Decimal) -> str:
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


_BIT_TYPES = frozenset(("bit",))
_FLOAT_TYPES = frozenset(("float", "real"))
_DATE_TYPES = frozenset(("date", "datetime", "timestamp"))


def column_kind(source_type: str, target_type: str, *, is_json: bool, cross: bool) -> str:
    """The kind of a column (module docstring) from its catalog type names on both sides
    (``information_schema.columns.data_type``); ``cross``: the sides are other products."""
    types = {source_type.lower(), target_type.lower()}
    if is_json:
        return "json"
    if types & _BIT_TYPES:
        return "bit"
    if types & _FLOAT_TYPES and "double" not in types and "double precision" not in types:
        return "float"
    if cross and types & _DATE_TYPES:
        return "zero"
    return ""


def canonical(value: Any, *, json_column: bool = False, kind: str = "") -> str | None:
    """The canonical text of one column value (see the module docstring)."""
    if value is None:
        return None
    if kind:
        adjusted: str | None = _by_kind(value, kind)
        if adjusted is not _PLAIN:
            return adjusted
        json_column = kind == "json"
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


_PLAIN: Any = object()  # _by_kind's "no adjustment" (typed Any: it stands for a text)


def _by_kind(value: Any, kind: str) -> str | None:
    """The canonical text for a kind, or ``_PLAIN`` when the value needs no adjusting."""
    if kind == "bit" and isinstance(value, bytes | bytearray):
        return str(int.from_bytes(value, "big"))
    if kind == "float" and isinstance(value, float):
        return format(value, ".6g")
    if kind == "zero" and isinstance(value, str):
        return None
    plain: str | None = _PLAIN  # the sentinel: not adjusted
    return plain


def canonical_row(values: Sequence[Any], kinds: Sequence[str]) -> Canonical:
    """The canonical texts of a row's values (``kinds[i]``: column i's :func:`column_kind`)."""
    return tuple(canonical(v, kind=k) for v, k in zip(values, kinds, strict=True))


def row_digest(row: Canonical) -> int:
    """A 64-bit digest of a canonical row (NULL and the text ``None`` differ)."""
    data = json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
