"""``headwater demo``: the main job on an embedded default, end to end on one machine.

:func:`~headwater.demo.run.run_demo` starts a sandbox MariaDB source (binlog on) and a
target in a temporary directory, creates the shop (:mod:`~headwater.demo.workload`),
starts a reader, snapshots the shop through the Spark pipeline into the target MariaDB
and a Parquet change log, streams the live workload after it, shows progress
(:mod:`~headwater.demo.progress`), then stops the workload, waits for catch-up, verifies
every target table against its source (:mod:`headwater.verify`) and prints a report whose
last line is ``demo verified tables=<n> rows=<m> mismatches=<k>``.
"""

from headwater.demo.run import DemoOptions, run_demo

__all__ = ["DemoOptions", "run_demo"]
