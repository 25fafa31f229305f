"""Date and time values of row images: the helpers the generated row decoders call.

Formats (MySQL ``sql-common/my_time.cc`` and ``sql/field.cc``; MariaDB writes the same
"MySQL 5.6" formats TIME2/DATETIME2/TIMESTAMP2 while ``mysql56_temporal_format=ON``, the
default since 10.3):

DATE (3 bytes LE)        ``day | month << 5 | year << 9`` (``Field_newdate``)
TIME (3 bytes LE, old)   signed ``HHMMSS`` as a decimal number (``Field_time``)
DATETIME (8 bytes, old)  ``YYYYMMDDhhmmss`` as a decimal u64 (``Field_datetime``)
TIMESTAMP (4 bytes, old) u32 LE seconds since the epoch, UTC
TIME2 (3 bytes BE + frac)  ``my_time_packed_from_binary``: the integer part is
                         ``hour << 12 | minute << 6 | second`` biased by 0x800000; negative
                         times store the two's complement of the whole packed value, so a
                         non-zero fraction of a negative time borrows one from the integer part.
DATETIME2 (5 bytes BE + frac)  ``my_datetime_packed_from_binary``: value - 0x8000000000 =
                         ``((year * 13 + month) << 5 | day) << 17 | hour << 12 | minute << 6
                         | second``
TIMESTAMP2 (4 bytes BE + frac)  seconds since the epoch, UTC (``my_timestamp_from_binary``)

The fraction takes ``(fsp + 1) // 2`` bytes, big endian: 1 byte of 1/100 s for fsp 1-2,
2 bytes of 1/10000 s for fsp 3-4, 3 bytes of microseconds for fsp 5-6.

Zero and partly zero dates cannot be ``datetime.date``: they come back as the ``str`` MySQL
would print (``0000-00-00``, ``2020-00-15 10:00:00.000``), per the value conventions of
:mod:`headwater.binlog`.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

__all__ = [
    "UTC",
    "date_from_packed",
    "datetime2_text",
    "datetime_from_old",
    "time2_from_parts",
    "time_from_old",
    "zero_timestamp",
]

TIMEF_INT_OFS = 0x800000
TIMEF_OFS = 0x800000000000


def _frac_text(usec: int, fsp: int) -> str:
    if not fsp:
        return ""
    return "." + f"{usec:06d}"[:fsp]


def zero_timestamp(fsp: int) -> str:
    """The zero TIMESTAMP/DATETIME as MySQL prints it, with ``fsp`` fraction digits."""
    return "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")


def date_from_packed(n: int) -> date | str:
    """DATE / NEWDATE: ``day | month << 5 | year << 9``."""
    day = n & 31
    month = (n >> 5) & 15
    year = n >> 9
    try:
        return date(year, month, day)
    except ValueError:
        return f"{year:04d}-{month:02d}-{day:02d}"


def datetime2_text(n: int, usec: int, fsp: int) -> str:
    """A DATETIME2 that is no valid ``datetime``, as MySQL prints it."""
    ymd = n >> 17
    ym = ymd >> 5
    hms = n & 0x1FFFF
    return (
        f"{ym // 13:04d}-{ym % 13:02d}-{ymd & 31:02d} "
        f"{hms >> 12:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}" + _frac_text(usec, fsp)
    )


def datetime_from_old(v: int) -> datetime | str:
    """Old DATETIME: ``YYYYMMDDhhmmss`` as a decimal number."""
    d, t = divmod(v, 1000000)
    year, md = divmod(d, 10000)
    month, day = divmod(md, 100)
    hour, ms = divmod(t, 10000)
    minute, second = divmod(ms, 100)
    try:
        return datetime(year, month, day, hour, minute, second)
    except ValueError:
        return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"


def time_from_old(v: int) -> timedelta:
    """Old TIME: signed ``HHMMSS`` as a decimal number."""
    a = -v if v < 0 else v
    hours, ms = divmod(a, 10000)
    minutes, seconds = divmod(ms, 100)
    delta = timedelta(hours=hours, minutes=minutes, seconds=seconds)
    return -delta if v < 0 else delta


def time2_from_parts(intpart: int, frac: int, fsp: int) -> timedelta:
    """TIME2 from its 3-byte big-endian integer part and its raw big-endian fraction.

    For fsp 5-6 ``intpart`` is the whole 6-byte value (integer part and microseconds).
    Follows ``my_time_packed_from_binary`` and ``TIME_from_longlong_time_packed``.
    """
    if fsp >= 5:
        packed = intpart - TIMEF_OFS
    else:
        ip = intpart - TIMEF_INT_OFS
        if fsp >= 3:
            if ip < 0 and frac:
                ip += 1
                frac -= 0x10000
            packed = (ip << 24) + frac * 100
        elif fsp >= 1:
            if ip < 0 and frac:
                ip += 1
                frac -= 0x100
            packed = (ip << 24) + frac * 10000
        else:
            packed = ip << 24
    neg = packed < 0
    if neg:
        packed = -packed
    hms = packed >> 24
    usec = packed & 0xFFFFFF
    delta = timedelta(
        hours=(hms >> 12) & 0x3FF, minutes=(hms >> 6) & 63, seconds=hms & 63, microseconds=usec
    )
    return -delta if neg else delta
