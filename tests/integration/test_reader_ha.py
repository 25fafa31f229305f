"""Reader high availability (issue #19): three reader processes, a real ZooKeeper, a live
MariaDB under a random workload; the leader is SIGKILLed (and restarted) at random moments
and once SIGSTOPped past its session timeout. A consumer reading over HTTP through the
cluster sees every source transaction exactly once and in order, and the members' logs end
record-for-record identical."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from headwater.coordination.leadership import cluster_view, task_root
from headwater.coordination.zk import connect
from headwater.position import BinlogCoordinate
from headwater.reader.follow import FollowError, LeaderLink, same_record
from headwater.sandbox import MariadbSandbox
from headwater.store import AtSeq, ChangeLog
from tests.integration.test_reader_capture import oracle_transactions, wait_for
from tests.integration.zk_support import free_port, zookeeper  # noqa: F401

pytestmark = pytest.mark.integration

KILLS = 5


def _config(tmp: Path, name: str, port: int, server: MariadbSandbox, start: Any) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(
        f"""data_dir: {tmp / name}
server:
  listen: "127.0.0.1:{port}"
sources:
  - name: shop
    host: {server.host}
    port: {server.port}
    user: root
    server_id: {7400 + port % 1000}
    start: {{file: {start.file}, offset: {start.offset}}}
    filters: {{include: ['shop\\..*']}}
    heartbeat_period: 0.5
    state_interval: 0.1
"""
    )
    return path


class Member:
    def __init__(self, tmp: Path, name: str, server: MariadbSandbox, start: Any, zk: str):
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = _config(tmp, name, self.port, server, start)
        self.zk = zk
        self.log = open(tmp / f"{name}.log", "a")  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "headwater.cli.main", "reader", "run"]
        cmd += ["--config", str(self.config), "--zookeeper", self.zk]
        cmd += ["--member", self.name, "--advertise", self.url]
        self.proc = subprocess.Popen(cmd, stderr=self.log, stdout=self.log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()  # after the last process: a restart reopens nothing


class Consumer(threading.Thread):
    """Reads raw records from whichever member answers, from its own checkpoint (seq)."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(daemon=True)
        self.urls = urls
        self.gtids: list[str] = []
        self.next_seq = 1
        self.done = threading.Event()
        self.received_at: list[float] = []

    def run(self) -> None:
        i = 0
        while not self.done.is_set():
            link = LeaderLink(self.urls[i % len(self.urls)], "shop", timeout=3.0)
            try:
                for rec in link.records(self.next_seq, wait_ms=200):
                    assert rec.seq == self.next_seq
                    if rec.last_chunk:
                        self.gtids.append(rec.gtid)
                    self.next_seq += 1
            except FollowError:
                i += 1
                time.sleep(0.05)
            finally:
                link.close()


def _fresh_task(zk: Any) -> None:
    """Forget the task's cluster of an earlier test (the ZooKeeper server is the
    module's): its epochs and, above all, its saved resume state."""
    from kazoo.exceptions import NoNodeError

    with contextlib.suppress(NoNodeError):
        zk.delete(task_root("shop"), recursive=True)


def _leader(zk: Any) -> str | None:
    view = cluster_view(zk, "shop")
    return None if view["leader"] is None else str(view["leader"])


