"""QUERY events (and MariaDB's QUERY_COMPRESSED): a statement and its session context.

Layout (MySQL ``libs/mysql/binlog/event/statement_events.cpp``, ``Query_event`` reading
constructor; MariaDB ``sql/log_event.cc``, ``Query_log_event``)::

    post-header (13 bytes for QUERY; EXECUTE_LOAD_QUERY appends 13 more of its own)
      thread_id        u32
      exec_time        u32   seconds the statement ran
      db_len           u8
      error_code       u16
      status_vars_len  u16   (absent from pre-5.0 formats, which are refused)
    status_vars        status_vars_len bytes: (code u8, value) pairs, see below
    db                 db_len bytes, then 0x00
    query              the rest of the body (QUERY_COMPRESSED: compressed, see below)

``status_vars_len`` larger than what follows the post-header is corruption (the servers
check exactly this); so is a missing NUL after the db name.

Status variables, by code (MySQL ``enum Query_event_status_vars`` in statement_events.h,
MariaDB ``sql/log_event.h``)::

     0 FLAGS2                   u32          9 TABLE_MAP_FOR_UPDATE      u64
     1 SQL_MODE                 u64         10 MASTER_DATA_WRITTEN       u32
     2 CATALOG (5.0.0-5.0.3)    u8 len, s, 0 11 INVOKER                  u8 len, user,
     3 AUTO_INCREMENT           u16 incr,                                 u8 len, host
                                u16 offset  12 UPDATED_DB_NAMES          u8 n; if n <= 16,
     4 CHARSET                  u16 client,                               n NUL-ended names
                                u16 conn,   13 MICROSECONDS              u24
                                u16 server  14 COMMIT_TS, 15 COMMIT_TS2  never written
     5 TIME_ZONE                u8 len, s   16 EXPLICIT_DEFAULTS_FOR_TS  u8
     6 CATALOG_NZ               u8 len, s   17 DDL_LOGGED_WITH_XID       u64
     7 LC_TIME_NAMES            u16         18 DEFAULT_COLLATION_UTF8MB4 u16
     8 CHARSET_DATABASE         u16         19 SQL_REQUIRE_PRIMARY_KEY   u8
                                            20 DEFAULT_TABLE_ENCRYPTION  u8
    MariaDB: 128 HRNOW u24 (microseconds), 129 XID u64, 130 GTID_FLAGS3 u8 (+ u64
    sa_seq_no when it has COMMIT_ALTER 4 or ROLLBACK_ALTER 8), 131 CHARACTER_SET_COLLATIONS
    u8 n, then n x (u16 charset id, u16 collation id).

Both servers stop at the first code they do not know -- its length is unknown, so nothing
after it can be read -- and keep the statement; so do we, keeping the unread bytes in
:attr:`QueryStatus.unparsed` (MySQL never writes 14 and 15, and its reader treats them as
unknown). A *known* variable that runs past the status block is corruption.

QUERY_COMPRESSED (MariaDB ``log_bin_compress``): the query is ``0x80 | n`` (n = 1..4),
the uncompressed length in n big-endian bytes, then a zlib stream
(``binlog_buf_uncompress``, sql/log_event.cc).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

from headwater.binlog._context import BinlogEvent, DecodeContext
from headwater.binlog._control import charset_text
from headwater.binlog._cursor import Cursor
from headwater.binlog.constants import EventType
from headwater.binlog.framing import RawEvent
from headwater.errors import BinlogFormatError, TruncatedError

__all__ = ["QueryEvent", "QueryStatus", "parse_query", "parse_status_vars"]

_QUERY_HEADER_MINIMAL_LEN = 11  # post-header of pre-5.0 formats, without status_vars_len
_MAX_DBS_IN_EVENT_MTS = 16
_OVER_MAX_DBS_IN_EVENT_MTS = 254
_FL_COMMIT_ALTER_E1 = 4
_FL_ROLLBACK_ALTER_E1 = 8

_StatusReader = Callable[[Cursor, dict[str, object]], None]


@dataclass(frozen=True, slots=True)
class QueryStatus:
    """The status variables of a QUERY event; ``None`` where the event did not carry one.

    ``charset_client``/``collation_connection``/``collation_server`` come from CHARSET;
    ``updated_db_names`` is ``()`` when the server wrote "more than 16 databases";
    ``microseconds`` is MySQL's MICROSECONDS or MariaDB's HRNOW; ``unknown_code`` is the
    first code that stopped parsing, ``unparsed`` the bytes from it to the block's end.
    """

    flags2: int | None = None
    sql_mode: int | None = None
    catalog: str | None = None
    auto_increment_increment: int | None = None
    auto_increment_offset: int | None = None
    charset_client: int | None = None
    collation_connection: int | None = None
    collation_server: int | None = None
    time_zone: str | None = None
    lc_time_names: int | None = None
    charset_database: int | None = None
    table_map_for_update: int | None = None
    master_data_written: int | None = None
    invoker_user: str | None = None
    invoker_host: str | None = None
    updated_db_names: tuple[str, ...] | None = None
    microseconds: int | None = None
    explicit_defaults_for_timestamp: bool | None = None
    ddl_xid: int | None = None
    default_collation_for_utf8mb4: int | None = None
    sql_require_primary_key: int | None = None
    default_table_encryption: int | None = None
    xid: int | None = None
    gtid_flags3: int | None = None
    sa_seq_no: int | None = None
    character_set_collations: tuple[tuple[int, int], ...] | None = None
    unknown_code: int | None = None
    unparsed: bytes = b""


@dataclass(frozen=True, slots=True)
class QueryEvent(BinlogEvent):
    """QUERY (also EXECUTE_LOAD_QUERY and MariaDB QUERY_COMPRESSED, decompressed).

    ``schema`` is the default database (``""`` for none); ``query`` the statement decoded
    in the client character set (``query_bytes`` keeps the bytes as logged).
    """

    thread_id: int
    exec_time: int
    error_code: int
    schema: str
    query: str
    status: QueryStatus
    query_bytes: bytes


def parse_query(raw: RawEvent, ctx: DecodeContext) -> QueryEvent:
    what = raw.type_name
    body = raw.body
    post = ctx.post_header_length(raw.type_code)
    cur = Cursor(body)
    thread_id = cur.u32("thread_id")
    exec_time = cur.u32("exec_time")
    db_len = cur.u8("db_len")
    error_code = cur.u16("error_code")
    if post <= _QUERY_HEADER_MINIMAL_LEN:
        raise BinlogFormatError("no status variables (pre-5.0 format)")
    status_len = cur.u16("status_vars_len")
    cur.skip(post - cur.pos, "post-header")
    data_len = len(body) - post
    if status_len > data_len:
        raise TruncatedError(
            f"status_vars_len {status_len} exceeds the {data_len} bytes after the post-header"
        )
    status = parse_status_vars(body[cur.pos : cur.pos + status_len], what)
    cur.skip(status_len, "status vars")
    schema = cur.take(db_len, "db")
    if cur.u8("db terminator") != 0:
        raise BinlogFormatError(f"db name of {db_len} bytes is not NUL-terminated")
    query = cur.rest()
    if raw.type_code == EventType.QUERY_COMPRESSED:
        query = _uncompress_query(query, ctx.max_uncompressed)
    return QueryEvent(
        thread_id,
        exec_time,
        error_code,
        schema.decode("utf-8", "replace"),
        charset_text(query, status.charset_client),
        status,
        query,
    )


def parse_status_vars(block: bytes | memoryview, what: str = "QUERY") -> QueryStatus:
    """Decode a status variable block (see the module docstring for the codes)."""
    cur = Cursor(block, "status vars")
    found: dict[str, object] = {}
    while cur.remaining:
        start = cur.pos
        code = cur.u8("code")
        reader = _STATUS_READERS.get(code)
        if reader is None:
            found["unknown_code"] = code
            found["unparsed"] = bytes(block[start:])
            break
        reader(cur, found)
    return QueryStatus(**found)  # type: ignore[arg-type]


def _short_string(cur: Cursor, field: str) -> str:
    return cur.string(cur.u8(f"{field} length"), field)


def _read_catalog_old(cur: Cursor, found: dict[str, object]) -> None:
    length = cur.u8("catalog length")
    found["catalog"] = cur.string(length, "catalog")
    cur.skip(1, "catalog terminator")


def _read_charset(cur: Cursor, found: dict[str, object]) -> None:
    found["charset_client"] = cur.u16("charset_client")
    found["collation_connection"] = cur.u16("collation_connection")
    found["collation_server"] = cur.u16("collation_server")


def _read_auto_increment(cur: Cursor, found: dict[str, object]) -> None:
    found["auto_increment_increment"] = cur.u16("auto_increment_increment")
    found["auto_increment_offset"] = cur.u16("auto_increment_offset")


def _read_invoker(cur: Cursor, found: dict[str, object]) -> None:
    found["invoker_user"] = _short_string(cur, "invoker user")
    found["invoker_host"] = _short_string(cur, "invoker host")


def _read_updated_dbs(cur: Cursor, found: dict[str, object]) -> None:
    count = cur.u8("updated db count")
    if count > _MAX_DBS_IN_EVENT_MTS:  # OVER_MAX_DBS_IN_EVENT_MTS: names not logged
        found["updated_db_names"] = ()
        return
    if count == 0:
        raise BinlogFormatError("UPDATED_DB_NAMES with a count of 0")
    names = []
    for i in range(count):
        end = bytes(cur.data[cur.pos : cur.end]).find(b"\0")
        if end < 0:
            raise TruncatedError(f"updated db name {i + 1} of {count} is not ended")
        names.append(cur.string(end, "updated db name"))
        cur.skip(1, "updated db name terminator")
    found["updated_db_names"] = tuple(names)


def _read_gtid_flags3(cur: Cursor, found: dict[str, object]) -> None:
    flags = cur.u8("gtid_flags3")
    found["gtid_flags3"] = flags
    if flags & (_FL_COMMIT_ALTER_E1 | _FL_ROLLBACK_ALTER_E1):
        found["sa_seq_no"] = cur.u64("sa_seq_no")


def _read_charset_collations(cur: Cursor, found: dict[str, object]) -> None:
    count = cur.u8("character_set_collations count")
    found["character_set_collations"] = tuple(
        (cur.u16("charset id"), cur.u16("collation id")) for _ in range(count)
    )


def _simple(name: str, read: str) -> _StatusReader:
    def reader(cur: Cursor, found: dict[str, object]) -> None:
        found[name] = getattr(cur, read)(name)

    return reader


def _string(name: str) -> _StatusReader:
    def reader(cur: Cursor, found: dict[str, object]) -> None:
        found[name] = _short_string(cur, name)

    return reader


def _flag(cur: Cursor, found: dict[str, object]) -> None:
    found["explicit_defaults_for_timestamp"] = cur.u8("explicit_defaults_for_timestamp") != 0


_STATUS_READERS: dict[int, _StatusReader] = {
    0: _simple("flags2", "u32"),
    1: _simple("sql_mode", "u64"),
    2: _read_catalog_old,
    3: _read_auto_increment,
    4: _read_charset,
    5: _string("time_zone"),
    6: _string("catalog"),
    7: _simple("lc_time_names", "u16"),
    8: _simple("charset_database", "u16"),
    9: _simple("table_map_for_update", "u64"),
    10: _simple("master_data_written", "u32"),
    11: _read_invoker,
    12: _read_updated_dbs,
    13: _simple("microseconds", "u24"),
    16: _flag,
    17: _simple("ddl_xid", "u64"),
    18: _simple("default_collation_for_utf8mb4", "u16"),
    19: _simple("sql_require_primary_key", "u8"),
    20: _simple("default_table_encryption", "u8"),
    128: _simple("microseconds", "u24"),
    129: _simple("xid", "u64"),
    130: _read_gtid_flags3,
    131: _read_charset_collations,
}


def _uncompress_query(data: bytes, cap: int) -> bytes:
    if not data or data[0] & 0xE0 != 0x80:
        raise BinlogFormatError("bad compression header")
    lenlen = data[0] & 0x07
    if not 1 <= lenlen <= 4 or len(data) < 1 + lenlen:
        raise TruncatedError("compressed length missing")
    size = int.from_bytes(data[1 : 1 + lenlen], "big")
    if size > cap:
        raise BinlogFormatError(f"uncompressed size {size} exceeds the limit of {cap} bytes")
    inflater = zlib.decompressobj()
    out = inflater.decompress(data[1 + lenlen :], size + 1)
    if len(out) != size or not inflater.eof:
        raise BinlogFormatError(f"inflated to {len(out)} bytes, header says {size}")
    return out
