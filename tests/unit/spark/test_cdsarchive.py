"""The JVM's class data sharing archive (issue #17, restart time): the flags that use it,
one maker at a time, stale locks taken over (headwater.spark.cdsarchive)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from headwater.spark import cdsarchive


@pytest.fixture
def tmpdir_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    return tmp_path


def test_archive_is_named_for_the_java_and_spark_install(tmpdir_is: Path) -> None:
    path = cdsarchive.archive_path()
    assert path.parent == tmpdir_is
    assert path.name.startswith("headwater-spark-") and path.suffix == ".jsa"
    assert path == cdsarchive.archive_path()  # stable within an install


def test_existing_archive_is_used_and_its_notices_kept_quiet(tmpdir_is: Path) -> None:
    path = cdsarchive.archive_path()
    path.write_bytes(b"archive")
    flags = cdsarchive.java_options()
    assert flags.split() == [
        f"-XX:SharedArchiveFile={path}",
        "-Xlog:cds=off",
        "-Xlog:cds+dynamic=off",
    ]


def test_no_archive_no_flags_and_a_running_maker_is_not_doubled(tmpdir_is: Path) -> None:
    path = cdsarchive.archive_path()
    lock = path.with_name(path.name + ".lock")
    lock.write_bytes(b"")  # a maker is running
    assert cdsarchive.java_options() == ""
    assert not cdsarchive._lock(path)
    assert lock.exists()


def test_stale_lock_is_taken_over(tmpdir_is: Path) -> None:
    path = cdsarchive.archive_path()
    lock = path.with_name(path.name + ".lock")
    lock.write_bytes(b"")
    old = time.time() - cdsarchive.LOCK_STALE_S - 10
    os.utime(lock, (old, old))
    assert cdsarchive._lock(path)
    assert lock.stat().st_mtime > old + 5  # a fresh lock, this maker's
    assert not cdsarchive._lock(path)


def test_without_make_nothing_is_started(tmpdir_is: Path) -> None:
    path = cdsarchive.archive_path()
    assert cdsarchive.java_options(make=False) == ""
    assert not path.with_name(path.name + ".lock").exists()
