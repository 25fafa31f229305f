"""Starts and subscriptions by tagged GTID sets (MySQL 8.3+), end to end without a MySQL
server: the COM_BINLOG_DUMP_GTID bytes the client sends for a tagged set, and a task
directory built from tagged GTID events through the reader's grouping path
(``_mysql9_log``) read back from the start points of ``/v1/subscribe`` (over real HTTP)
and of the Spark source's ``startingPosition``, which must skip exactly the transactions
the set contains.
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server_support import Http
from tests.unit.binlog._mysql9_log import LATIN, LATIN_COLUMN, SID, Txn, build_task
from tests.unit.binlog._mysql_serialization import gtid_set_bytes

from headwater.binlog._packets import BINLOG_DUMP_NON_BLOCK, binlog_dump_gtid
from headwater.position import MysqlGtid, MysqlGtidSet
from headwater.server import ServerOptions, TaskHandle
from headwater.server.app import HeadwaterServer
from headwater.server.requests import parse_start as server_start
from headwater.spark.offsets import parse_start as spark_start, start_request
from headwater.store import ChangeLog, StoreOptions

U = str(SID)


def test_com_binlog_dump_gtid_carries_a_tagged_set_in_the_tagged_format() -> None:
    """sql/rpl_source.cc ``com_binlog_dump_gtid`` reads flags (u16), server_id (u32),
    name_size (u32), the name, pos (u64), data_size (u32), then hands ``data_size`` bytes
    to ``Gtid_set::add_gtid_encoding``, which (8.3+) reads the tagged format when the
    first u64 says so (``decode_nsids_format``). The expected set bytes are built by the
    test-side encoder, not by :meth:`MysqlGtidSet.encode`."""
    other = uuid.UUID("11111111-2222-3333-4444-555555555555")
    gtids = MysqlGtidSet.parse(f"{U}:1-5:7:alpha:1-3,{U}:Beta:2,{other}:1-9")
    body = binlog_dump_gtid(gtids, 77, BINLOG_DUMP_NON_BLOCK)
    data = gtid_set_bytes(
        [
            (other, "", [(1, 10)]),  # MySQL orders TSIDs by uuid bytes, then tag
            (SID, "", [(1, 6), (7, 8)]),
            (SID, "alpha", [(1, 4)]),
            (SID, "beta", [(2, 3)]),
        ]
    )
    # BINLOG_THROUGH_GTID (4) is added to the flags; no file name; position 4.
    head = struct.pack("<HII", BINLOG_DUMP_NON_BLOCK | 4, 77, 0) + struct.pack("<QI", 4, len(data))
    assert body == head + data
    assert struct.unpack_from("<Q", data)[0] == 1 << 56 | 4 << 8 | 1  # tagged, 4 TSIDs
    assert MysqlGtidSet.decode(data) == (gtids, len(data))


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Txn]]:
    d = tmp_path_factory.mktemp("mysql9") / "task"
    return d, build_task(d)


def _expected(txns: list[Txn], wanted: MysqlGtidSet) -> list[str]:
    """From the first transaction whose GTID is not in the set on (the store's rule)."""
    first = next(
        (i for i, t in enumerate(txns) if MysqlGtid.parse(t.gtid) not in wanted), len(txns)
    )
    return [t.gtid for t in txns[first:]]


CASES = [
    f"{U}:1-2",
    f"{U}:1-2:alpha:1-3",  # the tagged numbers follow the untagged ones in the log
    f"{U}:1-3:alpha:1-3:beta:1",
    f"{U}:1-4:alpha:1-4:beta:1-2",
    f"{U}:1-5:alpha:1-5:beta:1-2",
    f"{U}:alpha:1-3",  # untagged 1 not in it: nothing skipped
    f"{U}:1-2:ALPHA:1-2",
]


def test_server_and_spark_starts_skip_exactly_the_tagged_transactions_contained(
    task: tuple[Path, list[Txn]],
) -> None:
    d, txns = task
    seen = set()
    with ChangeLog.open(str(d / "changes"), StoreOptions()) as log:
        assert [r.gtid for r in log.reader("earliest")] == [t.gtid for t in txns]
        for text in CASES:
            wanted = MysqlGtidSet.parse(text)
            want = _expected(txns, wanted)
            seen.add(len(want))
            by_server = server_start({"gtid_set": text})
            by_spark = spark_start(f"gtid:{text}")
            # The Spark source over HTTP sends its start as /v1/subscribe's start field.
            via_http = server_start(start_request(by_spark))
            assert by_server == by_spark == via_http == wanted
            assert [r.gtid for r in log.reader(by_server)] == want, text
    assert len(seen) >= 5  # the cases start at different transactions


@pytest.fixture(scope="module")
def http(task: tuple[Path, list[Txn]]) -> Iterator[Http]:
    handle = TaskHandle(log=task[0] / "changes")
    server = HeadwaterServer({"t9": handle}, ServerOptions()).start()
    try:
        yield Http(server.url)
    finally:
        server.close()
        handle.change_log().close()


def _drain(http: Http, start: Any, fmt: str) -> list[Any]:
    reply = http.post("/v1/subscribe", {"task": "t9", "start": start, "format": fmt})
    assert reply.status == 200, reply.body
    items, _checkpoint, _n = http.drain(reply.json()["checkpoint"])
    return items


@pytest.mark.parametrize("text", [CASES[1], CASES[2], CASES[6]])
def test_subscribe_over_http_by_a_tagged_set(
    http: Http, task: tuple[Path, list[Txn]], text: str
) -> None:
    records = _drain(http, {"gtid_set": text}, "raw")
    assert [r["gtid"] for r in records] == _expected(task[1], MysqlGtidSet.parse(text))


def _text(value: Any) -> bytes:
    """A JSON name back to bytes: text, or lossless base64 of bytes that are not UTF-8."""
    if isinstance(value, dict):
        return base64.b64decode(value["undecodable_text_base64"])
    return str(value).encode()


def test_http_json_rows_of_names_that_are_not_utf8(
    http: Http, task: tuple[Path, list[Txn]]
) -> None:
    rows = _drain(http, "earliest", "json")
    assert [r["after"]["id"] for r in rows] == [t.row_id for t in task[1]]
    # database/table values stay lossless; a column name (an object key) shows its
    # undecodable bytes as \xNN (server/encoding.py); no exception either way.
    assert [(_text(r["database"]), _text(r["table"])) for r in rows] == [t.table for t in task[1]]
    latin = [r for r in rows if _text(r["database"]) == LATIN[0]]
    assert len(latin) == 4
    assert all(set(r["after"]) == {"id", "pr\\xe9nom"} for r in latin), latin[0]
    assert [r["after"]["pr\\xe9nom"] for r in latin] == [
        f"r{t.row_id}" for t in task[1] if t.table == LATIN
    ]
    assert LATIN_COLUMN == b"pr\xe9nom"
