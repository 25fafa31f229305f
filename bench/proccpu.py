"""CPU seconds of a bench's processes, from /proc (proc(5)), for figures that the load of
a shared 2-core machine sways less than wall time: this process (every thread), the Spark
JVM it started (its JIT compiler threads apart), that JVM's Python workers, and processes
named by pid (bench/kafka.py: the broker, the source MariaDB and the reader process).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace

__all__ = ["Cpu", "Pids", "Snapshot", "own_cpu"]

TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: str) -> tuple[str, list[str]] | None:
    """``(comm, the fields after it)`` of a ``/proc/.../stat`` file, None if it is gone."""
    try:
        with open(path) as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def _seconds(fields: list[str], first: int) -> float:
    """Two consecutive tick counts of a stat line from ``first`` (proc(5): fields 14-15
    utime stime at 11, 16-17 cutime cstime at 13), summed in seconds."""
    return (int(fields[first]) + int(fields[first + 1])) / TICK


def own_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread; not reaped children) of process ``pid``
    so far, 0 if it is gone."""
    stat = _stat(f"/proc/{pid}/stat")
    return 0.0 if stat is None else _seconds(stat[1], 11)


def compiler_seconds(pid: int) -> float:
    """CPU seconds so far of the JIT compiler threads (``C1``/``C2 CompilerThread``) of the
    JVM ``pid``: what a young JVM spends compiling, and a long-running pipeline's has long
    done."""
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = _stat(f"/proc/{pid}/task/{tid}/stat")
        if stat is not None and "CompilerThre" in stat[0]:
            total += _seconds(stat[1], 11)
    return total


@dataclass(frozen=True)
class Cpu:
    """CPU seconds of the run's parts: this process (pipeline driver, plain producer), the
    Spark JVM (``jit``: its compiler threads, part of ``jvm``), its Python workers, the
    broker, the source MariaDB and the reader process (part of the pipeline, as the reader
    task was while it ran in a thread of this process). A snapshot, or the difference of
    two."""

    driver: float = 0.0
    jvm: float = 0.0
    jit: float = 0.0
    workers: float = 0.0
    broker: float = 0.0
    source: float = 0.0
    reader: float = 0.0

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    @property
    def pipeline(self) -> float:
        return self.driver + self.jvm + self.workers + self.reader


@dataclass(frozen=True)
class Snapshot:
    """:class:`Cpu` so far, with the Python workers' CPU per process (``-1``: the
    children the JVM reaped). Subtracting two counts the processes alive at the later
    one: PySpark's daemon ignores SIGCHLD, so a worker that ends (Spark stops idle
    workers after a minute) takes its CPU out of every sum, and a plain difference of
    sums went negative by a worker's lifetime (-1.05 s in a round)."""

    cpu: Cpu
    workers: dict[int, float]

    def __sub__(self, other: Snapshot) -> Cpu:
        w = sum(t - other.workers.get(pid, 0.0) for pid, t in self.workers.items())
        return replace(self.cpu - other.cpu, workers=w)


@dataclass
class Pids:
    """The processes whose CPU is counted apart from this one's. ``reader`` changes from
    round to round (a process a round): two snapshots count the reader's CPU only if
    they saw the same process."""

    broker: int
    source: int
    reader: int | None = None

    def cpu(self) -> Snapshot:
        """A snapshot of every part's CPU: the JVM is this process's ``java`` child, its
        descendants the Python workers (own and reaped CPU each)."""
        procs: dict[int, tuple[int, str, list[str]]] = {}
        for name in os.listdir("/proc"):
            stat = _stat(f"/proc/{name}/stat") if name.isdigit() else None
            if stat is not None:
                procs[int(name)] = (int(stat[1][1]), stat[0], stat[1])
        children: dict[int, list[int]] = {}
        for pid, (ppid, _comm, _f) in procs.items():
            children.setdefault(ppid, []).append(pid)
        me = os.getpid()
        jvm = next((p for p in children.get(me, []) if procs[p][1] == "java"), None)
        jvm_s = jit = 0.0
        workers: dict[int, float] = {}
        if jvm is not None:
            jvm_s, jit = _seconds(procs[jvm][2], 11), compiler_seconds(jvm)
            workers[-1] = _seconds(procs[jvm][2], 13)
            stack = list(children.get(jvm, []))
            while stack:
                pid = stack.pop()
                stack += children.get(pid, [])
                workers[pid] = _seconds(procs[pid][2], 11) + _seconds(procs[pid][2], 13)
        cpu = Cpu(
            _seconds(procs[me][2], 11), jvm_s, jit, 0.0, own_cpu(self.broker),
            own_cpu(self.source), 0.0 if self.reader is None else own_cpu(self.reader),
        )  # fmt: skip
        return Snapshot(cpu, workers)
