"""API load: a reader's capture rate while clients hammer its HTTP API, against no clients.

Starts a sandbox MariaDB (binlog on) and ``headwater reader run`` as a subprocess with its
HTTP API (the defaults: ``max_connections`` 64, 2 fetch workers) on a fixed port. The
capture rate is the reader's own: how fast it stores a backlog of ``--txns`` single-row
transactions committed on the source while it was stopped (the source only serves the
binlog dump then, so its write speed does not count). In the same run, ``--rounds`` pairs
of rounds (3; ``--quick`` 2), each round restarting the reader over a fresh backlog, the
medians compared (the machine is shared: one round swings):

1. ``baseline``: no API clients;
2. ``load``: ``--clients`` (default 20) clients fetch continuously (JSON, decoded rows,
   ``max_rows`` 1000, ``timeout_ms`` 200; from the earliest record again once they reach
   the end, so they always decode) over keep-alive connections, and ``--idle`` (default
   300) idle connections are opened and held.

The reader reaches the source through a gate (a TCP proxy in this process, used in both
rounds) that holds its connections until the round opens it: after the restart once its
API answers (baseline), or once the clients are all connected (load), so the load is
there from the first captured transaction. A round's rate is the growth of the stored
seq (``state.json``) from the first transaction stored after the gate opened until the
whole backlog is stored, over that time. The clients run in their own process at a lower
priority (``nice`` 10): on a real deployment they are on other machines, and here they
share the reader's two cores; their own parsing is C (orjson).

Prints per round the capture rate, the fetch latency p50/p99 and count of the load round,
the peak RSS (VmHWM) of the reader process and of its fetch workers. Last line:
``capture_under_api_load=<median load rate / median baseline rate>`` (target >= 0.8).
``--quick``: backlogs of 100 000 transactions, 2 pairs of rounds (about three minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import multiprocessing
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from headwater.sandbox import MariadbSandbox, SandboxOptions, free_port
from headwater.store import ReaderState


def _stored_seq(task_dir: Path) -> int:
    """The seq the reader has stored and acknowledged (its ``state.json``)."""
    deadline = time.monotonic() + 30
    while True:
        state = ReaderState.load(str(task_dir / "state.json"))
        if state is not None:
            return state.seq
        if time.monotonic() > deadline:
            raise SystemExit(f"the reader wrote no state in {task_dir}")
        time.sleep(0.05)


def _hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with open(task / "children") as f:
            out += [int(p) for p in f.read().split()]
    return out


# --- the client process ---------------------------------------------------------------------


def _client_process(url: str, clients: int, idle: int, stop: Any, ready: Any, out: Any) -> None:
    os.nice(10)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    host, port = url.removeprefix("http://").rsplit(":", 1)
    latencies: list[float] = []
    refused = [0]
    lock = threading.Lock()
    serving = threading.Event()

    def post(conn: http.client.HTTPConnection, path: str, body: Any) -> tuple[int, Any]:
        conn.request("POST", path, orjson.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, orjson.loads(data)

    def fetcher() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        cp: str | None = None
        mine: list[float] = []
        while not stop.is_set():
            try:
                if cp is None:
                    status, doc = post(conn, "/v1/subscribe", {"task": "src", "start": "earliest"})
                    if status != 200:
                        raise OSError(f"subscribe {status}")
                    cp = doc["checkpoint"]
                started = time.monotonic()
                status, doc = post(
                    conn, "/v1/fetch", {"checkpoint": cp, "max_rows": 1000, "timeout_ms": 200}
                )
                if status != 200:
                    raise OSError(f"fetch {status}")
                mine.append(time.monotonic() - started)
                serving.set()
                cp = doc["checkpoint"] if doc["rows"] else None  # at the end: from the start
            except (OSError, http.client.HTTPException, KeyError) as e:
                if not isinstance(e, ConnectionRefusedError) and serving.is_set():
                    print(f"fetch failed: {type(e).__name__}: {e}", file=sys.stderr)
                if serving.is_set():  # not the retries while the reader starts
                    with lock:
                        refused[0] += 1
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                time.sleep(0.05)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=fetcher) for _ in range(clients)]
    for t in threads:
        t.start()
    serving.wait()  # the reader answers, and fetchers hold their connections first
    print(f"{time.strftime('%H:%M:%S')} clients: the first fetch answered", file=sys.stderr)
    time.sleep(0.2)
    held = []
    for _ in range(idle):
        try:
            held.append(socket.create_connection((host, int(port)), timeout=5))
        except OSError:
            refused[0] += 1
    ready.set()
    print(
        f"{time.strftime('%H:%M:%S')} clients: {clients} fetching, {len(held)} idle "
        "connections held",
        file=sys.stderr,
    )
    stop.wait()
    for t in threads:
        t.join(60)
    for s in held:
        s.close()
    out.put((latencies, refused[0]))


# --- the run ----------------------------------------------------------------------------------


def _backlog(server: MariadbSandbox, first: int, n: int) -> None:
    """Commit ``n`` single-row transactions, four connections in parallel."""

    def write(lo: int, hi: int) -> None:
        conn = server.connect("bench")
        with conn.cursor() as cur:
            for i in range(lo, hi):
                cur.execute("INSERT INTO t VALUES (%s, %s, %s, %s)", (i, i * 7, f"row {i}", i / 3))
        conn.close()

    bounds = [first + n * k // 4 for k in range(5)]
    threads = [threading.Thread(target=write, args=bounds[k : k + 2]) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


class Gate:
    """A TCP proxy to the source that holds every connection until :meth:`open`: the
    reader restarts, its API comes up, and its capture starts only when the round says
    so (once the clients are all connected). Bytes are copied by two threads per
    connection (recv/sendall release the GIL; a few tens of MB per round)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.opened = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def open(self) -> float:
        self.opened.set()
        return time.monotonic()

    def close(self) -> None:
        self.opened.clear()

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self.opened.wait()
        upstream = socket.create_connection(self.target)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        buf = bytearray(1 << 20)
        try:
            while n := src.recv_into(buf):
                dst.sendall(memoryview(buf)[:n])
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


