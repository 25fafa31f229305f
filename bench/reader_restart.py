"""A restarted reader's catch-up, alone (issue #17): why some restarts cost twice the CPU.

Starts a sandbox source MariaDB and the reader process of bench/readerproc.py, then, for
each of ``--rounds`` rounds: stops the reader, commits bench/pipeline.py's workload (500 000
rows, 800 000 row changes, on a table of the round's own) and restarts it, timed until
the log holds the source's last transaction. Printed per round: wall time, the reader
process's user and system CPU and its minor page faults (/proc, proc(5)), the load.

``--memory alternate`` writes 300 MB to a file before each restart and deletes it before
the odd rounds only ("recycled": the kernel has 300 MB of just-freed page cache to hand
out) and keeps it before the even ones ("grown": the page cache, and the reader's new
memory, take pages the guest has not used lately). On this machine (a Firecracker VM whose
balloon reports free pages to the host, /sys/module/page_reporting) the first touch of such
a page costs a host page fault: 2026-11-25, 6 rounds at load 2.5-2.8, recycled 0.11-0.14
reader CPU-s (system 0.05-0.07), grown 0.15-0.29 (system 0.09-0.24), the same ~15 000
minor faults (another run at load 4.5-5.7: recycled 0.27, 0.11, 0.11, grown 0.16, 0.16,
0.20: freed pages may be reported to the host before the reader takes them, 256 MiB of
``reported_kib`` during some recycled rounds, so the split is a tendency, not a switch).
``perf record -g`` of the reader: the difference is in the kernel's
``copy_folio_from_iter_atomic`` (the log's ``writev`` into new page cache pages, 9-13
samples recycled, 87-174 grown) and ``clear_page_erms`` (zeroing new anonymous pages, up
to 183 against 6-18), while ``Scanner_scan`` (the reader's own decoding) stays at 7-17.
A plain 50 MB file write shows the same: 8-13 ms of system CPU into recycled pages, 95-111
ms into grown ones, 5-6 ms overwriting cached pages.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from headwater.config import FilterConfig, HostConfig, SourceConfig, StartConfig
from headwater.position import BinlogCoordinate
from headwater.sandbox import MariadbSandbox, SandboxOptions
from headwater.spark.logaccess import open_log
from headwater.spark.offsets import parse_options

sys.path.insert(0, str(Path(__file__).parent))
from pipeline import workload  # (bench/pipeline.py's batched workload)
from readerproc import Reader

TABLE = (
    "CREATE TABLE bench.{table} (id INT PRIMARY KEY, a INT NOT NULL,"
    " b VARCHAR(64) NULL, c DECIMAL(10,2) NULL, ts BIGINT NOT NULL)"
)


def proc_stat(pid: int) -> tuple[int, float, float]:
    """Minor faults, user and system CPU seconds of ``pid`` (proc(5): fields 10, 14, 15)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[7]), int(fields[11]) / tick, int(fields[12]) / tick


def stored_through(log: Any, gtid_pos: str) -> bool:
    """The log's last acknowledged record is the transaction of ``gtid_pos``."""
    end = log.end()[0]
    last = next(iter(log.records(end - 1, end)), None) if end > 1 else None
    return last is not None and last.gtid == gtid_pos


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--memory", choices=("as-is", "alternate"), default="as-is")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hw-bench-restart-"))
    source = MariadbSandbox(SandboxOptions()).start()
    try:
        tables = [f"t{n}" for n in range(1, args.rounds + 1)]
        source.execute("CREATE DATABASE bench", *(TABLE.format(table=t) for t in tables))
        config = SourceConfig(
            name="bench",
            hosts=(HostConfig(source.host, source.port),),
            user="root",
            server_id=4242,
            start=StartConfig("file", coordinate=BinlogCoordinate(*source.binlog_position())),
            filters=FilterConfig(include=(r"bench\..*",)),
        )
        reader = Reader(config, tmp / "task", tmp)
        reader.start()
        while not (tmp / "task" / "changes").is_dir():
            time.sleep(0.05)
        for n, table in enumerate(tables, 1):
            reader.stop()
            changes = workload(source, args.rows, table)
            gtid = str(source.query("SELECT @@gtid_binlog_pos")[0][0])
            memory = ""
            if args.memory == "alternate":
                fill = tmp / f"fill{n}"
                with open(fill, "wb") as f:
                    for _ in range(300):
                        f.write(b"x" * (1 << 20))
                memory = "recycled " if n % 2 else "grown "
                if n % 2:
                    fill.unlink()
            log = open_log(parse_options({"path": str(tmp / "task")}), decoding=False)
            pid = reader.pid
            assert pid is not None
            load = os.getloadavg()[0]
            before = proc_stat(pid)
            t0 = time.perf_counter()
            reader.start()
            while not stored_through(log, gtid):
                reader.check()
                time.sleep(0.005)
            wall = time.perf_counter() - t0
            faults, user, system = (b - a for a, b in zip(before, proc_stat(pid), strict=True))
            log.close()
            print(
                f"round {n} {memory}{table}: {changes} changes, {wall:.3f} s, reader"
                f" {user + system:.2f} CPU-s (user {user:.2f}, system {system:.2f}),"
                f" {faults:.0f} minor faults; load {load:.2f}",
                flush=True,
            )
        reader.stop(again=False)
    finally:
        source.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
