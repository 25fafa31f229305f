"""DDL statements on their way into the change log: scope, filter, redaction.

The grouper (``headwater.reader.grouping``) hands every DDL QUERY event here before it
becomes part of a record. :func:`prepare_ddl` classifies the statement
(:func:`headwater.schema.ddlscope.ddl_scope`), and when it carries a credential rewrites the
event so that the secret is never written: the change log, the schema history beside it
and every API response only ever see the rewritten event (DESIGN.md, decision 8: the one
exception to "store raw").

The rewritten event keeps the QUERY layout (MySQL ``Query_event`` in
libs/mysql/binlog/event/statement_events.cpp, MariaDB ``Query_log_event`` in
sql/log_event.cc; ``headwater.binlog._query`` documents it)::

    header (19)  post-header  status vars  db  0x00  query

Only the query, the last field, changes; its length is implied by the event's length, so
the header's ``event_size`` is moved by the same number of bytes (it still counts the
stripped checksum when the source used CRC32, as every stored event's does:
``headwater.changes``). The checksum itself is not stored, so there is none to recompute.
A MariaDB QUERY_COMPRESSED event is compressed again the way the server does it
(``binlog_buf_compress`` in sql/log_event.cc: ``0x80 | n``, the uncompressed length in
``n`` big-endian bytes, then a zlib stream).

Invariant: a rewritten event parses with ``headwater.binlog.events.parse_event`` to the
same thread id, database, status variables and error code, with the redacted statement.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, replace

from headwater.binlog.constants import EVENT_HEADER_SIZE, EventType
from headwater.binlog.events import QueryEvent
from headwater.schema.ddlscope import DdlScope, ddl_scope, redact_annotation, redact_statement

__all__ = ["PreparedDdl", "prepare_ddl", "redact_annotate_event", "rewrite_query_event"]

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_EVENT_SIZE_AT = 9  # header: timestamp u32, type u8, server_id u32, then event_size u32
_DB_LEN_AT = 8  # post-header: thread_id u32, exec_time u32, db_len u8
_STATUS_LEN_AT = 11  # ... error_code u16, status_vars_len u16


@dataclass(frozen=True, slots=True)
class PreparedDdl:
    """A DDL event ready to store: its scope, the bytes to store, the statement as stored."""

    scope: DdlScope
    data: bytes | memoryview
    query: QueryEvent
    redacted: bool


def prepare_ddl(
    query: QueryEvent, data: bytes | memoryview, type_code: int, post_header_len: int
) -> PreparedDdl:
    """Classify one DDL QUERY event and redact it when it carries a credential."""
    scope = ddl_scope(query.query, query.schema)
    new = redact_statement(query.query_bytes, scope)
    if new is None:
        return PreparedDdl(scope, data, query, False)
    event = rewrite_query_event(
        data, post_header_len, new, compressed=type_code == EventType.QUERY_COMPRESSED
    )
    text = new.decode("utf-8", "replace")
    return PreparedDdl(scope, event, replace(query, query=text, query_bytes=new), True)


def rewrite_query_event(
    data: bytes | memoryview, post_header_len: int, query: bytes, *, compressed: bool = False
) -> bytes:
    """The QUERY event ``data`` (header + body, no checksum) with ``query`` as its statement."""
    view = memoryview(data)
    body = EVENT_HEADER_SIZE
    db_len = view[body + _DB_LEN_AT]
    (status_len,) = _U16.unpack_from(view, body + _STATUS_LEN_AT)
    start = body + post_header_len + status_len + db_len + 1
    if start > len(view):
        raise ValueError(f"QUERY event of {len(view)} bytes ends before its statement")
    stored = _compress(query) if compressed else query
    out = bytearray(view[:start])
    out += stored
    (size,) = _U32.unpack_from(view, _EVENT_SIZE_AT)
    _U32.pack_into(out, _EVENT_SIZE_AT, size + len(out) - len(view))
    return bytes(out)


def redact_annotate_event(
    data: bytes | memoryview, *, rows_query: bool = False
) -> bytes | memoryview:
    """The ANNOTATE_ROWS event ``data`` (header + body, no checksum) with the credentials
    in its statement redacted, or ``data`` itself when there are none. The body is the
    statement and nothing else (MariaDB ``Annotate_rows_log_event`` in sql/log_event.cc:
    no post-header, the text runs to the event's end), so only ``event_size`` moves.

    ``rows_query``: MySQL's ROWS_QUERY event instead (``binlog_rows_query_log_events``;
    ``Rows_query_event`` in libs/mysql/binlog/event/rows_event.cpp): one length byte,
    which readers skip (it is capped at 255), then the text to the end; the byte is
    written as ``min(len, 255)`` of the new text, as the server does."""
    view = memoryview(data)
    start = EVENT_HEADER_SIZE + (1 if rows_query else 0)
    new = redact_annotation(bytes(view[start:]))
    if new is None:
        return data
    out = bytearray(view[:start])
    if rows_query:
        out[EVENT_HEADER_SIZE] = min(len(new), 255)
    out += new
    (size,) = _U32.unpack_from(view, _EVENT_SIZE_AT)
    _U32.pack_into(out, _EVENT_SIZE_AT, size + len(out) - len(view))
    return bytes(out)


def _compress(query: bytes) -> bytes:
    n = len(query)
    lenlen = 1 if n < 1 << 8 else 2 if n < 1 << 16 else 3 if n < 1 << 24 else 4
    return bytes((0x80 | lenlen,)) + n.to_bytes(lenlen, "big") + zlib.compress(query)
