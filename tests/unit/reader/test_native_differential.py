"""The compiled ingest path against the Python one: the same records, byte for byte.

A dump answer (packets: fake ROTATE, then the events of a binlog file, then EOF) is fed in
chunks of random sizes to two pipelines:

* reference: ``EventFramer`` -> ``Grouper.feed`` (no scanner) -> ``ChangeLog.append_many``;
* native: ``DumpSplitter`` (the scanner takes the common transactions: ``Grouper.native_scan``
  -> ``ChangeLog.append_frames``) -> ``EventFramer`` -> ``Grouper.feed`` for the rest.

Both must store the same records (position, payload, time, GTID, table counts, schema
version, flags, chunk number, seq) and report the same transaction ends. Streams are the
real binlog fixtures and generated MariaDB logs: single-row and multi-row transactions,
UPDATE/DELETE images with NULLs, 1- and 2-byte VARCHAR lengths, BLOBs, several tables per
transaction, ANNOTATE_ROWS, BEGIN/COMMIT QUERY transactions, standalone DDL, heartbeats,
filtered tables, transactions large enough to be chunked, GTIDs going backwards, and a
corrupt CRC (both paths must fail the same way).
"""

from __future__ import annotations

import contextlib
import gzip
import random
import struct
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from headwater.binlog._packets import EventFramer
from headwater.binlog.constants import EVENT_HEADER, EventType
from headwater.binlog.framing import DumpSplitter
from headwater.config import FilterConfig
from headwater.errors import CorruptRecordError, HeadwaterError
from headwater.position import MariadbGtid, MariadbGtidPos, Position
from headwater.reader.committed import Committed
from headwater.reader.filters import TableFilter
from headwater.reader.grouping import Grouper
from headwater.store import ChangeLog, StoreOptions
from headwater.store.segment import SEG, read_footer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "binlog"))
from _binlog_encode import enc_prefixed, image, rows_body, table_map_body

E = EventType
FIXTURES = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "binlog" / "mysql"
MARIADB = FIXTURES / "mariadb-bin.000001"
FILE = "mariadb-bin.000001"

# ---- streams -------------------------------------------------------------------------


def mariadb_fde() -> bytes:
    """The FORMAT_DESCRIPTION of the MariaDB 10.5 fixture (CRC32 checksums), whole."""
    data = MARIADB.read_bytes()
    size = struct.unpack_from("<I", data, 4 + 9)[0]
    return data[4 : 4 + size]


class LogWriter:
    """A MariaDB binlog file, event by event (CRC32 appended, log_pos filled in)."""

    def __init__(self, server_id: int = 1) -> None:
        self.out = bytearray(b"\xfebin") + mariadb_fde()
        self.server_id = server_id
        self.ts = 1_700_000_000

    def event(self, tc: int, body: bytes, *, ts: int | None = None, flags: int = 0) -> None:
        size = 19 + len(body) + 4
        pos = len(self.out) + size
        ts = self.ts if ts is None else ts
        head = EVENT_HEADER.pack(ts, tc, self.server_id, size, pos, flags)
        data = head + body
        self.out += data + struct.pack("<I", zlib.crc32(data))


@dataclass
class Table:
    table_id: int
    db: str
    name: str
    types: list[int]
    metas: list[bytes]

    def table_map(self) -> bytes:
        return table_map_body(self.table_id, self.db, self.name, self.types, self.metas)

    def value(self, rng: random.Random, col: int) -> bytes | None:
        if col and rng.random() < 0.15:
            return None
        t = self.types[col]
        if t == 3:  # LONG
            return rng.getrandbits(32).to_bytes(4, "little")
        if t == 8:  # LONGLONG
            return rng.getrandbits(64).to_bytes(8, "little")
        if t == 15:  # VARCHAR: 1 or 2 length bytes after the max length
            maxlen = int.from_bytes(self.metas[col], "little")
            return enc_prefixed(b"v" * rng.randrange(0, min(maxlen, 700)), 1 if maxlen < 256 else 2)
        if t == 252:  # BLOB with a 2-byte length
            return enc_prefixed(bytes(rng.getrandbits(8) for _ in range(rng.randrange(40))), 2)
        assert t == 18  # DATETIME2(6)
        return bytes(rng.getrandbits(8) for _ in range(8))

    def row(self, rng: random.Random, cols: list[int]) -> bytes:
        return image([self.value(rng, c) for c in cols])


