"""A log source's heartbeat lag is measured to the sinks' commit (headwater.logs.lag).

A pipeline (in process, on the tests' Spark session) structures a log whose heartbeat
lines carry the wall-clock time they were written into MariaDB; the batch's commit is
recorded by MariaDB itself (``headwater_checkpoint.applied_at``, set in the sink's
transaction just before it commits). The pipeline's status and metrics must report:

* ``committed_at`` no earlier than MariaDB's ``applied_at`` of that batch: the lag runs
  to the sink's commit, past the moment the batch was cut (``read_ts`` in the heartbeat
  rows, earlier still);
* ``lag_seconds`` = ``committed_at`` minus the newest heartbeat's time, and
  ``max_lag_seconds`` the same for the oldest, to the millisecond;
* the same lag in ``metrics.prom`` (``headwater_pipeline_heartbeat_lag_seconds``).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.runner import PipelineRunner
from headwater.sandbox import MariadbSandbox

pytestmark = pytest.mark.integration

CONFIG = r"""
name: logs-lag
checkpoint: {ck}
source:
  logs:
    name: app
    path: {logdir}
    files: "app.log*"
    database: {db}
    idle_ms: 0
    heartbeat:
      regex: 'HEARTBEAT sent=(?P<ts>\S+ \S+)'
      format: 'yyyy-MM-dd HH:mm:ss,SSS'
    groups:
      - name: req
        table: requests
        columns: {{path: string}}
        operators:
          - extract: {{regex: 'request path=(?P<path>\S+)'}}
sinks:
  - type: mysql
    host: {host}
    port: {port}
    user: root
    create_tables: true
    checkpoint_database: {db}_ck
"""


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


@pytest.mark.timeout(600)
def test_heartbeat_lag_runs_to_the_sink_commit(
    spark: Any, mariadb_target: MariadbSandbox, tmp_path: Path
) -> None:
    db = f"lag_{os.getpid()}"
    logdir = tmp_path / "logs"
    logdir.mkdir()
    sent = []
    with (logdir / "app.log").open("w") as f:
        for i in range(30):
            if i % 10 == 9:
                now = dt.datetime.now(dt.UTC)
                now = now.replace(microsecond=now.microsecond // 1000 * 1000)
                sent.append(now)
                f.write(f"HEARTBEAT sent={_stamp(now)}\n")
                time.sleep(0.05)  # heartbeats some milliseconds apart: newest != oldest
            else:
                f.write(f"request path=/p/{i}\n")
    text = CONFIG.format(ck=tmp_path / "ck", logdir=logdir, db=db,
                         host=mariadb_target.host, port=mariadb_target.port)  # fmt: skip
    config = parse_pipeline_config(text, base=tmp_path)
    runner = PipelineRunner(config, spark=spark)
    runner.run(available_now=True, progress=io.StringIO())

    status = json.loads((tmp_path / "ck" / "status.json").read_text())
    beat = status["heartbeat"]
    assert beat is not None, status
    # one row per source and shard, all written by the batch's transaction
    [(batch_id, applied_at)] = mariadb_target.query(
        f"SELECT batch_id, UNIX_TIMESTAMP(MAX(applied_at)) FROM `{db}_ck`.headwater_checkpoint"
        " GROUP BY batch_id"
    )
    [(read_ts,)] = mariadb_target.query(
        f"SELECT UNIX_TIMESTAMP(MAX(read_ts)) FROM `{db}`.heartbeat"
    )
    assert mariadb_target.query(f"SELECT COUNT(*) FROM `{db}`.heartbeat")[0][0] == len(sent)
    assert (beat["batch_id"], beat["beats"]) == (batch_id, len(sent))
    assert beat["sent_at"] == pytest.approx(sent[-1].timestamp(), abs=1e-6)
    # the end of the lag: after the sink's transaction, itself after the batch was cut
    assert float(read_ts) <= float(applied_at) <= beat["committed_at"]
    assert beat["lag_seconds"] == round(beat["committed_at"] - sent[-1].timestamp(), 3)
    assert beat["max_lag_seconds"] == round(beat["committed_at"] - sent[0].timestamp(), 3)
    assert beat["max_lag_seconds"] > beat["lag_seconds"] > 0
    metrics = _samples((tmp_path / "ck" / "metrics.prom").read_text())
    labels = '{pipeline="logs-lag"}'
    assert metrics[f"headwater_pipeline_heartbeat_lag_seconds{labels}"] == beat["lag_seconds"]
    assert metrics[f"headwater_pipeline_heartbeat_sent_timestamp_seconds{labels}"] == (
        pytest.approx(sent[-1].timestamp(), abs=1e-6)
    )
