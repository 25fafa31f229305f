"""Tagged GTIDs (MySQL 8.3+): GTID_TAGGED events, tagged PREVIOUS_GTIDS and the tagged GTID
set encoding, each against bytes built from the MySQL source's format
(``_mysql_serialization``), and the variable-length integers against the examples of MySQL's
``libs/mysql/serialization/readme.md``."""

from __future__ import annotations

import struct
import uuid

import pytest
from _mysql_serialization import gtid_set_bytes, gtid_tagged_body, varlen_s, varlen_u
from hypothesis import given, strategies as st
from test_events import parse

from headwater._varlen import encode_int, encode_uint, read_int, read_uint
from headwater.binlog.constants import EventType
from headwater.binlog.events import GtidEvent, PreviousGtidsEvent
from headwater.errors import BinlogFormatError, TruncatedError
from headwater.position import MysqlGtid, MysqlGtidSet

SID = uuid.UUID("3e11fa47-71ca-11e1-9e33-c80aa9429562")  # bytes >= 0x80 take 2 varlen bytes
SID2 = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")


def test_varlen_examples_of_the_mysql_readme() -> None:
    # "00000111 11111111 11111011" (big-endian display) is 65535 unsigned; the signed
    # examples are 65535, -65535 and -65536.
    assert encode_uint(65535) == bytes([0b11111011, 0b11111111, 0b00000111])
    assert encode_int(65535) == bytes([0b11110011, 0b11111111, 0b00001111])
    assert encode_int(-65535) == bytes([0b11101011, 0b11111111, 0b00001111])
    assert encode_int(-65536) == bytes([0b11111011, 0b11111111, 0b00001111])
    assert encode_uint(2**64 - 1) == b"\xff" * 9


@given(st.integers(0, 2**64 - 1))
def test_varlen_unsigned_matches_the_independent_encoder(v: int) -> None:
    assert encode_uint(v) == varlen_u(v)
    assert read_uint(varlen_u(v) + b"junk") == (v, len(varlen_u(v)))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlen_signed_matches_the_independent_encoder(v: int) -> None:
    assert encode_int(v) == varlen_s(v)
    assert read_int(varlen_s(v)) == (v, len(varlen_s(v)))


def test_gtid_tagged_event_all_fields() -> None:
    body = gtid_tagged_body(
        SID,
        42,
        "mytag",
        flags=1,
        last_committed=7,
        sequence_number=8,
        immediate_ts=1714534357425326,
        original_ts=1714534357000000,
        transaction_length=312,
        immediate_version=90600,
        original_version=80400,
        ticket=5,
    )
    ev = parse(EventType.GTID_TAGGED, body)
    assert ev == GtidEvent(
        1, SID, 42, None, 7, 8, 1714534357425326, 1714534357000000, 312, 90600, 80400, 5, "mytag"
    )
    assert isinstance(ev, GtidEvent)
    assert ev.gtid == MysqlGtid(SID, 42, "mytag")
    assert str(ev.gtid) == f"{SID}:mytag:42"


def test_gtid_tagged_event_defaults_of_absent_fields() -> None:
    body = gtid_tagged_body(SID2, 2**40, "a_1", immediate_ts=1000, immediate_version=80400)
    ev = parse(EventType.GTID_TAGGED, body)
    assert isinstance(ev, GtidEvent)
    # original_* equal the immediate ones when left out; no group ticket.
    assert (ev.original_commit_timestamp, ev.original_server_version) == (1000, 80400)
    assert ev.commit_group_ticket is None
    assert (ev.sid, ev.gno, ev.tag) == (SID2, 2**40, "a_1")


def test_gtid_tagged_event_skips_fields_of_a_newer_server() -> None:
    body = gtid_tagged_body(SID, 3, "t", extra_fields=[(12, varlen_u(99)), (13, varlen_u(1))])
    ev = parse(EventType.GTID_TAGGED, body)
    assert isinstance(ev, GtidEvent) and ev.gtid == MysqlGtid(SID, 3, "t")


def test_gtid_tagged_event_refuses_unknown_fields_it_may_not_ignore() -> None:
    body = gtid_tagged_body(SID, 3, "t", extra_fields=[(12, b"\x00")], last_non_ignorable=13)
    with pytest.raises(BinlogFormatError, match="may not be ignored"):
        parse(EventType.GTID_TAGGED, body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x04" + gtid_tagged_body(SID, 3, "t")[1:], "format version 2"),
        (gtid_tagged_body(SID, 3, "9bad"), "not a valid tag"),
        (gtid_tagged_body(SID, 3, "x" * 33), "at most 32"),
        (gtid_tagged_body(SID, 0, "t"), "gno 0 out of range"),
    ],
)
def test_gtid_tagged_event_bad_values(body: bytes, message: str) -> None:
    with pytest.raises(BinlogFormatError, match=message):
        parse(EventType.GTID_TAGGED, body)


