"""Idle pipeline: the CPU a running pipeline takes while the tables it reads do not change.

Starts a sandbox source MariaDB and a target MariaDB, a reader task (in this process)
whose filter keeps ``bench.*`` and which writes a heartbeat row into ``bench.heartbeat``
every second (``HeartbeatConfig``: each one is a stored record of a table the pipeline
does not read), and a pipeline as a service would run it: ``headwater pipeline run`` in a
process of its own (Spark ``local[2]``, MySQL sink, ``tables: [bench.t]``). A few rows of
``bench.t`` go through first (the pipeline is running and warm), then, after a short
settling pause, the CPU time of the pipeline's process tree (its Python driver, the JVM
and Spark's Python workers: utime + stime of every process under it, sampled every 0.5
s so that a process ending in the window counts too: :class:`TreeCpu`) is measured over
``--seconds`` (30) while the reader goes on storing heartbeats. ``--threads N`` also
lists the N busiest threads (the JVM names its threads: ``stream execution thread``,
``C1 CompilerThread0``, ...). The micro-batches run meanwhile are counted from the checkpoint's
``offsets/`` directory.

Last line: ``idle_pipeline_cpu_pct=<CPU seconds / wall seconds * 100>`` (100 is one core;
the issue's target is under 2).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from headwater.config import FilterConfig, HeartbeatConfig, HostConfig, SourceConfig, StartConfig
from headwater.position import BinlogCoordinate
from headwater.reader.task import ReaderTask
from headwater.sandbox import MariadbSandbox, SandboxOptions

TABLE = "CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT NOT NULL)"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int] | None:
    """``(parent pid, utime + stime + cutime + cstime in ticks)`` of a process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces), proc_pid_stat(5): state is
    # field 3, ppid 4, utime 14, stime 15, cutime 16, cstime 17.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), sum(int(f) for f in fields[11:15])


