"""The reader's start decision and its reconcile with the log, as pure functions (no server).

The cases are the table of reader/start.py's docstring: first starts of each kind, a resume
on the same server, a failover, the log ahead of the state, the log behind it (lost tail),
and the refusals that name what is missing.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from headwater.binlog.preflight import SourceInfo
from headwater.config import FilterConfig, StartConfig
from headwater.errors import ConfigError, PositionPurgedError
from headwater.position import BinlogCoordinate, MariadbGtidPos, MysqlGtidSet, Position
from headwater.reader.start import (
    LogEnd,
    choose_start,
    gtid_key_of,
    layout_of,
    read_log_end,
    reconcile,
    summary_key,
)
from headwater.store import (
    ChangeIdInfo,
    ChangeLog,
    Durability,
    LogInfo,
    ReaderState,
    Record,
    StoreOptions,
)
from headwater.store.index import gtid_key
from headwater.store.segment import segment_name

MARIA = "mariadb:1:0"
LAST = Position(0, 3, 400)
FIRST_ID = (ChangeIdInfo(0, MARIA, Position(0, 3, 4), "", 1),)


def _source(
    *,
    server_id: int = 1,
    logs: tuple[str, ...] = ("bin.000003", "bin.000004"),
    gtid_position: str = "0-1-50",
    uuid_: str | None = None,
) -> SourceInfo:
    return SourceInfo(
        address="db:3306",
        flavor="mysql" if uuid_ else "mariadb",
        version="11.4",
        server_id=server_id,
        server_uuid=uuid_,
        gtid_domain_id=None if uuid_ else 0,
        hostname="db",
        user="'r'@'%'",
        binlog_format="ROW",
        binlog_row_image="FULL",
        binlog_row_metadata="FULL",
        binlog_checksum="CRC32",
        current=BinlogCoordinate(logs[-1], 900),
        binary_logs=tuple((n, 1000) for n in logs),
        gtid_position=gtid_position,
        gtid_purged="",
    )


def _state(
    pos: Position | None = LAST,
    gtids: str = "0-1-20",
    seq: int = 20,
    ids: tuple[ChangeIdInfo, ...] = FIRST_ID,
) -> ReaderState:
    return ReaderState(pos, gtids, 7, seq, ids)


def _rec(seq: int, offset: int, gtid: str, file_num: int = 3, cid: int = 0) -> LogInfo:
    return LogInfo(seq, Position(cid, file_num, offset, 2), 1000 + seq, gtid)


# --- first starts -------------------------------------------------------------------------


def test_first_start_latest_takes_the_current_end_and_the_gtid_position() -> None:
    d = choose_start(StartConfig(), ReaderState(), _source(), now_us=5)
    assert d.start == BinlogCoordinate("bin.000004", 900)
    assert d.state.gtid_set == "0-1-50"
    assert d.state.change_ids == (ChangeIdInfo(0, MARIA, Position(0, 4, 900), "0-1-50", 5),)
    assert d.first_position == Position(0, 4, 900)
    assert d.ts_floor is None and not d.save


def test_first_start_earliest_file_gtid_and_timestamp() -> None:
    src = _source()
    assert choose_start(StartConfig("earliest"), ReaderState(), src).start == BinlogCoordinate(
        "bin.000003", 4
    )
    coord = BinlogCoordinate("bin.000004", 120)
    assert choose_start(StartConfig("file", coordinate=coord), ReaderState(), src).start == coord
    g = MariadbGtidPos.parse("0-1-9")
    d = choose_start(StartConfig("gtid", gtid_set=g), ReaderState(), src)
    assert d.start == g and d.state.gtid_set == "0-1-9"
    assert d.first_position == Position(0, 4, 0)
    at = BinlogCoordinate("bin.000003", 4)
    d = choose_start(StartConfig("timestamp", ts_us=123), ReaderState(), src, at_time=at)
    assert d.start == at and d.ts_floor == 123


# --- resumes ------------------------------------------------------------------------------


def test_same_server_resumes_at_the_file_and_offset_of_the_last_transaction() -> None:
    st = _state()
    d = choose_start(StartConfig(), st, _source())
    assert d.start == BinlogCoordinate("bin.000003", 400)
    assert d.state == st and not d.save


def test_same_server_without_the_file_resumes_from_the_gtid_set() -> None:
    d = choose_start(StartConfig(), _state(), _source(logs=("bin.000004",)))
    assert d.start == MariadbGtidPos.parse("0-1-20")


def test_same_server_without_the_file_or_gtids_refuses() -> None:
    with pytest.raises(PositionPurgedError, match="binlog file number 3"):
        choose_start(StartConfig(), _state(gtids=""), _source(logs=("bin.000004",)))


def test_another_server_continues_from_the_gtid_set_under_a_new_change_id() -> None:
    d = choose_start(StartConfig(), _state(), _source(server_id=2), now_us=9)
    assert d.start == MariadbGtidPos.parse("0-1-20")
    assert d.save
    assert d.state.change_ids[-1] == ChangeIdInfo(1, "mariadb:2:0", Position(1, 0, 0), "0-1-20", 9)
    assert "change_id 1" in d.note


def test_another_server_without_gtids_refuses() -> None:
    with pytest.raises(PositionPurgedError, match="another server"):
        choose_start(StartConfig(), _state(gtids=""), _source(server_id=2))


# --- reconcile: the log ahead -------------------------------------------------------------


def test_log_ahead_of_the_state_advances_it_over_the_records() -> None:
    st = _state()
    end = LogEnd(_rec(22, 700, "0-1-22"), (_rec(21, 600, "0-1-21"), _rec(22, 700, "0-1-22")))
    got, lost = reconcile(st, end)
    assert lost is None
    assert got.seq == 22 and got.position == Position(0, 3, 700)
    assert got.gtid_set == "0-1-22" and got.ts_us == 1022


def test_log_at_the_state_changes_nothing() -> None:
    st = _state()
    assert reconcile(st, LogEnd(_rec(20, 400, "0-1-20"))) == (st, None)


# --- reconcile: the log behind (its tail lost) ---------------------------------------------


def test_lost_tail_moves_the_state_back_to_the_last_intact_record() -> None:
    st = _state(gtids="0-1-20,1-1-8", seq=20)
    end = LogEnd(_rec(17, 300, "0-1-17"), caps={"0": (17, "0-1-17"), "1": (5, "")})
    got, lost = reconcile(st, end)
    assert got.seq == 17 and got.position == Position(0, 3, 300)
    assert got.gtid_set == "0-1-17,1-1-5"
    assert got.ts_us == 1017
    assert lost is not None and (lost.first_seq, lost.last_seq) == (18, 20)
    assert "seqs 18-20" in str(lost) and "0-1-17" in str(lost)
    # The same server still has the file: resume after the intact record.
    d = choose_start(StartConfig(), got, _source(), lost=lost)
    assert d.start == BinlogCoordinate("bin.000003", 300)


def test_lost_tail_keeps_a_domain_the_change_id_began_with_and_drops_unknown_ones() -> None:
    ids = (ChangeIdInfo(0, MARIA, Position(0, 3, 4), "2-1-40", 1),)
    st = _state(gtids="0-1-20,2-1-44,3-1-2", ids=ids)
    got, _ = reconcile(st, LogEnd(_rec(10, 200, "0-1-10"), caps={"0": (10, "0-1-10")}))
    assert got.gtid_set == "0-1-10,2-1-40"


def test_lost_tail_of_mysql_gtids_clips_each_uuid_at_its_cap() -> None:
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    st = _state(gtids=f"{a}:1-30:35-40,{b}:1-9")
    got, _ = reconcile(st, LogEnd(_rec(12, 200, f"{a}:36"), caps={str(a): (36, f"{a}:36")}))
    assert MysqlGtidSet.parse(got.gtid_set) == MysqlGtidSet.parse(f"{a}:1-30:35-36")


def test_lost_tail_drops_change_ids_begun_after_the_intact_end() -> None:
    ids = (
        ChangeIdInfo(0, MARIA, Position(0, 3, 4), "", 1),
        ChangeIdInfo(1, "mariadb:2:0", Position(1, 0, 0), "0-1-25", 2),
    )
    st = _state(pos=Position(1, 7, 90), gtids="0-2-30", seq=30, ids=ids)
    got, lost = reconcile(st, LogEnd(_rec(24, 500, "0-1-24"), caps={"0": (24, "0-1-24")}))
    assert got.change_ids == ids[:1] and got.gtid_set == "0-1-24"
    # Reading the lost range again from the other server could number it differently.
    with pytest.raises(PositionPurgedError, match=r"seqs 25-30.*another server"):
        choose_start(StartConfig(), got, _source(server_id=2), lost=lost)


def test_lost_range_the_source_no_longer_has_names_the_range() -> None:
    st = _state(seq=20)
    got, lost = reconcile(st, LogEnd(_rec(17, 300, "0-1-17"), caps={"0": (17, "0-1-17")}))
    with pytest.raises(PositionPurgedError, match=r"lost seqs 18-20 .* binlog file number 3"):
        choose_start(StartConfig(), got, _source(logs=("bin.000004",)), lost=lost)


def test_nothing_intact_reads_again_from_where_the_change_id_began() -> None:
    st = _state(seq=5)
    got, lost = reconcile(st, LogEnd(None))
    assert got.position is None and got.seq == 0 and got.gtid_set == ""
    assert lost is not None and (lost.first_seq, lost.last_seq) == (1, 5)
    d = choose_start(StartConfig(), got, _source(), lost=lost)
    assert d.start == BinlogCoordinate("bin.000003", 4)
    with pytest.raises(PositionPurgedError, match="change id 0"):
        choose_start(StartConfig(), got, _source(logs=("bin.000004",)), lost=lost)


def test_nothing_intact_after_a_gtid_start_reads_from_its_gtid_set() -> None:
    ids = (ChangeIdInfo(0, MARIA, Position(0, 4, 0), "0-1-9", 1),)
    got, lost = reconcile(_state(gtids="0-1-14", seq=5, ids=ids), LogEnd(None))
    assert got.gtid_set == "0-1-9"
    d = choose_start(StartConfig(), got, _source(), lost=lost)
    assert d.start == MariadbGtidPos.parse("0-1-9")


# --- GTID keys agree with the store's summaries --------------------------------------------


@pytest.mark.parametrize("gtid", ["0-1-17", "4294967295-9-1", f"{uuid.UUID(int=7)}:12"])
def test_gtid_keys_of_texts_and_of_store_summaries_agree(gtid: str) -> None:
    k = gtid_key(gtid)
    assert k is not None
    assert gtid_key_of(gtid) == (summary_key(k[0], k[1]), k[2])


def test_a_lost_range_is_not_read_again_under_another_filter_or_chunk_size() -> None:
    before = layout_of(FilterConfig(include=(r"k\..*",)), 1 << 20)
    st = replace(_state(seq=20), layout=before)
    got, lost = reconcile(st, LogEnd(_rec(17, 300, "0-1-17"), caps={"0": (17, "0-1-17")}))
    assert got.layout == before and lost is not None and lost.layout == before
    d = choose_start(StartConfig(), got, _source(), lost=lost, layout=before)
    assert d.start == BinlogCoordinate("bin.000003", 300)
    for now in (
        layout_of(FilterConfig(include=(r"k\..*", r"m\..*")), 1 << 20),
        layout_of(FilterConfig(include=(r"k\..*",)), 1 << 19),
    ):
        assert now != before
        with pytest.raises(ConfigError, match=r"lost seqs 18-20 .* another table filter"):
            choose_start(StartConfig(), got, _source(), lost=lost, layout=now)
    # Without a loss the settings may change freely.
    assert choose_start(StartConfig(), st, _source(), layout="0").start == BinlogCoordinate(
        "bin.000003", 400
    )


def test_the_layout_round_trips_and_old_states_load_without_one(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    st = replace(_state(), layout="1234abcd")
    st.save(path)
    assert ReaderState.load(path) == st
    old = st.to_json()
    del old["layout"]
    assert ReaderState.from_json(old) == replace(st, layout="")


# --- read_log_end over a real log ------------------------------------------------------------


def test_read_log_end_of_a_cut_log_caps_each_domain_at_its_last_intact_gtid(
    tmp_path: Path,
) -> None:
    """Domain 1 appears only in sealed segments (its cap comes from their GTID summaries),
    domain 0 also in the active one (its cap is the last intact record's GTID)."""
    opts = StoreOptions(durability=Durability.NONE, segment_bytes=64 * 1024)
    payload = b"x" * 500
    with ChangeLog.open(str(tmp_path), opts) as log:
        for i in range(1, 401):
            gtid = f"1-7-{i}" if i <= 100 and i % 2 else f"0-1-{i}"
            log.append(Record(Position(0, 3, 100 * i), payload, 1000 + i, gtid))
        active = log.active_base()
    assert active > 101  # domain 1 is wholly in sealed segments
    seg = tmp_path / segment_name(active)
    os.truncate(seg, seg.stat().st_size // 2)  # the active segment's tail is lost
    state = ReaderState(Position(0, 3, 40000), "0-1-400,1-7-99", 1400, 400, FIRST_ID)
    with ChangeLog.open(str(tmp_path), opts) as log:
        end = read_log_end(log, state)
        last = log.acked_seq
    assert active <= last < 400
    assert end.last is not None and end.last.seq == last and end.last.gtid == f"0-1-{last}"
    assert end.caps["0"] == (last, f"0-1-{last}")
    assert end.caps["1"] == (99, "")
    got, lost = reconcile(state, end)
    assert got.gtid_set == f"0-1-{last},1-7-99"
    assert got.position == Position(0, 3, 100 * last) and got.seq == last
    assert lost is not None and (lost.first_seq, lost.last_seq) == (last + 1, 400)


def test_read_log_end_of_a_log_ahead_lists_the_transactions_beyond_the_state(
    tmp_path: Path,
) -> None:
    with ChangeLog.open(str(tmp_path), StoreOptions()) as log:
        for i in range(1, 6):
            log.append(Record(Position(0, 3, 100 * i), b"p", 1000 + i, f"0-1-{i}"))
        end = read_log_end(log, ReaderState(Position(0, 3, 300), "0-1-3", 1003, 3, FIRST_ID))
    assert [(r.seq, r.gtid) for r in end.beyond] == [(4, "0-1-4"), (5, "0-1-5")]
    assert end.caps == {}
