"""Log structuring: lines/s of the pipeline's log source against a single-process Python loop.

Generates one log4j-style file (requests as key=value, errors with multi-line stack
traces, lines no group takes, cast failures, heartbeats: the shapes of
tests/integration/test_logs_pipeline.py) and the same rules (a request group and an error
group with extract, filter, kv, split, trim, timestamp), then, in the same run, on the
same file:

1. ``python_loop``: one process reads the file, cuts its records as the pipeline does
   (:func:`headwater.logs.files.records_of`) and routes each with the Python engine
   (:meth:`headwater.logs.groups.LogRules.route`: the same regular expressions, compiled
   once by ``re``'s cache), counting rows per table;
2. ``pipeline``: the pipeline's streaming query on Spark local mode (``--master``,
   default ``local[2]``): the ``headwater_logs`` source reading the directory plus the
   groups as Spark SQL (:func:`headwater.logs.config.log_changes`) into Spark's ``noop``
   sink with ``availableNow``, counting rows per table. The session is started and a
   small file is structured first (a warm-up: JVM start and plan compilation are not
   counted); the timed run is a fresh query over the big file.

Both must agree on the rows per table (checked). Prints each side's lines/s; last line
``logs_vs_python_loop=<pipeline lines/s / python loop lines/s>`` (target >= 1.5 with 2
cores). ``--quick``: 100 000 entries instead of 600 000.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
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


def pipeline(
    spark: Any, config: Any, directory: Path, checkpoint: Path
) -> tuple[float, Counter[str]]:
    import dataclasses

    from pyspark.sql import functions as F

    from headwater.logs.config import log_changes

    rows = log_changes(spark, dataclasses.replace(config, directory=directory))
    counted = rows.observe("tables", *(
        F.sum(F.when(F.col("table") == t, 1).otherwise(0)).alias(t) for t in config.rules.tables()
    ))  # fmt: skip
    start = time.perf_counter()
    query = (
        counted.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - start
    counts: Counter[str] = Counter()
    for p in query.recentProgress:
        metrics = (p.get("observedMetrics") or {}).get("tables")
        if metrics is not None:
            for t in config.rules.tables():
                counts[t] += int(metrics[t] or 0)
    return seconds, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 000 entries")
    ap.add_argument("--entries", type=int, default=None)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    entries = args.entries or (100_000 if args.quick else 600_000)

    from headwater.logs.config import parse_logs_section
    from headwater.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="headwater-bench-logs-"))
    try:
        config = parse_logs_section(yaml.safe_load(RULES), base=work)
        (work / "warm").mkdir()
        (work / "big").mkdir()
        generate(work / "warm" / "app.log", 2000)
        generate(work / "big" / "app.log", entries)
        size = (work / "big" / "app.log").stat().st_size
        print(f"entries={entries} bytes={size} master={args.master}", flush=True)

        py_s, py_counts = python_loop(config, work / "big" / "app.log")
        print(f"python_loop seconds={py_s:.2f} lines_per_s={entries / py_s:.0f}", flush=True)

        spark = build_session(args.master, "headwater-bench-logs")
        try:
            pipeline(spark, config, work / "warm", work / "ck-warm")
            sp_s, sp_counts = pipeline(spark, config, work / "big", work / "ck-big")
        finally:
            spark.stop()
        print(f"pipeline seconds={sp_s:.2f} lines_per_s={entries / sp_s:.0f}", flush=True)
        print("tables " + " ".join(f"{t}={py_counts[t]}" for t in sorted(py_counts)))
        if +sp_counts != +py_counts:
            raise SystemExit(f"the pipeline's rows per table differ: {dict(sp_counts)}")
        print(f"logs_vs_python_loop={py_s / sp_s:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
