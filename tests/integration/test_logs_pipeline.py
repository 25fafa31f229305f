"""A generated log4j-style log through ``headwater pipeline run`` into MariaDB and Parquet.

The generator writes requests (key=value), errors with multi-line stack traces, a line
no group takes, a request whose ``ms`` is not a number (cast failure) and heartbeats,
rotates the file by rename in the middle, and records what each entry is. The pipeline is
SIGKILLed while it works and restarted from its checkpoint. Every entry must land exactly
once (``ums_id_`` is the key; row counts equal the generator's), in the right table, with
the values the generator wrote, in MariaDB and in the Parquet mirror. Heartbeats carry the
wall-clock time they were written, so their ``lag_ms`` is a real (small, non-negative) lag.

The deadlines are generous because a loaded 2-core machine makes Spark's first
micro-batch slow (it compiles the plan): that, not a lost write, is why an earlier run
saw no rows in MariaDB within 120 s (the first batch alone took over 60 s under load 18).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from headwater.sandbox import MariadbSandbox

pytestmark = pytest.mark.integration

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
#: for the pipeline's Spark start plus its first micro-batch, on a loaded machine
DEADLINE_S = 300

CONFIG = r"""
name: logs-it
checkpoint: {ck}
source:
  logs:
    name: app
    path: {logdir}
    files: "app.log*"
    database: {db}
    record_start: '^\d{{4}}-\d\d-\d\d '
    idle_ms: 500
    chunk_bytes: 4096
    heartbeat:
      regex: 'HEARTBEAT sent=(?P<ts>\S+ \S+)'
      format: 'yyyy-MM-dd HH:mm:ss,SSS'
    groups:
      - name: req
        table: requests
        columns: {{at: timestamp, level: string, path: string, ms: int, user: string}}
        operators:
          - extract:
              regex: '^(?P<time>\S+ \S+) (?P<level>[A-Z]+) +\[(?P<thread>[^\]]*)\] (?P<msg>.*)$'
          - filter: {{field: msg, regex: '^request '}}
          - kv: {{field: msg, keys: [path, ms, user]}}
          - timestamp: {{field: time, format: 'yyyy-MM-dd HH:mm:ss,SSS', into: at}}
      - name: err
        table: errors
        columns: {{at: timestamp, exception: string, message: string, trace: string}}
        operators:
          - extract:
              regex: '^(?P<time>\S+ \S+) ERROR +\[[^\]]*\] (?P<exception>[\w.]+):
                (?P<rest>(?s:.*))'
          - split: {{field: rest, separator: "\n", into: [message, trace]}}
          - trim: [trace]
          - timestamp: {{field: time, format: 'yyyy-MM-dd HH:mm:ss,SSS', into: at}}
sinks:
  - type: mysql
    host: {host}
    port: {port}
    user: root
    create_tables: true
  - type: parquet_mirror
    path: {parquet}
