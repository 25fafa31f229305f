"""Numeric codes of the binary log format: event types, column types, flags.

Sources: MySQL ``libs/mysql/binlog/event/binlog_event.h`` (enum Log_event_type) and
``include/field_types.h`` (enum enum_field_types); MariaDB ``sql/log_event.h`` for the
MariaDB-only event types (160 and up).
"""

from __future__ import annotations

import struct
from enum import IntEnum

__all__ = [
    "BINLOG_MAGIC",
    "CHECKSUM_ALG_CRC32",
    "CHECKSUM_ALG_OFF",
    "CHECKSUM_ALG_UNDEF",
    "EVENT_HEADER",
    "EVENT_HEADER_SIZE",
    "LOG_EVENT_ARTIFICIAL_F",
    "ColumnType",
    "EventType",
]

#: The four bytes every binlog file starts with.
BINLOG_MAGIC = b"\xfebin"

#: Common event header (v4): timestamp, type code, server_id, event_size (header + body +
#: checksum), log_pos (offset of the *next* event; 0 in artificial events), flags.
EVENT_HEADER = struct.Struct("<IBIIIH")
EVENT_HEADER_SIZE = EVENT_HEADER.size  # 19

#: Flag on events the server makes up rather than reads from its log (fake ROTATE at the
#: start of a dump, and the FORMAT_DESCRIPTION it re-sends). MySQL: LOG_EVENT_ARTIFICIAL_F.
LOG_EVENT_ARTIFICIAL_F = 0x20

#: binlog_checksum algorithm byte in FORMAT_DESCRIPTION (enum_binlog_checksum_alg).
CHECKSUM_ALG_OFF = 0
CHECKSUM_ALG_CRC32 = 1
CHECKSUM_ALG_UNDEF = 255


class EventType(IntEnum):
    UNKNOWN = 0
    START_V3 = 1
    QUERY = 2
    STOP = 3
    ROTATE = 4
    INTVAR = 5
    LOAD = 6
    SLAVE = 7
    CREATE_FILE = 8
    APPEND_BLOCK = 9
    EXEC_LOAD = 10
    DELETE_FILE = 11
    NEW_LOAD = 12
    RAND = 13
    USER_VAR = 14
    FORMAT_DESCRIPTION = 15
    XID = 16
    BEGIN_LOAD_QUERY = 17
    EXECUTE_LOAD_QUERY = 18
    TABLE_MAP = 19
    PRE_GA_WRITE_ROWS = 20
    PRE_GA_UPDATE_ROWS = 21
    PRE_GA_DELETE_ROWS = 22
    WRITE_ROWS_V1 = 23
    UPDATE_ROWS_V1 = 24
    DELETE_ROWS_V1 = 25
    INCIDENT = 26
    HEARTBEAT = 27
    IGNORABLE = 28
    ROWS_QUERY = 29
    WRITE_ROWS = 30
    UPDATE_ROWS = 31
    DELETE_ROWS = 32
    GTID = 33
    ANONYMOUS_GTID = 34
    PREVIOUS_GTIDS = 35
    TRANSACTION_CONTEXT = 36
    VIEW_CHANGE = 37
    XA_PREPARE = 38
    PARTIAL_UPDATE_ROWS = 39
    TRANSACTION_PAYLOAD = 40
    HEARTBEAT_V2 = 41
    GTID_TAGGED = 42
    # MariaDB (sql/log_event.h)
    ANNOTATE_ROWS = 160
    BINLOG_CHECKPOINT = 161
    MARIADB_GTID = 162
    MARIADB_GTID_LIST = 163
    START_ENCRYPTION = 164
    QUERY_COMPRESSED = 165
    WRITE_ROWS_COMPRESSED_V1 = 166
    UPDATE_ROWS_COMPRESSED_V1 = 167
    DELETE_ROWS_COMPRESSED_V1 = 168
    WRITE_ROWS_COMPRESSED = 169
    UPDATE_ROWS_COMPRESSED = 170
    DELETE_ROWS_COMPRESSED = 171


class ColumnType(IntEnum):
    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    TIME = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    TIMESTAMP2 = 17
    DATETIME2 = 18
    TIME2 = 19
    TYPED_ARRAY = 20
    VECTOR = 242
    INVALID = 243
    BOOL = 244
    JSON = 245
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255
