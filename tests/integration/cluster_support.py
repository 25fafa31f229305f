"""A Spark standalone cluster for tests: a master and workers started from PySpark's own
launcher (``$SPARK_HOME/bin/spark-class``, SPARK_HOME = the pyspark package directory),
each worker in its own mount namespace with a private tmpfs over ``/tmp``, so that it
sees none of the driver's, the reader's or the test's directories (pytest's ``tmp_path``
is under /tmp), as on separate machines. ``shared`` is a directory outside /tmp (under
/var/tmp) that every process sees at the same path: the workers' work directories
(executor logs) live there, and tests put "shared" file sink paths there.

Workers get a minimal environment (no HW_* or password variables of the test). The
Python executors run is the driver's ``PYSPARK_PYTHON`` (the same venv path exists on
the workers: /work is not masked), as ``spark.pyspark.python`` would be on a real cluster.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyspark

__all__ = ["SPARK_HOME", "Cluster", "standalone_cluster"]

SPARK_HOME = os.path.dirname(pyspark.__file__)


@dataclass
class Cluster:
    master: str
    shared: Path
    work_dirs: list[Path]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "JAVA_HOME")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
    return env


@contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, timeout: float = 240) -> Iterator[Cluster]:
    shared = Path("/var/tmp") / f"headwater-cluster-{uuid.uuid4().hex[:12]}"
    shared.mkdir(parents=True)
    port, ui = _free_port(), _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    spark_class = os.path.join(SPARK_HOME, "bin", "spark-class")
    try:
        with (shared / "master.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.master.Master", "--host",
                     "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                    stdout=log, stderr=subprocess.STDOUT, env=_env(), start_new_session=True,
                )
            )  # fmt: skip
        work_dirs = []
        for i in range(workers):
            work = shared / f"worker-{i}"
            work.mkdir()
            work_dirs.append(work)
            script = (
                "set -e; mount --make-rprivate /; mount -t tmpfs tmpfs /tmp;"
                f" exec {spark_class} org.apache.spark.deploy.worker.Worker --host 127.0.0.1"
                f" --cores {cores} --memory 1g --work-dir {work} --webui-port 0"
                f" spark://127.0.0.1:{port}"
            )
            with (shared / f"worker-{i}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        ["unshare", "--mount", "sh", "-c", script],
                        stdout=log, stderr=subprocess.STDOUT, env=_env(),
                        start_new_session=True,
                    )
                )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                    state = orjson.loads(r.read())
                if int(state.get("aliveworkers", 0)) >= workers:
                    break
            except OSError:
                pass
            for p in procs:
                assert p.poll() is None, (shared / "master.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the standalone cluster did not come up"
            time.sleep(0.5)
        yield Cluster(f"spark://127.0.0.1:{port}", shared, work_dirs)
    finally:
        for p in reversed(procs):
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(shared, ignore_errors=True)
