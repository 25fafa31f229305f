"""Stored transactions decode into change rows: a live MariaDB binlog, grouped into
transactions the way the reader stores them, through :func:`decode_record`."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest

from headwater._native._ingest import events
from headwater.binlog.constants import EventType
from headwater.binlog.framing import FormatDescription, iter_file_events
from headwater.binlog.tablemap import TableMap
from headwater.changes import (
    _CHANGE_EVENTS,
    _TABLE_MAPS,
    ChangeBlock,
    _events_python,
    _general_blocks,
    _planned_blocks,
    decode_blocks,
    decode_record,
    encode_events,
    iter_payload_events,
)
from headwater.errors import BinlogFormatError
from headwater.position import Position, binlog_file_number
from headwater.sandbox import MariadbSandbox
from headwater.schema import SchemaHistory
from headwater.schema.introspect import read_database_charsets, read_server_charset, read_tables
from headwater.store import Record


def _transactions(
    mariadb: MariadbSandbox, file: str, start: int
) -> tuple[FormatDescription, list[Record]]:
    """Group the file's events from ``start`` into records: MARIADB_GTID ... XID, or a
    GTID followed by one standalone QUERY (DDL)."""
    fde: FormatDescription | None = None
    records: list[Record] = []
    current: list[bytes] = []
    first_offset = 0
    gtid = ""
    ts = 0
    for raw in iter_file_events(mariadb.binlog_path(file)):
        if raw.type_code == EventType.FORMAT_DESCRIPTION:
            fde = FormatDescription.parse(raw.data)
            continue
        if raw.offset is None or raw.offset < start:
            continue
        if raw.type_code == EventType.MARIADB_GTID:
            current, first_offset, ts = [], raw.offset, raw.timestamp
            seq_no, domain = (
                int.from_bytes(raw.body[:8], "little"),
                int.from_bytes(raw.body[8:12], "little"),
            )
            gtid = f"{domain}-{raw.server_id}-{seq_no}"
            standalone = raw.body[12] & 1
            current.append(bytes(raw.data))
            continue
        current.append(bytes(raw.data))
        if raw.type_code == EventType.XID or (raw.type_code == EventType.QUERY and standalone):
            records.append(
                Record(
                    Position(0, binlog_file_number(file), first_offset),
                    encode_events(current),
                    ts_us=ts * 1_000_000,
                    gtid=gtid,
                    seq=len(records) + 1,
                )
            )
    assert fde is not None
    return fde, records


def test_transactions_decode_to_change_rows(mariadb: MariadbSandbox, db: str) -> None:
    file, start = mariadb.binlog_position()
    mariadb.execute(
        f"CREATE TABLE `{db}`.acct (id INT PRIMARY KEY, owner VARCHAR(20), bal DECIMAL(8,2),"
        " seen DATETIME(3))",
        f"CREATE TABLE `{db}`.audit (n INT)",
    )
    conn = mariadb.connect(db)
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(
            "INSERT INTO acct VALUES (1, 'ann', 10.50, '2024-01-02 03:04:05.678'),"
            " (2, 'bob', -3.00, NULL)"
        )
        cur.execute("INSERT INTO audit VALUES (7)")
        cur.execute("UPDATE acct SET bal = bal + 1 WHERE id = 2")
        cur.execute("COMMIT")
        cur.execute("DELETE FROM acct WHERE id = 1")
    conn.close()

    fde, records = _transactions(mariadb, file, start)
    assert len(records) == 4  # two CREATE TABLEs, the multi-statement transaction, the delete
    ddl = [c for r in records[:2] for c in decode_record(r, source="s", fde=fde)]
    assert [(c.op, c.database, c.sql) for c in ddl] == [
        (
            "ddl",
            "",
            f"CREATE TABLE `{db}`.acct (id INT PRIMARY KEY, owner VARCHAR(20), "
            "bal DECIMAL(8,2), seen DATETIME(3))",
        ),
        ("ddl", "", f"CREATE TABLE `{db}`.audit (n INT)"),
    ]

    changes = decode_record(records[2], source="src1", fde=fde, want=lambda d, t: t == "acct")
    assert [(c.op, c.table, c.key, c.before, c.after) for c in changes] == [
        (
            "insert",
            "acct",
            {"id": 1},
            None,
            {
                "id": 1,
                "owner": "ann",
                "bal": Decimal("10.50"),
                "seen": dt.datetime(2024, 1, 2, 3, 4, 5, 678000),
            },
        ),
        (
            "insert",
            "acct",
            {"id": 2},
            None,
            {"id": 2, "owner": "bob", "bal": Decimal("-3.00"), "seen": None},
        ),
        (
            "update",
            "acct",
            {"id": 2},
            {"id": 2, "owner": "bob", "bal": Decimal("-3.00"), "seen": None},
            {"id": 2, "owner": "bob", "bal": Decimal("-2.00"), "seen": None},
        ),
    ]
    record = records[2]
    assert [c.sequence for c in changes] == [record.seq << 24 | n for n in range(3)]
    assert {c.gtid for c in changes} == {record.gtid} and record.gtid.startswith("0-1-")
    assert all(c.source == "src1" and c.ts_us == record.ts_us for c in changes)
    # Positions: the transaction's offset, the index of the rows event within it.
    assert [c.position.offset for c in changes] == [record.position.offset] * 3
    indexes = [c.position.event_index for c in changes]
    assert indexes[0] == indexes[1] < indexes[2]

    everything = decode_record(record, source="s", fde=fde)
    assert [(c.table, c.op) for c in everything] == [
        ("acct", "insert"),
        ("acct", "insert"),
        ("audit", "insert"),
        ("acct", "update"),
    ]
    assert everything[2].key is None  # audit has no primary key
    (deleted,) = decode_record(records[3], source="s", fde=fde)
    assert (deleted.op, deleted.key, deleted.after) == ("delete", {"id": 1}, None)


def test_malformed_payload_is_a_typed_error_naming_the_record() -> None:
    good = encode_events([bytes(19 + 8)])
    assert len(list(iter_payload_events(good))) == 1
    with pytest.raises(BinlogFormatError, match="does not fit"):
        list(iter_payload_events(good[:-1]))
    record = Record(Position(0, 1, 4), good[:-3], seq=9)
    with pytest.raises(BinlogFormatError, match="record 9"):
        decode_record(record, source="s", fde=None)
    # An event that does not decode: named by record, offset in its file and type.
    body = (77).to_bytes(6, "little") + bytes(4)
    header = struct.pack("<IBIIIH", 0, EventType.WRITE_ROWS_V1, 1, 19 + len(body), 600, 0)
    record = Record(Position(0, 1, 4), encode_events([header + body]), seq=9)
    with pytest.raises(BinlogFormatError, match="without a TABLE_MAP") as e:
        decode_record(record, source="s", fde=None)
    assert (e.value.source, e.value.offset, e.value.event_type) == (
        "s record 9 at 0:1:4:0",
        600 - 19 - len(body),
        "WRITE_ROWS_V1",
    )


def test_the_compiled_walk_of_a_payload_is_the_python_walk() -> None:
    """``_ingest.events`` (the planned decoding's walk of a record) gives what its Python
    twin gives: the index, type and body bounds of each event a change may come from
    (GTID, annotation and XID passed over), and None for a payload that does not frame."""

    def event(code: int, body: bytes) -> bytes:
        return struct.pack("<IBIIIH", 0, code, 1, 19 + len(body), 0, 0) + body

    payload = encode_events(
        [
            event(EventType.MARIADB_GTID, bytes(19)),
            event(EventType.ANNOTATE_ROWS, b"INSERT INTO t VALUES (1)"),
            event(EventType.TABLE_MAP, b"map"),
            event(EventType.WRITE_ROWS_V1, b"rows"),
            event(EventType.QUERY, b""),
            event(EventType.XID, bytes(8)),
        ]
    )
    want = [(2, 19, 112, 115), (3, 23, 138, 142), (4, 2, 165, 165)]
    assert events(payload, _CHANGE_EVENTS) == want
    assert _events_python(payload, _CHANGE_EVENTS) == want
    assert events(b"", _CHANGE_EVENTS) == _events_python(b"", _CHANGE_EVENTS) == []
    for cut in (payload[:-1], payload[:3], payload + bytes(2), payload + bytes(4)):
        assert events(cut, _CHANGE_EVENTS) is None
        assert _events_python(cut, _CHANGE_EVENTS) is None
    with pytest.raises(ValueError, match="256 bytes"):
        events(payload, b"\x01")


class _CountingSchema:
    """A SchemaLookup that knows no table (FULL metadata names the columns) and counts how
    often it is asked for columns."""

    def __init__(self) -> None:
        self.asked = 0

    def columns_for(self, table_map: TableMap, position: Position) -> None:
        self.asked += 1

    def primary_key_for(self, database: str, table: str, position: Position) -> None:
        return None


def test_records_share_parsed_table_maps_and_ask_the_schema_once_each(
    mariadb: MariadbSandbox, db: str
) -> None:
    mariadb.execute(f"CREATE TABLE `{db}`.m (id INT PRIMARY KEY, v VARCHAR(20))")
    file, start = mariadb.binlog_position()
    for i in range(3):
        mariadb.execute(f"INSERT INTO `{db}`.m VALUES ({i}, 'a'), ({i + 10}, NULL)")
    # 2000 rows: MariaDB cuts the statement into several rows events of one record.
    mariadb.execute(
        f"INSERT INTO `{db}`.m SELECT seq, REPEAT('x', 20) FROM seq_100_to_2099", database=db
    )
    fde, records = _transactions(mariadb, file, start)
    assert len(records) == 4
    _TABLE_MAPS.clear()
    schema = _CountingSchema()
    blocks = [decode_blocks(r, source="s", fde=fde, schema=schema) for r in records]
    assert [sum(len(b.rows) for b in bs) for bs in blocks] == [2, 2, 2, 2000]
    assert len(blocks[3]) > 2  # several rows events in the last record
    # One parsed TABLE_MAP for the four records, one schema question per record.
    assert [len(maps) for maps in _TABLE_MAPS.values()] == [1]
    assert schema.asked == 4
    for record, record_blocks in zip(records, blocks, strict=True):
        for block in record_blocks:
            assert type(block.position) is Position
            assert block.position == Position.parse(str(block.position))
            assert (block.position.file_num, block.position.offset) == (
                record.position.file_num,
                record.position.offset,
            )
    last = [b.position.event_index for b in blocks[3]]
    assert last == sorted(set(last)) and last[0] >= 2  # after the GTID and TABLE_MAP


def _both_ways(
    records: list[Record],
    fde: FormatDescription,
    schema: SchemaHistory | None,
    want: object = None,
) -> list[list[ChangeBlock] | None]:
    """Each record's blocks by plan (None: left to the general loop), after checking that
    they equal the general loop's, which parses every event."""
    maps = _TABLE_MAPS.setdefault((fde.table_id_size, fde.is_mariadb), {})
    out: list[list[ChangeBlock] | None] = []
    for record in records:
        general = _general_blocks(record, fde, maps, schema, want, None)  # type: ignore[arg-type]
        planned = _planned_blocks(record, fde.table_id_size, maps, schema, want)  # type: ignore[arg-type]
        assert planned is None or planned == general, record
        out.append(planned)
    return out


def test_planned_decoding_equals_the_general_loop(mariadb: MariadbSandbox, db: str) -> None:
    """Rows events decoded by plan (_planned_blocks) give the general loop's blocks: one-row
    and multi-row transactions, several tables (one filtered out), updates moving a key,
    deletes, MINIMAL images, a statement cut into several rows events, a table without a
    key, names from the schema history (NO_LOG metadata), a column renamed in the history (the
    same TABLE_MAP bytes at a new schema version get a new plan) and a column added."""
    mariadb.execute(
        f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
        f"CREATE TABLE `{db}`.b (k INT, w VARCHAR(10))",
    )
    file, start = mariadb.binlog_position()
    conn = mariadb.connect(db)
    history = SchemaHistory(mariadb=True)
    bootstrap = Position(0, binlog_file_number(file), start - 1)
    history.bootstrap(
        read_tables(conn, [db]), bootstrap, databases=read_database_charsets(conn, [db]),
        server_charset=read_server_charset(conn),
    )  # fmt: skip
    conn.close()
    with mariadb.binlog_settings(metadata="NO_LOG"):
        conn = mariadb.connect(db)
        conn.autocommit(True)
        try:
            cur = conn.cursor()
            for i in range(1, 4):
                cur.execute(f"INSERT INTO a VALUES ({i}, 'v{i}', {i * 10})")
            cur.execute("INSERT INTO a SELECT seq, REPEAT('x', 20), seq FROM seq_10_to_1500")
            cur.execute("BEGIN")
            cur.execute("INSERT INTO b VALUES (1, 'one'), (2, NULL)")
            cur.execute("UPDATE a SET id = 5000, n = NULL WHERE id = 1")
            cur.execute("COMMIT")
            cur.execute("UPDATE b SET w = 'two' WHERE k = 2")
            cur.execute("DELETE FROM a WHERE id = 2")
            cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
            cur.execute("UPDATE a SET n = 7 WHERE id = 3")
            cur.execute("DELETE FROM a WHERE id = 10")
            cur.execute("SET SESSION binlog_row_image = 'FULL'")
            cur.execute("ALTER TABLE a ADD COLUMN z INT")
            cur.execute("INSERT INTO a VALUES (4, 'v4', 40, NULL)")
            cur.execute("UPDATE a SET v = 'w', z = 1 WHERE id = 4")
        finally:
            conn.close()
    fde, records = _transactions(mariadb, file, start)
    (alter,) = [r for r in records if r.payload.find(b"ADD COLUMN") >= 0]
    rows = [r for r in records if r is not alter]
    assert len(rows) == 11
    # The history says a column was renamed from the second record on, which the
    # binlog does not show (the same TABLE_MAP bytes before and after): the decoding
    # follows the history, a plan is made per schema version.
    history.apply_ddl(f"ALTER TABLE `{db}`.a RENAME COLUMN v TO label", db, rows[1].position)
    history.apply_ddl(f"ALTER TABLE `{db}`.a ADD COLUMN z INT", db, alter.position)

    _TABLE_MAPS.clear()
    # A TABLE_MAP not parsed yet in this process: the record is left to the general loop.
    assert _planned_blocks(rows[0], fde.table_id_size, {}, history, None) is None
    again = _both_ways(rows, fde, history)
    assert all(p is not None for p in again)
    blocks = [b for p in again if p is not None for b in p]
    assert [(b.table, b.op, len(b.rows)) for b in blocks[:3]] == [("a", "insert", 1)] * 3
    assert len([b for b in again[3] or [] if b.op == "insert"]) > 1  # rows events cut
    assert sum(len(b.rows) for b in again[3] or []) == 1491
    before_rename, after_rename = again[0], again[-1]
    assert before_rename is not None and after_rename is not None
    assert before_rename[0].after_names == ["id", "v", "n"]
    assert before_rename[0].key_names == ("id",)
    assert (again[1] or [])[0].after_names == ["id", "label", "n"]
    assert after_rename[0].after_names == ["id", "label", "n", "z"]
    assert after_rename[0].rows == [((4, "v4", 40, None), (4, "w", 40, 1))]
    minimal = again[7]
    assert minimal is not None and minimal[0].before_names == ["id"]
    assert [(b.table, b.key_names) for b in again[4] or []] == [("b", None), ("a", ("id",))]
    # a filtered table's events are skipped, as the general loop skips them
    filtered = _both_ways(rows, fde, history, want=lambda _d, t: t == "a")
    assert [b.table for p in filtered if p is not None for b in p].count("b") == 0
    assert [len(p) for p in filtered if p is not None][4:6] == [1, 0]
    # without a schema: @1, @2, ... as the general loop names them
    nameless = _both_ways(rows, fde, None)
    assert nameless[0] is not None and nameless[0][0].after_names == ["@1", "@2", "@3"]
    assert (nameless[-1] or [])[0].after_names == ["@1", "@2", "@3", "@4"]