class Reader:
    """``headwater reader run`` as a subprocess; restartable on the same port."""

    def __init__(self, tmp: Path, server: MariadbSandbox, gate: Gate, port: int) -> None:
        file, offset = server.binlog_position()
        self.config = tmp / "reader.yaml"
        self.config.write_text(
            f"data_dir: {tmp / 'data'}\nserver:\n  listen: '127.0.0.1:{port}'\nsources:\n"
            f"  - name: src\n    host: 127.0.0.1\n    port: {gate.port}\n"
            "    user: root\n    server_id: 9301\n    state_interval: 0.1\n"
            "    store: {segment_bytes: 4MiB}\n"
            f"    start: {{file: {file}, offset: {offset}}}\n"
        )
        self.log = tmp / "reader.log"
        self.task_dir = tmp / "data" / "src"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> float:
        cfg = str(self.config)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "headwater.cli.main", "reader", "run", "--config", cfg],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.started = time.monotonic()
        return self.started

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)

    def catch_up(self, target: int, gate_opened: float) -> tuple[float, int]:
        """Wait until ``target`` is stored; the rate from the first stored transaction
        after the gate opened (connecting and probing the source are not counted)."""
        seq0 = _stored_seq(self.task_dir)
        begin: tuple[float, int] | None = None
        while True:
            now, seq = time.monotonic(), _stored_seq(self.task_dir)
            if begin is None and seq > seq0 and now >= gate_opened:
                begin = (now, seq)
            if seq >= target:
                if begin is None or seq == begin[1]:
                    raise SystemExit("the backlog was stored in one step: give a larger --txns")
                return (seq - begin[1]) / (now - begin[0]), seq - begin[1]
            time.sleep(0.01)


