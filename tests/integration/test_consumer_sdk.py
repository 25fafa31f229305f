"""The consumer SDK in one process and ``headwater consume``, against a live MariaDB and
``headwater reader run`` (no ZooKeeper: file checkpoints).

Oracles: the source table (replaying the delivered changes per key gives its contents,
compared as the typed values pymysql reads), the reader's own JSON stream (every change
delivered, once), the documented shard hash (``headwater.server.sharding``), and the three
decodings against each other: raw records decoded in the client and protobuf rows must give
equal typed values; JSON rows must be the JSON rendering of them (docs/formats.md).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from headwater.binlog.dump import json_default
from headwater.changes import ChangeRow
from headwater.client import Batch, Consumer, ConsumerError, ConsumerOptions, FileStore
from headwater.sandbox import MariadbSandbox
from headwater.server.sharding import shard_of
from tests.integration.server_support import Http
from tests.integration.test_consumer_group import reader_process
from tests.integration.test_reader_capture import wait_for

pytestmark = pytest.mark.integration

SHARDS = 3


@pytest.fixture(scope="module")
def reader(mariadb: MariadbSandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    mariadb.execute(
        "DROP DATABASE IF EXISTS sdk",
        "CREATE DATABASE sdk",
        "CREATE TABLE sdk.t (id INT PRIMARY KEY, d DECIMAL(10,2), b VARBINARY(8), "
        "at DATETIME(3), day DATE, s VARCHAR(20), n INT NULL)",
        "DROP DATABASE IF EXISTS sdkm",
        "CREATE DATABASE sdkm",  # markers, outside sdk.* (see _expected)
        "CREATE TABLE sdkm.mark (id INT AUTO_INCREMENT PRIMARY KEY)",
    )
    try:
        with reader_process(mariadb, tmp_path_factory.mktemp("reader")) as http:
            yield http
    finally:
        mariadb.execute("DROP DATABASE IF EXISTS sdk", "DROP DATABASE IF EXISTS sdkm")


def _workload(mariadb: MariadbSandbox, rng: random.Random, n: int) -> None:
    statements = []
    for _ in range(n):
        k = rng.randrange(40)
        d = f"{rng.randrange(-99999, 99999) / 100:.2f}"
        b = os.urandom(rng.randrange(0, 8)).hex()
        at = f"2026-0{rng.randrange(1, 10)}-1{rng.randrange(10)} 12:34:56.{rng.randrange(1000):03d}"
        n_value = "NULL" if rng.random() < 0.3 else str(rng.randrange(-5, 5))
        kind = rng.random()
        if kind < 0.5:
            statements.append(
                f"INSERT INTO sdk.t VALUES ({k}, {d}, x'{b}', '{at}', '2024-02-29', "
                f"'s{k}-ü', {n_value}) ON DUPLICATE KEY UPDATE d = {d}, b = x'{b}', n = {n_value}"
            )
        elif kind < 0.8:
            statements.append(f"UPDATE sdk.t SET at = '{at}', s = 'u{k}' WHERE id = {k}")
        else:
            statements.append(f"DELETE FROM sdk.t WHERE id = {k}")
    mariadb.execute(*statements)


def _expected(http: Http, mariadb: MariadbSandbox) -> list[Any]:
    """The reader's JSON rows of ``sdk.*`` once it has captured all the source committed
    (a marker row written now is served: the reader captures in commit order)."""
    mariadb.execute("INSERT INTO sdkm.mark () VALUES ()")
    mark = int(mariadb.query("SELECT MAX(id) FROM sdkm.mark")[0][0])

    def captured() -> bool:
        rows, _cp, _n = http.drain(http.subscribe(task="src", tables=["sdkm.*"], ddl=False))
        return any(r["after"]["id"] == mark for r in rows)

    wait_for(captured, 30, "the reader to capture the source")
    rows, _cp, _n = http.drain(http.subscribe(task="src", tables=["sdk.*"], ddl=False))
    return rows


class Collector:
    """A handler that keeps every batch (shard, changes) it is given."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[tuple[int, list[ChangeRow]]] = []

    def __call__(self, batch: Batch) -> None:
        with self.lock:
            self.batches.append((batch.shard, list(batch.changes)))

    def changes(self) -> list[tuple[int, ChangeRow]]:
        with self.lock:
            return [(shard, c) for shard, cs in self.batches for c in cs]


