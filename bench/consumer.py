"""The consumer SDK against a bare fetch loop, and a group's recovery after a SIGKILL.

Throughput: a sandbox MariaDB logs ``rows`` inserts into ``bench.orders`` (the workload of
``bench/fetch.py``, one store record per transaction of 100 rows) into a change log that a
``HeadwaterServer`` serves from a child process. In this process, one after the other:

* the *bare loop*: ``/v1/subscribe`` (format ``raw``) from earliest, then ``/v1/fetch``
  until every record is read, each record decoded with ``decode_record`` (what a client
  that does everything itself must do) and its changes handed to :func:`touch`;
* the *SDK*: ``Consumer`` (1 process, 4 shards, client decoding, file checkpoints) whose
  handler does :func:`touch` on each batch, timed from ``start()`` until the handler has
  seen every row.

The same reader, format and rows on both sides, and the same work per row in the handler
(read ``sequence``, ``key`` and ``after``: the SDK builds its rows' dicts when they are
first read, so a handler that reads nothing would flatter it).

Steady state, measured fairly: each side first runs one untimed warm-up round over the
whole log (its imports, lazy ones included, such as the schema history module the SDK
loads when it decodes, its first connections, the reader's page cache), then the timed
rounds alternate ``--rounds`` times (default 15 with ``--quick``, 3 otherwise), the side
that goes first swapping every round so that neither always meets the other's leftovers.
Each round's rates, paired ratio and CPU seconds of this process (the server's are the
same for both) go to stderr. The last line is the median of the rounds' paired ratios
(each pair saw about the same load); before it come the best rate of each side and the
median CPU seconds per 100000 rows of each (CPU is what the load moves least).

Recovery: a standalone ZooKeeper (Debian's package, as the tests start it), two member
processes of one group (4 shards, the default session timeout, ``ZkStore``) whose handler
takes 50 ms per batch of 20 rows, so the log lasts; once the first member has handled a
batch of each of its shards it is SIGKILLed, and the time until the other member handles a
batch of one of those shards is printed. Last lines::

    sigkill_to_resume_s=<seconds>
    sdk_rows_per_s=<n>
    raw_fetch_rows_per_s=<n>
    sdk_cpu_s_per_100k=<seconds>
    raw_fetch_cpu_s_per_100k=<seconds>
    sdk_vs_raw_fetch_best=<best SDK rate / best bare-loop rate>
    sdk_vs_raw_fetch=<median of the rounds' paired ratios>

``--member URL ZK GROUP`` runs one member (used by the recovery part).
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from fetch import records, workload  # bench/fetch.py: the same workload and records
from headwater.changes import ChangeRow, decode_record
from headwater.client import Batch, Consumer, ConsumerOptions, FileStore, ZkStore
from headwater.client.transport import record_of
from headwater.sandbox import MariadbSandbox
from headwater.store import ChangeLog, Durability, StoreOptions

REPO = Path(__file__).resolve().parents[1]


def serve(directory: str, fde: Any, conn: Any) -> None:
    """Child process: serve the change log in ``directory`` until told to stop."""
    from headwater.server import ServerOptions, TaskHandle
    from headwater.server.app import HeadwaterServer

    log = ChangeLog.open(directory, StoreOptions(durability=Durability.NONE))
    tasks = {"bench": TaskHandle(log=log, fde=fde)}
    with HeadwaterServer(
        tasks, ServerOptions(max_rows=100_000, max_bytes=256 << 20)
    ).start() as api:
        host, port = api.address
        conn.send(f"http://{host}:{port}")
        conn.recv()
    log.close()


def touch(changes: Sequence[ChangeRow]) -> int:
    """The handler's work on either side: read each change's sequence, key and after
    image (what a handler that writes changes somewhere reads); the changes touched."""
    n = 0
    for c in changes:
        if c.sequence >= 0 and c.key is not None and c.after is not None:
            n += 1
    return n


def bare_loop(url: str, fde: Any, n_rows: int) -> float:
    """Rows/s of subscribe + fetch (raw) + decode_record with one connection, each
    record's changes handed to :func:`touch`."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    began = time.perf_counter()
    conn.request("POST", "/v1/subscribe", orjson.dumps({"task": "bench", "format": "raw"}))
    token = orjson.loads(conn.getresponse().read())["checkpoint"]
    rows = 0
    while rows < n_rows:
        body = {"checkpoint": token, "max_rows": 2000, "max_bytes": 8 << 20, "timeout_ms": 1000}
        conn.request("POST", "/v1/fetch", orjson.dumps(body))
        page = orjson.loads(conn.getresponse().read())
        for doc in page["records"]:
            rows += touch(decode_record(record_of(doc), source="bench", fde=fde))
        token = page["checkpoint"]
    elapsed = time.perf_counter() - began
    conn.close()
    assert rows == n_rows, rows
    return n_rows / elapsed


