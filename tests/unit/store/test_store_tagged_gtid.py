"""Tagged MySQL GTIDs (``uuid:tag:n``, MySQL 8.3+) in the store's GTID index and lookups.

Lookups by a GTID set that has tags are checked against an independent linear scan (the
first record whose GTID, parsed by :class:`MysqlGtid`, is not in the set by
:meth:`MysqlGtidSet.__contains__`), and the index is checked to summarize tagged blocks
(kind 3) so that they can be skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from headwater.position import MysqlGtid, MysqlGtidSet
from headwater.store import ChangeLog, Record, StoreOptions
from headwater.store.index import (
    KIND_MYSQL,
    KIND_MYSQL_TAGGED,
    GtidWanted,
    IndexBuilder,
    gtid_key,
    tagged_ident,
)

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "11111111-2222-3333-4444-555555555555"
B1 = uuid.UUID(U1).bytes


def test_gtid_key_of_a_tagged_gtid_is_kind_3_with_the_tag_digest() -> None:
    k = gtid_key(f"{U1}:mytag:7")
    assert k == (KIND_MYSQL_TAGGED, tagged_ident(B1, "mytag"), 7)
    # MySQL keeps tags lowercased (Tag::from_cstring); the key does not depend on case.
    assert gtid_key(f"{U1}:MyTag:7") == k
    assert gtid_key(f"{U1}:other:7") != k
    assert gtid_key(f"{U1}:7") == (KIND_MYSQL, B1, 7)
    assert len(k[1]) == 16 and k[1] != B1
    bad = (f"{U1}::7", f"{U1}:9tag:7", f"{U1}:tag-x:7", f"{U1}:{'a' * 33}:7", f"{U1}:tag:x")
    assert [gtid_key(g) for g in bad] == [None] * len(bad)


def test_wanted_keeps_tags_apart_from_untagged_gtids() -> None:
    w = GtidWanted(MysqlGtidSet.parse(f"{U1}:1-3:tag:1-10"))
    got = [
        w.contains(g)
        for g in (f"{U1}:2", f"{U1}:5", f"{U1}:tag:5", f"{U1}:TAG:10", f"{U1}:tag:11", f"{U1}:x:1")
    ]
    assert got == [True, False, True, True, False, False]
    t = tagged_ident(B1, "tag")
    assert w.covers(KIND_MYSQL_TAGGED, t, 1, 10) is True
    assert w.covers(KIND_MYSQL_TAGGED, t, 1, 11) is False
    # The untagged numbers 1-3 say nothing about the tag's numbers, nor the other way.
    assert w.covers(KIND_MYSQL, B1, 4, 10) is False
    assert w.covers(KIND_MYSQL_TAGGED, t, 1, 3) is True


def test_a_block_of_one_tagged_source_gets_a_summary() -> None:
    b = IndexBuilder(10**9)
    for i in range(1, 6):
        b.add(i, i * 10, (1, 1, i, 0), i, f"{U1}:tag:{i + 100}", 10)
    b.seal()
    assert b.view.leaves == [{(KIND_MYSQL_TAGGED, tagged_ident(B1, "tag")): (101, 105)}]
    assert b.footer_summary() == {(KIND_MYSQL_TAGGED, tagged_ident(B1, "tag")): (101, 105)}


def _options(**kw: object) -> StoreOptions:
    base: dict[str, object] = {
        "segment_bytes": 2048,
        "index_interval_bytes": 256,
        "group_commit_ms": 1.0,
        "retention_age_s": None,
        "retention_bytes": None,
        "compress_after_s": None,
        "roll_interval_s": None,
    }
    base.update(kw)
    return StoreOptions(**base)  # type: ignore[arg-type]


def _rec(i: int, gtid: str) -> Record:
    from headwater.position import Position

    return Record(
        Position(1, 1, 100 * i), f"rec{i}:".encode() + bytes(60), ts_us=1000 * i, gtid=gtid
    )


def _first_not_in(gtids: list[str], wanted: MysqlGtidSet) -> int | None:
    for seq, g in enumerate(gtids, 1):
        if MysqlGtid.parse(g) not in wanted:
            return seq
    return None


# A log as a MySQL 8.4 source writes it: per (uuid, tag) numbers rise in log order, sources
# interleave in runs (an application that tags some of its transactions).
SOURCES = [(U1, ""), (U1, "alpha"), (U2, ""), (U2, "alpha"), (U1, "b_2")]


def _log_gtids(runs: list[tuple[int, int]]) -> list[str]:
    nxt = dict.fromkeys(range(len(SOURCES)), 1)
    out: list[str] = []
    for src, n in runs:
        sid, tag = SOURCES[src]
        for _ in range(n):
            g = nxt[src]
            nxt[src] += 1
            out.append(f"{sid}:{tag}:{g}" if tag else f"{sid}:{g}")
    return out


def test_tagged_lookup_skips_exactly_the_wanted_transactions(tmp_path: Path) -> None:
    gtids = _log_gtids([(1, 60), (0, 30), (1, 40), (4, 30), (1, 20)])
    with ChangeLog.open(str(tmp_path), _options()) as log:
        for i, g in enumerate(gtids, 1):
            log.append_nowait(_rec(i, g))
        log.flush()
        segs = log.segments()
        assert len(segs) > 3
        kinds = {
            k
            for m in segs
            if m.footer is not None and m.footer.summary is not None
            for k, _i in m.footer.summary
        }
        assert KIND_MYSQL_TAGGED in kinds  # tagged segments are summarized, so skippable
        cases = {
            f"{U1}:alpha:1-60": 61,
            f"{U1}:alpha:1-100,{U1}:1-30": 131,
            f"{U1}:alpha:1-120:b_2:1-30,{U1}:1-30": None,
            f"{U1}:1-30:alpha:1-59": 60,
            f"{U1}:alpha:2-60": 1,
            f"{U1}:1-60": 1,  # untagged numbers never cover tagged ones
            f"{U1}:ALPHA:1-100:b_2:1-10,{U1}:1-30": 141,
        }
        for text, want in cases.items():
            wanted = MysqlGtidSet.parse(text)
            assert _first_not_in(gtids, wanted) == want, text
            got = log.reader(wanted).next()
            assert (got.seq if got else None) == want, text


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    runs=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 25)), min_size=1, max_size=8),
    cuts=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 80), st.integers(0, 3)), max_size=5),
)
def test_tagged_lookup_matches_a_linear_scan(
    tmp_path_factory: Callable[..., Path],
    runs: list[tuple[int, int]],
    cuts: list[tuple[int, int, int]],
) -> None:
    gtids = _log_gtids(runs)
    wanted = MysqlGtidSet()
    for src, upto, hole in cuts:
        sid, tag = SOURCES[src]
        for g in range(1, upto + 1):
            if hole == 0 or g % (hole + 3):
                wanted.add(MysqlGtid(uuid.UUID(sid), g, tag))
    d = tmp_path_factory.mktemp("log")  # type: ignore[attr-defined]
    with ChangeLog.open(str(d), _options()) as log:
        for i, g in enumerate(gtids, 1):
            log.append_nowait(_rec(i, g))
        log.flush()
        got = log.reader(wanted).next()
    assert (got.seq if got else None) == _first_not_in(gtids, wanted), str(wanted)
