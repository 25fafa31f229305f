"""Consumer groups end to end: a live MariaDB, ``headwater reader run``, a real ZooKeeper,
PostgreSQL as the SQL checkpoint store and the handler's target, consumer processes.

The handler of ``consumer_proc`` inserts each change into ``applied`` and commits the
batch's checkpoint in the same transaction. The three first members decode differently
(raw records in the client, JSON and protobuf from the server), so the test also shows that
every decoding shards and delivers the same changes. Every process a test starts is
registered with the ``procs`` fixture, which kills what is still running at teardown.
Oracles: the source table itself (replaying
``applied`` per key in ``sequence`` order gives the table's final contents), and the
reader's own JSON stream (every change sequence of ``cg.*`` is applied exactly once).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from headwater.changes.sequence import ROW_BITS
from headwater.client import Consumer, ConsumerOptions, SqlStore
from headwater.coordination.groups import live_members
from headwater.coordination.zk import connect, servers_path, shard_path
from headwater.sandbox import MariadbSandbox
from tests.integration.server_support import Http
from tests.integration.test_reader_capture import wait_for
from tests.integration.zk_support import zookeeper_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[str]:
    with zookeeper_server() as hosts:
        yield hosts


@contextmanager
def reader_process(mariadb: MariadbSandbox, directory: Path) -> Iterator[Http]:
    """``headwater reader run`` of task ``src`` from the server's current binlog position,
    API on a free port; yields its client once the task runs; always stopped."""
    file, offset = mariadb.binlog_position()
    config = directory / "reader.yaml"
    config.write_text(
        f"""data_dir: data
server:
  listen: "127.0.0.1:0"
sources:
  - name: src
    host: {mariadb.host}
    port: {mariadb.port}
    user: root
    server_id: 7418
    start: {{file: {file}, offset: {offset}}}
    state_interval: 0.1
"""
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater.cli.main", "reader", "run", "--config", str(config)],
        stderr=subprocess.DEVNULL,
    )
    try:
        server_file = directory / "data" / "server.json"
        wait_for(lambda: server_file.exists() or proc.poll() is not None, 30, "server.json")
        http = Http(json.loads(server_file.read_text())["url"])
        wait_for(lambda: _task_state(http) == "running", 30, "the task to run")
        yield http
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def reader(mariadb: MariadbSandbox, tmp_path: Path) -> Iterator[Http]:
    mariadb.execute(
        "DROP DATABASE IF EXISTS cg",
        "CREATE DATABASE cg",
        "CREATE TABLE cg.t (id INT PRIMARY KEY, v INT NOT NULL)",
        "DROP DATABASE IF EXISTS cgm",
        "CREATE DATABASE cgm",  # markers: outside the consumed tables (see _wait_applied)
        "CREATE TABLE cgm.mark (id INT AUTO_INCREMENT PRIMARY KEY)",
    )
    try:
        with reader_process(mariadb, tmp_path) as http:
            yield http
    finally:
        mariadb.execute("DROP DATABASE IF EXISTS cg", "DROP DATABASE IF EXISTS cgm")


def _task_state(http: Http) -> str | None:
    reply = http.get("/v1/info")
    if reply.status == 503:  # a starting reader answers before its change log exists
        return None
    assert reply.status == 200, reply.body[:300]
    return str(reply.json()["tasks"]["src"]["status"]["state"])


class Procs:
    """Consumer processes of one test; :meth:`cleanup` leaves none running."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.consumer_proc", *args],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.started.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    try:
        yield p
    finally:
        p.cleanup()


def _workload(mariadb: MariadbSandbox, rng: random.Random, n: int) -> None:
    statements = []
    for _ in range(n):
        k = rng.randrange(60)
        kind = rng.random()
        if kind < 0.5:
            statements.append(f"INSERT INTO cg.t VALUES ({k}, {rng.randrange(1000)}) "
                              f"ON DUPLICATE KEY UPDATE v = v + 1")  # fmt: skip
        elif kind < 0.8:
            statements.append(f"UPDATE cg.t SET v = {rng.randrange(1000)} WHERE id = {k}")
        else:
            statements.append(f"DELETE FROM cg.t WHERE id = {k}")
    mariadb.execute(*statements)


class Member:
    def __init__(self, procs: Procs, url: str, zk: str, dsn: str, shards: int, *extra: str):
        self.proc = procs.start(url, zk, dsn, "cg", str(shards), *extra)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip().startswith(("started", "holding")), line

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)  # consumer_proc dumps its threads
            time.sleep(2)
            raise
        assert self.proc.returncode == 0 and "stopped" in out, out


def _source_state(mariadb: MariadbSandbox) -> dict[str, int]:
    return {json.dumps({"id": int(k)}): int(v) for k, v in mariadb.query("SELECT id, v FROM cg.t")}


