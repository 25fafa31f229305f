"""A MySQL 8.4 / 9.x style reader task directory built without a server.

The binlog file starts with the FORMAT_DESCRIPTION and PREVIOUS_GTIDS of a real MySQL
8.0.26 binlog (shared fixture), then transactions built here from the formats in the MySQL
source: untagged GTID_LOG_EVENTs (``Gtid_event`` post-header, 42 bytes:
libs/mysql/binlog/event/control_events.h), GTID_TAGGED_LOG_EVENTs
(``_mysql_serialization.gtid_tagged_body``), QUERY ``BEGIN`` (``Query_event`` post-header,
13 bytes: statement_events.h), TABLE_MAP and WRITE_ROWS_V2 (``_binlog_encode``), XID.
One table's database, table and column names are bytes that are not UTF-8 (latin1 text,
as a server with ``character_set_system`` other than utf8 can log them).

The file goes through the reader's grouping path (:class:`Grouper`) into a real change
log, and ``fde.bin`` is written as the reader task does, so the task directory is what the
server and the Spark source read.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from tests.unit.binlog._binlog_encode import enc_prefixed, image, packed_int, rows_body
from tests.unit.binlog._mysql_serialization import gtid_tagged_body

from headwater.binlog.constants import ColumnType as T, EventType as E
from headwater.binlog.framing import iter_file_events
from headwater.reader.grouping import Grouper
from headwater.store import ChangeLog, Durability, StoreOptions

BASE = Path("/work/shared/fixtures/binlog/mysql/binlog-invisible-columns.000001")
SID = uuid.UUID("3e11fa47-71ca-11e1-9e33-c80aa9429562")
FILE = "binlog.000001"
#: (database, table) of the two tables: the second's names are not UTF-8.
PLAIN = (b"shop", b"orders")
LATIN = (b"caf\xe9", b"t\xe9l\xe9")
LATIN_COLUMN = b"pr\xe9nom"


@dataclass(frozen=True)
class Txn:
    gtid: str  # as the store keeps it: uuid:n or uuid:tag:n
    table: tuple[bytes, bytes]
    row_id: int


def _header(type_code: int, ts: int = 1_700_000_000) -> bytes:
    # timestamp, type, server_id, size and log_pos (fixed by _join), flags
    return struct.pack("<IBIIIH", ts, type_code, 1, 0, 0, 0)


def _join(events: list[tuple[bytes, bytes]]) -> bytes:
    """A CRC32 binlog file: sizes, log positions and checksums made right."""
    out = bytearray(b"\xfebin")
    for header, body in events:
        size = 19 + len(body) + 4
        head = bytearray(header)
        struct.pack_into("<II", head, 9, size, len(out) + size)
        event = bytes(head) + body
        out += event + struct.pack("<I", zlib.crc32(event))
    return bytes(out)


def _fixture_head() -> list[tuple[bytes, bytes]]:
    """The fixture's FORMAT_DESCRIPTION and PREVIOUS_GTIDS (header, body w/o checksum)."""
    data = BASE.read_bytes()
    out, pos = [], 4
    while len(out) < 2:
        size = struct.unpack_from("<I", data, pos + 9)[0]
        out.append((data[pos : pos + 19], data[pos + 19 : pos + size - 4]))
        pos += size
    assert [h[4] for h, _b in out] == [E.FORMAT_DESCRIPTION, E.PREVIOUS_GTIDS]
    return out


def gtid_body(gno: int) -> bytes:
    """GTID_LOG_EVENT: flags (1: may have been committed as one unit), sid, gno,
    logical-timestamp type code 2, last_committed, sequence_number."""
    return struct.pack("<B16sqBqq", 1, SID.bytes, gno, 2, 0, 1)


def query_body(sql: str, db: bytes = b"") -> bytes:
    # thread_id, exec_time, db_len, error_code, status_vars_len (none); db NUL; the query
    return struct.pack("<IIBHH", 1, 0, len(db), 0, 0) + db + b"\0" + sql.encode()


