"""The change log: appends, rotation, reopening, lookups, tailing, chunks, other processes."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from headwater.errors import StoreError
from headwater.position import MariadbGtidPos, MysqlGtidSet, Position
from headwater.store import (
    LATEST,
    AtSeq,
    AtTime,
    ChangeLog,
    Durability,
    Record,
    StoreOptions,
)
from headwater.store.segment import SEG, parse_name

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def fill(log: ChangeLog, rec: Callable[..., Record], lo: int, hi: int, **kw: object) -> None:
    for i in range(lo, hi):
        log.append_nowait(rec(i, **kw))
    log.flush()


def payload_ids(records: list[Record]) -> list[int]:
    return [int(r.payload.split(b":")[0][3:]) for r in records]


def test_append_assigns_sequence_and_reads_back_everything(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        seqs = [log.append(rec(i)) for i in range(1, 6)]
        assert seqs == [1, 2, 3, 4, 5]
        assert log.acked_seq == 5
        got = list(log.reader())
    assert [r.seq for r in got] == [1, 2, 3, 4, 5]
    assert got[2].payload == rec(3).payload
    assert (got[2].position, got[2].gtid, got[2].tables, got[2].schema_version) == (
        Position(1, 1, 300),
        f"{UUID}:3",
        (("db.t", 3),),
        7,
    )


def test_tiny_segments_rotate_and_names_sort_in_log_order(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        fill(log, rec, 1, 201)
        segs = log.segments()
    assert len(segs) > 10
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith(SEG))
    bases = [parse_name(n)[0] for n in names]  # type: ignore[index]
    assert bases == [m.base for m in segs]
    for a, b in itertools.pairwise(segs):
        assert a.footer is not None and a.footer.last_seq + 1 == b.base
        assert a.footer.count == b.base - a.base


def test_sequence_survives_reopen(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        fill(log, rec, 1, 51)
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert log.acked_seq == 50
        assert log.append(rec(51)) == 51
        assert [r.seq for r in log.reader()] == list(range(1, 52))
        assert log.problems == []


@pytest.mark.parametrize("durability", list(Durability))
def test_each_durability_policy_acknowledges_appends(
    tmp_path: Path, opts, rec, durability: Durability
) -> None:
    with ChangeLog.open(str(tmp_path), opts(durability=durability)) as log:
        for i in range(1, 21):
            assert log.append(rec(i)) == i
            assert log.acked_seq == i
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert payload_ids(list(log.reader())) == list(range(1, 21))


def test_lookup_by_position_time_gtid_and_seq(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        fill(log, rec, 1, 301)
        for i in (1, 2, 57, 150, 299, 300):
            assert log.reader(Position(1, 1, 100 * i)).next().seq == i  # type: ignore[union-attr]
            assert log.reader(Position(1, 1, 100 * i - 50)).next().seq == i  # type: ignore[union-attr]
            assert log.reader(AtTime(1000 * i)).next().seq == i  # type: ignore[union-attr]
            assert log.reader(AtSeq(i)).next().seq == i  # type: ignore[union-attr]
            gs = MysqlGtidSet.parse(f"{UUID}:1-{i}")
            nxt = log.reader(gs).next()
            assert (nxt.seq if nxt else None) == (i + 1 if i < 300 else None)
        assert log.reader(Position(9, 0, 0)).next() is None
        assert log.reader(AtTime(10**12)).next() is None


def test_time_lookup_is_correct_when_timestamps_go_backwards(tmp_path: Path, opts, rec) -> None:
    ts = [1000 * i - (2500 if i % 5 == 0 else 0) for i in range(1, 201)]
    with ChangeLog.open(str(tmp_path), opts()) as log:
        for i in range(1, 201):
            log.append_nowait(rec(i, ts=ts[i - 1]))
        log.flush()
        for target in range(0, 202_000, 777):
            want = next((i + 1 for i, t in enumerate(ts) if t >= target), None)
            got = log.reader(AtTime(target)).next()
            assert (got.seq if got else None) == want, target


def test_gtid_lookup_with_holes_and_uuid_change(tmp_path: Path, opts, rec) -> None:
    other = "11111111-2222-3333-4444-555555555555"
    gtids = [f"{UUID}:{i}" for i in range(1, 101)] + [f"{other}:{i}" for i in range(1, 101)]
    with ChangeLog.open(str(tmp_path), opts()) as log:
        for i, g in enumerate(gtids, 1):
            log.append_nowait(rec(i, gtid=g))
        log.flush()
        cases = {
            f"{UUID}:1-100": 101,
            f"{UUID}:1-100,{other}:1-40": 141,
            f"{UUID}:1-49:51-100": 50,
            f"{UUID}:2-100": 1,
            "": 1,
            f"{UUID}:1-100,{other}:1-100": None,
        }
        for text, want in cases.items():
            got = log.reader(MysqlGtidSet.parse(text)).next()
            assert (got.seq if got else None) == want, text


def test_mariadb_gtid_lookup_per_domain(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        for i in range(1, 121):
            log.append_nowait(rec(i, gtid=f"{i % 2}-1-{(i + 1) // 2}"))
        log.flush()
        got = log.reader(MariadbGtidPos.parse("0-1-30,1-1-30")).next()
        assert got is not None and (got.seq, got.gtid) == (61, "1-1-31")
        got = log.reader(MariadbGtidPos.parse("0-1-60,1-1-25")).next()
        assert got is not None and (got.seq, got.gtid) == (51, "1-1-26")


def test_latest_and_earliest(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert (log.latest(), log.earliest()) == (None, None)
        fill(log, rec, 1, 31)
        latest, earliest = log.latest(), log.earliest()
        assert latest is not None and earliest is not None
        assert (latest.seq, latest.position, earliest.seq, earliest.ts_us) == (
            30,
            Position(1, 1, 3000),
            1,
            1000,
        )


def test_tailing_reader_is_woken_by_append(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts(group_commit_ms=0.5)) as log:
        reader = log.reader(LATEST)
        assert reader.next(0) is None
        got: list[int] = []

        def consume() -> None:
            for _ in range(50):
                r = reader.next(timeout=10)
                assert r is not None
                got.append(r.seq)

        t = threading.Thread(target=consume)
        t.start()
        for i in range(1, 51):
            log.append(rec(i))
        t.join(10)
        assert not t.is_alive()
        assert got == list(range(1, 51))


def test_reader_never_sees_unacknowledged_records(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(
        str(tmp_path),
        opts(group_commit_ms=60_000, group_commit_bytes=1 << 20, max_pending_bytes=1 << 20),
    ) as log:
        reader = log.reader()
        for i in range(1, 11):
            log.append_nowait(rec(i))
        assert log.acked_seq == 0
        assert reader.next(0) is None
        log.flush()
        assert [r.seq for r in reader] == list(range(1, 11))


def test_memory_tail_serves_recent_records(tmp_path: Path, opts, rec) -> None:
    # The tail holds the active segment's records: the appended objects themselves.
    options = opts(memory_tail_bytes=1 << 20, segment_bytes=1 << 20)
    with ChangeLog.open(str(tmp_path), options) as log:
        originals = [rec(i) for i in range(1, 21)]
        log.append_many(originals)
        log.flush()
        got = list(log.reader())
        assert [id(r) for r in got] == [id(o) for o in originals]


def test_memory_tail_keeps_the_newest_records_within_its_budget(tmp_path: Path, opts, rec) -> None:
    options = opts(memory_tail_bytes=2000, segment_bytes=1 << 20)
    with ChangeLog.open(str(tmp_path), options) as log:
        originals = [rec(i) for i in range(1, 101)]
        for r in originals:
            log.append_nowait(r)
        log.flush()
        first, _base, recs, _ends = log.read_side.writer.tail  # type: ignore[union-attr]
        # ~190-byte frames: the tail is halved whenever it passes 2000 bytes.
        assert len(recs) == 101 - first
        assert 5 <= len(recs) <= 11
        got = list(log.reader())
        assert [r.seq for r in got] == list(range(1, 101))
        assert [id(r) for r in got[first - 1 :]] == [id(o) for o in originals[first - 1 :]]
        assert all(a is not b for a, b in zip(got[: first - 1], originals, strict=False))
        assert [r.payload for r in got] == [r.payload for r in originals]


def test_chunked_transaction_reassembles_and_streams(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        log.append(rec(1))
        header = Record(Position(1, 1, 200), b"", ts_us=2000, gtid=f"{UUID}:2")
        last = log.append_chunked(header, [b"a" * 700, b"b" * 700, b"c" * 700])
        log.append(rec(3))
        assert last == 4
        r = log.reader()
        first = r.next_transaction()
        big = r.next_transaction()
        assert first is not None and big is not None
        assert big.payload == b"a" * 700 + b"b" * 700 + b"c" * 700
        assert [(c.first_chunk, c.last_chunk, c.chunk_no) for c in big.records] == [
            (True, False, 0),
            (False, False, 1),
            (False, True, 2),
        ]
        assert log.reader(Position(1, 1, 200)).next().seq == 2  # type: ignore[union-attr]


def test_unfinished_chunked_transaction_is_invisible_and_dropped(tmp_path: Path, opts, rec) -> None:
    log = ChangeLog.open(str(tmp_path), opts())
    log.append(rec(1))
    log.append_nowait(rec(2, flags=1))
    log.append_nowait(rec(2, flags=0, chunk_no=1))
    log.flush()
    assert log.acked_seq == 1
    assert [r.seq for r in log.reader()] == [1]
    # Simulate a crash: release the files without finishing the transaction.
    pub = log.read_side.pub
    with pub.lock:
        pub.closed = True
        pub.flush_cond.notify_all()
    os.close(log._lock_fd)
    with ChangeLog.open(str(tmp_path), opts()) as again:
        assert again.acked_seq == 1
        assert again.append(rec(3)) == 2
        assert payload_ids(list(again.reader())) == [1, 3]


def test_chunk_order_mistakes_are_refused(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        with pytest.raises(ValueError, match="continuation chunk"):
            log.append(rec(1, flags=0))
        log.append_nowait(rec(1, flags=1))
        with pytest.raises(ValueError, match="new transaction"):
            log.append(rec(2))


def test_oversized_payload_is_refused(tmp_path: Path, opts, rec) -> None:
    with (
        ChangeLog.open(str(tmp_path), opts(max_record_bytes=100)) as log,
        pytest.raises(ValueError, match="max_record_bytes"),
    ):
        log.append(rec(1, size=200))


def test_second_writer_is_refused(tmp_path: Path, opts) -> None:
    with ChangeLog.open(str(tmp_path), opts()), pytest.raises(StoreError, match="another process"):
        ChangeLog.open(str(tmp_path), opts())


def test_read_only_open_needs_an_existing_log(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no change log"):
        ChangeLog.open(str(tmp_path), StoreOptions(), read_only=True)


def test_read_only_reader_in_same_process_follows_writer(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        fill(log, rec, 1, 41)
        ro = ChangeLog.open(str(tmp_path), opts(), read_only=True)
        r = ro.reader()
        assert [x.seq for x in r] == list(range(1, 41))
        with pytest.raises(StoreError, match="read-only"):
            ro.append(rec(99))
        fill(log, rec, 41, 81)
        got = []
        while (x := r.next(timeout=5)) is not None and x.seq <= 80:
            got.append(x.seq)
            if x.seq == 80:
                break
        assert got == list(range(41, 81))
        assert ro.reader(Position(1, 1, 6000)).next().seq == 60  # type: ignore[union-attr]
        ro.close()


CHILD = """
import sys
from headwater.store import ChangeLog, StoreOptions
log = ChangeLog.open(sys.argv[1], StoreOptions(), read_only=True)
r = log.reader()
seen = []
while len(seen) < int(sys.argv[2]):
    rec = r.next(timeout=20)
    if rec is None:
        break
    assert rec.payload.startswith(b"rec%d:" % rec.seq), rec.seq
    seen.append(rec.seq)
