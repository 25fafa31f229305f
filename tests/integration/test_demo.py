"""``headwater demo`` as a user runs it (a subprocess, short settings): the last line is
``demo verified tables=4 rows=<m> mismatches=0`` with exit 0; a target row changed behind
the pipeline's back (``--alter-target``) makes verify report exactly that key, exit 1."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "demo", "--rows", "300", "--seconds", "4",
         *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_demo_ends_verified_with_no_mismatch() -> None:
    done = _demo()
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines[-1].startswith("demo verified tables=4 rows=")
    assert lines[-1].endswith(" mismatches=0")
    assert any(line.startswith("demo: snapshot rows=") for line in lines)
    assert "demo: starting a source and a target MariaDB" in done.stderr


def test_a_target_row_altered_behind_the_pipeline_fails_the_demo() -> None:
    done = _demo("--alter-target", "UPDATE customers SET name = 'mallory' WHERE id = 7")
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stderr[-3000:]
    assert "  different: id=7 (name)" in lines
    assert [line for line in lines if line.startswith("  ")] == ["  different: id=7 (name)"]
    assert lines[-1].endswith(" mismatches=1")