def tables() -> list[Table]:
    return [
        Table(70, "shop", "orders", [3, 15, 8], [b"", (40).to_bytes(2, "little"), b""]),
        Table(
            71, "shop", "wide", [3, 15, 252, 18], [b"", (600).to_bytes(2, "little"), b"\2", b"\6"]
        ),
        Table(72, "logs", "audit", [8, 15], [b"", (200).to_bytes(2, "little")]),
    ]


def rows_event(rng: random.Random, t: Table, n: int) -> tuple[int, bytes]:
    width = len(t.types)
    kind = rng.choice(("insert", "insert", "update", "delete"))
    v2 = rng.random() < 0.2
    tc = {"insert": (23, 30), "update": (24, 31), "delete": (25, 32)}[kind][v2]
    present = list(range(width))
    after = present if rng.random() < 0.7 else [0, *range(1, width)[: rng.randrange(width)]]
    data = b""
    for _ in range(n):
        data += t.row(rng, present)
        if kind == "update":
            data += t.row(rng, after)
    body = rows_body(t.table_id, width, data, present, after, v2=v2, update=kind == "update")
    return tc, body


def query_body(sql: str, db: str = "shop") -> bytes:
    # thread_id, exec_time, db_len, error_code, status_vars_len; db\0; query
    return struct.pack("<IIBHH", 1, 0, len(db), 0, 0) + db.encode() + b"\0" + sql.encode()


def generated_log(seed: int, n_txns: int = 60) -> bytes:
    rng = random.Random(seed)
    w = LogWriter()
    ts = tables()
    seq = 100
    for i in range(n_txns):
        w.ts += rng.randrange(2)
        # now and then a GTID going backwards (always once)
        seq += 1 if rng.random() < 0.95 and i != n_txns // 2 else -3
        shape = rng.random()
        if shape < 0.05:
            w.event(E.MARIADB_GTID, struct.pack("<QIB", seq, 0, 1))  # standalone DDL
            w.event(E.QUERY, query_body("ALTER TABLE orders ADD COLUMN z INT"))
            continue
        if shape < 0.08:
            w.event(E.HEARTBEAT, b"mariadb-bin.000001", flags=0x20)
        w.event(E.MARIADB_GTID, struct.pack("<QIB", seq, 0, 0) + b"\0" * 6)
        begin_commit = shape < 0.15
        if begin_commit:
            w.event(E.QUERY, query_body("BEGIN"))
        if rng.random() < 0.5:
            w.event(E.ANNOTATE_ROWS, rng.choice(ANNOTATIONS))
        used = rng.sample(ts, rng.randrange(1, 4))
        for t in used:
            w.event(E.TABLE_MAP, t.table_map())
        big = rng.random() < 0.05
        for _ in range(rng.randrange(1, 4) * (40 if big else 1)):
            t = rng.choice(used)
            tc, body = rows_event(rng, t, rng.choice((1, 1, 2, 30)))
            w.event(tc, body)
        if begin_commit:
            w.event(E.QUERY, query_body("COMMIT"))
        else:
            w.event(E.XID, rng.getrandbits(64).to_bytes(8, "little"))
    return bytes(w.out)


ANNOT_SECRET = b"Annot-S3cret-9"
#: Statements as MariaDB annotates row events with them; some carry a credential.
ANNOTATIONS = (
    b"INSERT INTO orders VALUES (...)",
    b"INSERT INTO orders VALUES (...)",
    b"UPDATE users SET pw = PASSWORD('" + ANNOT_SECRET + b"') WHERE id = 1",
    b"update users set Password = '" + ANNOT_SECRET + b"' where id = 2",
    b"UPDATE users SET password_hash = 'x', password = '" + ANNOT_SECRET + b"' WHERE id = 3",
    b"INSERT INTO connections VALUES (1)",  # a word the scanner hands over; nothing to hide
)