def _check(pg: Any, http: Http, mariadb: MariadbSandbox) -> None:
    rows = pg.execute("SELECT seq, k, op, v FROM applied ORDER BY id").fetchall()
    seqs = [r[0] for r in rows]
    assert len(seqs) == len(set(seqs)), "a change was applied twice"
    expected, _cp, _n = http.drain(http.subscribe(task="src", tables=["cg.*"], ddl=False))
    assert sorted(seqs) == sorted(r["sequence"] for r in expected)
    last: dict[str, int] = {}
    state: dict[str, int] = {}
    for seq, key, op, v in rows:
        assert seq > last.get(key, -1), f"key {key}: {seq} after {last[key]}"
        last[key] = seq
        if op == "delete":
            state.pop(key, None)
        else:
            state[key] = v
    assert state == _source_state(mariadb)


def _caught_up(pg: Any, http: Http) -> bool:
    expected, _cp, _n = http.drain(http.subscribe(task="src", tables=["cg.*"], ddl=False))
    return bool(pg.execute("SELECT count(*) FROM applied").fetchone()[0] >= len(expected))


def _wait_applied(pg: Any, http: Http, mariadb: MariadbSandbox, what: str) -> None:
    """Until the reader has captured all the source committed (a marker row written now is
    served: the reader captures in commit order), then until the group applied every
    change of ``cg.*`` the reader serves."""
    mariadb.execute("INSERT INTO cgm.mark () VALUES ()")
    mark = int(mariadb.query("SELECT MAX(id) FROM cgm.mark")[0][0])

    def captured() -> bool:
        rows, _cp, _n = http.drain(http.subscribe(task="src", tables=["cgm.*"], ddl=False))
        return any(r["after"]["id"] == mark for r in rows)

    wait_for(captured, 30, "the reader to capture the source")
    wait_for(lambda: _caught_up(pg, http), 60, what)


@pytest.fixture
def applied(postgres: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """PostgreSQL's DSN and a connection with the handler's ``applied`` table."""
    dsn = " ".join(f"{k}={v}" for k, v in postgres.items())
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute(
            "CREATE TABLE applied (id BIGSERIAL PRIMARY KEY, seq BIGINT NOT NULL, shard INT, "
            "pid INT, tbl TEXT, k TEXT, op TEXT, v INT)"
        )
        yield dsn, pg


def test_three_members_kill_join_leave_and_reshard_apply_every_change_exactly_once(
    mariadb: MariadbSandbox,
    reader: Http,
    zookeeper: str,
    applied: tuple[str, Any],
    procs: Procs,
) -> None:
    dsn, pg = applied
    rng = random.Random(18)
    members = [
        Member(procs, reader.url, zookeeper, dsn, 8, "--decode", decode)
        for decode in ("client", "json", "protobuf")
    ]
    _workload(mariadb, rng, 300)
    time.sleep(1.5)
    members[0].proc.send_signal(signal.SIGKILL)  # dies mid-stream
    members[0].proc.wait()
    _workload(mariadb, rng, 300)
    zk = connect(zookeeper)
    try:  # what a reader registering itself writes; the new member discovers it there
        zk.create(f"{servers_path('src')}/r1", reader.url.encode(), ephemeral=True, makepath=True)
        members.append(Member(procs, "-", zookeeper, dsn, 8))
    finally:
        zk.stop()
        zk.close()
    _workload(mariadb, rng, 300)
    members[1].stop()
    _workload(mariadb, rng, 300)
    _wait_applied(pg, reader, mariadb, "the group to catch up")
    refused = _reshard(dsn, zookeeper, 12)
    assert refused.returncode != 0 and "live members" in refused.stderr, refused
    for m in members[2:]:
        m.stop()
    zk = connect(zookeeper)
    try:
        wait_for(lambda: not live_members(zk, "cg"), 30, "the killed member's session to end")
    finally:
        zk.stop()
        zk.close()
    done = _reshard(dsn, zookeeper, 12)
    assert done.returncode == 0 and done.stdout.startswith("group cg: 12 shards"), done
    _workload(mariadb, rng, 300)
    members = [Member(procs, reader.url, zookeeper, dsn, 12) for _ in range(2)]
    _workload(mariadb, rng, 300)
    _wait_applied(pg, reader, mariadb, "the resharded group to catch up")
    for m in members:
        m.stop()
    _check(pg, reader, mariadb)
    shards = {r[0] for r in pg.execute("SELECT DISTINCT shard FROM applied").fetchall()}
    assert set(range(12)) <= shards


@pytest.mark.parametrize("hold", ["before-tx", "in-tx"])
def test_a_paused_owner_whose_shard_moved_cannot_ack(
    mariadb: MariadbSandbox,
    reader: Http,
    zookeeper: str,
    applied: tuple[str, Any],
    procs: Procs,
    hold: str,
) -> None:
    """``before-tx``: paused inside the handler before its transaction; it resumes after
    the other member took the shard and claimed its checkpoint row: its checkpoint write
    is refused and its transaction rolled back. ``in-tx``: paused after writing its rows
    and checkpoint, before the commit: the new owner's claim waits on the checkpoint row's
    lock, so the resumed owner's commit lands first and the claim reads the checkpoint
    after it (no batch applied twice), and its ack is still refused."""
    dsn, pg = applied
    rng = random.Random(19)
    _workload(mariadb, rng, 50)
    extra = ["--hold-in-tx"] if hold == "in-tx" else []
    paused = procs.start(reader.url, zookeeper, dsn, "cgp", "1", "--hold-first", "3", *extra)
    assert paused.stdout is not None
    assert paused.stdout.readline().strip() == "started"
    holding = paused.stdout.readline().split()
    assert holding[0] == "holding"
    paused.send_signal(signal.SIGSTOP)
    other = procs.start(reader.url, zookeeper, dsn, "cgp", "1")
    assert other.stdout is not None
    assert other.stdout.readline().strip() == "started"
    zk = connect(zookeeper)
    try:
        mark = f"-{paused.pid}-"  # member ids are host-pid-random
        wait_for(lambda: mark not in (_owner(zk, "cgp", 0) or mark), 30, "the shard to move")
    finally:
        zk.stop()
        zk.close()
    if hold == "before-tx":
        _wait_applied(pg, reader, mariadb, "the other member to catch up")
    paused.send_signal(signal.SIGCONT)
    assert paused.stdout.readline().split() == ["fenced", holding[1], holding[2]]
    _wait_applied(pg, reader, mariadb, "the group to catch up")
    _workload(mariadb, rng, 30)  # the new owner goes on from the right checkpoint
    _wait_applied(pg, reader, mariadb, "the group to catch up again")
    _check_once(pg, reader)
    for p in (paused, other):
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=40)
        assert p.returncode == 0 and "stopped" in out, out


