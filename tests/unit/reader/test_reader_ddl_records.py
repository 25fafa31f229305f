"""DDL on its way into the change log: objects in the record's table list, the reader's
filters applied to them, credentials redacted in the stored event (which still decodes
with the project's decoders: differential check against the statement redacted alone)."""

from __future__ import annotations

import struct

from tests.unit.reader.test_reader_grouping import Sink, Stream, gtid

from headwater.binlog.constants import EVENT_HEADER, EventType
from headwater.binlog.events import DecodeContext, QueryEvent, parse_event
from headwater.binlog.framing import RawEvent
from headwater.changes import decode_record, iter_payload_events
from headwater.config import FilterConfig
from headwater.position import Position
from headwater.reader.ddl_records import prepare_ddl, rewrite_query_event
from headwater.reader.filters import TableFilter
from headwater.reader.grouping import Grouper
from headwater.schema.ddlscope import ddl_scope, redact_statement

E = EventType
SECRET = "Repl-S3cret-PW-7731"


def query_body(sql: bytes, db: str = "shop", status: bytes = b"") -> bytes:
    # thread_id, exec_time, db_len, error_code, status_vars_len; status; db NUL; query
    head = struct.pack("<IIBHH", 77, 3, len(db), 0, len(status))
    return head + status + db.encode() + b"\0" + sql


def ddl(s: Stream, seq: int, sql: str, db: str = "shop") -> None:
    s.send(E.MARIADB_GTID, gtid(seq, standalone=True))
    s.send(E.QUERY, query_body(sql.encode(), db))


def test_ddl_records_list_the_objects_they_touch() -> None:
    sink = Sink()
    s = Stream(Grouper(sink))
    ddl(s, 1, "RENAME TABLE a TO b, crm.c TO crm.d")
    ddl(s, 2, "DROP DATABASE IF EXISTS otherdb")
    ddl(s, 3, "CREATE USER 'evil'@'%'")
    assert [r.tables for r in sink.records] == [
        (("shop.a", 0), ("shop.b", 0), ("crm.c", 0), ("crm.d", 0)),
        (("otherdb.*", 0),),
        (("!account", 0),),
    ]
    assert all(d.is_ddl and d.stored for d in s.done)


def test_a_filtered_reader_keeps_ddl_of_its_tables_only() -> None:
    sink = Sink()
    flt = TableFilter(FilterConfig(include=(r"shop\.x",)))
    s = Stream(Grouper(sink, table_filter=flt))
    ddl(s, 1, "ALTER TABLE x ADD c INT")
    ddl(s, 2, "ALTER TABLE y ADD c INT")
    ddl(s, 3, "DROP DATABASE shop")  # the database as a whole: only for shop\..* filters
    ddl(s, 4, "CREATE DATABASE secret")
    ddl(s, 5, "GRANT ALL ON *.* TO u")
    ddl(s, 6, "RENAME TABLE x TO old_x")  # touches shop.x
    assert [r.gtid for r in sink.records] == ["0-1-1", "0-1-6"]
    assert [d.stored for d in s.done] == [True, False, False, False, False, True]


def test_a_database_filter_keeps_its_database_ddl() -> None:
    sink = Sink()
    s = Stream(Grouper(sink, table_filter=TableFilter(FilterConfig(include=(r"shop\..*",)))))
    ddl(s, 1, "DROP DATABASE shop")
    ddl(s, 2, "DROP DATABASE otherdb")
    assert [r.tables for r in sink.records] == [(("shop.*", 0),)]


def test_statements_not_about_data_never_reach_the_schema_history() -> None:
    seen: list[str] = []

    def on_ddl(q: QueryEvent, pos: Position) -> int:
        seen.append(q.query)
        return 1

    s = Stream(Grouper(Sink(), on_ddl=on_ddl))
    ddl(s, 1, f"CREATE USER 'repl'@'%' IDENTIFIED BY '{SECRET}'")
    ddl(s, 2, f"CREATE TABLE f (a INT) ENGINE=FEDERATED CONNECTION='mysql://u:{SECRET}@h/d/t'")
    assert seen == [
        "CREATE TABLE f (a INT) ENGINE=FEDERATED CONNECTION='mysql://u:<redacted>@h/d/t'"
    ]


def test_a_credential_is_redacted_in_the_stored_event_which_still_decodes() -> None:
    sink = Sink()
    s = Stream(Grouper(sink))
    sql = f"CREATE USER 'repl'@'%' IDENTIFIED BY '{SECRET}'"
    ddl(s, 1, sql)
    (rec,) = sink.records
    assert SECRET.encode() not in rec.payload
    _gtid_event, query_event = iter_payload_events(rec.payload)
    # the header's event_size moved with the statement (no checksum in this stream)
    assert EVENT_HEADER.unpack_from(query_event.data)[3] == len(query_event.data)
    ev = parse_event(query_event, DecodeContext())
    assert isinstance(ev, QueryEvent)
    expected = redact_statement(sql.encode(), ddl_scope(sql, "shop"))
    assert ev.query_bytes == expected == b"CREATE USER 'repl'@'%' IDENTIFIED BY '<redacted>'"
    assert (ev.schema, ev.thread_id, ev.exec_time, ev.error_code) == ("shop", 77, 3, 0)
    (change,) = decode_record(rec, source="t", fde=None)
    assert change.op == "ddl" and change.sql == expected.decode()


