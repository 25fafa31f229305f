"""Reader failover (issue #19): three reader processes of one task on a real ZooKeeper and a
live MariaDB; the leader is SIGKILLed and the time until a consumer, reading raw records
over HTTP from whichever member answers, receives the first transaction committed after
the kill is measured. The killed member is restarted (it rejoins as a follower) before the
next round. Then the follower lag (records behind the leader, as each member publishes it)
is sampled under a steady load of single-row transactions at ``--rate`` (5,000/s).

Default timeouts: the ZooKeeper session is 4 s (coordination/zk.py). A SIGKILLed leader's
API refuses connections at once: a follower deposes it after 0.5 s of refusals (no wait
for its session to expire), and the new leader appends after the deposed leader's lease
(0.6 x 4 s) has run out; see docs/operations.md, "Why deposing is safe".

Usage: .venv/bin/python bench/failover.py [--rounds 10] [--rate 5000] [--quick]
Last line: ``failover_s=<p50 over the rounds>``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.zk_support import zookeeper_server

from headwater.coordination.leadership import cluster_view
from headwater.coordination.zk import connect
from headwater.reader.follow import FollowError, LeaderLink
from headwater.sandbox import MariadbSandbox, free_port


class Member:
    def __init__(self, tmp: Path, name: str, server: MariadbSandbox, start: Any, zk: str):
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = tmp / f"{name}.yaml"
        self.config.write_text(
            f"""data_dir: {tmp / name}
server:
  listen: "127.0.0.1:{self.port}"
sources:
  - name: shop
    host: {server.host}
    port: {server.port}
    user: root
    server_id: {7400 + self.port % 1000}
    start: {{file: {start[0]}, offset: {start[1]}}}
    filters: {{include: ['shop\\..*']}}
"""
        )
        self.zk = zk
        self.log = open(tmp / f"{name}.log", "a")  # noqa: SIM115 - closed in stop()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "headwater.cli.main", "reader", "run"]
        cmd += ["--config", str(self.config), "--zookeeper", self.zk]
        cmd += ["--member", self.name, "--advertise", self.url]
        self.proc = subprocess.Popen(cmd, stderr=self.log, stdout=self.log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Consumer(threading.Thread):
    """Raw records from any member; remembers when each GTID's seq_no first arrived."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(daemon=True)
        self.urls = urls
        self.next_seq = 1
        self.arrived: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.done.is_set():
            link = LeaderLink(self.urls[i % len(self.urls)], "shop", timeout=3.0)
            try:
                for rec in link.records(self.next_seq, wait_ms=100):
                    if rec.last_chunk:
                        self.arrived.setdefault(int(rec.gtid.rsplit("-", 1)[1]), time.monotonic())
                    self.next_seq += 1
            except FollowError:
                i += 1
                time.sleep(0.02)
            finally:
                link.close()


def load(server: MariadbSandbox, rate: float, stop: threading.Event, first: int) -> None:
    """Single-row autocommit transactions at ``rate`` per second (as far as it keeps up)."""
    conn = server.connect("shop")
    n, t0 = first, time.monotonic()
    with conn.cursor() as cur:
        while not stop.is_set():
            n += 1
            cur.execute("INSERT INTO t VALUES (%s, 'x')", (n,))
            ahead = (n - first) / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    conn.close()


def gtid_seq(server: MariadbSandbox) -> int:
    pos = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
    return int(pos.rsplit("-", 1)[1]) if pos else 0


def wait_for(what: str, predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--rate", type=float, default=5000.0, help="transactions/s for the lag")
    ap.add_argument("--lag-seconds", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true", help="2 rounds, 3 s of lag sampling")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.lag_seconds = 2, 3.0
    tmp = Path(tempfile.mkdtemp(prefix="hw-failover-"))
    server = MariadbSandbox().start()
    try:
        server.execute(
            "CREATE DATABASE shop", "CREATE TABLE shop.t (id BIGINT PRIMARY KEY, v TEXT)"
        )
        start = server.binlog_position()
        with zookeeper_server() as hosts:
            members = {n: Member(tmp, n, server, start, hosts) for n in ("a", "b", "c")}
            zk = connect(hosts)
            stop = threading.Event()
            consumer = Consumer([m.url for m in members.values()])
            try:
                for m in members.values():
                    m.start()
                wait_for("a leader", lambda: cluster_view(zk, "shop")["leader"], 60)
                consumer.start()
                trickle = threading.Thread(target=load, args=(server, 200.0, stop, 0))
                trickle.start()
                times = []
                for rnd in range(args.rounds):
                    wait_for("3 members", lambda: len(cluster_view(zk, "shop")["members"]) == 3, 60)
                    time.sleep(1.0)
                    name = str(cluster_view(zk, "shop")["leader"])
                    victim = members[name]
                    assert victim.proc is not None
                    before = gtid_seq(server)
                    victim.proc.kill()
                    killed = time.monotonic()
                    victim.proc.wait()

                    def arrived(after: int = before) -> bool:
                        return any(s > after for s in list(consumer.arrived))

                    wait_for("a transaction after the kill", arrived, 60)
                    took = min(t for s, t in list(consumer.arrived.items()) if s > before) - killed
                    times.append(took)
                    print(
                        f"round {rnd + 1}: leader {name} killed, next transaction in {took:.2f} s"
                    )
                    victim.log = open(tmp / f"{name}.log", "a")  # noqa: SIM115
                    victim.start()
                stop.set()
                trickle.join()
                # follower lag at a steady rate
                stop = threading.Event()
                first = 10_000_000
                steady = threading.Thread(target=load, args=(server, args.rate, stop, first))
                wait_for("3 members", lambda: len(cluster_view(zk, "shop")["members"]) == 3, 60)

                def caught_up() -> bool:  # the last restarted member has copied the log
                    docs = cluster_view(zk, "shop")["members"].values()
                    return all(d.get("lag") == 0 for d in docs if d.get("role") == "follower")

                wait_for("the followers to catch up", caught_up, 60)
                t0, g0 = time.monotonic(), gtid_seq(server)
                steady.start()
                lags: list[int] = []
                while time.monotonic() - t0 < args.lag_seconds:
                    time.sleep(0.5)
                    for doc in cluster_view(zk, "shop")["members"].values():
                        if doc.get("role") == "follower" and doc.get("lag") is not None:
                            lags.append(int(doc["lag"]))
                stop.set()
                steady.join()
                achieved = (gtid_seq(server) - g0) / (time.monotonic() - t0)
                print(f"steady load: {achieved:.0f} transactions/s (asked {args.rate:.0f})")
                if lags:
                    lags.sort()
                    print(
                        f"follower_lag_records p50={lags[len(lags) // 2]} "
                        f"p95={lags[int(len(lags) * 0.95)]} max={lags[-1]} samples={len(lags)}"
                    )
            finally:
                stop.set()
                consumer.done.set()
                for m in members.values():
                    if m.proc is not None and m.proc.poll() is None:
                        os.kill(m.proc.pid, signal.SIGCONT)
                    m.stop()
                zk.stop()
                zk.close()
    finally:
        server.stop()
    print(f"failover rounds: {' '.join(f'{t:.2f}' for t in times)}")
    print(f"failover_s={statistics.median(times):.2f}")


if __name__ == "__main__":
    main()
