"""What decoding an event depends on besides its own bytes: :class:`DecodeContext`.

The context is the only mutable state of event decoding. :func:`headwater.binlog.events.
parse_event` updates it as it goes: a FORMAT_DESCRIPTION replaces :attr:`DecodeContext.fde`,
a TABLE_MAP is stored under its table id, and the table maps are dropped after a rows event
that ends its statement (``STMT_END_F``), as the server's applier does
(``Rows_log_event::do_apply_event`` clears its table map at statement end; every statement's
rows events are preceded by the TABLE_MAPs they use), which keeps the dict bounded.

When no FORMAT_DESCRIPTION has been seen (a single event parsed on its own), the post-header
lengths of binlog v4 as MySQL 5.6+ writes them are assumed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from headwater.binlog.codec import ColumnDef
from headwater.binlog.constants import EventType
from headwater.binlog.framing import FormatDescription
from headwater.binlog.tablemap import TableMap

#: Entries kept in :attr:`DecodeContext.table_map_cache` before it is emptied.
TABLE_MAP_CACHE_SIZE = 4096

__all__ = [
    "DEFAULT_MAX_UNCOMPRESSED",
    "TABLE_MAP_CACHE_SIZE",
    "BinlogEvent",
    "ColumnsSupplier",
    "DecodeContext",
]

#: Default cap on a decompressed TRANSACTION_PAYLOAD or QUERY_COMPRESSED body (1 GiB).
DEFAULT_MAX_UNCOMPRESSED = 1 << 30

#: Given a TABLE_MAP, the column definitions in force for it (schema history), or ``None``.
ColumnsSupplier = Callable[[TableMap], Sequence[ColumnDef] | None]

# Post-header lengths of binlog v4 (MySQL 5.6+ Format_description_event, control_events.cpp)
# used only before any FORMAT_DESCRIPTION has been seen.
_DEFAULT_POST_HEADER: dict[int, int] = {
    EventType.QUERY: 13,
    EventType.ROTATE: 8,
    EventType.TABLE_MAP: 8,
    EventType.WRITE_ROWS_V1: 8,
    EventType.UPDATE_ROWS_V1: 8,
    EventType.DELETE_ROWS_V1: 8,
    EventType.WRITE_ROWS: 10,
    EventType.UPDATE_ROWS: 10,
    EventType.DELETE_ROWS: 10,
    EventType.PARTIAL_UPDATE_ROWS: 10,
    EventType.EXECUTE_LOAD_QUERY: 26,
    EventType.BEGIN_LOAD_QUERY: 4,
    EventType.APPEND_BLOCK: 4,
    EventType.INCIDENT: 2,
    EventType.GTID: 42,
    EventType.ANONYMOUS_GTID: 42,
    EventType.XA_PREPARE: 0,
    EventType.QUERY_COMPRESSED: 13,
}


@dataclass(slots=True, frozen=True)
class BinlogEvent:
    """Base of the decoded event bodies defined here (TABLE_MAP and rows events are
    :class:`~headwater.binlog.tablemap.TableMap` and
    :class:`~headwater.binlog.rows.RowsEvent`)."""


@dataclass(slots=True)
class DecodeContext:
    """Decoding state of one binlog stream (one file, or one replica connection).

    ``source`` names the file or server in errors. ``columns`` supplies column definitions
    from the schema history for tables whose TABLE_MAP lacks names (MINIMAL metadata).
    ``max_uncompressed`` caps the memory a compressed event may expand to: larger ones are
    refused with :class:`~headwater.errors.BinlogFormatError` rather than allocated.
    """

    fde: FormatDescription | None = None
    table_maps: dict[int, TableMap] = field(default_factory=dict)
    columns: ColumnsSupplier | None = None
    source: str | None = None
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
    #: Parsed TABLE_MAPs by their body bytes: the server logs the same TABLE_MAP before
    #: every statement, and parsing one costs far more than hashing its bytes. Bounded.
    table_map_cache: dict[bytes, TableMap] = field(default_factory=dict)

    def post_header_length(self, type_code: int) -> int:
        if self.fde is not None:
            return self.fde.post_header_length(type_code)
        return _DEFAULT_POST_HEADER.get(type_code, 0)

    @property
    def table_id_size(self) -> int:
        return 6 if self.fde is None else self.fde.table_id_size
