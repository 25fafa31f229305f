"""A reader whose log loses its tail (``durability: none`` and a power cut) loses nothing.

``headwater reader run`` runs as a subprocess with ``durability: none`` while a workload
commits transactions; it is SIGKILLed at a random moment, and then, as a power cut would,
the tail of its active segment is damaged: truncated at a random point, or a byte flipped at
a random point, within the last ``TAIL`` bytes (which covers what was not yet synced, and
often records ``state.json`` already counts). 20 rounds. Before each damage the test reads
every record a consumer could have seen (what the head file acknowledged) and remembers its
seq and GTID. In the end:

* the log holds every transaction of the source's binlog for the filtered database exactly
  once, in binlog order, with the same row changes (the binlog files read independently);
* every seq a consumer saw in any round still names the same GTID: no seq was given to
  another transaction after the tail was lost and read again.

And when the source purged the binlog holding a lost range, the task stops with an error
naming it, appending nothing.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from headwater.config import FilterConfig, StoreConfig
from headwater.position import BinlogCoordinate, binlog_file_number
from headwater.reader.task import read_task_status
from headwater.sandbox import MariadbSandbox
from headwater.store import ChangeLog
from headwater.store.segment import SEG, parse_name, segment_name
from tests.integration.test_reader_capture import (
    Running,
    assert_same_changes,
    changes_of,
    oracle_transactions,
    source_config,
    start_at,
    wait_caught_up,
    wait_for,
    workload,
)

#: bench/reader_crash.py runs a longer soak through HEADWATER_CRASH_ROUNDS
ROUNDS = int(os.environ.get("HEADWATER_CRASH_ROUNDS", "20"))
TAIL = 16 * 1024


def _write_config(path: Path, server: MariadbSandbox, start: BinlogCoordinate, data: Path) -> None:
    (path.parent / "password").write_text("")  # the sandbox's root has none
    path.write_text(
        f"""
data_dir: {data}
sources:
  - name: cut
    host: {server.host}
    port: {server.port}
    user: root
    password_file: password
    server_id: 7311
    heartbeat_period: 0.5
    state_interval: 0.05
    start: {{file: {start.file}, offset: {start.offset}}}
    filters:
      include: ['k\\..*']
    reconnect: {{initial: 0.05, max: 0.5}}
    store: {{durability: none, segment_bytes: 262144}}
