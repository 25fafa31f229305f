from typing import Any

#: walk's statuses: the payload's end, a TABLE_MAP to parse, an event left to Python
DONE: int
TABLE_MAP: int
SLOW: int
#: int64s per event walk appends to ``out``
FIELDS: int

def walk(
    payload: bytes,
    pos: int,
    table_id_size: int,
    tables: dict[int, Any],  # id -> None or (index, Shape, width[, scanner])
    scanner: Any,
    ordinal: int,
    out: bytearray,
    expected: int,
    stop_query: bool = False,
    /,
) -> tuple[int, int, int]:
    """The rows events of ``payload`` from ``pos`` fed to ``scanner``, or to a table
    entry's own scanner (its fourth item); ``stop_query``: stop at QUERY events (walk.c)."""
