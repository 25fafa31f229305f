"""The row sequence: one 64-bit number that orders every change of a source.

A change's ``sequence`` is ``record << 24 | row``: ``record`` is the change log record's
``seq`` (a transaction), ``row`` the change's index among the record's change rows
(below 2**24; docs/formats.md, "The change row"). Sorting by sequence is log order, and
the record a change came from is ``sequence >> 24``. Snapshot rows use the upper half of
the row space (``headwater.snapshot.watermarks``). This module is the one place that
spells the arithmetic out.
"""

from __future__ import annotations

__all__ = ["ROW_BITS", "ROW_LIMIT", "record_of", "row_of", "sequence_of"]

#: Bits of a sequence that count rows within a record.
ROW_BITS = 24
#: Rows a record may hold (row indexes are below this).
ROW_LIMIT = 1 << ROW_BITS
_ROW_MASK = ROW_LIMIT - 1


def sequence_of(record: int, row: int) -> int:
    """The sequence of row ``row`` of record ``record``."""
    return (record << ROW_BITS) | row


def record_of(sequence: int) -> int:
    """The record seq of a sequence."""
    return sequence >> ROW_BITS


def row_of(sequence: int) -> int:
    """The row index within its record of a sequence."""
    return sequence & _ROW_MASK
