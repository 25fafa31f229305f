"""The operations console in a real browser: headless Debian Chromium (driven by
playwright-core, ``console_browser.js``) logs in with the token as HTTP Basic password and
reads ``/console`` of a live reader while a pipeline streams from it into MariaDB.

Real parts: the session's MariaDB as source, a :class:`ReaderService` serving its HTTP
API, local Spark running a :class:`PipelineRunner` that reports its status to the reader,
the target MariaDB. ``make setup`` installs Chromium and playwright-core."""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.config import parse_reader_config
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.runner import PipelineRunner
from headwater.reader.service import ReaderService
from headwater.sandbox import MariadbSandbox
from tests.integration.server_support import Http

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "console-browser-token"
ROWS = 120


class Browser:
    """``console_browser.js`` in a node process: one JSON command, one JSON answer."""

    def __init__(self) -> None:
        env = {**os.environ, "NODE_PATH": str(ROOT / ".browser" / "node_modules")}
        self.proc = subprocess.Popen(
            ["node", str(Path(__file__).with_name("console_browser.js"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def __call__(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline() or '{"error": "browser gone"}')
        assert "error" not in answer, f"{op}: {answer['error']}"
        return answer["ok"]

    def close(self) -> None:
        try:
            self("close")
        finally:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
            self.proc.stdout.close()


@pytest.fixture
def browser() -> Iterator[Browser]:
    b = Browser()
    try:
        yield b
    finally:
        b.close()


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _between(before: str, shown: str, after: str, sep: str) -> bool:
    """Whether ``shown`` has the prefix of both and a number between theirs (a GTID
    ``d-s-N``, a position ``d:s:N:0``)."""
    parts = [text.split(sep) for text in (before, shown, after)]
    index = 2  # the sequence number, the offset
    prefixes = {tuple(p[:index]) for p in parts}
    low, mid, high = (int(p[index]) for p in parts)
    return len(prefixes) == 1 and low <= mid <= high


def test_console_shows_the_task_and_the_pipeline_and_turns_a_stopped_pipeline_red(
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    spark: Any,
    browser: Browser,
    tmp_path: Path,
) -> None:
    mariadb.execute(f"CREATE TABLE `{db}`.item (id INT PRIMARY KEY, qty INT)")
    file, offset = mariadb.binlog_position()
    (tmp_path / "token").write_text(TOKEN + "\n")
    reader_config = parse_reader_config(
        f"""data_dir: {tmp_path / "data"}
server: {{listen: "127.0.0.1:0", token_file: {tmp_path / "token"}}}
sources:
  - name: live
    host: {mariadb.host}
    port: {mariadb.port}
    user: root
    server_id: 9231
    heartbeat_period: 0.5
    heartbeat: {{table: {db}.heartbeat, interval: 0.5}}
    start: {{file: {file}, offset: {offset}}}
    filters: {{include: ['{db}\\..*']}}
""",
        env={},
    )
    for first in range(0, ROWS, 40):  # three transactions
        values = ", ".join(f"({i}, {i * 2})" for i in range(first, first + 40))
        mariadb.execute(f"INSERT INTO `{db}`.item VALUES {values}")
    dst = f"{db}_console"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
    service = ReaderService(reader_config)
    service.start()
    stop = threading.Event()
    pipeline: threading.Thread | None = None
    try:
        assert service.server is not None
        url = service.server.url
        http = Http(url, token=TOKEN)
        task = service.tasks["live"]
        wait_for(lambda: task.transactions_stored >= 3, 30, "the reader to store 3 transactions")
        pipeline_file = tmp_path / "pipeline.yaml"
        pipeline_file.write_text(
            f"""name: console-e2e
source:
  server: {url}
  task: live
  tables: [{db}.item]
  token_file: {tmp_path / "token"}
checkpoint: {tmp_path / "ck"}
progress: 1
monitoring: {{lag_warning_s: 3600}}
transforms:
  - rename_database: {{{db}: {dst}}}
sinks:
  - type: mysql
    host: {mariadb_target.host}
    port: {mariadb_target.port}
    user: root
    create_tables: true
    schema_file: {tmp_path / "data" / "live" / "schema.jsonl"}
"""
        )
        runner = PipelineRunner(load_pipeline_config(pipeline_file), spark=spark)
        failures: list[BaseException] = []

        def run() -> None:
            try:
                runner.run(stop=stop, progress=io.StringIO())
            except BaseException as e:
                failures.append(e)

        pipeline = threading.Thread(target=run, name="pipeline", daemon=True)
        pipeline.start()

        def target_rows() -> int:
            try:
                return int(mariadb_target.query(f"SELECT COUNT(*) FROM `{dst}`.item")[0][0])
            except Exception:  # the sink has not created the table yet
                return 0

        last: list[Any] = [None]

        def reported() -> dict[str, Any] | None:
            assert not failures, failures
            [last[0]] = http.get("/v1/pipelines").json()["pipelines"] or [None]
            return last[0] if last[0] and last[0]["rows_out_total"] == ROWS else None

        wait_for(lambda: target_rows() == ROWS, 90, f"{ROWS} rows in the target")
        wait_for(reported, 30, f"the pipeline's report of its rows (last: {last})")
        info = http.get("/v1/info").json()["tasks"]["live"]

        assert browser("open", url=f"{url}/console", user="ops", password=TOKEN)["status"] == 200
        [row] = browser("rows", selector="tr.task")
        assert row["class"] == "task ok"
        assert row["fields"]["task"] == "live"
        assert row["fields"]["state"] == "running"
        # Heartbeats move the GTID set and position on: the page shows values between
        # the two /v1/info answers around it.
        after = http.get("/v1/info").json()["tasks"]["live"]
        assert _between(info["gtid_set"], row["fields"]["gtid_set"], after["gtid_set"], "-")
        seqs = (info["latest"]["seq"], int(row["fields"]["latest_seq"]), after["latest"]["seq"])
        assert seqs[0] <= seqs[1] <= seqs[2], seqs  # the heartbeat's rows are stored too
        position = row["fields"]["position"]
        assert _between(info["status"]["position"], position, after["status"]["position"], ":")
        assert row["fields"]["change_id"] == str(info["status"]["change_id"])
        [prow] = browser("rows", selector="tr.pipeline")
        assert prow["class"] == "pipeline ok", prow
        assert prow["fields"]["pipeline"] == "console-e2e"
        assert prow["fields"]["source"] == "live"
        assert prow["fields"]["rows_out_total"] == str(target_rows()) == str(ROWS)
        assert prow["fields"]["rows_in_total"] == str(ROWS)
        assert int(prow["fields"]["batches"]) >= 1
        assert float(prow["fields"]["lag_seconds"]) < 3600

        def lag_points() -> int:
            browser("reload")
            [points] = browser("attrs", selector='svg.lag[data-task="live"]', name="data-points")
            return int(points) if int(points) >= 2 else 0

        assert wait_for(lag_points, 20, "two points in the lag chart") >= 2
        polyline = browser("attrs", selector='svg.lag[data-task="live"] polyline', name="points")
        assert len(polyline[0].split()) >= 2
        shot = tmp_path / "console.png"
        browser("screenshot", path=str(shot))
        print(f"console screenshot: {shot}")
        assert shot.stat().st_size > 10_000

        stop.set()
        stopped = time.monotonic()
        pipeline.join(timeout=60)
        assert not pipeline.is_alive() and not failures, failures
        interval = 1.0  # the pipeline's progress:
        browser("reload")
        browser(
            "wait",
            selector='tr.pipeline.red[data-pipeline="console-e2e"]',
            timeout_ms=int(interval * 1000),
        )
        assert time.monotonic() - stopped < 60
        [prow] = browser("rows", selector="tr.pipeline")
        assert prow["fields"]["state"] == "stopped" and prow["fields"]["why"] == "stopped"
        browser("screenshot", path=str(tmp_path / "console-stopped.png"))
        print(f"console screenshot after the stop: {tmp_path / 'console-stopped.png'}")
    finally:
        stop.set()
        if pipeline is not None:
            pipeline.join(timeout=60)
        service.stop()
        mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
