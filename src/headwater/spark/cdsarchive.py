"""A class data sharing archive of Spark's JVM classes, made once in the background.

Why (headwater.spark.session, "Class data sharing"): most of a local Spark JVM's start is
loading, parsing and verifying classes; Java's dynamic AppCDS archive (JEP 350,
``-XX:ArchiveClassesAtExit``) keeps the classes a JVM loaded, ready to map at the next
start with ``-XX:SharedArchiveFile``. Measured on this 2-core machine: a session ready
after 5.8 CPU-seconds instead of 11.2, its first job 2.2 instead of 4.7.

Where and when. The archive is ``<tmp>/headwater-spark-<key>.jsa`` (about 150 MB), the
key hashing the ``java`` binary that ``spark-submit`` runs and Spark's jar list, so a
Java or Spark upgrade makes a new one. :func:`java_options` gives the flags that use it
when it exists. When it does not, it starts :func:`make_archive` in a detached process of
its own (``python -m headwater.spark.cdsarchive``, at nice 10; one at a time: a lock
file, taken over after ``LOCK_STALE_S``), and the session that asked starts without it:
the JVM writes its archive only when it exits, and a pipeline's JVM runs for days, may be
killed, and must not make its user wait at exit. That process runs a small local session
(a batch job through Arrow and a Python worker, a few streaming micro-batches through
``foreachBatch``: the classes every pipeline loads), ends its JVM by closing its standard
input (the py4j gateway exits on it), waits for the dump and renames the file into place,
so no JVM ever maps a half-written archive. Java checks an archive against its class path
and ignores one that does not match; ``-Xlog:cds=off`` keeps its notices (the signed jars
it skips, a mismatch) out of the terminal. Classes not in the archive load as usual.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["archive_path", "java_options", "make_archive"]

log = logging.getLogger(__name__)

#: A lock older than this belongs to a maker that died: the next start takes it over.
LOCK_STALE_S = 1800.0
#: How long the maker waits for its JVM to write the archive after it was told to exit.
DUMP_WAIT_S = 600.0
#: Unified-logging settings that keep the JVM's class-sharing notices off the terminal.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _key() -> str:
    """What the archive depends on: the ``java`` that spark-submit runs, Spark's jars."""
    from pyspark.find_spark_home import _find_spark_home

    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    parts = []
    if java is not None:
        real = os.path.realpath(java)
        with contextlib.suppress(OSError):
            st = os.stat(real)
            parts.append(f"{real}:{st.st_size}:{st.st_mtime_ns}")
    with contextlib.suppress(OSError):
        jars = Path(_find_spark_home()) / "jars"
        parts += sorted(f"{j.name}:{j.stat().st_size}" for j in jars.iterdir())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path() -> Path:
    return Path(tempfile.gettempdir()) / f"headwater-spark-{_key()}.jsa"


def java_options(*, make: bool = True) -> str:
    """The driver JVM's flags for the archive, or ``""`` while there is none (then, with
    ``make``, its making is started in the background unless it is running already)."""
    final = archive_path()
    if final.exists():
        return f"-XX:SharedArchiveFile={final} {QUIET}"
    if make and _lock(final):
        _spawn(final)
    return ""


def _lock(final: Path) -> bool:
    lock = final.with_name(final.name + ".lock")
    with contextlib.suppress(OSError):
        if time.time() - lock.stat().st_mtime > LOCK_STALE_S:
            lock.unlink()
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:
        return False
    os.close(fd)
    return True


def _spawn(final: Path) -> None:
    """Start ``python -m headwater.spark.cdsarchive FINAL`` detached: through a shell that
    ends at once, so the maker is nobody's child (no zombie, not in a pipeline's process
    tree) and in a session of its own."""
    env = {**os.environ, "HEADWATER_SPARK_CDS": "0"}
    command = [sys.executable, "-m", "headwater.spark.cdsarchive", str(final)]
    with contextlib.suppress(OSError):
        subprocess.run(
            ["/bin/sh", "-c", 'nice -n 10 "$@" >/dev/null 2>&1 </dev/null &', "sh", *command],
            env=env,
            start_new_session=True,
            check=False,
            timeout=30,
        )
        log.info("making the JVM's class data sharing archive in the background: %s", final)


def _same(batches: Iterator[Any]) -> Iterator[Any]:
    return batches


def _exercise(spark: object) -> None:
    """The work whose classes go into the archive: what every pipeline runs."""
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    schema = "id long"
    spark.range(0, 1000, 1, 2).repartition(2, "id").mapInArrow(_same, schema).collect()
    done: list[int] = []

    def batch(df: object, batch_id: int) -> None:
        from pyspark.sql import DataFrame

        assert isinstance(df, DataFrame)
        df.selectExpr("value AS id").repartition(2, "id").mapInArrow(_same, schema).collect()
        done.append(batch_id)

    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 100).load()
        .writeStream.foreachBatch(batch).start()
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while len(done) < 3 and query.isActive and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


def make_archive(final: Path) -> bool:
    """Run a session that dumps its classes at exit and move the archive to ``final``;
    whether it is there now."""
    from pyspark import SparkContext

    from headwater.spark.session import build_session

    for stale in final.parent.glob(final.name + ".*.tmp"):  # left by makers that died
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > LOCK_STALE_S:
                stale.unlink()
    temporary = final.with_name(f"{final.name}.{os.getpid()}.tmp")
    flags = f"-Duser.timezone=UTC -XX:ArchiveClassesAtExit={temporary} {QUIET}"
    proc: subprocess.Popen[bytes] | None = None
    try:
        spark = build_session(
            "local[2]", "headwater-cds-archive", conf={"spark.driver.extraJavaOptions": flags}
        )
        proc = getattr(SparkContext._gateway, "proc", None)
        try:
            _exercise(spark)
        finally:
            spark.stop()
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()  # the gateway exits, and the JVM dumps its classes
            if proc.wait(DUMP_WAIT_S) == 0 and temporary.exists():
                os.replace(temporary, final)
    finally:
        if proc is not None and proc.poll() is None:  # failed: no dump after we are gone
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):
            temporary.unlink()
        with contextlib.suppress(OSError):
            final.with_name(final.name + ".lock").unlink()
    return final.exists()


if __name__ == "__main__":
    sys.exit(0 if make_archive(Path(sys.argv[1])) else 1)