"""


class Generator:
    """Writes entries and remembers ``(file ordinal, offset) -> (table, values)``."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.n = 0
        self.expected: list[tuple[str, dict[str, Any]]] = []
        self.f = (directory / "app.log").open("ab")

    def _ts(self) -> tuple[str, dt.datetime]:
        t = T0 + dt.timedelta(milliseconds=1234 * self.n)
        return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}", t

    def entry(self) -> None:
        self.n += 1
        text, t = self._ts()
        kind = self.n % 7
        if kind in (0, 1, 2):
            n = self.n
            line = f"{text} INFO  [http-{n % 3}] request path=/p/{n} ms={n * 3} user=u{n}"
            values = {"at": t, "level": "INFO", "path": f"/p/{n}", "ms": n * 3, "user": f"u{n}"}
            self.expected.append(("requests", values))
        elif kind == 3:
            trace = "\n".join(
                f"\tat com.example.C{i}.m(C{i}.java:{i})" for i in range(self.n % 4 + 1)
            )
            exc = "java.lang.IllegalStateException"
            line = f"{text} ERROR [w] {exc}: bad {self.n}\n{trace}"
            values = {"at": t, "exception": exc, "message": f"bad {self.n}", "trace": trace.strip()}
            self.expected.append(("errors", values))
        elif kind == 4:
            line = f"{text} WARN  [main] cache nearly full {self.n}"
            self.expected.append(("unknown", {"raw": line, "reason": "no group matched"}))
        elif kind == 5:
            line = f"{text} INFO  [http-1] request path=/x ms=slow{self.n} user=v"
            reason = "group req, operator columns: field ms is not a int"
            self.expected.append(("unknown", {"raw": line, "reason": reason}))
        else:  # written now: lag_ms is then the real lag
            now = dt.datetime.now(dt.UTC)
            now = now.replace(microsecond=now.microsecond // 1000 * 1000)
            sent = now.strftime("%Y-%m-%d %H:%M:%S,") + f"{now.microsecond // 1000:03d}"
            line = f"{text} INFO  [hb] HEARTBEAT sent={sent}"
            self.expected.append(("heartbeat", {"sent_ts": now}))
        self.f.write(line.encode() + b"\n")
        self.f.flush()

    def rotate(self) -> None:
        self.f.close()
        os.rename(self.dir / "app.log", self.dir / "app.log.1")
        self.f = (self.dir / "app.log").open("ab")


def _run(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "headwater.cli.main",
                "pipeline",
                "run",
                "--config",
                str(config),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def _counts(target: MariadbSandbox, db: str) -> dict[str, int]:
    out = {}
    for table in ("requests", "errors", "unknown", "heartbeat"):
        try:
            out[table] = int(target.query(f"SELECT COUNT(*) FROM `{db}`.`{table}`")[0][0])
        except Exception:  # not created yet
            out[table] = 0
    return out


# two pipeline processes, each a JVM start plus a first micro-batch that compiles the plan:
# about a minute on a quiet machine, several at load 15-20 on 2 cores
@pytest.mark.timeout(900)
def test_log_lines_land_exactly_once_through_kill_and_rotation(
    tmp_path: Path, mariadb_target: MariadbSandbox
) -> None:
    db = f"logs_{os.getpid()}"
    logdir = tmp_path / "logs"
    logdir.mkdir()
    config = tmp_path / "pipeline.yaml"
    config.write_text(CONFIG.format(ck=tmp_path / "ck", logdir=logdir, db=db,
                                    host=mariadb_target.host, port=mariadb_target.port,
                                    parquet=tmp_path / "parquet"))  # fmt: skip
    gen = Generator(logdir)
    stderr = tmp_path / "pipeline.err"
    for _ in range(60):
        gen.entry()
    proc = _run(config, stderr)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while sum(_counts(mariadb_target, db).values()) == 0:
            assert proc.poll() is None, stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, stderr.read_text()[-3000:]
            time.sleep(0.5)
        for _ in range(60):  # more while it runs, then the rotation, then more
            gen.entry()
        gen.rotate()
        for _ in range(60):
            gen.entry()
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)  # in the middle of whatever it does
        proc.wait()
        killed_with = sum(_counts(mariadb_target, db).values())
        for _ in range(40):
            gen.entry()
        proc = _run(config, stderr)
        want: dict[str, int] = {}
        for table, _ in gen.expected:
            want[table] = want.get(table, 0) + 1
        assert killed_with < len(gen.expected)  # the restart has work to do
        deadline = time.monotonic() + DEADLINE_S
        while _counts(mariadb_target, db) != want:
            assert proc.poll() is None, stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, (_counts(mariadb_target, db), want)
            time.sleep(0.5)
    finally:
        gen.f.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    _check_rows(mariadb_target, db, gen)
    _check_parquet(tmp_path / "parquet", db, gen)


def _expected_by_table(gen: Generator) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for table, values in gen.expected:
        out.setdefault(table, []).append(values)
    return out


def _naive(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=None)


def _check_rows(target: MariadbSandbox, db: str, gen: Generator) -> None:
    want = _expected_by_table(gen)
    got = target.query(f"SELECT `at`, level, path, ms, user FROM `{db}`.requests ORDER BY ums_id_")
    assert [tuple(r) for r in got] == [
        (_naive(v["at"]), v["level"], v["path"], v["ms"], v["user"]) for v in want["requests"]
    ]
    got = target.query(
        f"SELECT `at`, exception, message, trace FROM `{db}`.errors ORDER BY ums_id_"
    )
    assert [tuple(r) for r in got] == [
        (_naive(v["at"]), v["exception"], v["message"], v["trace"]) for v in want["errors"]
    ]
    got = target.query(f"SELECT raw, reason FROM `{db}`.`unknown` ORDER BY ums_id_")
    assert [tuple(r) for r in got] == [(v["raw"], v["reason"]) for v in want["unknown"]]
    got = target.query(f"SELECT sent_ts FROM `{db}`.heartbeat ORDER BY ums_id_")
    assert [r[0] for r in got] == [_naive(v["sent_ts"]) for v in want["heartbeat"]]
    # read_ts - sent_ts, with read_ts when the driver cut the batch after the line was
    # written: non-negative, and under the test's whole duration
    got = target.query(
        f"SELECT lag_ms, TIMESTAMPDIFF(MICROSECOND, sent_ts, read_ts) DIV 1000"
        f" FROM `{db}`.heartbeat"
    )
    assert got and all(lag == diff and 0 <= lag < 2 * DEADLINE_S * 1000 for lag, diff in got)


def _check_parquet(root: Path, db: str, gen: Generator) -> None:
    want = _expected_by_table(gen)
    for table in ("requests", "errors", "unknown", "heartbeat"):
        files = [p for p in root.rglob("*.parquet") if f"{table}" in str(p.relative_to(root))]
        assert files, f"no parquet for {table} under {root}"
        rows = sorted(
            (r for f in files for r in pq.read_table(f).to_pylist()), key=lambda r: r["ums_id_"]
        )
        assert len(rows) == len(want[table]), table
        assert len({r["ums_id_"] for r in rows}) == len(rows)
        columns = [c for c in want[table][0] if c != "at" and c != "sent_ts"]
        assert [{c: r[c] for c in columns} for r in rows] == [
            {c: v[c] for c in columns} for v in want[table]
        ], table
        times = [r.get("at", r.get("sent_ts")) for r in rows]
        expected = [v.get("at", v.get("sent_ts")) for v in want[table]]
        if expected[0] is not None:
            assert [_utc(t) for t in times] == expected, table


def _utc(t: Any) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
