"""Console load time: ``GET /console`` with 50 tasks and 50 pipelines (issue 23: < 1 s).

A :class:`HeadwaterServer` in this process serves ``--tasks`` change logs (each holding
``--records`` records, so every task has a retained range) with live-looking status dicts;
each task's ring buffer holds a full hour of samples (720: one per 5 s), so both charts
are drawn with their most points; ``--pipelines`` pipelines POST a status report each
(with snapshot progress for three tables) through ``/v1/pipelines``, as
``headwater.pipeline.status`` does. Then ``--rounds`` page loads over HTTP with the token
(a new connection each, as a browser's reload); the median is reported.

Last line: ``console_load_s=<median seconds of one GET /console>`` (target < 1).
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from headwater.position import Position
from headwater.server import ServerOptions, TaskHandle
from headwater.server.app import HeadwaterServer
from headwater.store import ChangeLog, Durability, Record, StoreOptions

TOKEN = "bench-console-token"


def _log(path: Path, records: int) -> ChangeLog:
    log = ChangeLog.open(str(path), StoreOptions(durability=Durability.NONE))
    now_us = time.time_ns() // 1000
    for i in range(records):
        log.append(
            Record(
                Position(0, 1, 4 + i * 100),
                b"x" * 64,
                now_us - (records - i) * 1000,
                f"0-1-{i + 1}",
                (("shop.orders", 1),),
            )
        )
    log.flush()
    return log


def _status(i: int) -> dict[str, Any]:
    return {
        "state": "running",
        "error": None,
        "position": f"0:1:{1000 + i}:0",
        "gtid_set": f"0-1-{500 + i},1-2-{i}",
        "change_id": 0,
        "lag_s": 0.25 + i / 100,
        "events_in": 1000 * i,
        "transactions_stored": 100 * i,
    }


def _report(i: int) -> bytes:
    return orjson.dumps(
        {
            "version": 1,
            "name": f"pipeline-{i:02d}",
            "state": "running" if i % 7 else "failed",
            "source": {"server": "http://127.0.0.1", "task": f"task-{i:02d}", "path": None},
            "interval_s": 10.0,
            "updated_at": time.time(),
            "batches": 40 + i,
            "rows_in_total": 100_000 + i,
            "rows_out_total": 99_000 + i,
            "rows_per_s": 2500.0,
            "batch_seconds": 0.4,
            "lag_seconds": 1.5,
            "lag_warning_s": 60.0,
            "errors_total": 0 if i % 7 else 1,
            "last_error": None if i % 7 else "pipeline failed: sink unreachable",
            "snapshot": {
                f"shop.t{t}": {
                    "chunks_done": 3,
                    "chunks_total": 8,
                    "rows": 150_000,
                    "rows_per_s": 50_000.0,
                    "eta_s": 5.0,
                }
                for t in range(3)
            },
        }
    )


def _request(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--pipelines", type=int, default=50)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="hw-bench-console-") as tmp:
        logs = [_log(Path(tmp) / f"t{i}", args.records) for i in range(args.tasks)]
        tasks = {
            f"task-{i:02d}": TaskHandle(log=log, status=_status(i)) for i, log in enumerate(logs)
        }
        server = HeadwaterServer(tasks, ServerOptions(token=TOKEN, fetch_workers=0))
        now = time.time()
        for k in range(720, 0, -1):  # an hour of samples, one per 5 s
            server.console.sample(now - k * 5)
        server.start()
        try:
            for i in range(args.pipelines):
                status, body = _request(server.url, "POST", "/v1/pipelines", _report(i))
                assert status == 200, body
            times = []
            size = 0
            for _ in range(rounds):
                t0 = time.perf_counter()
                status, page = _request(server.url, "GET", "/console")
                times.append(time.perf_counter() - t0)
                assert status == 200, page[:200]
                size = len(page)
            assert page.count(b'<tr class="task') == args.tasks
            assert page.count(b'<tr class="pipeline') == args.pipelines
        finally:
            server.close()
            for log in logs:
                log.close()
    print(f"tasks={args.tasks} pipelines={args.pipelines} page_bytes={size}")
    print("load_s=" + " ".join(f"{t:.3f}" for t in times))
    print(f"console_load_s={statistics.median(times):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