def _raw(tc: int, body: bytes, size_extra: int = 0) -> RawEvent:
    size = 19 + len(body) + size_extra
    data = EVENT_HEADER.pack(1_700_000_000, tc, 1, size, 1000 + size, 0) + body
    return RawEvent(1000, 1_700_000_000, tc, 1, 1000 + size, 0, memoryview(data))


def test_rewrite_keeps_status_variables_and_the_checksum_count_in_event_size() -> None:
    # FLAGS2 (code 0, u32) and SQL_MODE (code 1, u64) status variables
    status = b"\x00" + struct.pack("<I", 0x4000) + b"\x01" + struct.pack("<Q", 0x1234)
    sql = f"ALTER USER 'a'@'%' IDENTIFIED BY '{SECRET}'".encode()
    raw = _raw(E.QUERY, query_body(sql, "mysql", status), size_extra=4)  # CRC32 was stripped
    new = redact_statement(sql, ddl_scope(sql.decode(), "mysql"))
    assert new is not None
    out = rewrite_query_event(raw.data, 13, new)
    assert EVENT_HEADER.unpack_from(out)[3] == len(out) + 4
    before = parse_event(raw, DecodeContext())
    after = parse_event(_raw(E.QUERY, out[19:]), DecodeContext())
    assert isinstance(before, QueryEvent) and isinstance(after, QueryEvent)
    assert after.status == before.status and after.schema == "mysql"
    assert after.query_bytes == new


def test_a_compressed_query_event_is_compressed_again() -> None:
    import zlib

    sql = f"SET PASSWORD FOR 'a'@'%' = PASSWORD('{SECRET}')".encode()
    packed = bytes((0x81, len(sql))) + zlib.compress(sql)
    raw = _raw(E.QUERY_COMPRESSED, query_body(packed, "mysql"))
    q = parse_event(raw, DecodeContext())
    assert isinstance(q, QueryEvent) and q.query_bytes == sql
    prepared = prepare_ddl(q, raw.data, E.QUERY_COMPRESSED, 13)
    assert prepared.redacted
    again = parse_event(_raw(E.QUERY_COMPRESSED, bytes(prepared.data)[19:]), DecodeContext())
    assert isinstance(again, QueryEvent)
    assert again.query_bytes == b"SET PASSWORD FOR 'a'@'%' = PASSWORD('<redacted>')"
    assert SECRET.encode() not in bytes(prepared.data)


def test_row_annotations_with_a_credential_are_redacted_and_still_decode() -> None:
    """MariaDB's ANNOTATE_ROWS and MySQL's ROWS_QUERY carry the DML statement's text:
    a credential in it is redacted like a DDL's, and the event still parses."""
    from headwater.binlog.events import AnnotateRowsEvent, RowsQueryEvent
    from headwater.reader.ddl_records import redact_annotate_event

    sql = f"UPDATE app.users SET pw = PASSWORD('{SECRET}') WHERE id = 7".encode()
    annotate = _raw(E.ANNOTATE_ROWS, sql, size_extra=4)
    out = redact_annotate_event(annotate.data)
    assert SECRET.encode() not in bytes(out)
    assert EVENT_HEADER.unpack_from(out)[3] == len(out) + 4  # the stripped CRC still counted
    ev = parse_event(_raw(E.ANNOTATE_ROWS, bytes(out)[19:]), DecodeContext())
    assert isinstance(ev, AnnotateRowsEvent)
    assert ev.query == "UPDATE app.users SET pw = PASSWORD('<redacted>') WHERE id = 7"

    rows_query = _raw(E.ROWS_QUERY, bytes((len(sql),)) + sql)
    out = redact_annotate_event(rows_query.data, rows_query=True)
    assert SECRET.encode() not in bytes(out) and EVENT_HEADER.unpack_from(out)[3] == len(out)
    assert bytes(out)[19] == len(out) - 20  # the length byte of the new text
    ev = parse_event(_raw(E.ROWS_QUERY, bytes(out)[19:]), DecodeContext())
    assert isinstance(ev, RowsQueryEvent) and "<redacted>" in ev.query

    plain = _raw(E.ANNOTATE_ROWS, b"INSERT INTO app.users VALUES (1)")
    assert redact_annotate_event(plain.data) is plain.data  # nothing to hide: as it came