def _consume(http: Http, store: FileStore, decode: str, count: int) -> Collector:
    options = ConsumerOptions(
        task="src", group=f"g-{decode}", readers=(http.url,), tables=("sdk.*",),
        shards=SHARDS, batch_size=7, max_wait=0.05, ddl=False, decode=decode,
    )  # fmt: skip
    got = Collector()
    consumer = Consumer(options, got, store).start()
    try:
        wait_for(lambda: len(got.changes()) >= count, 60, f"{count} changes ({decode})")
    finally:
        consumer.stop(timeout=20)
    return got


def _typed_state(changes: list[ChangeRow]) -> dict[int, dict[str, Any]]:
    state: dict[int, dict[str, Any]] = {}
    for c in sorted(changes, key=lambda c: c.sequence):
        assert c.key is not None
        if c.op == "delete":
            state.pop(c.key["id"], None)
        else:
            assert c.after is not None
            state[c.key["id"]] = c.after
    return state


def _source(mariadb: MariadbSandbox) -> dict[int, dict[str, Any]]:
    names = ("id", "d", "b", "at", "day", "s", "n")
    rows = mariadb.query("SELECT * FROM sdk.t")
    return {row[0]: dict(zip(names, row, strict=True)) for row in rows}


def test_client_json_and_protobuf_decoding_deliver_the_same_changes_per_shard_in_order(
    mariadb: MariadbSandbox, reader: Http, tmp_path: Path
) -> None:
    _workload(mariadb, random.Random(181), 150)
    expected = _expected(reader, mariadb)
    store = FileStore(tmp_path / "checkpoints")
    got = {d: _consume(reader, store, d, len(expected)) for d in ("client", "json", "protobuf")}

    by_seq: dict[str, dict[int, tuple[int, ChangeRow]]] = {}
    for decode, collector in got.items():
        for _shard, changes in collector.batches:
            assert 1 <= len(changes) <= 7
        delivered = collector.changes()
        seqs = [c.sequence for _s, c in delivered]
        assert sorted(seqs) == sorted(r["sequence"] for r in expected), decode
        assert len(seqs) == len(set(seqs)), f"{decode}: a change delivered twice"
        last: dict[int, int] = {}
        for shard, c in delivered:
            assert c.sequence > last.get(shard, -1), f"{decode}: shard {shard} out of order"
            last[shard] = c.sequence
        by_seq[decode] = {c.sequence: (shard, c) for shard, c in delivered}

    for seq, (shard, c) in by_seq["client"].items():
        assert shard == shard_of(c, SHARDS)  # the documented hash
        p_shard, p = by_seq["protobuf"][seq]
        j_shard, j = by_seq["json"][seq]
        assert shard == p_shard == j_shard
        assert (p.op, p.key, p.before, p.after) == (c.op, c.key, c.before, c.after)
        rendered = orjson.loads(orjson.dumps([c.key, c.before, c.after], default=json_default))
        assert [j.key, j.before, j.after] == rendered
    for image in (c.after for _s, c in by_seq["protobuf"].values() if c.after is not None):
        assert isinstance(image["d"], Decimal) and isinstance(image["b"], bytes)
        assert isinstance(image["at"], dt.datetime) and image["day"] == dt.date(2024, 2, 29)

    state = _typed_state([c for _s, c in by_seq["client"].values()])
    assert state == _source(mariadb)

    # a clean stop saved the checkpoints: a restarted consumer gets only the new changes
    first = max(by_seq["client"])
    _workload(mariadb, random.Random(182), 40)
    more = [r for r in _expected(reader, mariadb) if r["sequence"] > first]
    again = _consume(reader, store, "client", len(more)).changes()
    assert sorted(c.sequence for _s, c in again) == sorted(r["sequence"] for r in more)


def test_a_stalled_shard_does_not_hold_back_the_others(
    mariadb: MariadbSandbox, reader: Http, tmp_path: Path
) -> None:
    """Shard 0's handler blocks until every change of the other shards was handled, with
    queues of 20 rows: the one raw feed must go on serving shards 1 and 2 (shard 0 paused
    and re-read later), then shard 0 gets every one of its changes, in order, once."""
    _workload(mariadb, random.Random(184), 150)
    expected = _expected(reader, mariadb)
    others = {r["sequence"] for r in expected if _shard_of_json(r) != 0}
    assert 20 < len(others) < len(expected) - 20
    seen: set[int] = set()
    released = threading.Event()
    got = Collector()

    def handle(batch: Batch) -> None:
        if batch.shard == 0:
            assert released.wait(60), "shard 0 was never released"
        else:
            seen.update(c.sequence for c in batch.changes)
            if others <= seen:
                released.set()
        got(batch)

    options = ConsumerOptions(
        task="src", group="stall", readers=(reader.url,), tables=("sdk.*",), shards=SHARDS,
        batch_size=5, max_wait=0.01, ddl=False, queue_rows=20, fetch_records=10,
    )  # fmt: skip
    consumer = Consumer(options, handle, FileStore(tmp_path / "cp")).start()
    try:
        wait_for(lambda: len(got.changes()) >= len(expected), 60, "every change")
    finally:
        consumer.stop(timeout=20)
    delivered = got.changes()
    assert sorted(c.sequence for _s, c in delivered) == sorted(r["sequence"] for r in expected)
    last: dict[int, int] = {}
    for shard, c in delivered:
        assert c.sequence > last.get(shard, -1)
        last[shard] = c.sequence