def _wait_api(url: str) -> None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection(host, int(port), timeout=5)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the reader's API did not come up")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 100 000-transaction backlog")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--idle", type=int, default=300)
    parser.add_argument("--txns", type=int, default=None, help="backlog per round")
    parser.add_argument("--rounds", type=int, default=None, help="pairs of rounds (median)")
    args = parser.parse_args()
    # SIGTERM (a timeout) unwinds like Ctrl-C, so the servers started below are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    txns = args.txns or (100_000 if args.quick else 300_000)
    rounds = args.rounds or (2 if args.quick else 3)

    with tempfile.TemporaryDirectory(prefix="hw-api-load-") as tmp_name:
        tmp = Path(tmp_name)
        server = MariadbSandbox(SandboxOptions()).start()
        reader: Reader | None = None
        clients: Any = None
        try:
            server.execute(
                "CREATE DATABASE bench",
                "CREATE TABLE bench.t (id BIGINT PRIMARY KEY, a BIGINT, b VARCHAR(64), c DOUBLE)",
            )
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            gate = Gate((server.host, server.port))
            reader = Reader(tmp, server, gate, port)
            _backlog(server, 0, 20_000)  # something to fetch from the first round on
            reader.start()
            reader.catch_up(20_000, gate.open())
            stored = 20_000

            ctx = multiprocessing.get_context("spawn")
            baselines: list[float] = []
            loads: list[float] = []
            latencies: list[float] = []
            refused = 0
            reader_kib = 0
            workers_kib: list[int] = []
            for r in range(1, rounds + 1):
                # no clients
                reader.stop()
                gate.close()
                _backlog(server, stored, txns)
                stored += txns
                reader.start()
                _wait_api(url)
                rate, n = reader.catch_up(stored, gate.open())
                baselines.append(rate)
                print(f"round {r} baseline (no clients): capture {rate:,.0f} txn/s ({n:,})")

                # the reader restarts, the clients connect, then capture may start
                reader.stop()
                gate.close()
                _backlog(server, stored, txns)
                stored += txns
                stop_clients, ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
                clients = ctx.Process(
                    target=_client_process,
                    args=(url, args.clients, args.idle, stop_clients, ready, out),
                )
                clients.start()
                reader.start()
                if not ready.wait(120):
                    raise SystemExit("the clients did not get going")
                rate, n = reader.catch_up(stored, gate.open())
                loads.append(rate)
                print(
                    f"round {r} load ({args.clients} fetching, {args.idle} idle connections): "
                    f"capture {rate:,.0f} txn/s ({n:,})"
                )
                assert reader.proc is not None
                reader_kib = max(reader_kib, _hwm_kib(reader.proc.pid))
                workers_kib = [_hwm_kib(p) for p in _children(reader.proc.pid)]
                stop_clients.set()
                lat, failed = out.get(timeout=120)
                clients.join(60)
                latencies += lat
                refused += failed
            latencies.sort()
            if latencies:
                p50 = statistics.median(latencies)
                p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
                print(
                    f"fetch latency p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
                    f"({len(latencies):,} fetches; {refused} refused or failed attempts)"
                )
            else:
                print(f"no fetch completed ({refused} refused or failed attempts)")
            print(
                f"peak RSS: reader {reader_kib / 1024:.0f} MiB; its child processes "
                + ", ".join(f"{k / 1024:.0f} MiB" for k in workers_kib)
            )
            baseline, loaded = statistics.median(baselines), statistics.median(loads)
            print(f"median capture: {baseline:,.0f} txn/s without clients, {loaded:,.0f} with")
            print(f"capture_under_api_load={loaded / baseline:.2f}")
        finally:
            if clients is not None and clients.is_alive():
                clients.terminate()
            if reader is not None:
                reader.stop()
            server.stop()


if __name__ == "__main__":
    main()