print(",".join(map(str, seen)))
"""


def test_reader_in_another_process_tails_the_writer(tmp_path: Path, opts, rec) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        fill(log, rec, 1, 11)
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), "150"], stdout=subprocess.PIPE, text=True
        )
        for i in range(11, 151):
            log.append(rec(i))
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out.strip() == ",".join(str(i) for i in range(1, 151))


def test_idle_log_rolls_on_time(tmp_path: Path, opts, rec) -> None:
    # Nothing is appended after the first records: the flusher's timer seals the segment.
    with ChangeLog.open(str(tmp_path), opts(roll_interval_s=0.2, segment_bytes=1 << 20)) as log:
        last = log.append_many([rec(i) for i in range(1, 4)])
        assert log.wait_acked(last, 5.0)
        pub = log.read_side.pub
        with pub.cond:
            rolled = pub.cond.wait_for(lambda: len(log.segments()) == 2, 5.0)
        assert rolled
        first, active = log.segments()
        assert first.footer is not None and (first.footer.first_seq, first.footer.last_seq) == (
            1,
            3,
        )
        assert (active.base, active.footer) == (4, None)
        assert log.append(rec(4)) == 4
        assert [r.seq for r in log.reader()] == [1, 2, 3, 4]
    with ChangeLog.open(str(tmp_path), opts()) as log:
        assert [m.base for m in log.segments()] == [1, 4]
        assert log.problems == []


def test_append_many_frames_like_single_appends(tmp_path: Path, opts, rec) -> None:
    one, many = tmp_path / "one", tmp_path / "many"
    with ChangeLog.open(str(one), opts()) as log:
        for i in range(1, 41):
            log.append_nowait(rec(i))
        log.flush()
        segs = log.segments()
    with ChangeLog.open(str(many), opts()) as log:
        assert log.append_many([rec(i) for i in range(1, 21)]) == 20
        assert log.append_many([rec(i) for i in range(21, 41)]) == 40
        assert log.append_many([]) == 40
    assert len(segs) > 3
    assert sorted(os.listdir(one)) == sorted(os.listdir(many))
    for meta in segs:
        name = os.path.basename(meta.path)
        # Same frames; footers differ only in their seal time.
        end = meta.footer.data_end if meta.footer else None
        assert (one / name).read_bytes()[:end] == (many / name).read_bytes()[:end], name


def test_append_many_rejects_a_bad_record_after_appending_the_ones_before(
    tmp_path: Path, opts, rec
) -> None:
    with ChangeLog.open(str(tmp_path), opts()) as log:
        bad = Record(Position(1, 1, 1), b"x", gtid="g" * 256)
        with pytest.raises(ValueError, match="GTID longer"):
            log.append_many([rec(1), rec(2), bad, rec(4)])
        log.flush()
        assert log.acked_seq == 2
        assert log.append(rec(3)) == 3
        assert [payload_ids([r])[0] for r in log.reader()] == [1, 2, 3]
