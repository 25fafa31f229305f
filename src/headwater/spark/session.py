"""The Spark session headwater pipelines run in.

Local by default (``local[2]`` fits the 2-core machines this is tested on): few shuffle
partitions; on local masters only, UI off and uncompressed shuffle blocks (a cluster keeps
its UI: docs/cluster.md); Arrow on for Python data
exchange, session time zone UTC (change rows carry UTC instants), and Debian's MariaDB
JDBC driver on the class path when it is there
(``/usr/share/java/mariadb-java-client.jar``; use ``jdbc:mysql://`` URLs with
``driver=org.mariadb.jdbc.Driver``: a ``jdbc:mariadb://`` URL quotes identifiers wrongly).

Python workers (local masters only: on a cluster, workers run the Python that
``spark.pyspark.python`` or ``PYSPARK_PYTHON`` names there). Spark puts
``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip first on every Python worker's
``PYTHONPATH`` (``PythonUtils.sparkPythonPath``). A zip holds no compiled bytecode, so
every worker process compiled PySpark's modules from source, and every task's
``importlib.invalidate_caches()`` re-read the zip's directory: seconds per micro-batch on
two cores. When the workers run this very interpreter, which has the same PySpark
installed (pip), :func:`build_session` points ``PYSPARK_PYTHON`` at a small launcher that
drops those two zips from ``PYTHONPATH`` and runs this interpreter, so workers import
PySpark from site-packages with its cached bytecode.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "JDBC_DRIVER",
    "JDBC_JAR",
    "build_session",
    "is_local",
    "session_conf",
    "spark_log_level",
    "worker_launcher",
]

JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"
JDBC_DRIVER = "org.mariadb.jdbc.Driver"


def spark_log_level(cli_level: str) -> str:
    """Spark's log level for a command run at ``--log-level cli_level``: Spark's own log
    lines (an executor's failure is a JVM stack trace with the Python one inside) only at
    debug; otherwise the command's one ``headwater: error:`` line says what failed."""
    return "WARN" if cli_level == "debug" else "OFF"


def is_local(master: str) -> bool:
    """Whether ``master`` runs everything in this machine's JVM (``local``, ``local[N]``,
    ``local[N,F]``, ``local[*]``)."""
    return master == "local" or master.startswith("local[")


def session_conf(
    master: str, *, shuffle_partitions: int = 2, conf: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The Spark settings :func:`build_session` gives ``master`` (``conf`` last: it
    overrides them). Local masters only: the UI off (a test or a laptop run needs no web
    server), uncompressed shuffle blocks. A cluster keeps Spark's defaults there: its UI
    is how an operator sees executors and tasks (``spark.ui.enabled: "false"`` in the
    pipeline's ``spark.conf`` turns it off)."""
    out = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    }
    if is_local(master):
        out["spark.ui.enabled"] = "false"
        # A cluster's default is its executors' total cores (snapshot waves and the RDD
        # jobs spread over them); a local master's is its thread count, set here to match
        # the shuffle partitions.
        out["spark.default.parallelism"] = str(shuffle_partitions)
        # One machine: shuffle blocks never cross a network, so compressing them is CPU
        # spent for nothing (measured: 15% of a pipeline micro-batch on two cores).
        out["spark.shuffle.compress"] = "false"
        out["spark.shuffle.spill.compress"] = "false"
    if os.path.exists(JDBC_JAR):
        out["spark.jars"] = JDBC_JAR
    out.update(conf or {})
    return out


def build_session(
    master: str = "local[2]",
    app_name: str = "headwater",
    *,
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A configured :class:`SparkSession` (``getOrCreate``: an existing one is reused)."""
    from pyspark.sql import SparkSession

    if is_local(master):
        # Python workers must run this interpreter (the one that has headwater installed),
        # not whatever python3 is first on PATH; Spark reads this before it starts the
        # JVM. Only in local mode: on a cluster the driver's interpreter path means
        # nothing on a worker (spark.pyspark.python or the packed environment of
        # docs/cluster.md says which Python the executors run).
        python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if python == sys.executable:
            os.environ["PYSPARK_PYTHON"] = str(worker_launcher())
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_conf(
        master, shuffle_partitions=shuffle_partitions, conf=conf
    ).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


_LAUNCHER = """#!/bin/sh
# headwater: run Spark's Python workers without pyspark.zip and the py4j zip on PYTHONPATH
# (headwater.spark.session explains why); written by headwater, safe to delete.
kept=""
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    */pyspark.zip|*/py4j-*-src.zip) ;;
    *) kept="${kept:+$kept:}$entry" ;;
  esac
done
unset IFS
PYTHONPATH="$kept" exec %s "$@"
"""


def worker_launcher() -> Path:
    """The launcher script for this interpreter (module docstring), written once per
    interpreter path into the temporary directory (atomically: concurrent sessions race
    harmlessly)."""
    text = _LAUNCHER % shlex.quote(sys.executable)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"headwater-python-{digest}.sh"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    return path