"""
    )


def _reader(config: Path) -> subprocess.Popen[bytes]:
    with open(config.parent / "reader.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "headwater.cli.main", "reader", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def _running(task_dir: Path, pid: int) -> bool:
    status = read_task_status(task_dir)
    assert status.get("state") != "failed", status
    return status.get("pid") == pid and status.get("state") == "running"


def _visible(changes: Path) -> dict[int, str]:
    """seq -> GTID of every whole transaction the head file acknowledges (what a consumer
    of this log could have read before the power cut)."""
    with ChangeLog.open(str(changes), read_only=True) as log, log.reader() as r:
        return {rec.seq: rec.gtid for rec in iter(lambda: r.next(0), None) if rec.last_chunk}


def _damage(changes: Path, rng: random.Random) -> str:
    """Truncate the active (newest) segment, or flip one byte of it, at a random point of
    its last TAIL bytes; returns what was done."""
    names = [parse_name(n) for n in os.listdir(changes)]
    path = changes / segment_name(max(p[0] for p in names if p is not None and p[1] == SEG))
    size = path.stat().st_size
    if size == 0:
        return f"{path.name} empty"
    at = rng.randrange(max(0, size - TAIL), size)
    if rng.random() < 0.5:
        os.truncate(path, at)
        return f"{path.name} truncated {size} -> {at}"
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
    return f"{path.name} byte {at} of {size} flipped"


@pytest.mark.slow
def test_lost_tails_are_read_again_and_no_seq_is_reused(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    server = sandbox_factory(server_id=23)
    server.execute("CREATE DATABASE k", "CREATE TABLE k.t (id INT PRIMARY KEY, v VARCHAR(40))")
    start = start_at(server).coordinate
    assert start is not None
    config = tmp_path / "reader.yaml"
    data = tmp_path / "data"
    _write_config(config, server, start, data)
    task_dir = data / "cut"
    changes = task_dir / "changes"
    stop = threading.Event()

    def load() -> None:
        conn = server.connect("k")
        i = 0
        with conn.cursor() as cur:
            while not stop.wait(0.002) and i < 2000 * ROUNDS:  # ~300 transactions/s
                if i % 10 == 0:
                    cur.execute("BEGIN")
                    for j in range(5):
                        cur.execute(f"INSERT INTO t VALUES ({1000000 + i * 10 + j}, 'batch')")
                    cur.execute("COMMIT")
                else:
                    cur.execute(f"INSERT INTO t VALUES ({i}, 'v{i}')")
                i += 1
        conn.close()

    writer = threading.Thread(target=load)
    writer.start()
    rng = random.Random(14)
    seen: dict[int, str] = {}
    damage: list[str] = []
    lost_rounds = 0
    try:
        for _ in range(ROUNDS):
            proc = _reader(config)
            wait_for(lambda p=proc: _running(task_dir, p.pid), 60, "the reader to run")
            threading.Event().wait(rng.uniform(0.2, 0.8))  # reads (and re-reads) a while
            proc.kill()
            proc.wait(10)
            status = read_task_status(task_dir)
            assert status.get("state") != "failed", status
            if not changes.exists():
                continue
            visible = _visible(changes)
            for seq, gtid in visible.items():
                assert seen.setdefault(seq, gtid) == gtid, (
                    f"seq {seq} was {seen[seq]}, now {gtid} (after {damage})"
                )
            damage.append(_damage(changes, rng))
            if len(_visible_after_recovery(changes)) < len(visible):
                lost_rounds += 1
    finally:
        stop.set()
        writer.join(60)
    proc = _reader(config)
    try:
        target = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
        wait_for(
            lambda: (
                read_task_status(task_dir).get("pid") == proc.pid
                and read_task_status(task_dir).get("gtid_set") == target
            ),
            90,
            "the restarted reader to catch up",
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "reader.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    final = _visible(changes)
    assert sorted(final) == list(range(1, len(final) + 1))
    # Exactly once and in order: the source's transactions on k, in binlog order.
    fde, expected = oracle_transactions(server, start)
    want = list(dict.fromkeys(c[0] for c in changes_of(expected, fde, "k")))
    assert [final[s] for s in sorted(final)] == want
    assert_same_changes(server, start, task_dir, "k")
    # No seq a consumer saw names another transaction now.
    changed = {s: (g, final.get(s)) for s, g in seen.items() if final.get(s) != g}
    assert not changed, f"seqs reused: {list(changed.items())[:5]} (damage: {damage})"
    # The damage did cut acknowledged transactions in most rounds (else nothing was tested).
    assert lost_rounds >= ROUNDS // 2, (lost_rounds, damage)


def _visible_after_recovery(changes: Path) -> dict[int, str]:
    """What a writer's recovery keeps of the damaged log (opened as the reader would)."""
    with ChangeLog.open(str(changes)) as log, log.reader() as r:
        return {rec.seq: rec.gtid for rec in iter(lambda: r.next(0), None) if rec.last_chunk}


def test_a_lost_tail_the_source_purged_stops_the_task_naming_the_range(
    sandbox_factory: Any, tmp_path: Path
) -> None:
    server = sandbox_factory(server_id=24)
    server.execute("CREATE DATABASE k", "CREATE TABLE k.t (id INT PRIMARY KEY, v VARCHAR(40))")
    config = source_config(
        server,
        "purged",
        start=start_at(server),
        filters=FilterConfig(include=(r"k\..*",)),
        store=StoreConfig(durability="none"),
    )
    task_dir = tmp_path / "purged"
    run = Running(config, task_dir)
    try:
        workload(server, "k", 30)
        wait_caught_up(run.task, server)
    finally:
        run.stop()
    stored = _visible(task_dir / "changes")
    # Half the active segment is lost (a power cut), and the source purges that binlog.
    seg = task_dir / "changes" / segment_name(1)
    os.truncate(seg, seg.stat().st_size // 2)
    kept = _visible_after_recovery(task_dir / "changes")
    assert 0 < len(kept) < len(stored)
    old = server.binlog_position()[0]
    server.execute("FLUSH BINARY LOGS")

    def purged() -> bool:
        # The server keeps a file a (just closed) dump thread still reads: try again.
        server.execute(f"PURGE BINARY LOGS TO '{server.binlog_position()[0]}'")
        return old not in [str(r[0]) for r in server.query("SHOW BINARY LOGS")]

    wait_for(purged, 30, f"{old} to be purged")
    again = Running(config, task_dir)
    try:
        wait_for(lambda: again.task.state == "failed", 30, "the task to fail")
    finally:
        again.stop()
    error = again.task.error or ""
    first, last = len(kept) + 1, max(stored)
    assert error.startswith("PositionPurgedError: the change log lost ")
    assert f"seqs {first}-{last} " in error
    assert f"GTID {stored[len(kept)]}" in error  # the last intact transaction
    assert f"binlog file number {binlog_file_number(old)}" in error
    # Nothing was appended: the lost seqs were not given to other transactions.
    assert _visible(task_dir / "changes") == kept
