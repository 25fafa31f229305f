"""Latency under load: commit on the source to visible on the target, and restart time.

Issue #17's latency targets, measured on one running pipeline as a service runs it:

* a sandbox source MariaDB (binlog on) and a target MariaDB with MariaDB's durable
  default (``innodb_flush_log_at_trx_commit=1``; ``--relaxed-target``: 2);
* a reader task (in this process, as ``bench/pipeline.py`` runs it) storing ``bench.*``;
* the pipeline in a process of its own, ``headwater pipeline run`` (Spark ``local[2]``,
  MySQL sink, 2 shards, the settings of ``bench/pipeline.py``), warmed by a few thousand
  rows before anything is timed.

Phases, in this order:

1. ``steady``: ``--rate`` (1,000) rows/s for ``--seconds`` (30; quick 10): 50 INSERT
   transactions a second of ``rate / 50`` rows each, paced on the clock;
2. ``high``: ``--high-rate`` (10,000) rows/s for ``--high-seconds`` (30; quick 8), the
   same way (200 rows a commit);
3. ``big``: one INSERT of ``--big-rows`` (100,000) rows in one transaction;
4. ``restart``: the pipeline process is killed (SIGKILL, a crash) while rows keep coming
   at 100 rows/s; then a new one is started and timed from its ``Popen`` to the first row
   committed after the kill becoming visible on the target (its first commit: the sink
   commits a batch's rows and its checkpoint row in one transaction). ``--restarts``
   times (3; quick 1); the worst counts. Also printed: the CPU-seconds the new process
   tree (driver, JVM, Python workers) spent until then, which the machine's load moves
   less than the wall time.

``--paired`` then measures the baseline in the same run: the pipeline restarted with
``driverApplyMaxRows: 0`` (every micro-batch a Spark job, as before the driver path of
:mod:`headwater.pipeline.direct`), warmed the same way, and the steady phase again.
``--source-option key=value`` passes more source options to the pipeline.

How times are taken. The workload runs in a process of its own (no GIL shared with the
reader) and takes a row's commit time with ``time.time()`` right after its COMMIT
returns (the commit happened before: the latency is under-stated by at most that round
trip, about 1 ms). Visibility is detected by polling the target from another process of
its own: ``SELECT id FROM t WHERE id > low`` (``low``: the highest id below which all
ids were seen; shards commit independently, so ids arrive out of order) every
``POLL_S`` (5 ms) after the previous answer; a row's visible time is ``time.time()``
when the first answer holding it came back. Both processes read the same clock. The
method's own error is the poll period plus one query, printed as ``poll gap`` (mean and
largest gap between two answers): 6-8 ms on average at load 10, far below the 50 ms the
targets need; on a machine at load 14-19 the poller itself waits for a core (mean
15-19 ms, single gaps up to 1 s), so read the gaps with the figures. The big
transaction is detected with ``COUNT(*)`` over its id range every 20 ms (its query,
over 100,000 keys, takes a few ms itself; the gap is printed too).

Printed: each figure with its target and the load average; each ratio figure / target;
last line ``latency_vs_target=<the largest of those ratios>``: at most 1.0 means every
target is met (steady p50 <= 0.25 s and p99 <= 0.5 s, high p99 < 1 s, big <= 3 s,
restart <= 15 s).
"""

from __future__ import annotations

import argparse
import multiprocessing
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

import pymysql

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from headwater.config import FilterConfig, HostConfig, SourceConfig, StartConfig
from headwater.position import BinlogCoordinate
from headwater.reader.task import ReaderTask
from headwater.sandbox import MariadbSandbox, SandboxOptions
from idle import CLK_TCK, command, tree_ticks  # bench/idle.py: CPU of a process tree

TABLE = (
    "CREATE TABLE IF NOT EXISTS {db}.t (id BIGINT PRIMARY KEY, a INT NOT NULL,"
    " b VARCHAR(64) NULL, ts BIGINT NOT NULL)"
)
#: Polling period of the visibility poller (after each answer).
POLL_S = 0.005
#: Commits per second of the paced workloads.
TICKS_PER_S = 50

#: (figure, target seconds) in the order printed.
TARGETS = {
    "steady_p50": 0.25,
    "steady_p99": 0.5,
    "high_p99": 1.0,
    "big": 3.0,
    "restart": 15.0,
}


def _connect(port: int, database: str | None) -> Any:
    return pymysql.connect(
        host="127.0.0.1", port=port, user="root", password="", database=database,
        autocommit=True, connect_timeout=5,
    )  # fmt: skip


# --- processes of their own: the workload and the poller ----------------------------------