def _shard_of_json(doc: Any) -> int:
    from headwater.client.decoded import row_of

    return shard_of(row_of(doc), SHARDS)


HANDLER = """
import json, os

def handle(batch):
    with open(os.environ["HW_TEST_OUT"], "a") as f:
        for c in batch.changes:
            kind = type(c.after or {}).__name__
            f.write(json.dumps([batch.shard, c.sequence, c.op, kind]) + "\\n")
"""


def _cli(args: list[str], errors: Path, **kw: Any) -> subprocess.Popen[bytes]:
    with open(errors, "ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "headwater.cli.main", "consume", "run", *args],
            stdout=subprocess.PIPE, stderr=err, **kw,
        )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> bytes:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise
    return out


def test_consume_cli_prints_json_lines_and_calls_a_handler_module(
    mariadb: MariadbSandbox, reader: Http, tmp_path: Path
) -> None:
    _workload(mariadb, random.Random(183), 60)
    expected = sorted(r["sequence"] for r in _expected(reader, mariadb))
    common = ["--reader", reader.url, "--task", "src", "--tables", "sdk.*", "--shards", "2",
              "--checkpoints", str(tmp_path / "cp")]  # fmt: skip

    errors = tmp_path / "stderr"
    proc = _cli([*common, "--group", "lines"], errors)
    lines: list[Any] = []
    try:
        assert proc.stdout is not None
        while len(lines) < len(expected):
            line = proc.stdout.readline()
            assert line, errors.read_text()
            lines.append(json.loads(line))
    finally:
        rest = _stop(proc)
    assert proc.returncode == 0
    assert rest == b""  # nothing past the source's changes
    assert sorted(doc["sequence"] for doc in lines) == expected
    for doc in lines:
        assert doc["database"] == "sdk" and doc["shard"] in (0, 1)
        assert doc["op"] in ("insert", "update", "delete")
        if doc["after"] is not None:  # JSON rendering of the typed values (docs/formats.md)
            assert isinstance(doc["after"]["d"], str) and "base64" in doc["after"]["b"]

    (tmp_path / "hw_test_handler.py").write_text(HANDLER)
    out = tmp_path / "handled.jsonl"
    env = {**os.environ, "HW_TEST_OUT": str(out), "PYTHONPATH": str(tmp_path)}
    proc = _cli([*common, "--group", "module", "--decode", "protobuf",
                 "--handler", "hw_test_handler:handle"], errors, env=env)  # fmt: skip
    try:
        wait_for(
            lambda: out.exists() and len(out.read_text().splitlines()) >= len(expected),
            60,
            "the handler module to see every change",
        )
    finally:
        assert _stop(proc) == b""  # a handler replaces the JSON lines
    assert proc.returncode == 0
    handled = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(h[1] for h in handled) == expected
    assert {h[3] for h in handled} == {"dict"}


