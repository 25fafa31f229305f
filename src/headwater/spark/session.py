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
PySpark from site-packages with its cached bytecode. Spark also puts its ``spark-core``
jar there (the jar of ``PythonUtils``); it holds no Python (no ``.py`` file in 4.3's
5,973 entries), but a jar is a zip, so every task's ``invalidate_caches()`` re-read its
directory too (15 ms of CPU a task, measured at load 6) and every
``importlib.metadata`` lookup listed it: the launcher drops it as well.

The JVM's terminal output (:func:`start_jvm`). The JVM that ``getOrCreate`` would start
writes to the terminal before any log level applies: the launcher's ``WARNING:
Using incubator modules``, Spark's ``Using Spark's default log4j profile`` and ``Setting
default log level`` lines, log4j's start-up warnings (loopback host name, native-hadoop).
:func:`build_session` starts the JVM itself (PySpark's ``launch_gateway``, the same
``spark-submit`` command) with its standard error on a pipe that a thread reads into the
logger ``headwater.spark.jvm``: those known start-up lines at DEBUG (shown with
``--log-level debug``), log4j lines at their own level, anything else at WARNING.

The JIT compiler (``headwater.jvm.c1Only``; off here, on by default for the pipelines
that gain from it: :func:`headwater.pipeline.runner.pipeline_conf`). A CDC pipeline's
JVM mostly plans micro-batches and runs small jobs (its rows go by the driver or net
paths): its C2 compiler thread kept compiling Spark's per-job code in every batch
(0.2-0.9 CPU-s of a bench/pipeline.py round, never settling). ``headwater.jvm.c1Only:
"true"`` in ``conf`` adds ``-XX:TieredStopAtLevel=1`` (C1 only) to the JVMs' options:
measured 2026-11-25 (paired runs, load 4-9), the round's JVM CPU 0.23-0.96 against
0.45-1.68 CPU-s (JIT 0.04-0.15 against 0.19-1.06), bench/latency.py --quick's restart 10 s
against 21 s. Not this builder's default: it serves the JVM-heavy paths too, and C1's
code is slower there: bench/logs.py --quick 1.61 against 2.47 (the log groups' generated
code), bench/replay.py --quick 2.93-2.98 against 3.03-3.30.

Class data sharing (local masters; :mod:`headwater.spark.cdsarchive`). Most of a JVM
start is loading and verifying Spark's classes: about 11 CPU-seconds from launch to a
ready session on this 2-core machine, and 5 more for the first job. With Java's dynamic
AppCDS archive of those classes (parsed and verified once, mapped from one file) it was
5.8 and 2.2 CPU-seconds (session ready in 11.6 s instead of 25 s, load 11).
:func:`build_session` adds ``-XX:SharedArchiveFile`` when the archive exists, and
otherwise starts its one-time making in the background (``HEADWATER_SPARK_CDS=0``
turns both off).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shlex
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from headwater.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "C1_ONLY",
    "JDBC_DRIVER",
    "JDBC_JAR",
    "build_session",
    "is_local",
    "session_conf",
    "spark_log_level",
    "start_jvm",
    "worker_launcher",
]

JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"
#: The setting that turns C2 off (module docstring); read here, never passed to Spark.
C1_ONLY = "headwater.jvm.c1Only"
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
    pipeline's ``spark.conf`` turns it off). ``headwater.jvm.c1Only: "true"`` adds
    ``-XX:TieredStopAtLevel=1`` to the driver's and executors' Java options (module
    docstring)."""
    out = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        # The JIT skips methods over 8000 bytes of bytecode by default; Spark's generated
        # code for a wide projection passes that, and then runs interpreted (measured on
        # the log groups' plan: 20% more CPU). Very large methods still defeat C2 (one
        # 176 KB method of every log group gave up "out of nodes"): headwater.logs.plan
        # cuts its plan into one compiled stage per group.
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:-DontCompileHugeMethods",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC -XX:-DontCompileHugeMethods",
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
        # Workers forked with the tasks' modules imported: a worker idle for a minute is
        # killed and its successor imported them all again (headwater.spark.workerdaemon).
        out["spark.python.daemon.module"] = "headwater.spark.workerdaemon"
    if os.path.exists(JDBC_JAR):
        out["spark.jars"] = JDBC_JAR
    out.update(conf or {})
    c1_only = out.pop(C1_ONLY, "false").strip().lower()
    if c1_only not in ("true", "false"):
        raise ConfigError(f"spark.conf {C1_ONLY} is 'true' or 'false', not {c1_only!r}")
    if c1_only == "true":
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            out[key] = f"{out.get(key, '')} -XX:TieredStopAtLevel=1".strip()
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
    settings = session_conf(master, shuffle_partitions=shuffle_partitions, conf=conf)
    if is_local(master) and os.environ.get("HEADWATER_SPARK_CDS", "1") != "0":
        from headwater.spark.cdsarchive import java_options

        flags = java_options()  # (none yet: the archive is made in the background)
        key = "spark.driver.extraJavaOptions"
        settings[key] = f"{settings.get(key, '')} {flags}".strip()
    start_jvm(master, app_name, settings)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


_jvm_log = logging.getLogger("headwater.spark.jvm")

#: What every JVM start prints and nobody needs to read (module docstring).
_START_UP_NOISE = re.compile(
    r"WARNING: Using incubator modules"
    r"|resolves to a loopback address"
    r"|Set SPARK_LOCAL_IP if you need to bind"
    r"|NativeCodeLoader: Unable to load native-hadoop"
    r"|Using Spark's default log4j profile"
    r"|Setting default log level to"
    r"|To adjust logging level use sc.setLogLevel"
    r"|ResolveWriteToStream: spark.sql.adaptive.enabled is not supported in streaming"
    # DataSketches (approx_top_k of the per-table counts) on its first use, on Java 17
    r"|Java versions > Java 11 can only operate in restricted mode"
)
#: A log4j line of Spark's default layout: ``26/11/24 07:31:02 WARN Utils: ...``.
_LOG4J = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")
_LEVELS = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "WARN": 30, "ERROR": 40, "FATAL": 50}


def _jvm_line_level(line: str) -> int:
    if _START_UP_NOISE.search(line):
        return logging.DEBUG
    match = _LOG4J.match(line)
    return logging.WARNING if match is None else _LEVELS[match.group(1)]


def _forward(fd: int) -> None:
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            text = line.rstrip("\n")
            if text:
                _jvm_log.log(_jvm_line_level(text), "%s", text)


def start_jvm(master: str, app_name: str, settings: Mapping[str, str]) -> None:
    """Start Spark's JVM (as ``getOrCreate`` would, with the same settings) with its
    standard error on a pipe that a daemon thread logs (module docstring); nothing when
    this process has a JVM already."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    conf.setAll(list(settings.items()))
    read_fd, write_fd = os.pipe()
    threading.Thread(target=_forward, args=(read_fd,), name="headwater-jvm", daemon=True).start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_fd})  # type: ignore[no-untyped-call]
    finally:
        os.close(write_fd)  # the JVM has its own copy
    SparkContext._ensure_initialized(gateway=gateway)


_LAUNCHER = """#!/bin/sh
# headwater: run Spark's Python workers without pyspark.zip, the py4j zip and the
# spark-core jar on PYTHONPATH (headwater.spark.session explains why); written by
# headwater, safe to delete.
kept=""
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    */pyspark.zip|*/py4j-*-src.zip|*/spark-core_*.jar) ;;
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