def paced_workload(port: int, rate: int, seconds: float, first_id: int, out: Any) -> None:
    """``rate`` rows/s for ``seconds``, ids from ``first_id``; sends ``[(first, n,
    committed)]`` (one per commit) through the pipe ``out``."""
    conn = _connect(port, "bench")
    per_tick = max(1, rate // TICKS_PER_S)
    commits: list[tuple[int, int, float]] = []
    next_id = first_id
    t0 = time.monotonic()
    with conn.cursor() as cur:
        while time.monotonic() - t0 < seconds:
            ids = range(next_id, next_id + per_tick)
            cur.execute("INSERT INTO t VALUES " + ",".join(f"({i}, 0, NULL, 0)" for i in ids))
            commits.append((next_id, per_tick, time.time()))  # autocommit: COMMIT returned
            next_id += per_tick
            time.sleep(max(0.0, t0 + (next_id - first_id) / rate - time.monotonic()))
    conn.close()
    out.send(commits)
    out.close()


def poller(port: int, first_id: int, timeout: float, expected_in: Any, out: Any) -> None:
    """Records when each id from ``first_id`` on becomes visible on the target, until the
    count that ``expected_in`` sends (the workload's rows) are all visible or ``timeout``;
    then sends ``(visible {id: time}, gaps between answers)``."""
    conn = _connect(port, "bench_hw")
    visible: dict[int, float] = {}
    gaps: list[float] = []
    low = first_id - 1
    expected: int | None = None
    deadline = time.monotonic() + timeout
    prev = time.time()
    with conn.cursor() as cur:
        while (expected is None or len(visible) < expected) and time.monotonic() < deadline:
            if expected is None and expected_in.poll():
                expected = expected_in.recv()
            try:
                cur.execute("SELECT id FROM t WHERE id > %s", (low,))
            except pymysql.err.ProgrammingError:  # the sink has not created the table yet
                time.sleep(0.1)
                continue
            now = time.time()
            gaps.append(now - prev)
            prev = now
            for (i,) in cur.fetchall():
                visible.setdefault(i, now)
            while low + 1 in visible:
                low += 1
            time.sleep(POLL_S)
    conn.close()
    out.send((visible, gaps))
    out.close()


def count_poller(port: int, first_id: int, n: int, timeout: float, out: Any) -> None:
    """Sends ``(time when all of [first_id, first_id + n) were visible or None, gaps)``."""
    conn = _connect(port, "bench_hw")
    gaps: list[float] = []
    seen: float | None = None
    deadline = time.monotonic() + timeout
    prev = time.time()
    with conn.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute(
                "SELECT COUNT(*) FROM t WHERE id BETWEEN %s AND %s", (first_id, first_id + n - 1)
            )
            now = time.time()
            gaps.append(now - prev)
            prev = now
            if cur.fetchone()[0] == n:
                seen = now
                break
            time.sleep(0.02)
    conn.close()
    out.send((seen, gaps))
    out.close()


_ctx = multiprocessing.get_context("spawn")


def _start(target: Any, *args: Any) -> tuple[Any, Any]:
    """Start ``target(*args, pipe)`` in a process of its own; returns (process, pipe)."""
    mine, theirs = _ctx.Pipe(duplex=False)
    proc = _ctx.Process(target=target, args=(*args, theirs), daemon=True)
    proc.start()
    theirs.close()
    return proc, mine


def _start_poller(port: int, first_id: int, timeout: float) -> tuple[Any, Any, Any]:
    """A :func:`poller` process; returns (process, result pipe, pipe to send the count)."""
    count_out, count_in = _ctx.Pipe(duplex=False)
    proc, pipe = _start(poller, port, first_id, timeout, count_out)
    return proc, pipe, count_in


def _result(proc: Any, pipe: Any, timeout: float) -> Any:
    if not pipe.poll(timeout):
        proc.kill()
        raise SystemExit(f"{proc.name}: no result in {timeout:.0f} s")
    value = pipe.recv()
    proc.join(10)
    return value


# --- the pipeline service -------------------------------------------------------------------


def pipeline_yaml(
    task_dir: Path, target_port: int, checkpoint: Path, extra: str, options: dict[str, str]
) -> str:
    given = "".join(f", {k}: '{v}'" for k, v in options.items())
    return (
        "name: latency\n"
        f"source: {{path: {task_dir}, partitions: 2,"
        f" options: {{maxBytesPerTrigger: '67108864'{given}}}}}\n"
        f"checkpoint: {checkpoint}\n"
        "progress: 1\n"
        "transforms:\n  - rename_database: {bench: bench_hw}\n"
        "sinks:\n"
        f"  - {{type: mysql, host: 127.0.0.1, port: {target_port}, user: root,"
        " create_tables: true, ddl: skip, shards: 2, batch_rows: 5000}\n" + extra
    )


class Pipeline:
    """``headwater pipeline run`` in a process of its own (its output in ``log``)."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        #: a command line to run the pipeline under (``--profile-restart``: py-spy)
        self.prefix: list[str] = []

    def start(self) -> float:
        """Start it; returns the ``time.time()`` of the start. Its output lines go to
        ``log`` with the seconds since the start in front."""
        self.started = time.time()
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "headwater.cli.main", "pipeline", "run",
             "--config", str(self.config), "--log-level", "info"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        threading.Thread(target=self._copy, args=(self.proc, self.started), daemon=True).start()
        return self.started

    def _copy(self, proc: subprocess.Popen[bytes], started: float) -> None:
        assert proc.stdout is not None
        with self.log.open("a") as out:
            out.write(f"--- pipeline started (pid {proc.pid})\n")
            for line in proc.stdout:
                out.write(f"{time.time() - started:8.3f} {line.decode(errors='replace')}")
                out.flush()

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise SystemExit(f"the pipeline ended ({self.proc.returncode}); see {self.log}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = None


# --- phases ---------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def paced(port_s: int, port_t: int, rate: int, seconds: float, first_id: int) -> list[float]:
    """Latencies (s) of ``rate`` rows/s for ``seconds``, sorted; prints the poll gaps."""
    poll_proc, poll_pipe, count = _start_poller(port_t, first_id, seconds + 120)
    work_proc, work_pipe = _start(paced_workload, port_s, rate, seconds, first_id)
    commits = _result(work_proc, work_pipe, seconds + 60)
    rows = sum(n for _f, n, _t in commits)
    count.send(rows)
    visible, gaps = _result(poll_proc, poll_pipe, 180)
    lat = []
    missing = 0
    for first, n, committed in commits:
        for i in range(first, first + n):
            if i in visible:
                lat.append(visible[i] - committed)
            else:
                missing += 1
    print(
        f"  {rows} rows in {len(commits)} commits"
        f" ({rows / seconds:,.0f} rows/s achieved), {missing} never visible;"
        f" poll gap mean {statistics.fmean(gaps) * 1000:.1f} ms,"
        f" max {max(gaps) * 1000:.1f} ms",
        file=sys.stderr,
    )
    if missing:
        raise SystemExit(f"{missing} rows never became visible")
    return sorted(lat)


def big(source: MariadbSandbox, port_t: int, rows: int, first_id: int) -> float:
    """Seconds from the commit of one ``rows``-row transaction to all its rows visible."""
    proc, pipe = _start(count_poller, port_t, first_id, rows, 300)
    conn = source.connect("bench")
    with conn.cursor() as cur:
        cur.execute(
            f"INSERT INTO t SELECT seq, 1, MD5(seq), 0 FROM seq_{first_id}_to_{first_id + rows - 1}"
        )
        committed = time.time()
    conn.close()
    seen, gaps = _result(proc, pipe, 320)
    if seen is None:
        raise SystemExit("the big transaction never became visible")
    print(
        f"  poll gap mean {statistics.fmean(gaps) * 1000:.1f} ms, max {max(gaps) * 1000:.1f} ms",
        file=sys.stderr,
    )
    return float(seen - committed)


def restart(
    pipeline: Pipeline, port_s: int, port_t: int, first_id: int, profile: Path | None
) -> float:
    """Kill the pipeline while rows come at 100 rows/s, start it again; seconds from the
    new process's start to the first row committed after the kill being visible. With
    ``profile``, the new process runs under ``py-spy record`` (idle stacks too), which
    writes its samples there once the first commit is seen."""
    pipeline.kill()
    pipeline.prefix = []
    if profile is not None:
        pipeline.prefix = [
            str(Path(sys.executable).parent / "py-spy"), "record", "--idle", "--format",
            "raw", "--rate", "50", "-o", str(profile), "--",
        ]  # fmt: skip
    rate, seconds = 100, 2.0
    work_proc, work_pipe = _start(paced_workload, port_s, rate, seconds, first_id)
    commits = _result(work_proc, work_pipe, seconds + 60)
    n = sum(c[1] for c in commits)
    proc, pipe, count = _start_poller(port_t, first_id, 120)
    count.send(1)  # the first row after the kill
    started = pipeline.start()
    visible, _gaps = _result(proc, pipe, 130)
    if not visible:
        raise SystemExit(f"the restarted pipeline committed nothing in 120 s; see {pipeline.log}")
    if pipeline.proc is not None:
        ticks = tree_ticks(pipeline.proc.pid)
        cpu = sum(ticks.values()) / CLK_TCK
        print(f"  restart: {cpu:.1f} CPU-s of the pipeline's process tree", file=sys.stderr)
        for pid, n in sorted(ticks.items()):
            if n >= CLK_TCK // 10:
                print(f"    pid {pid} {command(pid)}: {n / CLK_TCK:.1f} CPU-s", file=sys.stderr)
    if profile is not None and pipeline.proc is not None:
        pipeline.proc.send_signal(signal.SIGINT)  # py-spy writes its samples and ends
        time.sleep(5)
    # the rest of what was written while it was down, before the next phase
    proc, pipe, count = _start_poller(port_t, first_id, 120)
    count.send(n)
    _result(proc, pipe, 130)
    return float(min(visible.values()) - started)


def steady_baseline(
    args: Any, pipeline: Pipeline, config: Path, tmp: Path, port_t: int, port_s: int,
    seconds: float, extra: str,
) -> None:  # fmt: skip
    """``--paired``: the steady phase again with every micro-batch a Spark job, the same
    pipeline restarted with ``driverApplyMaxRows: 0`` and warmed as at the start."""
    options = {**dict(o.split("=", 1) for o in args.source_option), "driverApplyMaxRows": "0"}
    pipeline.kill()
    config.write_text(pipeline_yaml(tmp / "task", port_t, tmp / "checkpoint", extra, options))
    pipeline.prefix = []
    pipeline.start()
    print(f"baseline warm-up: 1,000 rows/s for {args.warm:.0f} s", file=sys.stderr)
    paced(port_s, port_t, 1000, args.warm, 300_000_000)
    print("baseline steady: every micro-batch a Spark job", file=sys.stderr)
    lat = paced(port_s, port_t, args.rate, seconds, 310_000_000)
    print(
        f"baseline (Spark jobs only) steady {args.rate:,} rows/s, {seconds:.0f} s:"
        f" p50 {pct(lat, 0.5):.3f} s, p90 {pct(lat, 0.9):.3f} s, p99 {pct(lat, 0.99):.3f} s,"
        f" max {lat[-1]:.3f} s; load {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=None, help="steady phase (30; quick 10)")
    ap.add_argument("--high-rate", type=int, default=10_000)
    ap.add_argument("--high-seconds", type=float, default=None, help="(30; quick 8)")
    ap.add_argument("--big-rows", type=int, default=100_000)
    ap.add_argument("--restarts", type=int, default=None, help="(3; quick 1)")
    ap.add_argument("--relaxed-target", action="store_true")
    ap.add_argument("--spark-conf", action="append", default=[], help="key=value, repeatable")
    ap.add_argument("--keep", action="store_true", help="print where the pipeline's log is")
    ap.add_argument(
        "--profile-restart", type=Path, default=None, help="py-spy samples of a restart here"
    )
    ap.add_argument("--warm", type=float, default=20.0, help="warm-up seconds at 1,000 rows/s")
    ap.add_argument(
        "--phases", default="steady,high,big,restart", help="comma-separated, in that order"
    )
    ap.add_argument("--source-option", action="append", default=[], help="key=value, repeatable")
    ap.add_argument(
        "--paired",
        action="store_true",
        help="then the steady phase again with every micro-batch a Spark job"
        " (driverApplyMaxRows=0), after a restart and a warm-up: the baseline of the same run",
    )
    args = ap.parse_args()
    seconds = args.seconds or (10.0 if args.quick else 30.0)
    high_seconds = args.high_seconds or (8.0 if args.quick else 30.0)
    restarts = args.restarts if args.restarts is not None else (1 if args.quick else 3)

    tmp = Path(tempfile.mkdtemp(prefix="hw-bench-latency-"))
    source = MariadbSandbox(SandboxOptions()).start()
    durability = () if args.relaxed_target else ("--innodb-flush-log-at-trx-commit=1",)
    target = MariadbSandbox(SandboxOptions(server_id=2, log_bin=False, extra=durability)).start()
    task: ReaderTask | None = None
    reader: threading.Thread | None = None
    extra = ""
    if args.spark_conf:
        extra = "spark:\n  conf:\n" + "".join(
            f"    {k}: '{v}'\n" for k, v in (c.split("=", 1) for c in args.spark_conf)
        )
    config = tmp / "latency.yaml"
    options = dict(o.split("=", 1) for o in args.source_option)
    config.write_text(pipeline_yaml(tmp / "task", target.port, tmp / "checkpoint", extra, options))
    pipeline = Pipeline(config, tmp / "pipeline.log")
    figures: dict[str, float] = {}
    try:
        source.execute("CREATE DATABASE bench", TABLE.format(db="bench"))
        target.execute("CREATE DATABASE bench_hw")
        reader_config = SourceConfig(
            name="bench",
            hosts=(HostConfig(source.host, source.port),),
            user="root",
            server_id=4244,
            start=StartConfig("file", coordinate=BinlogCoordinate(*source.binlog_position())),
            filters=FilterConfig(include=(r"bench\..*",)),
            state_interval=0.05,
        )
        task = ReaderTask(reader_config, tmp / "task")
        running_task = task

        def run_reader() -> None:
            try:
                running_task.run()
            finally:
                running_task.close()

        reader = threading.Thread(target=run_reader, daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while not (tmp / "task" / "changes").is_dir():
            if time.monotonic() > deadline:
                raise SystemExit("the reader's log never appeared")
            time.sleep(0.05)
        pipeline.start()
        # Warm-up: the pipeline is a running service; a few seconds of rows first.
        print(f"warm-up: 1,000 rows/s for {args.warm:.0f} s", file=sys.stderr)
        paced(source.port, target.port, 1000, args.warm, 1)
        pipeline.check()
        print(f"load average {os.getloadavg()[0]:.1f} at the start", file=sys.stderr)

        phases = set(args.phases.split(","))
        if "steady" in phases:
            print(f"steady: {args.rate:,} rows/s for {seconds:.0f} s", file=sys.stderr)
            lat = paced(source.port, target.port, args.rate, seconds, 1_000_000)
            figures["steady_p50"], figures["steady_p99"] = pct(lat, 0.5), pct(lat, 0.99)
            print(
                f"steady {args.rate:,} rows/s, {seconds:.0f} s: p50 {pct(lat, 0.5):.3f} s,"
                f" p90 {pct(lat, 0.9):.3f} s, p99 {pct(lat, 0.99):.3f} s, max {lat[-1]:.3f} s;"
                f" load {os.getloadavg()[0]:.1f}"
            )
            pipeline.check()
        if "high" in phases:
            print(f"high: {args.high_rate:,} rows/s for {high_seconds:.0f} s", file=sys.stderr)
            lat = paced(source.port, target.port, args.high_rate, high_seconds, 10_000_000)
            figures["high_p99"] = pct(lat, 0.99)
            print(
                f"high {args.high_rate:,} rows/s, {high_seconds:.0f} s:"
                f" p50 {pct(lat, 0.5):.3f} s, p90 {pct(lat, 0.9):.3f} s,"
                f" p99 {pct(lat, 0.99):.3f} s, max {lat[-1]:.3f} s;"
                f" load {os.getloadavg()[0]:.1f}"
            )
            pipeline.check()
        if "big" in phases:
            time.sleep(2)  # let the previous phase's last batch end
            print(f"big: one transaction of {args.big_rows:,} rows", file=sys.stderr)
            figures["big"] = big(source, target.port, args.big_rows, 100_000_000)
            print(
                f"big transaction, {args.big_rows:,} rows: visible {figures['big']:.2f} s"
                f" after its commit; load {os.getloadavg()[0]:.1f}"
            )
            pipeline.check()
        if "restart" in phases:
            times = []
            for n in range(restarts):
                time.sleep(3)  # a running pipeline, idle for a moment
                first = 200_000_000 + n * 10_000
                profile = args.profile_restart
                if profile is not None:
                    profile = profile.with_name(f"{profile.stem}-{n + 1}{profile.suffix}")
                times.append(restart(pipeline, source.port, target.port, first, profile))
                print(
                    f"restart {n + 1}: first commit {times[-1]:.2f} s after the process"
                    f" started; load {os.getloadavg()[0]:.1f}"
                )
            figures["restart"] = max(times)
        if args.paired:
            steady_baseline(args, pipeline, config, tmp, target.port, source.port, seconds, extra)
        load = os.getloadavg()
        print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end")
        ratios = {name: figures[name] / TARGETS[name] for name in TARGETS if name in figures}
        for name, ratio in ratios.items():
            print(f"{name}: {figures[name]:.3f} s, target {TARGETS[name]} s, ratio {ratio:.2f}")
        print(f"latency_vs_target={max(ratios.values()):.2f}")
    finally:
        pipeline.stop()
        if task is not None:
            task.request_stop()
        if reader is not None:
            reader.join(30)
        source.stop()
        target.stop()
        if args.keep:
            print(f"pipeline log: {pipeline.log}", file=sys.stderr)


if __name__ == "__main__":
    main()
