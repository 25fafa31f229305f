"""PySpark's worker daemon with the modules of headwater's tasks imported before it forks.

Spark starts one Python daemon per executor (``pyspark.daemon``); every Python worker is
a fork of it. Spark's ``PythonWorkerFactory`` kills a worker that has been idle for one
minute (``IDLE_WORKER_TIMEOUT_NS``, fixed in spark-core 4.3, checked every 10 s), so the
first micro-batch after a quiet minute runs in freshly forked workers, and PySpark's
daemon imports nothing before it forks: each new worker imports PySpark's worker,
pyarrow, pandas (``pa.table`` asks for it), numpy and headwater's pipeline, sink and log
modules (sqlglot among them) again. Measured on ``bench/pipeline.py`` (2026-11-24, load
2.3-2.7): the first timed round, after three minutes of the naive replicator, spent
3.15 CPU-s in the Python workers against 0.70-1.09 for the next rounds, and py-spy gave
56% of its worker samples to imports; a running service pays the same after every quiet
minute.

``spark.python.daemon.module`` names this module on local masters
(:func:`headwater.spark.session.session_conf`). It imports :data:`PRELOAD` (a module
that fails to import is left to the task, which reports it as before), freezes what
lives (``gc.freeze``: the workers' collections skip it, and reference counting of the
shared objects does not copy every page at once) and runs PySpark's own daemon loop,
which forks the workers: they start with the modules loaded, in pages shared with the
daemon until written.

Fork safety: PySpark's daemon imports the worker module after the fork because pandas
and pyarrow may start threads. After these imports the daemon has two: OpenBLAS's pool
(numpy), which OpenBLAS stops before a fork and restarts in the child
(``pthread_atfork``), and jemalloc's background purging thread (pyarrow's allocator),
whose locks jemalloc takes around a fork (its ``pthread_atfork`` handlers) and whose
thread it starts again in the child when needed. Arrow's own thread pools start on
first use, which the daemon never makes; Arrow re-creates them in a forked child
(``arrow::internal::AtFork``). No other thread runs in the daemon, and it forks only
from its accept loop, holding no lock of these libraries.
"""

from __future__ import annotations

import gc
import importlib

__all__ = ["PRELOAD", "main"]

#: What a headwater task imports (PySpark's worker and its Arrow serializers first).
PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "numpy",
    "pandas",
    "pyarrow",
    "pyarrow.compute",
    "headwater.pipeline.netapply",
    "headwater.sinks.mysql",
    "headwater.sinks.postgres",
    "headwater.sinks.glue",
    "headwater.spark.asofscan",
    "headwater.spark.logaccess",
    "headwater.spark.source",
    "headwater._native._lastwrite",
    "headwater._native._walk",
)


def main() -> None:
    """Import :data:`PRELOAD`, freeze the heap, run ``pyspark.daemon.manager``. Only for
    the daemon of the tasks' worker (``pyspark.worker``, its first argument): the daemons
    of Spark's other worker modules (data source lookup and planning, each a daemon of
    its own) import none of it."""
    import sys
    import warnings

    if sys.argv[1:2] not in ([], ["pyspark.worker"]):
        from pyspark import daemon

        daemon.manager()
        return
    with warnings.catch_warnings():
        # pandas >= 3 (see headwater.sinks.glue): PySpark warns at import, on stderr of
        # every daemon otherwise.
        warnings.simplefilter("ignore", FutureWarning)
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:  # the task imports it again and fails there, as before
                continue
    from pyspark import daemon

    gc.collect()
    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
