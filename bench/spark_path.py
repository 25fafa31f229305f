"""The SQL sinks' Spark path per row: JVM and Python-worker CPU, all columns against the
pipeline's columns (the source's ``columns`` option), with and without the shuffle.

What :func:`headwater.sinks.glue.write_sql_batch` runs for a large micro-batch, without
a target: the headwater source (batch read of a reader task's log, ``--partitions``
slices), the glue's routing projection (``_routed``), ``repartition(shards, part)``
(``--no-shuffle``: left out) and a ``mapInArrow`` that only counts its rows. Each
variant runs ``--rounds`` times in turn with the other after two untimed warm-up runs;
the CPU seconds come from /proc (the Spark JVM's own threads; the Python workers below
it), and the medians per row are printed. The task log: any reader task directory, e.g.
the one ``bench/pipeline.py`` leaves in ``/tmp/hw-bench-pipeline-*/task``.

Last line: ``spark_path_pruned_vs_all=<JVM CPU per row with the pipeline's columns /
with all columns>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).parent))

import pyarrow as pa

from headwater.pipeline.runner import PIPELINE_SPARK_CONF
from headwater.sinks import glue
from headwater.spark import register
from headwater.spark.session import build_session
from pipeline import spark_cpu


def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_arrays([pa.array([n], pa.int64())], names=["n"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("task", help="a reader task directory")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--no-shuffle", action="store_true")
    args = ap.parse_args()
    spark = build_session("local[2]", "headwater-bench-spark-path", conf=PIPELINE_SPARK_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    keys = glue._part_keys(spark, args.shards)

    def run(pruned: bool) -> tuple[int, float, float, float]:
        reader = (
            spark.read.format("headwater")
            .option("path", args.task)
            .option("partitions", str(args.partitions))
            .option("minBytesPerPartition", "0")
        )
        if pruned:
            reader = reader.option("columns", ",".join(glue.SOURCE_COLUMNS))
        routed = glue._routed(reader.load(), args.shards, keys)
        if not args.no_shuffle:
            routed = routed.repartition(args.shards, "part")
        cpu0, t0 = spark_cpu(), time.perf_counter()
        rows = sum(r["n"] for r in routed.mapInArrow(count, "n long").collect())
        wall, cpu1 = time.perf_counter() - t0, spark_cpu()
        return rows, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], wall

    for _ in range(2):
        run(False), run(True)
    results: dict[bool, list[Any]] = {False: [], True: []}
    for _ in range(args.rounds):
        for pruned in (False, True):
            results[pruned].append(run(pruned))
    jvm = {}
    for pruned, runs in results.items():
        rows = runs[0][0]
        jvm[pruned] = statistics.median(r[1] for r in runs) / rows
        workers = statistics.median(r[2] for r in runs) / rows
        print(
            f"{'pipeline columns' if pruned else 'all columns'}: {rows} rows,"
            f" JVM {jvm[pruned] * 1e6:.2f} us/row, Python workers {workers * 1e6:.2f} us/row,"
            f" wall {statistics.median(r[3] for r in runs):.2f} s (median of {args.rounds})"
        )
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"spark_path_pruned_vs_all={jvm[True] / jvm[False]:.2f}")


if __name__ == "__main__":
    main()