def sdk(url: str, n_rows: int, directory: str) -> float:
    """Rows/s delivered by the SDK (4 shards, one process) to a handler that does
    :func:`touch`."""
    seen = [0]
    lock = threading.Lock()
    done = threading.Event()

    def handle(batch: Batch) -> None:
        n = touch(batch.changes)
        with lock:
            seen[0] += n
            if seen[0] >= n_rows:
                done.set()

    options = ConsumerOptions(task="bench", group="sdk", readers=(url,), shards=4)
    began = time.perf_counter()
    consumer = Consumer(options, handle, FileStore(directory)).start()
    try:
        assert done.wait(600), f"the SDK delivered {seen[0]} of {n_rows} rows"
        elapsed = time.perf_counter() - began
    finally:
        consumer.stop()
    assert seen[0] == n_rows, seen[0]
    return n_rows / elapsed


def timed(run: Callable[[], float]) -> tuple[float, float]:
    """``run()``'s result and the CPU seconds this process spent in it."""
    cpu = time.process_time()
    result = run()
    return result, time.process_time() - cpu


def member(url: str, zk: str, group: str) -> int:
    """One group member: prints ``<time> <shard>`` per batch; runs until killed."""
    from headwater.coordination.zk import connect

    out = threading.Lock()  # one line per batch, whole: workers run in parallel

    def handle(batch: Batch) -> None:
        time.sleep(0.05)
        with out:
            print(f"batch {time.time():.3f} {batch.shard}", flush=True)

    options = ConsumerOptions(
        task="bench", group=group, readers=(url,), shards=4, batch_size=20, zookeeper=zk
    )
    client = connect(zk)
    Consumer(options, handle, ZkStore(client)).start()
    while True:
        time.sleep(1)


