"""The Spark session headwater pipelines run in.

Local by default (``local[2]`` fits the 2-core machines this is tested on): UI off, few
shuffle partitions, Arrow on for Python data exchange, session time zone UTC (change rows
carry UTC instants), and Debian's MariaDB JDBC driver on the class path when it is there
(``/usr/share/java/mariadb-java-client.jar``; use ``jdbc:mysql://`` URLs with
``driver=org.mariadb.jdbc.Driver``: a ``jdbc:mariadb://`` URL quotes identifiers wrongly).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JDBC_DRIVER", "JDBC_JAR", "build_session"]

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
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
    if os.path.exists(JDBC_JAR):
        builder = builder.config("spark.jars", JDBC_JAR)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
