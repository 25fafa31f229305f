"""A quiet terminal (issue 23): the JVM's start-up lines (incubator modules, loopback host
name, native-hadoop, log4j profile) reach the logger ``headwater.spark.jvm`` at DEBUG, not
the terminal. A real JVM in a child process, so this test's session is not the one started."""

from __future__ import annotations

import subprocess
import sys

import pytest

from headwater.spark.session import _jvm_line_level

pytestmark = pytest.mark.integration

SCRIPT = """
import logging, sys, warnings
warnings.simplefilter("ignore", FutureWarning)
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
shown = logging.StreamHandler(sys.stdout)
shown.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
jvm = logging.getLogger("headwater.spark.jvm")
jvm.setLevel(logging.DEBUG)
jvm.addHandler(shown)
jvm.propagate = False
from headwater.spark.session import build_session
spark = build_session("local[1]", "quiet-test")
spark.sparkContext.setLogLevel("OFF")
print("rows", spark.range(5).count(), flush=True)
spark.stop()
"""

START_UP = (
    "Using incubator modules",
    "resolves to a loopback address",
    "native-hadoop",
    "default log4j profile",
)


def test_jvm_start_up_lines_go_to_the_log_at_debug_not_to_the_terminal() -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr
    assert "rows 5" in run.stdout
    for text in START_UP:
        assert text not in run.stderr, run.stderr
        logged = [line for line in run.stdout.splitlines() if text in line]
        assert logged and all(line.startswith("DEBUG ") for line in logged), run.stdout


def test_other_jvm_lines_keep_their_level() -> None:
    assert _jvm_line_level("26/11/24 07:31:02 ERROR Executor: task failed") == 40
    assert _jvm_line_level("26/11/24 07:31:02 INFO SparkContext: Running Spark") == 20
    assert _jvm_line_level("Exception in thread main java.lang.OutOfMemoryError") == 30
    assert _jvm_line_level("WARNING: Using incubator modules: jdk.incubator.vector") == 10
