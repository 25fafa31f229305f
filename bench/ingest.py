"""Ingest: the reader landing a pre-filled binlog in its change log, against a bare socket drain.

Starts a sandbox MariaDB and runs two workloads, each into binlog files of its own:

* ``batched``: multi-row transactions of wide rows (``INSERT ... SELECT`` of 1000 rows);
* ``single``: single-row transactions (one INSERT each, autocommit).

For each, in the same run and on the same dump (from the workload's first binlog file to
the end of the log):

* ``raw``: bench/framing.py's ``raw_drain``: register, COM_BINLOG_DUMP, ``recv_into`` into
  one buffer until the EOF packet -- no framing, nothing kept;
* ``reader``: a :class:`headwater.reader.task.ReaderTask` started from that file, timed from
  its first transaction (like the raw drain, which starts its clock after the dump command)
  until the last transaction is in the change log *and acknowledged* (group commit,
  fdatasync); the time including connect, preflight and schema bootstrap is printed too.

Prints MB/s of both and, as the last line, ``ingest_vs_raw_stream=<reader/raw>`` for the
lower of the two workloads (target at least 0.4). ``--quick`` finishes in under a minute
with dumps of tens of MB (64 MB batched, 60 000 single-row transactions, about 21 MB).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from framing import raw_drain
from headwater.config import HostConfig, SourceConfig, StartConfig
from headwater.position import BinlogCoordinate
from headwater.reader.grouping import Committed
from headwater.reader.task import ReaderTask
from headwater.sandbox import MariadbSandbox, SandboxOptions

MB = 1024 * 1024


def fill_batched(server: MariadbSandbox, target_mb: int) -> None:
    server.execute(
        "CREATE TABLE bench.wide (id INT PRIMARY KEY, a VARCHAR(600), b VARCHAR(600),"
        " n BIGINT, d DATETIME(6))"
    )
    first, batch, written = 0, 1000, 0
    conn = server.connect("bench")
    with conn.cursor() as cur:
        while written < target_mb * MB:
            cur.execute(
                "INSERT INTO wide SELECT seq, RPAD(MD5(seq), 500, 'x'), RPAD(SHA1(seq), 500, 'y'),"
                f" seq * 7919, NOW(6) FROM seq_{first + 1}_to_{first + batch}"
            )
            first += batch
            written += batch * 1060
    conn.close()


def fill_single(server: MariadbSandbox, transactions: int) -> None:
    """One INSERT per transaction (autocommit), run by the server in a loop: each one
    is its own GTID ... XID group in the binlog, and filling takes seconds, not minutes."""
    server.execute("CREATE TABLE bench.small (id INT PRIMARY KEY, v VARCHAR(40), n INT)")
    before = int(str(server.query("SELECT @@gtid_binlog_pos")[0][0]).rsplit("-", 1)[1])
    conn = server.connect("bench")
    with conn.cursor() as cur:
        cur.execute(
            f"BEGIN NOT ATOMIC FOR i IN 0 .. {transactions - 1} DO"
            " INSERT INTO small VALUES (i, CONCAT('value ', i), i * 3); END FOR; END"
        )
    conn.close()
    after = int(str(server.query("SELECT @@gtid_binlog_pos")[0][0]).rsplit("-", 1)[1])
    assert after - before == transactions, f"{after - before} transactions, not {transactions}"


class _Timed(ReaderTask):
    """A task that signals when it has processed the target GTID position."""

    target = ""
    reached = threading.Event()
    first_at = 0.0

    def _committed(self, done: Committed) -> None:
        if not self.first_at:
            self.first_at = time.perf_counter()
        super()._committed(done)
        if done.gtid == self.target:
            self.reached.set()


def reader_ingest(
    server: MariadbSandbox, file: str, workdir: Path
) -> tuple[float, float, int, int]:
    """Seconds from the first transaction until everything is stored and acknowledged,
    seconds from the task's start (connect, preflight, schema bootstrap); bytes; records."""
    target = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
    config = SourceConfig(
        name="bench",
        hosts=(HostConfig(server.host, server.port),),
        user="root",
        server_id=9100,
        start=StartConfig("file", coordinate=BinlogCoordinate(file, 4)),
        heartbeat_period=1.0,
    )
    task = _Timed(config, workdir)
    task.target = target
    task.reached = threading.Event()
    task.open()
    began = time.perf_counter()
    thread = threading.Thread(target=task.run)
    thread.start()
    if not task.reached.wait(600):
        raise RuntimeError(f"the reader did not reach {target}: {task.state} {task.error}")
    assert task.store is not None
    task.store.wait_acked(task.seq, 60)
    ended = time.perf_counter()
    task.request_stop()
    thread.join()
    records = task.records_stored
    task.close()
    return ended - task.first_at, ended - began, task.bytes_in, records


def measure(name: str, server: MariadbSandbox, file: str, rounds: int, tmp: Path) -> float:
    raw_best = reader_best = 0.0
    for r in range(rounds):
        raw_bytes, _reads, raw_s = raw_drain(server, file, 8 * MB)
        secs, total_s, got, records = reader_ingest(server, file, tmp / f"{name}-{r}")
        raw_rate = raw_bytes / MB / raw_s
        reader_rate = got / MB / secs
        raw_best, reader_best = max(raw_best, raw_rate), max(reader_best, reader_rate)
        print(
            f"{name} round {r + 1}: raw {raw_rate:6.0f} MB/s ({raw_bytes / MB:.0f} MB)   "
            f"reader {reader_rate:6.0f} MB/s ({records} records, {secs:.2f} s streaming, "
            f"{total_s:.2f} s with connect and schema bootstrap)"
        )
    print(f"{name}: raw {raw_best:.0f} MB/s, reader {reader_best:.0f} MB/s")
    return reader_best / raw_best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small workloads, under a minute")
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    # Quick dumps are still tens of MB: the raw drain of a few MB takes milliseconds,
    # too short to time.
    batched_mb = 64 if args.quick else 300
    singles = 60_000 if args.quick else 300_000
    rounds = args.rounds or (2 if args.quick else 3)
    server = MariadbSandbox(SandboxOptions()).start()
    try:
        with tempfile.TemporaryDirectory(prefix="headwater-ingest-") as tmp:
            server.execute("CREATE DATABASE bench", "FLUSH BINARY LOGS")
            file = server.binlog_position()[0]
            fill_batched(server, batched_mb)
            ratio_batched = measure("batched", server, file, rounds, Path(tmp))
            server.execute("FLUSH BINARY LOGS")
            file = server.binlog_position()[0]
            fill_single(server, singles)
            ratio_single = measure("single", server, file, rounds, Path(tmp))
    finally:
        server.stop()
    print(f"ingest_vs_raw_stream batched={ratio_batched:.2f} single={ratio_single:.2f}")
    print(f"ingest_vs_raw_stream={min(ratio_batched, ratio_single):.2f}")


if __name__ == "__main__":
    main()
