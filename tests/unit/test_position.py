"""Positions and GTID sets: ordering, text and binary round trips, bad input."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, strategies as st

from headwater.position import (
    BinlogCoordinate,
    MariadbGtid,
    MariadbGtidPos,
    MysqlGtid,
    MysqlGtidSet,
    Position,
    binlog_file_number,
    parse_gtid_set,
)

SID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
SID2 = "57b70f4e-20d3-11e5-a393-4a63946f7eac"


def test_position_orders_by_change_id_first() -> None:
    assert Position(0, 99, 999, 9) < Position(1, 1, 4, 0)
    assert Position(1, 2, 4) < Position(1, 2, 5) < Position(1, 3, 4)
    assert Position(1, 2, 4, 1) > Position(1, 2, 4, 0)


def test_position_text_and_json_round_trip() -> None:
    p = Position(2, 17, 123456, 3)
    assert str(p) == "2:17:123456:3"
    assert Position.parse(str(p)) == p
    assert Position.parse("2:17:123456") == Position(2, 17, 123456, 0)
    assert p.to_json() == {"change_id": 2, "file": 17, "offset": 123456, "event": 3}
    assert Position.from_json(p.to_json()) == p


@pytest.mark.parametrize("text", ["", "1:2", "a:b:c", "1:2:3:4:5", "1:-2:3"])
def test_position_parse_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ValueError, match="CHANGE_ID:FILE_NUM:OFFSET"):
        Position.parse(text)


def test_position_rejects_negative_and_missing_fields() -> None:
    with pytest.raises(ValueError, match="offset"):
        Position(0, 1, -4)
    with pytest.raises(ValueError, match="'offset'"):
        Position.from_json({"change_id": 0, "file": 1})


def test_binlog_file_number_and_coordinate() -> None:
    assert binlog_file_number("mysql-bin.000042") == 42
    assert BinlogCoordinate.parse("mysql-bin.000003:1234") == BinlogCoordinate(
        "mysql-bin.000003", 1234
    )
    assert BinlogCoordinate.parse("mysql-bin.000003") == BinlogCoordinate("mysql-bin.000003", 4)
    with pytest.raises(ValueError, match="numeric suffix"):
        binlog_file_number("mysql-bin")


def test_mysql_gtid_set_merges_and_prints_closed_intervals() -> None:
    s = MysqlGtidSet.parse(f"{SID}:1-5:7, {SID}:6 ,{SID2.upper()}:3")
    assert str(s) == f"{SID}:1-7,{SID2}:3"
    assert MysqlGtid(uuid.UUID(SID), 7) in s
    assert MysqlGtid(uuid.UUID(SID), 8) not in s


def test_mysql_gtid_set_add_extends_last_interval() -> None:
    s = MysqlGtidSet.parse(f"{SID}:1-3")
    s.add(MysqlGtid.parse(f"{SID}:4"))
    s.add(MysqlGtid.parse(f"{SID}:10"))
    s.add(MysqlGtid.parse(f"{SID2}:1"))
    assert str(s) == f"{SID}:1-4:10,{SID2}:1"


def test_mysql_gtid_set_binary_layout_matches_gtid_set_encode() -> None:
    # sql/rpl_gtid_set.cc Gtid_set::encode: n_sids, then sid, n_intervals, [start, end).
    s = MysqlGtidSet.parse(f"{SID}:1-5:7")
    data = s.encode()
    assert data[:8] == (1).to_bytes(8, "little")
    assert data[8:24] == uuid.UUID(SID).bytes
    assert data[24:32] == (2).to_bytes(8, "little")
    assert data[32:48] == (1).to_bytes(8, "little") + (6).to_bytes(8, "little")
    assert data[48:64] == (7).to_bytes(8, "little") + (8).to_bytes(8, "little")
    assert MysqlGtidSet.decode(data) == (s, 64)


@pytest.mark.parametrize("data", [b"", b"\x01" + b"\x00" * 7, b"\x01" + b"\x00" * 30])
def test_mysql_gtid_set_decode_rejects_truncated_bytes(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"truncated|shorter"):
        MysqlGtidSet.decode(data)


def test_mysql_gtid_set_superset() -> None:
    big = MysqlGtidSet.parse(f"{SID}:1-10,{SID2}:1-2")
    assert big.issuperset(MysqlGtidSet.parse(f"{SID}:2-4:9"))
    assert not big.issuperset(MysqlGtidSet.parse(f"{SID}:9-11"))


@pytest.mark.parametrize("text", [f"{SID}", f"{SID}:0", f"{SID}:5-3", "nonsense:1", f"{SID}:x"])
def test_mysql_gtid_set_rejects_bad_text(text: str) -> None:
    with pytest.raises(ValueError):
        MysqlGtidSet.parse(text)


def test_mariadb_gtid_pos_keeps_last_per_domain() -> None:
    pos = MariadbGtidPos.parse("0-1-100, 1-2-5")
    pos.add(MariadbGtid(0, 3, 101))
    assert str(pos) == "0-3-101,1-2-5"
    assert MariadbGtid(1, 9, 5) in pos
    assert MariadbGtid(1, 2, 6) not in pos


def test_parse_gtid_set_tells_flavours_apart() -> None:
    assert isinstance(parse_gtid_set("0-1-5"), MariadbGtidPos)
    assert isinstance(parse_gtid_set(f"{SID}:1-2"), MysqlGtidSet)
    with pytest.raises(ValueError, match="empty"):
        parse_gtid_set("  ")


intervals = st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 50)), min_size=1, max_size=20)


@given(intervals, intervals)
def test_mysql_gtid_set_union_contains_exactly_both(
    a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    sid = uuid.UUID(SID)
    sa = MysqlGtidSet({sid: [(lo, lo + n + 1) for lo, n in a]})
    sb = MysqlGtidSet({sid: [(lo, lo + n + 1) for lo, n in b]})
    members = {g for lo, n in a + b for g in range(lo, lo + n + 1)}
    union = sa.union(sb)
    assert {g for g in range(1, 1100) if MysqlGtid(sid, g) in union} == members
    assert MysqlGtidSet.parse(str(union)) == union
    assert MysqlGtidSet.decode(union.encode())[0] == union