def dump_packets(log: bytes, name: str = FILE) -> bytes:
    """The server's answer to COM_BINLOG_DUMP from offset 4: a fake ROTATE (artificial,
    log_pos 0), every event of ``log`` one packet each, then EOF (sql/sql_repl.cc)."""
    events = [struct.pack("<Q", 4) + name.encode()]
    rotate = EVENT_HEADER.pack(0, E.ROTATE, 1, 19 + len(events[0]) + 4, 0, 0x20) + events[0]
    wholes = [rotate + struct.pack("<I", zlib.crc32(rotate))]
    pos = 4
    while pos < len(log):
        size = struct.unpack_from("<I", log, pos + 9)[0]
        wholes.append(log[pos : pos + size])
        pos += size
    out = bytearray()
    seq = 1
    for whole in [*wholes, None]:
        payload = b"\xfe\0\0\0\0" if whole is None else b"\0" + whole
        out += struct.pack("<I", len(payload) | seq << 24) + payload
        seq = (seq + 1) & 0xFF
    return bytes(out)


# ---- the two pipelines -----------------------------------------------------------------


class Feed:
    """recv_into over a byte string, in chunks of the given sizes (cycled)."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes, self.pos, self.i = data, sizes, 0, 0

    def __call__(self, view: memoryview) -> int:
        size = self.sizes[self.i % len(self.sizes)]
        self.i += 1
        n = min(len(view), size, len(self.data) - self.pos)
        view[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


def segment_data(directory: Path) -> list[bytes]:
    """The record bytes of every segment (frames, CRCs and all; no footer)."""
    out = []
    for path in sorted(directory.glob("*" + SEG)):
        data = path.read_bytes()
        with contextlib.suppress(CorruptRecordError):  # the active segment has no footer
            data = data[: read_footer(str(path)).data_end]
        out.append(data)
    return out


@dataclass
class Outcome:
    segments: list[bytes]
    records: list[tuple[object, ...]]
    dones: list[Committed]
    native: int
    error: str | None


def run(
    packets: bytes,
    sizes: list[int],
    tmp: Path,
    *,
    native: bool,
    table_filter: TableFilter | None = None,
    chunk_bytes: int = 24 * 1024,
    buffer_size: int = 48 * 1024,
    resume_checks: bool = False,
) -> Outcome:
    options = StoreOptions(segment_bytes=256 * 1024, maintenance_interval_s=None)
    log = ChangeLog.open(str(tmp), options)
    dones: list[Committed] = []
    seen = MariadbGtidPos()

    def skip(pos: Position, gtid: str, gobj: object, ts: int) -> bool:
        """ReaderTask._skip: at or before the last transaction, or a GTID already seen."""
        last = next((d.position for d in reversed(dones) if not d.skipped), None)
        if last is not None and (pos.file_num, pos.offset) <= (last.file_num, last.offset):
            return True
        return isinstance(gobj, MariadbGtid) and gobj in seen

    grouper = Grouper(
        log,
        table_filter=table_filter,
        chunk_bytes=chunk_bytes,
        batch=True,
        skip=skip if resume_checks else None,
    )

    def committed(done: Committed) -> None:
        dones.append(done)
        if not done.skipped and isinstance(done.gtid_obj, MariadbGtid):
            seen.add(done.gtid_obj)

    feed = Feed(packets, sizes)
    read: Callable[[memoryview], int]
    if native:
        assert grouper.native is not None
        native_path = grouper.native

        def consume(buf: bytearray, start: int, end: int, seq: int) -> tuple[int, int, int]:
            last = next((d for d in reversed(dones) if not d.skipped), None)
            gtid = next((g for g in seen.gtids() if g.domain_id == 0), None)
            status, stop, seq, done, _n = grouper.native_scan(
                buf,
                start,
                end,
                seq,
                file=framer.file,
                crc=True,
                verify=True,
                after=None if last is None else (last.position.file_num, last.position.offset),
                gtid_floor=(gtid.domain_id, gtid.seq_no) if isinstance(gtid, MariadbGtid) else None,
            )
            if done is not None:
                committed(done)
            return status, stop, seq

        splitter = DumpSplitter(
            feed,
            consume,
            ready=lambda: not grouper.in_transaction,
            abandon=native_path.reset,
            before_read=grouper.flush,
            buffer_size=buffer_size,
            min_read=1024,
        )
        read = splitter.recv_into
    else:
        grouper.native = None

        def read(view: memoryview) -> int:
            grouper.flush()
            return feed(view)

    framer = EventFramer(read, file=FILE, position=4, buffer_size=64 * 1024)
    error = None
    try:
        for file, offset, next_file, next_offset, raw in framer.events():
            done = grouper.feed(file, offset, next_file, next_offset, raw)
            if done is not None:
                committed(done)
    except HeadwaterError as e:  # both paths must fail alike (a corrupt event, ...)
        error = f"{type(e).__name__}: {e}"
    grouper.flush()
    log.flush()
    records = [
        (
            r.seq,
            r.position,
            r.payload,
            r.ts_us,
            r.gtid,
            r.tables,
            r.schema_version,
            r.flags,
            r.chunk_no,
        )
        for r in log.reader()
    ]
    log.close()
    return Outcome(segment_data(tmp), records, dones, grouper.native_transactions, error)


def same(a: Outcome, b: Outcome) -> None:
    """``b`` (native) stored what ``a`` (reference) stored and reported the same ends."""
    assert b.records == a.records
    assert b.segments == a.segments  # the same bytes on disk, CRCs included
    assert b.error == a.error
    assert sum(d.transactions for d in b.dones) == len(a.dones)
    i = 0
    for d in b.dones:
        i += d.transactions
        ref = a.dones[i - 1]
        assert (d.position, d.gtid, d.gtid_obj, d.ts_us, d.stored, d.next_offset, d.is_ddl) == (
            ref.position,
            ref.gtid,
            ref.gtid_obj,
            ref.ts_us,
            ref.stored,
            ref.next_offset,
            ref.is_ddl,
        )
        if d.transactions == 1:
            assert (d.skipped, d.records) == (ref.skipped, ref.records)


def compare(tmp: Path, packets: bytes, sizes: list[int], **kw: object) -> Outcome:
    ref = run(packets, sizes, tmp / "python", native=False, **kw)  # type: ignore[arg-type]
    nat = run(packets, sizes, tmp / "native", native=True, **kw)  # type: ignore[arg-type]
    same(ref, nat)
    return nat


# ---- tests ---------------------------------------------------------------------------


def test_the_mariadb_fixture_takes_the_native_path_with_identical_records(tmp_path: Path) -> None:
    nat = compare(tmp_path, dump_packets(MARIADB.read_bytes()), [1 << 20])
    assert len(nat.records) == 2
    assert nat.native == 2  # the first one too: the scanner asks for the new shape
    assert [rec[5] for rec in nat.records] == [(("toddy_test.outbox", 1),)] * 2


@pytest.mark.parametrize(
    "path",
    sorted(p for p in FIXTURES.iterdir() if p.is_file() and "checksum-none" not in p.name),
    ids=lambda p: p.name,
)
def test_real_fixtures_store_the_same_records(tmp_path: Path, path: Path) -> None:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    nat = compare(tmp_path, dump_packets(data), [4096, 1 << 20])
    assert nat.native == 0 or path == MARIADB  # MySQL logs stay on the Python path


def test_generated_log_in_one_read_goes_native_for_most_transactions(tmp_path: Path) -> None:
    nat = compare(tmp_path, dump_packets(generated_log(1, 200)), [1 << 30], buffer_size=4 << 20)
    assert len(nat.records) > 150
    assert nat.native > 80


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    sizes=st.lists(st.integers(1, 70_000), min_size=1, max_size=6),
)
def test_generated_logs_in_random_reads_store_the_same_records(
    tmp_path_factory: pytest.TempPathFactory, seed: int, sizes: list[int]
) -> None:
    tmp = tmp_path_factory.mktemp("diff")
    compare(tmp, dump_packets(generated_log(seed)), sizes)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000), sizes=st.lists(st.integers(1, 70_000), min_size=1, max_size=4))
def test_resume_checks_skip_the_same_transactions(
    tmp_path_factory: pytest.TempPathFactory, seed: int, sizes: list[int]
) -> None:
    """GTIDs going backwards: the task's skip check drops them on both paths (the scanner
    hands them to the event path, which asks)."""
    tmp = tmp_path_factory.mktemp("skip")
    nat = compare(tmp, dump_packets(generated_log(seed)), sizes, resume_checks=True)
    assert any(d.skipped for d in nat.dones)


def test_credentials_in_row_annotations_are_never_stored(tmp_path: Path) -> None:
    """ANNOTATE_ROWS statements carrying a credential go to the Python path, which stores
    them redacted; both paths store the same bytes, and the secret is in none of them."""
    log = generated_log(7, 300)
    assert log.count(ANNOT_SECRET) > 10
    nat = compare(tmp_path, dump_packets(log), [1 << 30], buffer_size=4 << 20)
    assert nat.native > 80
    stored = b"".join(nat.segments)
    assert ANNOT_SECRET not in stored
    assert b"PASSWORD('<redacted>')" in stored
    assert b"set Password = '<redacted>'" in stored  # SET PASSWORD's form, on a column
    assert b"UPDATE users SET /* headwater: statement redacted" in stored  # a form not placed
    assert b"INSERT INTO connections VALUES (1)" in stored


def test_filtered_tables_and_dropped_kinds_go_to_the_python_path(tmp_path: Path) -> None:
    f = TableFilter(FilterConfig(exclude=("logs.*",), events=("insert", "update", "ddl")))
    nat = compare(tmp_path, dump_packets(generated_log(7, 120)), [5000, 300], table_filter=f)
    assert all(name != "logs.audit" for rec in nat.records for name, _n in rec[5])  # type: ignore[union-attr]


def test_a_corrupt_event_fails_both_paths_at_the_same_transaction(tmp_path: Path) -> None:
    log = bytearray(generated_log(3, 40))
    log[len(log) * 2 // 3] ^= 0x40  # somewhere in an event body: its CRC32 no longer matches
    nat = compare(tmp_path, dump_packets(bytes(log)), [1 << 20])
    assert nat.error is not None and nat.error.startswith("ChecksumError")


def test_native_crc32_is_zlibs_on_short_and_long_events() -> None:
    from headwater._native import crc32

    rng = random.Random(5)
    for n in [*range(0, 300), 511, 512, 1000, 4099, 65536, 1 << 20]:
        data = rng.randbytes(n + 3)
        assert crc32(data[3:]) == zlib.crc32(data[3:])
        assert crc32(memoryview(data)[1 : n + 1]) == zlib.crc32(data[1 : n + 1])


def test_the_portable_crcs_agree_with_zlib_and_crc32c() -> None:
    """The table paths, used where the CPU lacks SSE4.2 / PCLMULQDQ; where it has them
    (``HW_CRC``), the folding passed its self-check at import."""
    from crc32c import crc32c as reference32c

    from headwater._native import _ingest

    rng = random.Random(9)
    for n in [*range(0, 70), 255, 256, 1000, 65537]:
        data = rng.randbytes(n)
        assert _ingest._portable_crc(0, data) == zlib.crc32(data)
        assert _ingest._portable_crc(1, data) == reference32c(data)
    assert _ingest.HW_CRC in (0, 1, 2, 3)