def _stats(root: int) -> dict[int, tuple[int, int, int]]:
    """``pid -> (parent pid, own utime + stime, reaped children's cutime + cstime)`` in
    ticks, of ``root`` and every live process under it."""
    stats: dict[int, tuple[int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2 :].split()
            own = int(fields[11]) + int(fields[12])
            stats[int(entry)] = (int(fields[1]), own, int(fields[13]) + int(fields[14]))
    out = {}
    for pid in stats:
        p = pid
        while p in stats and p != root:
            p = stats[p][0]
        if p == root:
            out[pid] = stats[pid]
    return out


class TreeCpu:
    """CPU ticks a process tree uses over a window, sampled every ``sample()`` call.

    Two samples' sums of utime + stime + cutime + cstime are wrong when a process of the
    tree ends in the window: its whole life's CPU moves into its parent's cutime (counted
    from before the window), or is lost when nobody in the tree reaps it (a worker that
    its daemon's exit orphaned; a run measured -1.28 CPU-s that way). Here each process
    counts its own utime + stime from its first sample (0 when born in the window) to its
    last; a parent's cutime + cstime growth counts only past what its children seen ending
    had at their last sample (children that lived and ended between two samples)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.first = _stats(root)
        self.last = dict(self.first)
        self.seen: dict[int, tuple[int, int, int]] = dict(self.first)
        self.born: set[int] = set()

    def sample(self) -> None:
        now = _stats(self.root)
        self.born |= now.keys() - self.seen.keys()
        self.seen.update(now)
        self.last = now

    def per_pid(self) -> dict[int, int]:
        """Ticks used in the window, per pid (a parent's includes the unseen children
        it reaped)."""
        used = {}
        for pid, (_ppid, own, _children) in self.seen.items():
            start = 0 if pid in self.born else self.first[pid][1]
            used[pid] = own - start
        for pid, (_ppid, _own, children) in self.last.items():
            before = 0 if pid in self.born else self.first[pid][2]
            ended = sum(
                s[1] + s[2]
                for child, s in self.seen.items()
                if s[0] == pid and child not in self.last
            )
            used[pid] += max(0, children - before - ended)
        return used


def tree_ticks(root: int) -> dict[int, int]:
    """CPU ticks of ``root`` and of every live process under it, by pid (children that
    ended and were waited for count in their parent's cutime/cstime)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                stats[int(entry)] = found
    ticks = {}
    for pid in stats:
        p = pid
        while p in stats and p != root:
            p = stats[p][0]
        if p == root:
            ticks[pid] = stats[pid][1]
    return ticks


def thread_ticks(pid: int) -> dict[int, tuple[str, int]]:
    """``tid -> (thread name, utime + stime in ticks)`` of every thread of ``pid`` (the
    name is the kernel's 15-character ``comm``: the JVM sets it from the Java name)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        out[int(tid)] = (name, int(fields[11]) + int(fields[12]))
    return out


def command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    name = Path(argv[0].decode()).name
    return f"{name} ({' '.join(a.decode() for a in argv[1:3])[:60]})" if len(argv) > 1 else name


def batches(checkpoint: Path) -> int:
    offsets = checkpoint / "offsets"
    return sum(1 for f in offsets.iterdir() if f.name.isdigit()) if offsets.is_dir() else 0


def wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured window")
    ap.add_argument("--settle", type=float, default=10.0, help="pause before the window")
    ap.add_argument("--quick", action="store_true", help="accepted; the window stays 30 s")
    ap.add_argument(
        "--threads", type=int, default=0, metavar="N",
        help="also print the N busiest threads of the pipeline's processes in the window",
    )  # fmt: skip
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hw-bench-idle-"))
    source = MariadbSandbox(SandboxOptions()).start()
    target = MariadbSandbox(SandboxOptions(server_id=2, log_bin=False)).start()
    stop = threading.Event()
    task: ReaderTask | None = None
    reader: threading.Thread | None = None
    pipeline: subprocess.Popen[bytes] | None = None
    try:
        source.execute("CREATE DATABASE bench", TABLE.format(db="bench"))
        target.execute("CREATE DATABASE bench_hw")
        config = SourceConfig(
            name="bench",
            hosts=(HostConfig(source.host, source.port),),
            user="root",
            server_id=4343,
            start=StartConfig("file", coordinate=BinlogCoordinate(*source.binlog_position())),
            filters=FilterConfig(include=(r"bench\..*",)),
            heartbeat=HeartbeatConfig("bench.heartbeat", interval=1.0),
        )
        task = ReaderTask(config, tmp / "task")
        running_task = task

        def run_reader() -> None:
            try:
                running_task.run()
            finally:
                running_task.close()

        reader = threading.Thread(target=run_reader, daemon=True)
        reader.start()
        wait(lambda: (tmp / "task" / "changes").is_dir(), 60, "the reader's log")
        checkpoint = tmp / "checkpoint"
        (tmp / "bench.yaml").write_text(
            "name: idle\n"
            f"source: {{path: {tmp / 'task'}, tables: [bench.t]}}\n"
            f"checkpoint: {checkpoint}\n"
            "transforms:\n  - rename_database: {bench: bench_hw}\n"
            "sinks:\n"
            f"  - {{type: mysql, host: {target.host}, port: {target.port}, user: root,"
            " create_tables: true, ddl: skip}\n"
        )
        log_file = (tmp / "pipeline.log").open("wb")
        pipeline = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli.main", "pipeline", "run",
             "--config", str(tmp / "bench.yaml")],
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        source.execute("INSERT INTO bench.t SELECT seq, seq FROM seq_1_to_100", database="bench")

        def applied() -> bool:
            if pipeline is not None and pipeline.poll() is not None:
                raise SystemExit(f"the pipeline ended; see {tmp / 'pipeline.log'}")
            found = target.query(
                "SELECT COUNT(*) FROM information_schema.tables"
                " WHERE table_schema = 'bench_hw' AND table_name = 't'"
            )[0][0]
            return bool(found) and target.query("SELECT COUNT(*) FROM bench_hw.t")[0][0] == 100

        wait(applied, 300, "the pipeline's first rows")
        time.sleep(args.settle)

        stored0, beats0, batches0 = task.records_stored, task.heartbeat, batches(checkpoint)
        written0 = beats0.written if beats0 is not None else 0
        tree, t0 = TreeCpu(pipeline.pid), time.monotonic()
        threads0 = {pid: thread_ticks(pid) for pid in tree.first} if args.threads else {}
        while time.monotonic() < t0 + args.seconds:
            time.sleep(min(0.5, max(0.0, t0 + args.seconds - time.monotonic())))
            tree.sample()
        t1 = time.monotonic()
        threads1 = {pid: thread_ticks(pid) for pid in tree.last} if args.threads else {}
        written1 = task.heartbeat.written if task.heartbeat is not None else 0
        used_ticks = tree.per_pid()
        cpu_s = sum(used_ticks.values()) / CLK_TCK
        for pid, ticks in sorted(used_ticks.items()):
            if ticks:
                ended = "" if pid in tree.last else ", ended in the window"
                print(f"  pid {pid} {command(pid)}: {ticks / CLK_TCK:.2f} CPU-s{ended}")
        if args.threads:
            busy = sorted(
                (
                    (ticks - threads0.get(pid, {}).get(tid, (name, 0))[1], pid, tid, name)
                    for pid, found in threads1.items()
                    for tid, (name, ticks) in found.items()
                ),
                reverse=True,
            )
            for used, pid, tid, name in busy[: args.threads]:
                if used:
                    print(f"    pid {pid} thread {tid} {name!r}: {used / CLK_TCK:.2f} CPU-s")
        pct = cpu_s / (t1 - t0) * 100
        load = os.getloadavg()
        print(
            f"window {t1 - t0:.1f} s: {written1 - written0} heartbeats written,"
            f" {task.records_stored - stored0} records stored by the reader,"
            f" {batches(checkpoint) - batches0} micro-batches run;"
            f" pipeline tree CPU {cpu_s:.2f} s; load average {load[0]:.1f} {load[1]:.1f}"
        )
        print(f"idle_pipeline_cpu_pct={pct:.2f}")
    finally:
        stop.set()
        if pipeline is not None and pipeline.poll() is None:
            pipeline.terminate()
            try:
                pipeline.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(pipeline.pid, 9)
        if task is not None:
            task.request_stop()
        if reader is not None:
            reader.join(30)
        source.stop()
        target.stop()


if __name__ == "__main__":
    main()