def table_map(table_id: int, names: tuple[bytes, bytes], column: bytes) -> bytes:
    """TABLE_MAP of ``(id INT, <column> VARCHAR(40))``, utf8mb4, with COLUMN_NAME metadata
    (names as raw bytes: Table_map_log_event writes them as the server holds them)."""
    db, table = names
    types = bytes([T.LONG, T.VARCHAR])
    meta = (160).to_bytes(2, "little")  # VARCHAR(40) utf8mb4: max 160 bytes
    out = table_id.to_bytes(6, "little") + (1).to_bytes(2, "little")
    out += bytes([len(db)]) + db + b"\0" + bytes([len(table)]) + table + b"\0"
    out += packed_int(2) + types + packed_int(len(meta)) + meta + b"\x03"  # both nullable
    optional = [
        (1, b"\x00"),  # SIGNEDNESS: one numeric column, signed
        (2, packed_int(255)),  # DEFAULT_CHARSET utf8mb4_0900_ai_ci for the one string column
        (4, b"".join(packed_int(len(n)) + n for n in (b"id", column))),
    ]
    for kind, value in optional:
        out += bytes([kind]) + packed_int(len(value)) + value
    return out


def transactions() -> list[Txn]:
    """Untagged, ``alpha`` and ``beta`` tagged transactions, interleaved; each tag numbers
    its own transactions from 1 (MySQL keeps one gno sequence per tsid)."""
    out: list[Txn] = []
    counters: dict[str, int] = {}
    plan = ["", "", "alpha", "alpha", "alpha", "", "beta", "alpha", "", "beta", "alpha", ""]
    for i, tag in enumerate(plan):
        counters[tag] = counters.get(tag, 0) + 1
        g = counters[tag]
        text = f"{SID}:{tag}:{g}" if tag else f"{SID}:{g}"
        out.append(Txn(text, LATIN if i % 3 == 1 else PLAIN, 100 + i))
    return out


def build_binlog(path: Path) -> list[Txn]:
    txns = transactions()
    events = _fixture_head()
    for t in txns:
        sid_tag_gno = t.gtid.split(":")
        gno = int(sid_tag_gno[-1])
        if len(sid_tag_gno) == 3:
            events.append((_header(E.GTID_TAGGED), gtid_tagged_body(SID, gno, sid_tag_gno[1])))
        else:
            events.append((_header(E.GTID), gtid_body(gno)))
        events.append((_header(E.QUERY), query_body("BEGIN", t.table[0])))
        tid = 90 if t.table == PLAIN else 91
        column = b"name" if t.table == PLAIN else LATIN_COLUMN
        events.append((_header(E.TABLE_MAP), table_map(tid, t.table, column)))
        row = image([struct.pack("<i", t.row_id), enc_prefixed(f"r{t.row_id}".encode(), 1)])
        events.append((_header(E.WRITE_ROWS), rows_body(tid, 2, row)))
        events.append((_header(E.XID, 1_700_000_000 + t.row_id), struct.pack("<Q", t.row_id)))
    path.write_bytes(_join(events))
    return txns


def build_task(task_dir: Path) -> list[Txn]:
    """``task_dir`` with ``changes/`` (the built binlog through :class:`Grouper`) and
    ``fde.bin``; the transactions in log order."""
    task_dir.mkdir(parents=True, exist_ok=True)
    binlog = task_dir.parent / FILE
    txns = build_binlog(binlog)
    opts = StoreOptions(durability=Durability.NONE, segment_bytes=4096, index_interval_bytes=512)
    with ChangeLog.open(str(task_dir / "changes"), opts) as log:
        grouper = Grouper(log, change_id=0)
        events = list(iter_file_events(binlog))
        for ev, nxt in zip(events, [*events[1:], None], strict=True):
            end = nxt.offset if nxt is not None else binlog.stat().st_size
            grouper.feed(FILE, ev.offset, FILE, end, ev)
        log.flush()
        (task_dir / "fde.bin").write_bytes(grouper.fde_raw)
    return txns