def test_gtid_tagged_event_every_truncation_is_a_format_error() -> None:
    body = gtid_tagged_body(SID, 12345, "mytag", immediate_ts=1714534357425326)
    for cut in range(len(body)):
        with pytest.raises(BinlogFormatError) as info:
            parse(EventType.GTID_TAGGED, body[:cut])
        assert "GTID_TAGGED" in str(info.value)


def test_tagged_previous_gtids_of_mysql_96() -> None:
    # Two TSIDs: the header is 72057594037928449 (the number of the error).
    data = gtid_set_bytes([(SID, "", [(1, 6)]), (SID, "mytag", [(1, 3)])])
    assert struct.unpack_from("<Q", data)[0] == 72057594037928449
    ev = parse(EventType.PREVIOUS_GTIDS, data)
    assert isinstance(ev, PreviousGtidsEvent)
    assert str(ev.gtid_set) == f"{SID}:1-5:mytag:1-2"
    assert ev.gtid_set.encode() == data
    for cut in range(8, len(data)):
        with pytest.raises(TruncatedError):
            parse(EventType.PREVIOUS_GTIDS, data[:cut])


def test_previous_gtids_unknown_format_byte() -> None:
    with pytest.raises(BinlogFormatError, match="unknown format byte 2"):
        parse(EventType.PREVIOUS_GTIDS, struct.pack("<Q", 2 << 56 | 1))


def test_tagged_set_encoding_matches_mysql_bytes() -> None:
    text = f"{SID2}:b:4,{SID}:1-5:7:mytag:1-2:zz:9,{SID2}:1-3:a:1"
    gset = MysqlGtidSet.parse(text)
    expected = gtid_set_bytes(
        [
            (SID2, "", [(1, 4)]),
            (SID2, "a", [(1, 2)]),
            (SID2, "b", [(4, 5)]),
            (SID, "", [(1, 6), (7, 8)]),
            (SID, "mytag", [(1, 3)]),
            (SID, "zz", [(9, 10)]),
        ]
    )
    assert gset.encode() == expected
    assert MysqlGtidSet.decode(expected + b"rest") == (gset, len(expected))
    assert str(gset) == f"{SID2}:1-3:a:1:b:4,{SID}:1-5:7:mytag:1-2:zz:9"


def test_untagged_set_keeps_the_classic_encoding() -> None:
    gset = MysqlGtidSet.parse(f"{SID}:1-5:7")
    assert gset.encode() == gtid_set_bytes([(SID, "", [(1, 6), (7, 8)])])
    assert not gset.is_tagged


_TSIDS = st.tuples(st.sampled_from([SID, SID2]), st.sampled_from(["", "a", "mytag", "z_9"]))
_GNOS = st.lists(st.tuples(_TSIDS, st.integers(1, 40)), max_size=30)


def _as_set(gtids: list[tuple[tuple[uuid.UUID, str], int]]) -> MysqlGtidSet:
    result = MysqlGtidSet()
    for (sid, tag), gno in gtids:
        result.add(MysqlGtid(sid, gno, tag))
    return result


@given(_GNOS, _GNOS)
def test_tagged_set_arithmetic_and_round_trips_against_python_sets(
    a: list[tuple[tuple[uuid.UUID, str], int]], b: list[tuple[tuple[uuid.UUID, str], int]]
) -> None:
    sa, sb = _as_set(a), _as_set(b)
    plain_a = {(sid, tag, gno) for (sid, tag), gno in a}
    plain_b = {(sid, tag, gno) for (sid, tag), gno in b}
    union = sa.union(sb)
    for sid in (SID, SID2):
        for tag in ("", "a", "mytag", "z_9"):
            for gno in range(1, 42):
                expected = (sid, tag, gno) in plain_a | plain_b
                assert (MysqlGtid(sid, gno, tag) in union) == expected
    assert union.issuperset(sa) and union.issuperset(sb)
    assert sa.issuperset(sb) == (plain_b <= plain_a)
    assert MysqlGtidSet.parse(str(union)) == union
    assert MysqlGtidSet.decode(union.encode()) == (union, len(union.encode()))
    # Within one (uuid, tag), intervals are sorted and disjoint.
    for sid, tag, lo, hi in union.tagged_intervals():
        assert lo < hi and (sid, tag, lo) in plain_a | plain_b