def test_a_feed_that_fails_on_a_record_stops_the_consumer_and_acks_nothing_after(
    mariadb: MariadbSandbox,
    reader: Http,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The raw feed meets a record its decoding fails on with an unexpected exception (a
    ValueError for the rows event of ``sdk.poison``, raised by the real decoder's caller
    seam, the reader and MariaDB real): the failure is logged with its traceback, kept as
    ``consumer.error``, raised by ``wait()`` and ``stop()``; the batch a handler holds at
    that moment is not acked, and no checkpoint passes the failing record."""
    import headwater.client.rawfeed as rawfeed

    mariadb.execute(
        "DROP TABLE IF EXISTS sdk.poison", "CREATE TABLE sdk.poison (id INT PRIMARY KEY)"
    )
    _workload(mariadb, random.Random(185), 60)
    mariadb.execute("INSERT INTO sdk.poison VALUES (1)")
    _workload(mariadb, random.Random(186), 20)
    expected = _expected(reader, mariadb)
    poison = next(r["sequence"] for r in expected if r["table"] == "poison")

    held = threading.Event()  # shard 0's first batch is in its handler
    real = rawfeed.decode_blocks

    def decode(record: Any, **kw: Any) -> Iterator[Any]:
        for block in real(record, **kw):
            if block.table == "poison" and block.op != "ddl":
                assert held.wait(30), "shard 0 never got a batch before the failing record"
                raise ValueError("crafted: this record does not decode")
            yield block

    monkeypatch.setattr(rawfeed, "decode_blocks", decode)
    got = Collector()
    held_batch: list[Batch] = []

    def handle(batch: Batch) -> None:
        if batch.shard == 0 and not held_batch:
            held_batch.append(batch)
            held.set()
            wait_for(lambda: consumer.error is not None, 30, "the feed's failure")
        got(batch)

    options = ConsumerOptions(
        task="src", group="poison", readers=(reader.url,), tables=("sdk.*",), shards=SHARDS,
        batch_size=5, max_wait=0.01, ddl=False, fetch_records=10, flush_every=1,
    )  # fmt: skip
    store = FileStore(tmp_path / "cp")
    consumer = Consumer(options, handle, store).start()
    with pytest.raises(ConsumerError) as waited:
        consumer.wait(60)
    error = waited.value
    assert error is consumer.error
    assert error.thread == "consumer-feed"
    assert isinstance(error.__cause__, ValueError)
    with pytest.raises(ConsumerError) as stopped:
        consumer.stop(timeout=20)
    assert stopped.value is error

    logged = [r for r in caplog.records if r.levelname == "ERROR" and r.exc_info]
    assert any(r.exc_info[1] is error.__cause__ for r in logged)  # type: ignore[index]
    delivered = got.changes()
    assert delivered and all(c.sequence < poison for _s, c in delivered)
    state = store.load("poison")
    assert state is not None
    first_held = held_batch[0].changes[0].sequence
    assert held_batch[0].state == "open"  # returned after the failure: not acked
    assert state.next[0] <= first_held
    assert all(n <= poison for n in state.next.values())
    assert [s for s, c in delivered if s != 0]  # the other shards were served before


@pytest.mark.parametrize("passing", [2, None])
def test_a_record_that_never_decodes_fails_the_consumer_after_its_retries(
    mariadb: MariadbSandbox,
    reader: Http,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    passing: int | None,
) -> None:
    """The raw feed's decoding raises a ``BinlogFormatError`` (no retry can fix it) on the
    rows of ``sdk.poison``. ``passing=2``: it fails twice, then decodes (a passing state):
    the consumer goes on and delivers every change. ``None``: it always fails: after
    ``GIVE_UP_AFTER`` tries the consumer fails with it instead of retrying for ever."""
    import headwater.client.consumer as consumer_module
    import headwater.client.rawfeed as rawfeed
    from headwater.errors import BinlogFormatError

    mariadb.execute(
        "DROP TABLE IF EXISTS sdk.poison", "CREATE TABLE sdk.poison (id INT PRIMARY KEY)"
    )
    _workload(mariadb, random.Random(188), 30)
    mariadb.execute("INSERT INTO sdk.poison VALUES (1)")
    _workload(mariadb, random.Random(189), 10)
    expected = _expected(reader, mariadb)
    poison = next(r["sequence"] for r in expected if r["table"] == "poison")
    failures: list[int] = []
    real = rawfeed.decode_blocks

    def decode(record: Any, **kw: Any) -> Iterator[Any]:
        for block in real(record, **kw):
            if (
                block.table == "poison"
                and block.op != "ddl"
                and (passing is None or len(failures) < passing)
            ):
                failures.append(1)
                raise BinlogFormatError("crafted: bad rows event", source="test", offset=4)
            yield block

    monkeypatch.setattr(rawfeed, "decode_blocks", decode)
    got = Collector()
    options = ConsumerOptions(
        task="src", group=f"never-{passing}", readers=(reader.url,), tables=("sdk.*",),
        shards=SHARDS, batch_size=5, max_wait=0.01, ddl=False,
    )  # fmt: skip
    consumer = Consumer(options, got, FileStore(tmp_path / "cp")).start()
    if passing is not None:
        try:
            wait_for(lambda: len(got.changes()) >= len(expected), 60, "every change")
        finally:
            consumer.stop(timeout=20)
        assert len(failures) == passing and consumer.error is None
        assert sorted(c.sequence for _s, c in got.changes()) == sorted(
            r["sequence"] for r in expected
        )
        return
    with pytest.raises(ConsumerError) as waited:
        consumer.wait(60)
    assert isinstance(waited.value.__cause__, BinlogFormatError)
    assert "bad rows event" in str(waited.value.__cause__)
    assert len(failures) == consumer_module.GIVE_UP_AFTER
    with pytest.raises(ConsumerError):
        consumer.stop(timeout=20)
    assert all(c.sequence < poison for _s, c in got.changes())


def test_a_worker_that_fails_outside_the_handler_stops_the_consumer(
    mariadb: MariadbSandbox, reader: Http, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler breaks its batch (``batch.changes = None``) and raises: the worker's own
    rollback then fails (AttributeError), outside the handler. The shard's thread must not
    die silently: the consumer fails, stops, and ``with`` raises the error on exit."""
    _workload(mariadb, random.Random(187), 60)
    _expected(reader, mariadb)
    broken: list[int] = []

    def handle(batch: Batch) -> None:
        if batch.shard == 1 and not broken:
            broken.append(batch.changes[0].sequence)
            batch.changes = None  # type: ignore[assignment]
            raise RuntimeError("handler failed with its batch broken")

    options = ConsumerOptions(
        task="src", group="broken", readers=(reader.url,), tables=("sdk.*",), shards=SHARDS,
        batch_size=5, max_wait=0.01, ddl=False, flush_every=1,
    )  # fmt: skip
    store = FileStore(tmp_path / "cp")
    with pytest.raises(ConsumerError) as raised, Consumer(options, handle, store) as consumer:
        consumer.wait(60)
    error = raised.value
    assert error.thread == "consumer-shard-1"
    assert isinstance(error.__cause__, AttributeError)
    assert any(r.exc_info and r.exc_info[1] is error.__cause__ for r in caplog.records)
    state = store.load("broken")
    assert state is not None and state.next[1] <= broken[0]


def test_one_shard_gets_every_change_in_log_order_once(
    mariadb: MariadbSandbox, reader: Http, tmp_path: Path
) -> None:
    """With one shard the raw feed routes rows events without hashing them."""
    _workload(mariadb, random.Random(188), 60)
    expected = _expected(reader, mariadb)
    options = ConsumerOptions(
        task="src", group="one", readers=(reader.url,), tables=("sdk.*",), shards=1,
        batch_size=7, max_wait=0.01, ddl=False,
    )  # fmt: skip
    got = Collector()
    with Consumer(options, got, FileStore(tmp_path / "cp")):
        wait_for(lambda: len(got.changes()) >= len(expected), 60, "every change")
    seqs = [c.sequence for _s, c in got.changes()]
    assert seqs == [r["sequence"] for r in expected]
    assert {s for s, _c in got.changes()} == {0}


def test_a_server_decoded_feed_that_fails_stops_the_consumer(
    mariadb: MariadbSandbox, reader: Http, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``decode="json"`` each shard has a feed thread of its own; an unexpected error
    reading the server's answer (a KeyError for a row of ``sdk.poison2``, raised where the
    answer is turned into rows) fails the consumer as the raw feed's does."""
    import headwater.client.consumer as consumer_module

    mariadb.execute(
        "DROP TABLE IF EXISTS sdk.poison2", "CREATE TABLE sdk.poison2 (id INT PRIMARY KEY)"
    )
    _workload(mariadb, random.Random(189), 30)
    mariadb.execute("INSERT INTO sdk.poison2 VALUES (1)")
    expected = _expected(reader, mariadb)
    row = next(r for r in expected if r["table"] == "poison2")
    poison, its_shard = row["sequence"], _shard_of_json(row)
    real = consumer_module.answer_of

    def answer_of(answer: Any) -> Any:
        out = real(answer)
        if any(r.table == "poison2" for r in out.rows):
            raise KeyError("crafted: a field this answer lacks")
        return out

    monkeypatch.setattr(consumer_module, "answer_of", answer_of)
    options = ConsumerOptions(
        task="src", group="poison-json", readers=(reader.url,), tables=("sdk.*",),
        shards=SHARDS, batch_size=5, max_wait=0.01, ddl=False, decode="json", flush_every=1,
    )  # fmt: skip
    got = Collector()
    store = FileStore(tmp_path / "cp")
    consumer = Consumer(options, got, store).start()
    with pytest.raises(ConsumerError) as waited:
        consumer.wait(60)
    assert waited.value.thread == f"consumer-feed-{its_shard}"
    assert isinstance(waited.value.__cause__, KeyError)
    with pytest.raises(ConsumerError):
        consumer.stop(timeout=20)
    # the other shards' streams never held that row: only its shard stops short of it
    assert all(c.sequence < poison for s, c in got.changes() if s == its_shard)
    state = store.load("poison-json")
    assert state is not None and state.next[its_shard] <= poison