def recovery(url: str) -> float:
    """Seconds from the SIGKILL of a member to its shards being consumed again."""
    sys.path.insert(0, str(REPO))
    from tests.integration.zk_support import zookeeper_server

    with zookeeper_server() as zk:
        cmd = [sys.executable, __file__, "--member", url, zk, "recovery"]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        try:
            lines: list[list[tuple[float, int]]] = [[], []]

            def pump(i: int) -> None:
                try:
                    for line in procs[i].stdout:  # type: ignore[union-attr]
                        words = line.split()
                        if len(words) == 3 and words[0] == "batch":
                            lines[i].append((float(words[1]), int(words[2])))
                        else:
                            print(f"member {i}: {line.rstrip()}", file=sys.stderr)
                except ValueError:  # the pipe was closed at the end: nothing more to read
                    return

            for i in range(2):
                threading.Thread(target=pump, args=(i,), daemon=True).start()
            deadline = time.monotonic() + 60
            while len({s for _t, s in lines[0]}) < 2 or len({s for _t, s in lines[1]}) < 2:
                assert time.monotonic() < deadline, "the members did not share the shards"
                time.sleep(0.1)
            time.sleep(0.5)
            # the shards member 0 owns now: those it handled last (a member that started
            # first owned every shard for a while; the other took its share since)
            last: dict[int, tuple[float, int]] = {}
            for i in range(2):
                for t, s in list(lines[i]):
                    if s not in last or t > last[s][0]:
                        last[s] = (t, i)
            victim = {s for s, (_t, i) in last.items() if i == 0}
            assert victim, "member 0 owns no shard"
            procs[0].kill()
            killed = time.time()
            deadline = time.monotonic() + 60
            while True:
                resumed = [t for t, s in list(lines[1]) if s in victim and t > killed]
                if resumed:
                    return min(resumed) - killed
                assert time.monotonic() < deadline, "the killed member's shards never resumed"
                time.sleep(0.05)
        finally:
            for p in procs:
                p.kill()
                p.wait()
                if p.stdout is not None:
                    p.stdout.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (about a minute)")
    parser.add_argument("--rows", type=int, default=None, help="rows to insert (100000)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="timed rounds of each (15 quick, else 3)"
    )
    parser.add_argument("--member", nargs=3, metavar=("URL", "ZK", "GROUP"))
    args = parser.parse_args(argv)
    if args.member:
        return member(*args.member)
    n_rows = args.rows or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (15 if args.quick else 3)

    server = MariadbSandbox().start()
    try:
        file, start = workload(server, n_rows)
        fde, recs = records(server, file, start)
    finally:
        server.stop()
    print(f"logged {n_rows} rows in {len(recs)} transactions", file=sys.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        log = ChangeLog.open(f"{tmp}/log", StoreOptions(durability=Durability.NONE))
        for rec in recs:
            log.append_nowait(rec)
        log.flush()
        log.close()
        ctx = multiprocessing.get_context("spawn")
        here, there = ctx.Pipe()
        child = ctx.Process(target=serve, args=(f"{tmp}/log", fde, there))
        child.start()
        try:
            assert here.poll(60), "the server process did not start"
            url = here.recv()
            # one untimed round of each: imports and first-use costs out of the figures
            bare_loop(url, fde, n_rows)
            sdk(url, n_rows, f"{tmp}/checkpoints-warm-up")
            # alternated, paired per round: the machine is shared, its load changes
            raw = with_sdk = 0.0
            ratios: list[float] = []
            cpus: tuple[list[float], list[float]] = ([], [])
            for attempt in range(rounds):
                directory = f"{tmp}/checkpoints-{attempt}"
                sdk_first = attempt % 2 == 1
                if sdk_first:
                    sdk_now, cpu_sdk = timed(lambda: sdk(url, n_rows, directory))  # noqa: B023
                raw_now, cpu_raw = timed(lambda: bare_loop(url, fde, n_rows))
                if not sdk_first:
                    sdk_now, cpu_sdk = timed(lambda: sdk(url, n_rows, directory))  # noqa: B023
                raw, with_sdk = max(raw, raw_now), max(with_sdk, sdk_now)
                ratios.append(sdk_now / raw_now)
                cpus[0].append(cpu_sdk * 100_000 / n_rows)
                cpus[1].append(cpu_raw * 100_000 / n_rows)
                # this process's CPU seconds (the server runs in its own): what the SDK
                # costs beyond the bare loop whatever the machine's load
                print(f"round {attempt}: bare loop {raw_now:,.0f} rows/s ({cpu_raw:.2f} s "
                      f"CPU), SDK {sdk_now:,.0f} rows/s ({cpu_sdk:.2f} s CPU), ratio "
                      f"{sdk_now / raw_now:.2f}, load {os.getloadavg()[0]:.1f}",
                      file=sys.stderr)  # fmt: skip
            resume = recovery(url)
        finally:
            here.send("stop")
            child.join(10)
            if child.is_alive():
                child.kill()
                child.join()
    print(f"sigkill_to_resume_s={resume:.2f}")
    print(f"sdk_rows_per_s={with_sdk:.0f}")
    print(f"raw_fetch_rows_per_s={raw:.0f}")
    print(f"sdk_cpu_s_per_100k={statistics.median(cpus[0]):.2f}")
    print(f"raw_fetch_cpu_s_per_100k={statistics.median(cpus[1]):.2f}")
    print(f"sdk_vs_raw_fetch_best={with_sdk / raw:.2f}")
    print(f"sdk_vs_raw_fetch={statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
