"""Row-image values (JSON, docs/formats.md "Values") back to SQL parameters.

Change rows carry images as JSON, where a DECIMAL is a string, bytes are
``{"base64": ...}``, dates are ISO 8601 and TIME is ``[-]HH:MM:SS[.ffffff]``. A sink needs
the column's type (:class:`~headwater.schema.model.Column`) to turn each value back into
what its driver binds correctly:

=========================  ==============================  ===============================
column type                parameter                       notes
=========================  ==============================  ===============================
DECIMAL                    ``decimal.Decimal``             exact
BINARY/BLOB/GEOMETRY/...   ``bytes``                       ``{"base64"}`` decoded
DATE                       ``datetime.date``               zero dates: :class:`ValueRules`
DATETIME                   ``datetime.datetime`` (naive)   zero dates: :class:`ValueRules`
TIMESTAMP                  ``datetime.datetime`` (UTC)     sessions run in UTC
TIME                       ``datetime.timedelta``          PostgreSQL ``interval``
SET                        ``str``, members joined by ","
JSON                       ``str`` (the JSON text)
undecodable text           ``bytes`` (MySQL) or text with U+FFFD (PostgreSQL)
everything else            as JSON gives it (int, float, str)
=========================  ==============================  ===============================

Zero dates (``0000-00-00``, ``2020-00-15``, ``0000-00-00 00:00:00``) follow
``ValueRules.zero_dates``: ``keep`` passes MySQL's text through (a MySQL target stores
it as it was), ``null`` binds NULL, ``fail`` raises :class:`ValueError` (the sink turns it
into a :class:`~headwater.errors.SinkError` naming table and key).
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from headwater.schema.model import BINARY_TYPES, Column

__all__ = ["ValueRules", "column_converter", "converter", "parse_time"]

_TIME = re.compile(r"^(-)?(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")
_BINARY = BINARY_TYPES | {
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
}


@dataclass(frozen=True, slots=True)
class ValueRules:
    """Per target: ``zero_dates`` is ``keep``, ``null`` or ``fail``; ``text_bytes`` says
    whether undecodable text may be bound as bytes (else it is decoded with U+FFFD)."""

    zero_dates: str = "keep"
    text_bytes: bool = True


def parse_time(text: str) -> dt.timedelta:
    """``[-]HH:MM:SS[.ffffff]`` (hours may exceed 24) as a timedelta."""
    m = _TIME.match(text)
    if m is None:
        raise ValueError(f"not a TIME value: {text!r}")
    sign, h, mi, s, frac = m.groups()
    value = dt.timedelta(
        hours=int(h), minutes=int(mi), seconds=int(s), microseconds=int((frac or "0").ljust(6, "0"))
    )
    return -value if sign else value


def _bytes(value: Any) -> Any:
    if isinstance(value, dict):
        payload = value.get("base64", value.get("undecodable_text_base64"))
        if payload is not None:
            return base64.b64decode(payload)
    return value


def _zero(rules: ValueRules, value: str) -> Any:
    if rules.zero_dates == "keep":
        return value
    if rules.zero_dates == "null":
        return None
    raise ValueError(f"zero date {value!r} (zero_dates: fail)")


def _temporal(parse: Callable[[str], Any], rules: ValueRules) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return parse(value)
        except ValueError:
            return _zero(rules, value)

    return convert


def _text(rules: ValueRules) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, dict) and "undecodable_text_base64" in value:
            raw = base64.b64decode(value["undecodable_text_base64"])
            return raw if rules.text_bytes else raw.decode("utf-8", "replace")
        return value

    return convert


def _identity(value: Any) -> Any:
    return value


def _decimal(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return Decimal(value)
    except ArithmeticError:  # decimal.InvalidOperation is not a ValueError
        raise ValueError("not a decimal number") from None


def _set(value: Any) -> Any:
    return ",".join(value) if isinstance(value, list) else value


def _time(value: Any) -> Any:
    return parse_time(value) if isinstance(value, str) else value


def converter(column: Column, rules: ValueRules) -> Callable[[Any], Any]:
    """The function from ``column``'s JSON value to its SQL parameter (None stays None:
    each conversion passes values of other types through)."""
    return _conversion(column, rules)[0]


def column_converter(column: Column, rules: ValueRules) -> Callable[[list[Any]], list[Any]]:
    """:func:`converter` over a list of ``column``'s values (one call per column of a
    statement, not per value). A list without a value of the type the conversion acts on
    (JSON gives exact types) comes back untouched: integer and float columns always, text
    columns unless a value is undecodable."""
    convert, acts_on = _conversion(column, rules)
    if acts_on is None:
        return _same

    def each(values: list[Any]) -> list[Any]:
        kinds = set(map(type, values))
        if acts_on not in kinds:
            return values
        if convert is _decimal and kinds == {str}:
            try:
                return list(map(Decimal, values))  # the C constructor, no call of _decimal
            except ArithmeticError:
                raise ValueError("not a decimal number") from None
        return list(map(convert, values))

    return each


def _conversion(column: Column, rules: ValueRules) -> tuple[Callable[[Any], Any], type | None]:
    """``column``'s conversion and the one JSON type it changes (None: none at all)."""
    kind = column.data_type
    if kind == "decimal":
        return _decimal, str
    if kind in _BINARY or column.charset == "binary":
        return _bytes, dict
    if kind == "date":
        return _temporal(dt.date.fromisoformat, rules), str
    if kind in ("datetime", "timestamp"):
        return _temporal(dt.datetime.fromisoformat, rules), str
    if kind == "time":
        return _time, str
    if kind == "set":
        return _set, list
    if column.is_character:
        return _text(rules), dict
    return _identity, None


def _same(values: list[Any]) -> list[Any]:
    return values
