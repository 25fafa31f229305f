"""``headwater snapshot`` killed with SIGKILL midway and run again resumes at chunk
granularity: the chunks done before the kill are not read again (same wave, same high
watermark in the state file), every planned chunk is done exactly once, the plan is the
same, and the target equals the source. On both paths of a chunk: bulk (a rename-only
pipeline into MariaDB) and general (a pipeline with a filter)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.sandbox import MariadbSandbox
from headwater.snapshot.state import SnapshotState
from tests.integration.snapshot_support import SHAPES, assert_equal, capture, pipeline_yaml
from tests.integration.test_reader_capture import Running, wait_caught_up


@pytest.fixture
def small(mariadb: MariadbSandbox, db: str, tmp_path: Path) -> Iterator[tuple[Running, Path]]:
    yield from capture(mariadb, db, tmp_path, 600)


def snapshot_command(config: Path, db: str, server: MariadbSandbox) -> list[str]:
    return [
        sys.executable, "-m", "headwater.cli.main", "snapshot", "--config", str(config),
        "--tables", ",".join(f"{db}.{t}" for t in SHAPES),
        "--source", f"mysql://root@{server.host}:{server.port}",
        "--chunk-rows", "100", "--wave-chunks", "2", "--timeout", "30",
    ]  # fmt: skip


def done_chunks(state_path: Path) -> dict[str, dict[str, object]]:
    try:
        state = SnapshotState.load(str(state_path))
    except Exception:  # the file is replaced atomically; a failed parse would be a bug
        raise
    return {} if state is None else dict(state.done)


@pytest.mark.parametrize("path", ["bulk", "rows"], ids=["bulk", "general"])
def test_killed_snapshot_resumes_without_duplicate_or_lost_chunks(
    path: str,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    small: tuple[Running, Path],
    tmp_path: Path,
) -> None:
    running, task_dir = small
    dst = f"{db}_copy"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`", "DROP DATABASE IF EXISTS hw_snap")
    # A filter that keeps every row still edits rows in Spark: the general path.
    extra = "" if path == "bulk" else '  - filter: "true"\n'
    config = pipeline_yaml(tmp_path / "p.yaml", task_dir, src=db, dst=dst, target=mariadb_target,
                           transforms=extra)  # fmt: skip
    state_path = tmp_path / "ck" / "snapshot.json"
    wait_caught_up(running.task, mariadb)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    cmd = snapshot_command(config, db, mariadb)
    with (tmp_path / "first.log").open("wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 120
        while len(done_chunks(state_path)) < 6:
            assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the snapshot made no progress"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    before = SnapshotState.load(str(state_path))
    assert before is not None
    planned = before.chunk_ids()
    assert 0 < len(before.done) < len(planned), "killed midway"

    second = subprocess.run(cmd, capture_output=True, env=env, timeout=240, check=False)
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    result = json.loads(second.stdout.decode().strip().splitlines()[-1])
    after = SnapshotState.load(str(state_path))
    assert after is not None and after.snapshot_id == before.snapshot_id
    assert after.chunk_ids() == planned
    assert sorted(after.done) == sorted(planned), "every chunk done, none twice"
    assert {d["path"] for d in after.done.values()} == {path}
    for chunk, entry in before.done.items():
        assert after.done[chunk] == entry, f"{chunk} was read again after the resume"
    assert min(d["wave"] for c, d in after.done.items() if c not in before.done) > before.wave
    assert result["progress"]["chunks_done"] == len(planned)
    assert "snapshot " in second.stderr.decode() and "chunks" in second.stderr.decode()
    assert_equal(mariadb, db, mariadb_target, dst)
