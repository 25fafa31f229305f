"""Log structuring: lines/s of the pipeline's log source against a single-process Python loop.

Generates one log4j-style file (requests as key=value, errors with multi-line stack
traces, lines no group takes, cast failures, heartbeats: the shapes of
tests/integration/test_logs_pipeline.py) and the same rules (a request group and an error
group with extract, filter, kv, split, trim, timestamp), then, in the same run, on the
same file, for ``--rounds`` rounds (each round both sides, one after the other):

1. ``python_loop``: one process reads the file, cuts its records as the pipeline does
   (:func:`headwater.logs.files.records_of`) and routes each with the Python engine
   (:meth:`headwater.logs.groups.LogRules.route`: the same regular expressions, compiled
   once by ``re``'s cache), counting rows per table;
2. ``pipeline``: the pipeline's streaming query on Spark local mode (``--master``,
   default ``local[2]``): the ``headwater_logs`` source reading a directory plus the
   groups as Spark SQL (:func:`headwater.logs.config.log_changes`) into Spark's ``noop``
   sink, counting rows per table (observed metrics). What is timed is a *running*
   pipeline's throughput on a backlog: the query is started on an empty directory, the
   warm-up file (``--warm`` entries, a third of the big file by default and at least
   100 000) is renamed into it, structured, and renamed in again as a new file, pass
   after pass, until the JIT time of a pass stops falling (:func:`warm_up`: at least
   two passes, at most ``--max-warm``): JVM start, plan compilation and the JIT's
   compilations are not per-line work, and one pass left seconds of compilation to the
   timed batch. Then, once the JIT compilers are idle (:func:`settle_jit`), the big file
   is renamed into the directory; the time runs from the rename to the end of the batch
   that finished it (the progress report's trigger start plus its duration: batches of
   the backlog only, detection included).

Fairness: both sides get the same warm-up, untimed: the Python loop structures the
warm-up file as many times as the pipeline did (``re``'s cache of compiled patterns,
the file pages, the interpreter's caches), after the pipeline's timed run, so the JVM
is idle while it runs. Both read the big file from the page cache. The bench polls the
query every 100 ms (the end is the progress report's, so the polling costs no accuracy
and little CPU). Printed per batch: its milliseconds (planning, run, offsets); per
round: the warm-up passes, and the JIT and GC milliseconds during the timed batch (the
JVM's compilation and collector beans: compiler threads' elapsed time, which a loaded
machine stretches).

Both must agree on the rows per table (checked each round). Prints each round's
seconds, lines/s and the load average, then the median of the rounds' ratios; last line
``logs_vs_python_loop=<pipeline lines/s / python loop lines/s>`` (target >= 1.5 with 2
cores). ``--quick``: 100 000 entries instead of 600 000, one round.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

RULES = r"""
name: app
path: .
files: "app.log*"
database: logs
record_start: '^\d{4}-\d\d-\d\d '
idle_ms: 0
chunk_bytes: 2097152
heartbeat: {regex: 'HEARTBEAT sent=(?P<ts>\S+ \S+)', format: 'yyyy-MM-dd HH:mm:ss,SSS'}
groups:
  - name: req
    table: requests
    columns: {at: timestamp, level: string, path: string, ms: int, user: string}
    operators:
      - extract: {regex: '^(?P<time>\S+ \S+) (?P<level>[A-Z]+) +\[(?P<thread>[^\]]*)\] (?P<msg>.*)$'}
      - filter: {field: msg, regex: '^request '}
      - kv: {field: msg, keys: [path, ms, user]}
      - timestamp: {field: time, format: 'yyyy-MM-dd HH:mm:ss,SSS', into: at}
  - name: err
    table: errors
    columns: {at: timestamp, exception: string, message: string, trace: string}
    operators:
      - extract: {regex: '^(?P<time>\S+ \S+) ERROR +\[[^\]]*\] (?P<exception>[\w.]+): (?P<rest>(?s:.*))'}
      - split: {field: rest, separator: "\n", into: [message, trace]}
      - trim: [trace]
      - timestamp: {field: time, format: 'yyyy-MM-dd HH:mm:ss,SSS', into: at}
