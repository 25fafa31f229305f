"""A large transaction is stored in bounded chunks and the reader's memory stays bounded.

The reader runs as a subprocess (``headwater reader run``); its peak RSS (``VmHWM`` in
``/proc/<pid>/status``) is read after a warm-up transaction and again after one
transaction of ``HEADWATER_BIG_TXN_MB`` megabytes of binlog (default 200; set 1024 for the
1 GB variant). The growth must stay under a bound that does not depend on the size.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from headwater.binlog.framing import FormatDescription
from headwater.changes import decode_record, iter_payload_events
from headwater.reader.task import read_task_status
from tests.integration.test_reader_capture import stored_records, wait_for

MB = 1024 * 1024
SIZE_MB = int(os.environ.get("HEADWATER_BIG_TXN_MB", "200"))
CHUNK = 4 * MB
#: Peak RSS growth allowed, whatever the transaction size: chunk buffers, the framer's
#: receive buffers, the store's pending writes and memory tail (32 MiB each at most).
BOUND = 120 * MB


def _hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.slow
def test_a_large_transaction_is_chunked_with_bounded_memory(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    server = sandbox_factory(server_id=51, extra=("--max-binlog-cache-size=4G",))
    server.execute(
        "CREATE DATABASE big",
        "CREATE TABLE big.t (id INT PRIMARY KEY, a VARCHAR(1000), b VARCHAR(1000))",
    )
    config = tmp_path / "reader.yaml"
    config.write_text(
        f"""
data_dir: {tmp_path / "data"}
sources:
  - name: big
    host: {server.host}
    port: {server.port}
    user: root
    server_id: 7501
    start: latest
    chunk_bytes: {CHUNK}
    heartbeat_period: 0.5
    state_interval: 0.2
"""
    )
    task_dir = tmp_path / "data" / "big"
    with open(tmp_path / "reader.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli.main", "reader", "run", "--config", str(config)],
            stderr=log,
        )
    try:

        def caught_up() -> bool:
            target = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
            st = read_task_status(task_dir)
            return st.get("pid") == proc.pid and st.get("gtid_set") == target

        wait_for(lambda: read_task_status(task_dir).get("state") == "running", 60, "start")
        server.execute("INSERT INTO big.t VALUES (0, 'warm', 'up')")
        wait_for(caught_up, 60, "the warm-up")
        before = _hwm(proc.pid)
        rows = SIZE_MB * MB // 2100
        server.execute(
            "INSERT INTO big.t SELECT seq, RPAD(MD5(seq), 1000, 'x'), RPAD(SHA1(seq), 1000, 'y') "
            f"FROM seq_1_to_{rows}",
            database="big",
        )
        wait_for(caught_up, 600, "the large transaction")
        growth = _hwm(proc.pid) - before
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert growth < BOUND, f"peak RSS grew {growth / MB:.0f} MiB for a {SIZE_MB} MB transaction"

    records = stored_records(task_dir)
    chunks = records[1:]
    assert len(chunks) >= SIZE_MB * MB // CHUNK * 9 // 10
    assert chunks[0].first_chunk and not chunks[0].last_chunk and chunks[-1].last_chunk
    assert [c.chunk_no for c in chunks] == list(range(len(chunks)))
    assert all(len(c.payload) <= CHUNK + 64 * 1024 for c in chunks)
    assert len({(c.position.file_num, c.position.offset) for c in chunks}) == 1
    indexes = [c.position.event_index for c in chunks]
    assert indexes == sorted(indexes) and len(set(indexes)) == len(indexes)
    # Each chunk decodes on its own (it repeats the TABLE_MAP), and all rows are there.
    fde = FormatDescription.parse((task_dir / "fde.bin").read_bytes())
    middle = chunks[len(chunks) // 2]
    assert next(iter_payload_events(middle.payload)).type_code == 19  # TABLE_MAP first
    assert decode_record(middle, source="t", fde=fde)
    total = sum(len(decode_record(c, source="t", fde=fde)) for c in chunks)
    assert total == rows
    # Tables list the rows of each chunk (the chunks add up to the transaction).
    assert all(c.tables and c.tables[0][0] == "big.t" for c in chunks)
    assert sum(n for c in chunks for _, n in c.tables) == rows
