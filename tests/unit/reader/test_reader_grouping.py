"""Grouping events into records, without a server: events are built byte by byte from the
layouts in MariaDB's sql/log_event.h (common header, MARIADB_GTID, QUERY, TABLE_MAP, XID)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from headwater.binlog.constants import EVENT_HEADER, EventType
from headwater.binlog.framing import RawEvent
from headwater.changes import iter_payload_events
from headwater.config import FilterConfig
from headwater.position import Position
from headwater.reader.committed import Committed
from headwater.reader.filters import TableFilter
from headwater.reader.grouping import Grouper
from headwater.store import Record

E = EventType
FILE = "mysql-bin.000007"


def event(tc: int, body: bytes, offset: int, ts: int = 1_700_000_000) -> RawEvent:
    size = 19 + len(body)
    data = EVENT_HEADER.pack(ts, tc, 1, size, offset + size, 0) + body
    return RawEvent(offset, ts, tc, 1, offset + size, 0, memoryview(data))


def gtid(seq: int, standalone: bool = False) -> bytes:
    return struct.pack("<QIB", seq, 0, 1 if standalone else 0)


def query(sql: str, db: str = "shop") -> bytes:
    # thread_id, exec_time, db_len, error_code, status_vars_len=0; db NUL; query
    return struct.pack("<IIBHH", 1, 0, len(db), 0, 0) + db.encode() + b"\0" + sql.encode()


def table_map(table_id: int, db: str, table: str) -> bytes:
    return (
        table_id.to_bytes(6, "little")
        + b"\x01\x00"
        + bytes([len(db)])
        + db.encode()
        + b"\0"
        + bytes([len(table)])
        + table.encode()
        + b"\0"
        + b"\x01\x03\x00\x00"  # 1 column, LONG, no metadata, null bitmap
    )


def rows(table_id: int, n: int = 2) -> bytes:
    """A WRITE_ROWS_V1 body of ``n`` rows of the one INT column (null bitmap, 4 bytes)."""
    images = b"".join(b"\x00" + i.to_bytes(4, "little") for i in range(n))
    return table_id.to_bytes(6, "little") + b"\x01\x00" + b"\x01\xff" + images


class Sink:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.batches = 0

    def append_nowait(self, record: Record) -> int:
        self.records.append(record)
        return len(self.records)

    def append_many(self, records: Sequence[Record]) -> int:
        self.records.extend(records)
        self.batches += 1
        return len(self.records)


class Stream:
    """Feeds events at increasing offsets into a grouper."""

    def __init__(self, grouper: Grouper) -> None:
        self.grouper = grouper
        self.offset = 256
        self.done: list[Committed] = []

    def send(self, tc: int, body: bytes, ts: int = 1_700_000_000) -> None:
        raw = event(tc, body, self.offset, ts)
        nxt = self.offset + len(raw.data)
        result = self.grouper.feed(FILE, self.offset, FILE, nxt, raw)
        self.offset = nxt
        if result is not None:
            self.done.append(result)

    def txn(self, seq: int, *tables: tuple[int, str, str], n_rows: int = 1) -> None:
        self.send(E.MARIADB_GTID, gtid(seq))
        for tid, db, table in tables:
            self.send(E.TABLE_MAP, table_map(tid, db, table))
            for _ in range(n_rows):
                self.send(E.WRITE_ROWS_V1, rows(tid))
        self.send(E.XID, struct.pack("<Q", seq), ts=1_700_000_005)


def test_a_transaction_becomes_one_record_with_its_position_gtid_time_and_tables() -> None:
    sink = Sink()
    s = Stream(Grouper(sink, change_id=3))
    start = s.offset
    s.txn(42, (10, "shop", "orders"), (11, "shop", "items"), n_rows=2)
    (rec,) = sink.records
    assert rec.position == Position(3, 7, start, 0)
    assert rec.gtid == "0-1-42"
    assert rec.ts_us == 1_700_000_005_000_000  # the XID's header time
    assert rec.tables == (("shop.orders", 4), ("shop.items", 4))  # rows, not rows events
    assert rec.flags == 3 and rec.chunk_no == 0
    types = [e.type_code for e in iter_payload_events(rec.payload)]
    assert types == [E.MARIADB_GTID, E.TABLE_MAP, 23, 23, E.TABLE_MAP, 23, 23, E.XID]
    (done,) = s.done
    assert done.stored and done.last_seq == 1 and done.next_offset == s.offset


def test_excluded_tables_are_dropped_and_an_empty_transaction_is_not_stored() -> None:
    sink = Sink()
    flt = TableFilter(FilterConfig(include=(r"shop\..*",), exclude=(r".*\.tmp_.*",)))
    s = Stream(Grouper(sink, table_filter=flt))
    s.txn(1, (10, "shop", "orders"), (11, "shop", "tmp_x"), (12, "crm", "people"))
    s.txn(2, (11, "shop", "tmp_x"))
    (rec,) = sink.records
    assert rec.tables == (("shop.orders", 2),)
    types = [e.type_code for e in iter_payload_events(rec.payload)]
    assert types == [E.MARIADB_GTID, E.TABLE_MAP, 23, E.XID]
    assert [(d.gtid, d.stored) for d in s.done] == [("0-1-1", True), ("0-1-2", False)]


def test_event_type_filter_drops_rows_events_by_kind() -> None:
    sink = Sink()
    flt = TableFilter(FilterConfig(events=("update", "delete")))
    s = Stream(Grouper(sink, table_filter=flt))
    s.txn(1, (10, "shop", "orders"))  # inserts only
    assert sink.records == [] and s.done[0].stored is False


def test_standalone_ddl_is_its_own_transaction_and_bumps_the_schema_version() -> None:
    sink = Sink()
    seen: list[tuple[str, Position]] = []

    def on_ddl(q: object, pos: Position) -> int:
        seen.append((q.query, pos))  # type: ignore[attr-defined]
        return 7

    s = Stream(Grouper(sink, on_ddl=on_ddl))
    start = s.offset
    s.send(E.MARIADB_GTID, gtid(5, standalone=True))
    s.send(E.QUERY, query("ALTER TABLE orders ADD c INT"))
    s.txn(6, (10, "shop", "orders"))
    ddl, dml = sink.records
    assert ddl.gtid == "0-1-5" and ddl.schema_version == 7 and dml.schema_version == 7
    assert seen == [("ALTER TABLE orders ADD c INT", Position(0, 7, start, 0))]
    assert s.done[0].is_ddl and not s.done[1].is_ddl


def test_begin_commit_query_transactions_without_xid() -> None:
    sink = Sink()
    s = Stream(Grouper(sink))
    s.send(E.MARIADB_GTID, gtid(9))
    s.send(E.QUERY, query("BEGIN"))
    s.send(E.TABLE_MAP, table_map(10, "shop", "log"))
    s.send(E.WRITE_ROWS_V1, rows(10))
    s.send(E.QUERY, query("COMMIT"), ts=1_700_000_009)
    (rec,) = sink.records
    assert rec.ts_us == 1_700_000_009_000_000 and len(list(iter_payload_events(rec.payload))) == 5


def test_large_transactions_are_chunked_and_chunks_repeat_their_table_maps() -> None:
    sink = Sink()
    s = Stream(Grouper(sink, chunk_bytes=1000))
    s.txn(1, (10, "shop", "a"), (11, "shop", "b"), n_rows=40)
    chunks = sink.records
    assert len(chunks) > 3
    assert [c.chunk_no for c in chunks] == list(range(len(chunks)))
    assert chunks[0].flags == 1 and chunks[-1].flags == 2
    assert all(c.flags == 0 for c in chunks[1:-1])
    assert all(len(c.payload) < 1000 + 200 for c in chunks)
    total_rows = 0
    for c in chunks[1:]:
        events = list(iter_payload_events(c.payload))
        maps = [e for e in events if e.type_code == E.TABLE_MAP]
        assert events[0].type_code == E.TABLE_MAP  # repeated at the start
        ids = {int.from_bytes(e.data[19:25], "little") for e in maps}
        assert {int.from_bytes(e.data[19:25], "little") for e in events if e.type_code == 23} <= ids
    for c in chunks:
        total_rows += sum(n for _, n in c.tables)
    assert total_rows == 160  # 80 rows events of 2 rows each
    indexes = [c.position.event_index for c in chunks]
    assert indexes[0] == 0 and indexes == sorted(indexes)
    assert len({(c.position.file_num, c.position.offset) for c in chunks}) == 1

    # event_index + place in the payload is each new event's index in the transaction: the
    # TABLE_MAPs repeated at the start of a later chunk take earlier indexes.
    def map_id(e: RawEvent) -> int:
        return int.from_bytes(e.data[19:25], "little")

    first = list(iter_payload_events(chunks[0].payload))
    seen, mapped = len(first), {map_id(e) for e in first if e.type_code == E.TABLE_MAP}
    for c in chunks[1:]:
        events = list(iter_payload_events(c.payload))
        repeated = 0
        while events[repeated].type_code == E.TABLE_MAP and map_id(events[repeated]) in mapped:
            repeated += 1
        assert repeated >= 1
        assert c.position.event_index + repeated == seen
        mapped |= {map_id(e) for e in events if e.type_code == E.TABLE_MAP}
        seen += len(events) - repeated


def test_skipped_transactions_store_nothing_but_are_reported() -> None:
    sink = Sink()
    s = Stream(Grouper(sink, skip=lambda pos, g, obj, ts: g == "0-1-1"))
    s.txn(1, (10, "shop", "a"))
    s.txn(2, (10, "shop", "a"))
    assert [r.gtid for r in sink.records] == ["0-1-2"]
    assert [(d.gtid, d.skipped) for d in s.done] == [("0-1-1", True), ("0-1-2", False)]


def test_control_events_between_transactions_are_not_stored() -> None:
    sink = Sink()
    s = Stream(Grouper(sink))
    s.send(E.BINLOG_CHECKPOINT, b"\x00" * 8)
    s.send(E.MARIADB_GTID_LIST, b"\x00" * 4)
    s.txn(1, (10, "shop", "a"))
    (rec,) = sink.records
    assert next(e.type_code for e in iter_payload_events(rec.payload)) == E.MARIADB_GTID


def test_batched_records_wait_for_flush_and_a_chunk_keeps_the_order() -> None:
    sink = Sink()
    grouper = Grouper(sink, batch=True, chunk_bytes=1000)
    s = Stream(grouper)
    s.txn(1, (10, "shop", "a"))
    s.txn(2, (10, "shop", "a"))
    assert sink.records == [] and len(grouper.pending) == 2
    assert all(d.stored and d.last_seq == 0 for d in s.done)
    assert grouper.flush() == 2 and sink.batches == 1 and grouper.flush() is None
    s.txn(3, (10, "shop", "a"))
    s.txn(4, (10, "shop", "a"), n_rows=40)  # chunked: the pending record goes first
    assert [r.gtid for r in sink.records[:3]] == ["0-1-1", "0-1-2", "0-1-3"]
    assert grouper.flush() == len(sink.records)
    assert [r.gtid for r in sink.records if r.last_chunk] == ["0-1-1", "0-1-2", "0-1-3", "0-1-4"]
