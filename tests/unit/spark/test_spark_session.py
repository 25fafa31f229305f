"""The worker launcher of headwater.spark.session: PySpark's zips and the spark-core jar
leave PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from headwater.spark.session import worker_launcher


def test_launcher_drops_spark_zips_and_jar_and_runs_this_interpreter(tmp_path: Path) -> None:
    kept = str(tmp_path / "kept")
    path = ":".join(
        [
            "/opt/spark/python/lib/pyspark.zip",
            kept,
            "/opt/spark/python/lib/py4j-0.10.9.9-src.zip",
            "/x/y",
            "/opt/spark/jars/spark-core_2.13-4.3.0.jar",
        ]
    )
    launcher = worker_launcher()
    assert worker_launcher() == launcher  # one file per interpreter
    assert os.access(launcher, os.X_OK)
    out = subprocess.run(
        [
            str(launcher),
            "-c",
            "import os, sys; print(os.environ['PYTHONPATH']); print(sys.executable)",
        ],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out == [f"{kept}:/x/y", sys.executable]


def test_launcher_with_an_empty_pythonpath() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [str(worker_launcher()), "-c", "import os; print(repr(os.environ.get('PYTHONPATH')))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "''"