def _check_info_and_status(members: dict[str, Member], zk: Any, hosts: str, end: int) -> None:
    """``/v1/info`` of every member shows its role, the epoch and its lag behind the
    leader; ``headwater reader status --zookeeper`` shows the same cluster."""
    view = cluster_view(zk, "shop")
    leader, epoch = view["leader"], view["epoch"]
    assert leader in members and epoch == view["epochs"][-1][0] >= KILLS + 2, view
    for name, m in members.items():
        with urllib.request.urlopen(f"{m.url}/v1/info", timeout=10) as resp:
            info = json.loads(resp.read())["tasks"]["shop"]
        cluster = info["status"]["cluster"]
        assert info["latest"]["seq"] == end, (name, info["latest"])
        assert cluster["epoch"] == epoch, (name, cluster)
        assert cluster["leader"] == members[leader].url, (name, cluster)
        assert cluster["role"] == ("leader" if name == leader else "follower"), (name, cluster)
        assert cluster["lag_records"] == 0, (name, cluster)
    cmd = [sys.executable, "-m", "headwater.cli.main", "reader", "status"]
    cmd += ["--config", str(members["a"].config), "--zookeeper", hosts]
    out = subprocess.run([*cmd, "--json"], capture_output=True, check=True, timeout=60).stdout
    shown = json.loads(out)["tasks"][0]["cluster"]
    assert (shown["leader"], shown["epoch"]) == (leader, epoch), shown
    assert {n: d["role"] for n, d in shown["members"].items()} == {
        n: "leader" if n == leader else "follower" for n in members
    }
    assert {d["seq"] for n, d in shown["members"].items() if n != leader} == {end}
    text = subprocess.run(cmd, capture_output=True, check=True, timeout=60, text=True).stdout
    assert f"cluster: leader={leader} epoch={epoch}" in text, text
    for n in members:
        role = "leader" if n == leader else "follower"
        assert f"{n}: {role} seq=" in text and f"url={members[n].url}" in text, text


