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
    tables: dict[int, tuple[int, Any, int] | None],
    scanner: Any,
    ordinal: int,
    out: bytearray,
    expected: int,
    /,
) -> tuple[int, int, int]:
    """The rows events of ``payload`` from ``pos`` fed to ``scanner`` (walk.c)."""
