"""The Spark session headwater pipelines run in.

Local by default (``local[2]`` fits the 2-core machines this is tested on): UI off, few
shuffle partitions, uncompressed shuffle blocks (local masters), Arrow on for Python data
exchange, session time zone UTC (change rows carry UTC instants), and Debian's MariaDB
JDBC driver on the class path when it is there
(``/usr/share/java/mariadb-java-client.jar``; use ``jdbc:mysql://`` URLs with
``driver=org.mariadb.jdbc.Driver``: a ``jdbc:mariadb://`` URL quotes identifiers wrongly).

Python workers (local masters). Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and the
py4j zip first on every Python worker's ``PYTHONPATH`` (``PythonUtils.sparkPythonPath``).
A zip holds no compiled bytecode, so every worker process compiled PySpark's modules from
source, and every task's ``importlib.invalidate_caches()`` re-read the zip's directory:
seconds per micro-batch on two cores. When the workers run this very interpreter, which
has the same PySpark installed (pip), :func:`build_session` points ``PYSPARK_PYTHON`` at a
small launcher that drops those two zips from ``PYTHONPATH`` and runs this interpreter,
so workers import PySpark from site-packages with its cached bytecode.
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

__all__ = ["JDBC_DRIVER", "JDBC_JAR", "build_session", "worker_launcher"]

JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"
JDBC_DRIVER = "org.mariadb.jdbc.Driver"


def build_session(
    master: str = "local[2]",
    app_name: str = "headwater",
    *,
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A configured :class:`SparkSession` (``getOrCreate``: an existing one is reused)."""
    from pyspark.sql import SparkSession

    # Python workers must run this interpreter (the one that has headwater installed), not
    # whatever python3 is first on PATH; Spark reads this before it starts the JVM.
    python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local") and python == sys.executable:
        os.environ["PYSPARK_PYTHON"] = str(worker_launcher())
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    if master.startswith("local"):
        # One machine: shuffle blocks never cross a network, so compressing them is CPU
        # spent for nothing (measured: 15% of a pipeline micro-batch on two cores).
        builder = builder.config("spark.shuffle.compress", "false").config(
            "spark.shuffle.spill.compress", "false"
        )
    if os.path.exists(JDBC_JAR):
        builder = builder.config("spark.jars", JDBC_JAR)
    for key, value in (conf or {}).items():
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
