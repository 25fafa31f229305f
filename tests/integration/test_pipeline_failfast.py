"""A configuration error that only an executor sees fails the pipeline after ONE attempt
(issue #16): Spark retries a failed task ``spark.task.maxFailures`` times, which helps a
lost connection but only repeats a missing privilege. The master is ``local[2,4]``: four
attempts per task, as on a cluster (plain ``local[2]`` never retries), so a retried
configuration error would show four times in the target's general log.

The target user may write the checkpoint database (the driver's setup succeeds) but only
read the target database, so the first INSERT of the batch, on an executor, is refused
with ER_TABLEACCESS_DENIED_ERROR (1142). Attempts are counted from the target's general
log (``mysql.general_log``: every statement the server received, denied ones included,
https://mariadb.com/kb/en/general-query-log/). The same for a Redis sink whose login
the server refuses, counted by the server's connections.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headwater.sandbox import MariadbSandbox
from tests.integration.bus_support import redis_server  # noqa: F401
from tests.integration.test_pipeline_e2e import reader  # noqa: F401
from tests.integration.test_pipeline_failure import run_cli
from tests.integration.test_reader_capture import Running, wait_caught_up

pytestmark = pytest.mark.integration


def test_missing_privilege_on_the_target_fails_after_one_attempt(
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    running, task_dir = reader
    dst = f"{db}_ff"[:60]
    user = f"hw_ff_{abs(hash(db)) % 10**6}"
    mariadb_target.execute(
        f"DROP DATABASE IF EXISTS `{dst}`",
        f"CREATE DATABASE `{dst}`",
        f"CREATE TABLE `{dst}`.uq (id INT PRIMARY KEY, v INT)",
        f"DROP USER IF EXISTS '{user}'@'%'",
        f"CREATE USER '{user}'@'%'",
        "CREATE DATABASE IF NOT EXISTS headwater",
        f"GRANT ALL ON headwater.* TO '{user}'@'%'",
        f"GRANT SELECT ON `{dst}`.* TO '{user}'@'%'",
    )
    mariadb.execute(
        "CREATE TABLE uq (id INT PRIMARY KEY, v INT)",
        "INSERT INTO uq VALUES (1, 5), (2, 6)",
        database=db,
    )
    wait_caught_up(running.task, mariadb)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "name: ff\n"
        f"source:\n  path: {task_dir}\n"
        f"checkpoint: {tmp_path / 'ck'}\n"
        "progress: 1\n"
        "spark:\n  master: local[2,4]\n"
        f"transforms:\n  - rename_database: {{{db}: {dst}}}\n"
        "sinks:\n"
        f"  - type: mysql\n    host: {mariadb_target.host}\n    port: {mariadb_target.port}\n"
        f"    user: {user}\n    create_tables: false\n    shards: 1\n    ddl: skip\n"
    )
    mariadb_target.execute(
        "SET GLOBAL log_output = 'TABLE'",
        "TRUNCATE mysql.general_log",
        "SET GLOBAL general_log = 1",
    )
    try:
        status, stderr = run_cli(config)
    finally:
        mariadb_target.execute("SET GLOBAL general_log = 0")
    inserts = mariadb_target.query(
        "SELECT argument FROM mysql.general_log WHERE command_type = 'Query'"
        " AND user_host LIKE %s AND argument LIKE %s",
        (f"{user}[{user}]%", f"INSERT INTO `{dst}`.`uq`%"),
    )
    mariadb_target.execute(f"DROP USER IF EXISTS '{user}'@'%'", f"DROP DATABASE `{dst}`")
    errors = [line for line in stderr.splitlines() if line.startswith("headwater: error:")]
    assert status == 2, stderr[-3000:]
    assert len(errors) == 1, stderr[-3000:]
    assert f"{dst}.uq" in errors[0] and "INSERT" in errors[0], errors[0]
    assert "resume from sequence" in errors[0], errors[0]
    assert "Traceback" not in stderr, stderr[-3000:]
    # one attempt: the batch's INSERT once, then the one-row INSERT that finds the key
    assert [r[0].endswith("(1, 5), (2, 6) ON DUPLICATE KEY UPDATE `v` = VALUES(`v`)")
            for r in inserts] == [True, False], [r[0][:120] for r in inserts]  # fmt: skip


def test_refused_redis_login_fails_after_one_attempt(
    mariadb: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    redis_server: tuple[str, int],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The password comes from a variable of the driver's environment and is not the
    server's (``requirepass``, set for this test only), so the server refuses the login
    (WRONGPASS): a ConnectionError subclass to redis-py, but no retry can fix it. Attempts
    are counted by the server (``INFO stats``: total_connections_received)."""
    import redis

    running, task_dir = reader
    mariadb.execute("CREATE TABLE uq (id INT PRIMARY KEY, v INT)", "INSERT INTO uq VALUES (1, 5)",
                    database=db)  # fmt: skip
    wait_caught_up(running.task, mariadb)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "name: ffr\n"
        f"source:\n  path: {task_dir}\n"
        f"checkpoint: {tmp_path / 'ck'}\n"
        "progress: 1\n"
        "spark:\n  master: local[2,4]\n"
        "sinks:\n"
        f"  - type: redis\n    host: {redis_server[0]}\n    port: {redis_server[1]}\n"
        "    password_env: HW_FF_REDIS_PASSWORD\n    tasks: 1\n"
        "    topic: 'ff.{database}.{table}'\n    schema_topic: 'ffs.{database}.{table}'\n"
    )
    client = redis.Redis(host=redis_server[0], port=redis_server[1])
    client.ping()  # connected (and logged in) before the server asks for a password
    client.config_set("requirepass", "the-right-one")
    try:
        before = int(client.info("stats")["total_connections_received"])
        secret = "s3cret-not-shown"
        env = {**os.environ, "HW_FF_REDIS_PASSWORD": secret}
        status, stderr = run_cli(config, env=env)
        after = int(client.info("stats")["total_connections_received"])
        written = client.keys(f"ff.{db}.*")
    finally:
        client.config_set("requirepass", "")
        client.close()
    errors = [line for line in stderr.splitlines() if line.startswith("headwater: error:")]
    assert status == 2, stderr[-3000:]
    assert len(errors) == 1 and "refused the login" in errors[0], stderr[-3000:]
    assert f"{redis_server[0]}:{redis_server[1]}" in errors[0], errors[0]
    assert secret not in stderr
    assert "Traceback" not in stderr, stderr[-3000:]
    assert written == []
    assert after - before == 1, (before, after)
