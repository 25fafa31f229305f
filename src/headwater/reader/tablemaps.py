"""What the grouper reads of a TABLE_MAP shape, without decoding a row.

A *shape* is a TABLE_MAP body (the event minus its header, whose time and log_pos vary):
the grouper looks at each shape once (``Grouper._new_shape``) and keeps what it learned.
This module holds the two pure pieces of that: :func:`table_names` reads the table id and
names without parsing the column definitions, and :class:`RowCounter` counts the rows of
the shape's rows events by walking their value lengths (``headwater.binlog.rows``). Both
get bytes and the table id size, nothing else; errors are raised, and the grouper reports
and counts them (``Grouper.count_errors``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from headwater.binlog.rows import count_rows, row_counter
from headwater.binlog.tablemap import TableMap

__all__ = ["RowCounter", "table_names"]


def table_names(body: memoryview, id_size: int) -> tuple[int, str, str]:
    """Table id, database and table of a TABLE_MAP body, without parsing the rest."""
    table_id = int.from_bytes(body[:id_size], "little")
    p = id_size + 2
    n = body[p]
    db = bytes(body[p + 1 : p + 1 + n]).decode("utf-8", "replace")
    p += n + 2
    m = body[p]
    table = bytes(body[p + 1 : p + 1 + m]).decode("utf-8", "replace")
    return table_id, db, table


@dataclass(slots=True)
class RowCounter:
    """Row counting for one TABLE_MAP shape: the parsed map and the count function of
    the last rows header seen (``type_code`` -1: none).

    While a table's rows events repeat the header (type, flags, width, bitmaps:
    ``prefix``), the grouper calls ``fn(data, 19 + len(prefix), len(data))`` as it is;
    :meth:`count` takes an event whose header differs, and keeps its count function."""

    table_map: TableMap
    type_code: int = -1
    prefix: bytes = b""
    fn: Callable[[memoryview | bytes, int, int], int] = lambda _b, _p, _e: 0

    def count(self, tc: int, data: memoryview | bytes, id_size: int) -> int:
        """Rows in a rows event (type code ``tc``, ``data`` with its header); raises
        ``BinlogFormatError`` if its images do not frame."""
        body = data[19:]
        known = row_counter(tc, body, table_map=self.table_map, table_id_size=id_size)
        if known is None:
            self.type_code = -1
            return count_rows(tc, body, table_map=self.table_map, table_id_size=id_size)
        start, fn = known
        self.type_code, self.prefix, self.fn = tc, bytes(body[:start]), fn
        return int(fn(body, start, len(body)))