def test_three_readers_survive_leader_kills_and_a_pause(
    sandbox_factory: Any,
    zookeeper: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    rnd = random.Random(19)
    server = sandbox_factory(server_id=41)
    server.execute(
        "CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(40))"
    )
    start = BinlogCoordinate(*server.binlog_position())
    members = {n: Member(tmp_path, n, server, start, zookeeper) for n in ("a", "b", "c")}
    zk = connect(zookeeper)
    _fresh_task(zk)
    stop_load = threading.Event()

    def load() -> None:
        conn = server.connect("shop")
        n = 0
        with conn.cursor() as cur:
            while not stop_load.is_set():
                n += 1
                if rnd.random() < 0.3:
                    cur.execute("BEGIN")
                    for k in range(rnd.randint(2, 5)):
                        cur.execute("INSERT INTO t VALUES (%s, %s)", (n * 10 + k, "x" * k))
                    cur.execute("COMMIT")
                else:
                    cur.execute("INSERT INTO t VALUES (%s, 'one')", (n * 10,))
                time.sleep(rnd.random() * 0.01)
        conn.close()

    consumer = Consumer([m.url for m in members.values()])
    loader = threading.Thread(target=load, daemon=True)
    failed = True
    try:
        for m in members.values():
            m.start()
        wait_for(lambda: _leader(zk) is not None, 60, "a leader")
        consumer.start()
        loader.start()
        for round_no in range(KILLS + 1):
            time.sleep(rnd.uniform(1.0, 3.0))
            name = _leader(zk)
            assert name is not None
            victim = members[name]
            assert victim.proc is not None
            if round_no == 2:  # paused past its session timeout, then resumed
                os.kill(victim.proc.pid, signal.SIGSTOP)
                wait_for(lambda n=name: _leader(zk) not in (None, n), 30, "a new leader")
                time.sleep(1.0)
                os.kill(victim.proc.pid, signal.SIGCONT)
            else:
                victim.proc.kill()
                victim.proc.wait()
                wait_for(lambda n=name: _leader(zk) not in (None, n), 30, "a new leader")
                victim.start()
        stop_load.set()
        loader.join(30)
        target = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
        _fde, expected = oracle_transactions(server, start)
        want = [r.gtid for r in expected]  # only shop's transactions follow ``start``
        assert len(want) > 100 and want[-1] == target

        wait_for(lambda: len(consumer.gtids) >= len(want), 60, "the consumer to catch up")
        consumer.done.set()
        consumer.join(10)
        assert consumer.gtids == want  # every transaction, once, in order

        def members_caught_up() -> bool:
            docs = cluster_view(zk, "shop")["members"]
            seqs = {d.get("seq") for d in docs.values() if d.get("role") == "follower"}
            return len(docs) == 3 and seqs == {consumer.next_seq - 1}

        wait_for(members_caught_up, 30, "every follower to reach the leader's end")
        # the SIGKILLed leaders were deposed (their APIs refused), not waited out
        deposed = json.loads(zk.get(f"{task_root('shop')}/deposed")[0])
        assert deposed["epoch"] in {e for e, _first in cluster_view(zk, "shop")["epochs"]}
        _check_info_and_status(members, zk, zookeeper, consumer.next_seq - 1)
        failed = False
    finally:
        stop_load.set()
        for m in members.values():
            m.stop()
        zk.stop()
        zk.close()
        if failed:  # the members' logs and directories, kept for a post-mortem
            kept = Path(tempfile.mkdtemp(prefix="headwater-reader-ha-"))
            shutil.copytree(tmp_path, kept, dirs_exist_ok=True)
            print(f"member logs and data kept in {kept}", file=sys.stderr)
    logs = [ChangeLog.open(str(tmp_path / n / "shop" / "changes"), read_only=True) for n in "abc"]
    try:
        ends = {log.acked_seq for log in logs}
        assert ends == {consumer.next_seq - 1}, ends
        readers = [log.reader(AtSeq(1)) for log in logs]
        count = 0
        while (first := readers[0].next(0)) is not None:
            for r in readers[1:]:
                other = r.next(0)
                assert other is not None and same_record(first, other), first.seq
            count += 1
        assert count == consumer.next_seq - 1
        for r in readers:
            r.close()
    finally:
        for log in logs:
            log.close()


def _info(member: Member) -> dict[str, Any]:
    with urllib.request.urlopen(f"{member.url}/v1/info", timeout=10) as resp:
        return dict(json.loads(resp.read())["tasks"]["shop"])


def _end(member: Member) -> int:
    """The member's last seq (-1 while its API does not answer yet)."""
    try:
        return int((_info(member).get("latest") or {}).get("seq") or 0)
    except OSError:
        return -1


def _records(directory: Path) -> list[Any]:
    with ChangeLog.open(str(directory), read_only=True) as log, log.reader(AtSeq(1)) as r:
        out = []
        while (rec := r.next(0)) is not None:
            out.append(rec)
        return out


def test_a_deposed_leader_comes_back_as_a_follower_without_appending(
    sandbox_factory: Any,
    zookeeper: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The leader holds records its follower has not copied (the follower was paused),
    is SIGSTOPped past its session timeout, the follower takes over (re-reading that tail
    from the source under the same seqs) and captures more; SIGCONT: the old leader
    appends nothing of its own, rejoins as a follower of the new epoch, and its log ends
    record-for-record (so byte-for-byte) identical to the new leader's."""
    server = sandbox_factory(server_id=42)
    server.execute(
        "CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(40))"
    )
    start = BinlogCoordinate(*server.binlog_position())
    members = {n: Member(tmp_path, n, server, start, zookeeper) for n in ("a", "b")}
    zk = connect(zookeeper)
    _fresh_task(zk)

    def insert(first: int, count: int) -> None:
        server.execute(
            *(f"INSERT INTO shop.t VALUES ({i}, 'row {i}')" for i in range(first, first + count))
        )

    try:
        for m in members.values():
            m.start()
        wait_for(lambda: _leader(zk) is not None, 60, "a leader")
        old = members[str(_leader(zk))]
        new = next(m for m in members.values() if m is not old)
        insert(1, 10)
        wait_for(lambda: _end(new) == _end(old) == 10, 30, "the follower to copy 10 records")
        assert new.proc is not None and old.proc is not None
        os.kill(new.proc.pid, signal.SIGSTOP)  # a follower that copies nothing for a while
        time.sleep(0.5)  # its long poll (300 ms) at the leader ends empty
        insert(11, 20)
        wait_for(lambda: _end(old) == 30, 30, "the leader to store 20 more")
        os.kill(old.proc.pid, signal.SIGSTOP)
        os.kill(new.proc.pid, signal.SIGCONT)
        tail = _records(tmp_path / old.name / "shop" / "changes")
        assert len(tail) == 30
        wait_for(lambda: _leader(zk) == new.name, 30, "the follower to take over")
        insert(31, 15)
        wait_for(lambda: _end(new) == 45, 30, "the new leader to capture")
        epochs = cluster_view(zk, "shop")["epochs"]
        assert len(epochs) == 2 and epochs[-1][1] == 11, epochs  # the tail was not copied

        os.kill(old.proc.pid, signal.SIGCONT)
        wait_for(
            lambda: _info(old)["status"]["cluster"].get("role") == "follower" and _end(old) == 45,
            30,
            "the old leader to rejoin and catch up",
        )
        insert(46, 5)
        wait_for(lambda: _end(old) == _end(new) == 50, 30, "both to reach 50")
        view = cluster_view(zk, "shop")
        assert view["leader"] == new.name and view["epochs"] == epochs  # no new epoch
        cluster = _info(old)["status"]["cluster"]
        assert (cluster["role"], cluster["epoch"], cluster["leader"]) == (
            "follower",
            epochs[-1][0],
            new.url,
        )
        said = (tmp_path / f"{old.name}.log").read_text()
        assert "no longer leader (epoch 1)" in said and "appends resume" not in said
    finally:
        for m in members.values():
            m.stop()
        zk.stop()
        zk.close()
    mine = _records(tmp_path / old.name / "shop" / "changes")
    theirs = _records(tmp_path / new.name / "shop" / "changes")
    assert [r.seq for r in mine] == list(range(1, 51))
    assert all(same_record(a, b) for a, b in zip(mine, theirs, strict=True))
    # the tail it held when paused is what the new leader re-read from the source
    assert all(same_record(a, b) for a, b in zip(tail, mine[:30], strict=True))
    ids = [int(r.gtid.rsplit("-", 1)[1]) for r in mine]
    assert ids == sorted(set(ids))  # each source transaction once, in order


def test_the_spark_source_follows_a_failover(
    sandbox_factory: Any,
    zookeeper: str,  # noqa: F811
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading through ``server=zookeeper://...``, a batch in flight when its reader (the
    leader) is SIGKILLed goes on at the other member with the same seqs; after the
    failover a Spark read over ``server=<dead URL>,<live URL>`` gets every change."""
    from headwater.spark import register
    from headwater.spark.logaccess import HttpLog
    from headwater.spark.offsets import parse_options

    monkeypatch.setattr("headwater.spark.logaccess.FETCH_RECORDS", 5)  # several fetches
    server = sandbox_factory(server_id=43)
    server.execute("CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY)")
    start = BinlogCoordinate(*server.binlog_position())
    a, b = (Member(tmp_path, n, server, start, zookeeper) for n in ("a", "b"))
    zk = connect(zookeeper)
    _fresh_task(zk)

    def insert(first: int, count: int) -> None:
        server.execute(*(f"INSERT INTO shop.t VALUES ({i})" for i in range(first, first + count)))

    try:
        a.start()  # the leader, and the first reader discovered (members sorted by name)
        wait_for(lambda: _leader(zk) == "a", 60, "a to lead")
        b.start()
        insert(1, 30)
        wait_for(lambda: _end(a) == _end(b) == 30, 30, "both members to hold 30 records")
        log = HttpLog(parse_options({"server": f"zookeeper://{zookeeper}", "task": "shop"}))
        assert log.url == a.url
        batch = log.records(1, 31)
        got = [next(batch) for _ in range(7)]
        assert a.proc is not None
        a.proc.kill()
        a.proc.wait()
        got += list(batch)
        assert log.url == b.url
        log.close()
        _fde, expected = oracle_transactions(server, start)
        assert [(r.seq, r.gtid) for r in got] == [(i + 1, r.gtid) for i, r in enumerate(expected)]

        wait_for(lambda: _leader(zk) == "b", 30, "b to take over")
        insert(31, 10)
        wait_for(lambda: _end(b) == 40, 30, "b to capture")
        register(spark)
        df = (
            spark.read.format("headwater")
            .option("server", f"{a.url},{b.url}")
            .option("task", "shop")
            .option("tables", "shop.t")
            .load()
        )
        rows = [r["after"] for r in df.orderBy("sequence").collect() if r["op"] == "insert"]
        assert [json.loads(r)["id"] for r in rows] == list(range(1, 41))
    finally:
        for m in (a, b):
            m.stop()
        zk.stop()
        zk.close()
