"""A pipeline whose sink fails fails like every other command (issues #14, #16): exit 2,
one ``headwater: error:`` line naming the table, the key and the sequence to resume from,
no Spark/py4j trace; the trace only with ``--log-level debug``. And a target password
variable that the driver lacks is refused at start, before any Spark task."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.sandbox import MariadbSandbox
from tests.integration.test_pipeline_e2e import reader, write_config  # noqa: F401
from tests.integration.test_reader_capture import Running, wait_caught_up

pytestmark = pytest.mark.integration


def run_cli(config: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    err = config.parent / f"stderr-{len(list(config.parent.glob('stderr-*')))}.txt"
    with err.open("w") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "headwater.cli.main", "pipeline", "run", "--config",
             str(config), "--available-now", *extra],
            stdout=subprocess.DEVNULL, stderr=out, timeout=600, env=env,
        )  # fmt: skip
    return proc.returncode, err.read_text()


def test_sink_constraint_error_exits_2_with_one_line(
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    running, task_dir = reader
    dst = f"{db}_fail"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`", f"CREATE DATABASE `{dst}`")
    # The target refuses the second row: a CHECK constraint the source does not have.
    mariadb_target.execute(
        "CREATE TABLE uq (id INT PRIMARY KEY, v INT, CONSTRAINT small CHECK (v < 10))",
        database=dst,
    )
    mariadb.execute(
        "CREATE TABLE uq (id INT PRIMARY KEY, v INT)",
        "INSERT INTO uq VALUES (1, 5)",
        "INSERT INTO uq VALUES (2, 50)",
        database=db,
    )
    wait_caught_up(running.task, mariadb)
    config = write_config(
        tmp_path / "pipeline.yaml", task_dir, src_db=db, dst_db=dst,
        target=mariadb_target, name="fail", ddl="skip", sliced=False,
    )  # fmt: skip

    status, stderr = run_cli(config)
    errors = [line for line in stderr.splitlines() if line.startswith("headwater: error:")]
    assert status == 2, stderr[-3000:]
    assert len(errors) == 1, stderr[-3000:]
    line = errors[0]
    assert f"{dst}.uq" in line and "key" in line and "resume from sequence" in line, line
    assert "Traceback" not in stderr and "py4j" not in stderr, stderr[-3000:]
    assert "at org.apache" not in stderr, stderr[-3000:]
    # After Spark's start-up banner: only progress lines and the error line.
    after = stderr.split("pipeline fail: started\n", 1)[1].splitlines()
    assert all(x.startswith(("pipeline fail: batch=", "headwater: error:")) for x in after), after

    status, stderr = run_cli(config, "--log-level", "debug")
    assert status == 2
    assert "Traceback" in stderr  # the whole trace, at debug only
    assert sum(line.startswith("headwater: error:") for line in stderr.splitlines()) == 1


def test_target_password_variable_missing_on_the_driver_fails_at_start(
    mariadb_target: MariadbSandbox, tmp_path: Path
) -> None:
    task_dir = tmp_path / "task"
    (task_dir / "changes").mkdir(parents=True)
    config = write_config(
        tmp_path / "pipeline.yaml", task_dir, src_db="a", dst_db="b",
        target=mariadb_target, name="nopw",
    )  # fmt: skip
    config.write_text(
        config.read_text().replace(
            "    user: root\n", "    user: root\n    password_env: HW_NOPE\n"
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "HW_NOPE"}
    status, stderr = run_cli(config, env=env)
    assert status == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("headwater: error:")]
    assert len(errors) == 1 and "HW_NOPE" in errors[0] and "sinks[0]" in errors[0], stderr
    assert "Traceback" not in stderr