"""  # noqa: E501


def generate(path: Path, entries: int) -> None:
    t0 = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    with path.open("w") as f:
        for n in range(entries):
            t = t0 + dt.timedelta(milliseconds=137 * n)
            ts = t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"
            kind = n % 10
            if kind < 6:
                f.write(f"{ts} INFO  [http-{n % 8}] request path=/p/{n} ms={n % 977} user=u{n}\n")
            elif kind == 6:
                trace = "".join(f"\tat com.example.C{i}.m(C{i}.java:{i})\n" for i in range(3))
                f.write(f"{ts} ERROR [w-1] java.lang.IllegalStateException: bad {n}\n{trace}")
            elif kind == 7:
                f.write(f"{ts} WARN  [main] cache nearly full {n}\n")
            elif kind == 8:
                f.write(f"{ts} INFO  [http-1] request path=/x ms=slow{n} user=v\n")
            else:
                f.write(f"{ts} INFO  [hb] HEARTBEAT sent={ts}\n")


def python_loop(config: Any, path: Path) -> tuple[float, Counter[str]]:
    from headwater.logs.files import records_of

    start = time.perf_counter()
    counts: Counter[str] = Counter()
    rules, record_start = config.rules, config.record_start
    data = path.read_bytes()
    for off, raw in records_of(data, record_start):
        counts[rules.route(raw.decode("utf-8", "replace"), file=path.name, offset=off).table] += 1
    return time.perf_counter() - start, counts


class Pipeline:
    """A running log pipeline on ``directory`` into Spark's ``noop`` sink."""

    def __init__(self, spark: Any, config: Any, directory: Path, checkpoint: Path) -> None:
        import dataclasses

        from pyspark.sql import functions as F

        from headwater.logs.config import log_changes

        self.tables = list(config.rules.tables())
        rows = log_changes(spark, dataclasses.replace(config, directory=directory))
        counted = rows.observe("tables", *(
            F.sum(F.when(F.col("table") == t, 1).otherwise(0)).alias(t) for t in self.tables
        ))  # fmt: skip
        self.directory = directory
        self.query = (
            counted.writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="0 seconds")
            .start()
        )
        self.seen = -1

    def wait_rows(self, rows: int, since: float) -> tuple[float, Counter[str]]:
        """Wait for the batches after the last one seen to total ``rows``; returns the end
        of the last of them (Unix seconds) and their rows per table."""
        counts: Counter[str] = Counter()
        got, end = 0, since
        while got < rows:
            if self.query.exception() is not None:
                raise SystemExit(f"the pipeline failed: {self.query.exception()}")
            for p in self.query.recentProgress:
                batch = int(p["batchId"])
                if batch <= self.seen or not p.get("numInputRows"):
                    continue
                self.seen = batch
                got += int(p["numInputRows"])
                start = dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
                end = start.timestamp() + p["durationMs"]["triggerExecution"] / 1000
                metrics = (p.get("observedMetrics") or {}).get("tables")
                d = p["durationMs"]
                print(f"    batch {batch}: rows={p['numInputRows']} ms={d['triggerExecution']}"
                      f" (planning {d.get('queryPlanning', 0)}, run {d.get('addBatch', 0)},"
                      f" offsets {d.get('latestOffset', 0)})", flush=True)  # fmt: skip
                for t in self.tables:
                    counts[t] += int(metrics[t] or 0) if metrics is not None else 0
            # the end comes from the progress report, not from when it is seen: a slow
            # poll costs no accuracy, and a fast one took CPU from the pipeline (py4j)
            time.sleep(0.1)
        return end, counts

    def stop(self) -> None:
        self.query.stop()


#: The warm-up ends at a pass that compiles at least this fraction of the JIT time of
#: the pass before (compilation no longer falling: the steady state).
WARM_JIT_FALL = 0.8


def settle_jit(spark: Any, limit_s: float = 60.0) -> float:
    """Wait until the JVM's JIT compilers are idle (their total compilation time grows by
    less than 50 ms in a second, at most ``limit_s``); returns the seconds waited."""
    bean = spark._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
    start = time.time()
    before = bean.getTotalCompilationTime()
    while time.time() - start < limit_s:
        time.sleep(1.0)
        now = bean.getTotalCompilationTime()
        if now - before < 50:
            break
        before = now
    return time.time() - start


def jvm_times(spark: Any) -> tuple[int, int]:
    """The JVM's total JIT compilation and garbage collection milliseconds so far."""
    mf = spark._jvm.java.lang.management.ManagementFactory
    gc = sum(max(0, b.getCollectionTime()) for b in mf.getGarbageCollectorMXBeans())
    return int(mf.getCompilationMXBean().getTotalCompilationTime()), int(gc)