def _owner(zk: Any, group: str, shard: int) -> str | None:
    from kazoo.exceptions import NoNodeError

    try:
        return str(zk.get(f"{shard_path(group, shard)}/owner")[0].decode())
    except NoNodeError:
        return None


def _reshard(dsn: str, zookeeper: str, count: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "consume", "reshard", "--group", "cg",
         "--shards", str(count), "--postgres", dsn, "--zookeeper", zookeeper],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _check_once(pg: Any, http: Http) -> None:
    seqs = [r[0] for r in pg.execute("SELECT seq FROM applied").fetchall()]
    assert len(seqs) == len(set(seqs))
    expected, _cp, _n = http.drain(http.subscribe(task="src", tables=["cg.*"], ddl=False))
    assert sorted(seqs) == sorted(r["sequence"] for r in expected)


def test_stop_returns_in_time_and_saves_while_a_claim_waits_on_a_locked_checkpoint_row(
    mariadb: MariadbSandbox, reader: Http, zookeeper: str, applied: tuple[str, Any]
) -> None:
    """Another transaction holds shard 1's checkpoint row and never ends (a process
    stopped inside its handler's transaction, or a handler's transaction left open after
    an error): the member's claim of shard 1 waits on that row lock for ever. Shard 0 is
    consumed meanwhile, and ``stop(timeout=2)`` returns in about 2 s with shard 0's last
    acked checkpoint saved (before: the claim held the store's only connection, so the
    final save, and the stop, waited for ever)."""
    dsn, pg = applied
    _workload(mariadb, random.Random(20), 40)
    store = SqlStore(lambda: psycopg.connect(dsn))
    blocker = psycopg.connect(dsn)
    consumer: Consumer | None = None
    try:
        store.create("cgl", 2, 1 << ROW_BITS)  # from the first record
        blocker.execute(
            "UPDATE headwater_consumer_shards SET version = version + 1 "
            "WHERE group_name = 'cgl' AND shard = 1"
        )  # and no commit: the row stays locked
        options = ConsumerOptions(
            task="src", group="cgl", readers=(reader.url,), tables=("cg.*",), shards=2,
            zookeeper=zookeeper, ddl=False, flush_interval=3600.0, flush_every=1_000_000,
        )  # fmt: skip
        handled: list[int] = []
        consumer = Consumer(options, lambda b: handled.extend(c.sequence for c in b.changes), store)
        consumer.start()
        wait_for(lambda: _lock_waiters(pg) == 1, 30, "the claim of shard 1 to wait on its row")
        wait_for(lambda: consumer is not None and consumer.owned() == [0], 30, "shard 0 to run")
        wait_for(lambda: handled and consumer.checkpoints()[0] > max(handled), 30, "shard 0")
        acked = consumer.checkpoints()[0]
        began = time.monotonic()
        stopper = threading.Thread(target=consumer.stop, args=(2.0,), daemon=True)
        stopper.start()
        stopper.join(30)
        took = time.monotonic() - began
        assert not stopper.is_alive() and took < 4.0, took
        consumer = None
        state = store.load("cgl")
        assert state is not None and state.next[0] >= acked
    finally:
        blocker.rollback()  # the waiting claim goes on now, and its thread ends
        blocker.close()
        if consumer is not None:
            consumer.stop(timeout=5.0)
        store.close()


def _lock_waiters(pg: Any) -> int:
    """Sessions of this database waiting for a row lock."""
    return int(
        pg.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]
    )
