"""Property: any sequence of appends, reopenings, retention, compression and reads returns
exactly the acknowledged records, in order (minus the prefix retention removed)."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from headwater.position import MysqlGtidSet, Position
from headwater.store import AtSeq, ChangeLog, Durability, Record, StoreOptions

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 30), st.sampled_from([0, 10, 300, 1500])),
    st.tuples(st.just("chunked"), st.integers(2, 4), st.just(0)),
    st.tuples(st.just("reopen"), st.sampled_from(list(Durability)), st.just(0)),
    st.tuples(st.just("retention"), st.integers(2000, 20000), st.just(0)),
    st.tuples(st.just("compress"), st.just(0), st.just(0)),
    st.tuples(st.just("read_from"), st.integers(0, 200), st.just(0)),
)


def options(
    durability: Durability = Durability.GROUP,
    retention: int | None = None,
) -> StoreOptions:
    return StoreOptions(
        segment_bytes=3000,
        index_interval_bytes=300,
        group_commit_ms=0.5,
        group_commit_bytes=2048,
        max_pending_bytes=8192,
        memory_tail_bytes=2000,
        retention_age_s=None,
        retention_bytes=retention,
        compress_after_s=0.0,
        compress_block_bytes=700,
        roll_interval_s=None,
        durability=durability,
    )


def check(log: ChangeLog, model: dict[int, bytes]) -> int:
    got = [(r.seq, r.payload) for r in log.reader()]
    earliest = log.segments()[0].base
    want = [(s, p) for s, p in sorted(model.items()) if s >= earliest]
    assert got == want
    return earliest


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=12))
def test_any_history_returns_exactly_the_acknowledged_records(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d:
        log = ChangeLog.open(d, options())
        model: dict[int, bytes] = {}
        n = 0
        earliest = 1
        try:
            for kind, a, b in ops:
                if kind == "append":
                    for _ in range(a):
                        n += 1
                        payload = n.to_bytes(4, "little") * (1 + b // 4)
                        rec = Record(Position(1, 1, n), payload, ts_us=n, gtid=f"{UUID}:{n}")
                        model[log.append(rec)] = payload
                elif kind == "chunked":
                    n += 1
                    chunks = [bytes([i]) * 500 for i in range(a)]
                    last = log.append_chunked(
                        Record(Position(1, 1, n), b"", ts_us=n, gtid=f"{UUID}:{n}"), chunks
                    )
                    for i, c in enumerate(chunks):
                        model[last - a + 1 + i] = c
                elif kind == "reopen":
                    log.close()
                    log = ChangeLog.open(d, options(a))
                    assert log.problems == []
                elif kind == "retention":
                    log.close()
                    log = ChangeLog.open(d, options(retention=a))
                    log.apply_retention()
                    sealed = [m for m in log.segments() if m.footer is not None]
                    total = sum(m.file_bytes for m in log.segments())
                    assert total <= a or not sealed
                elif kind == "compress":
                    log.compress_sealed()
                else:
                    seq = max(earliest, min(a, log.acked_seq + 1))
                    got = [(r.seq, r.payload) for r in log.reader(AtSeq(seq))]
                    assert got == [(s, p) for s, p in sorted(model.items()) if s >= seq]
                new_earliest = check(log, model)
                assert new_earliest >= earliest
                earliest = new_earliest
                assert log.acked_seq == (max(model) if model else 0)
            n += 1
            last = log.append(Record(Position(1, 1, n), b"end", ts_us=n, gtid=f"{UUID}:{n}"))
            before = MysqlGtidSet.parse(f"{UUID}:1-{n - 1}" if n > 1 else "")
            assert log.reader(before).next().seq == last  # type: ignore[union-attr]
            assert log.reader(MysqlGtidSet.parse(f"{UUID}:1-{n}")).next() is None
            assert log.latest().seq == last  # type: ignore[union-attr]
        finally:
            log.close()