def warm_up(spark: Any, run: Pipeline, warm: Path, entries: int, most: int) -> int:
    """Structure the warm-up file once, then again (a new copy renamed into the directory)
    until compilation stops falling (:data:`WARM_JIT_FALL`) or ``most`` passes
    ran; returns the passes. One warm-up batch is not the steady state: measured with the
    JVM's compilation bean (100 000 entries per batch, load 6-8), the JIT compiled 5.1,
    3.8, 1.2 and 1.4 s during four successive batches of the same records, which took
    4.5, 3.4, 1.4 and 1.4 s; the compilers are idle between batches (:func:`settle_jit`
    waits for that), so waiting does not help, running does. (Why the compilation stops
    between batches is not established; HotSpot's tiered policy drops queued compilations
    of methods that stopped running, ``compilationPolicy.cpp``, is a likely cause.)"""
    directory = run.directory
    previous: int | None = None
    for n in range(1, most + 1):
        staged = directory.parent / f"{directory.name}.warm{n}"
        shutil.copy(warm, staged)
        jit0 = jvm_times(spark)[0]
        os.rename(staged, directory / f"app.log.warm{n}")
        run.wait_rows(entries, time.time())
        jit_ms = jvm_times(spark)[0] - jit0
        print(f"  warm-up pass {n}: jit_ms={jit_ms}", flush=True)
        if previous is not None and jit_ms >= WARM_JIT_FALL * previous:
            return n
        previous = jit_ms
    return most


def python_round(
    config: Any, big: Path, entries: int, warm: Path, passes: int
) -> tuple[float, Counter[str]]:
    for _ in range(passes):  # the same warm-up passes as the pipeline's, untimed
        python_loop(config, warm)
    py_s, counts = python_loop(config, big)
    print(f"  python_loop seconds={py_s:.2f} lines_per_s={entries / py_s:.0f}", flush=True)
    return py_s, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 000 entries, one round")
    ap.add_argument("--entries", type=int, default=None)
    ap.add_argument("--warm", type=int, default=None, help="entries of the warm-up file")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-warm", type=int, default=5, help="most warm-up passes")
    args = ap.parse_args()
    entries = args.entries or (100_000 if args.quick else 600_000)
    # at least 100 000 entries per warm-up pass (fewer compile less per pass)
    warm = args.warm or max(entries // 3, 100_000)
    rounds = args.rounds or (1 if args.quick else 3)

    from headwater.logs.config import parse_logs_section
    from headwater.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="headwater-bench-logs-"))
    spark = None
    try:
        config = parse_logs_section(yaml.safe_load(RULES), base=work)
        (work / "in").mkdir()
        generate(work / "warm.log", warm)
        generate(work / "big.log", entries)
        size = (work / "big.log").stat().st_size
        print(f"entries={entries} bytes={size} warm={warm} master={args.master}", flush=True)
        # the pipeline session's settings (headwater.pipeline.runner)
        from headwater.pipeline.runner import PIPELINE_SPARK_CONF

        spark = build_session(args.master, "headwater-bench-logs", conf=PIPELINE_SPARK_CONF)
        ratios = []
        for r in range(rounds):
            load = os.getloadavg()[0]
            directory = work / "in" / f"r{r}"
            directory.mkdir()
            shutil.copy(work / "big.log", work / "in" / f"big{r}")
            run = Pipeline(spark, config, directory, work / f"ck{r}")
            try:
                passes = warm_up(spark, run, work / "warm.log", warm, args.max_warm)
                settled = settle_jit(spark)
                jvm0 = jvm_times(spark)
                start = time.time()
                os.rename(work / "in" / f"big{r}", directory / "app.log")
                end, sp_counts = run.wait_rows(entries, start)
                jit_ms, gc_ms = (b - a for a, b in zip(jvm0, jvm_times(spark), strict=True))
            finally:
                run.stop()
            sp_s = end - start
            py_s, py_counts = python_round(config, work / "big.log", entries, work / "warm.log",
                                           passes)  # fmt: skip
            if +sp_counts != +py_counts:
                raise SystemExit(f"the pipeline's rows per table differ: {dict(sp_counts)}")
            ratios.append(py_s / sp_s)
            print(f"round {r}: pipeline seconds={sp_s:.2f} lines_per_s={entries / sp_s:.0f}"
                  f" python_loop seconds={py_s:.2f} lines_per_s={entries / py_s:.0f}"
                  f" ratio={py_s / sp_s:.2f} load={load:.1f}-{os.getloadavg()[0]:.1f}"
                  f" warm_passes={passes} jit_settle_s={settled:.1f}"
                  f" timed_jit_ms={jit_ms} timed_gc_ms={gc_ms}",
                  flush=True)  # fmt: skip
        print("tables " + " ".join(f"{t}={py_counts[t]}" for t in sorted(py_counts)))
        print(f"logs_vs_python_loop={statistics.median(ratios):.2f}")
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
