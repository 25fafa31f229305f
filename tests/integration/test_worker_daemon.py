"""headwater.spark.workerdaemon on a local Spark session: a task's Python worker is a fork
of the daemon that imported the tasks' modules, so it starts with them loaded (a worker
Spark killed after an idle minute is replaced without importing them again), and no zip
or jar of Spark's is on its path (headwater.spark.session's launcher)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

#: Some of headwater.spark.workerdaemon.PRELOAD and what they import.
NAMES = ("pyspark.worker", "pyarrow", "pandas", "headwater.pipeline.netapply",
         "headwater.sinks.netwrite", "headwater.spark.asofscan")  # fmt: skip


def _look(_rows: object) -> list[tuple[str, tuple[bool, ...], int, list[str]]]:
    """In the worker, before anything of the task imports: the parent's command line,
    which of NAMES are loaded, how many objects the daemon froze, the zips and jars on
    ``sys.path`` (the launcher of headwater.spark.session drops Spark's)."""
    import gc

    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    archives = [p for p in sys.path if p.endswith((".zip", ".jar")) and os.path.exists(p)]
    return [(parent, tuple(n in sys.modules for n in NAMES), gc.get_freeze_count(), archives)]


def test_a_task_runs_in_a_fork_of_the_preloading_daemon(spark: SparkSession) -> None:
    assert spark.conf.get("spark.python.daemon.module") == "headwater.spark.workerdaemon"
    # A function of this test module is pickled by reference and would import it (and
    # headwater with it) before it runs: sent by value, it imports nothing of ours.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        seen = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(_look).collect()
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert len(seen) == 2
    for parent, loaded, frozen, archives in seen:
        assert "-m headwater.spark.workerdaemon pyspark.worker" in parent
        assert loaded == (True,) * len(NAMES)
        assert frozen > 10_000
        assert archives == []
