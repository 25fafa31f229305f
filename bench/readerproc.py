"""The benches' reader task in a process of its own, as production runs it (``headwater
reader run`` is a service apart from the pipeline), for bench/pipeline.py and
bench/kafka.py.

Until 2026-11-24 both benches ran the task in a thread of the bench's process, which also
runs the pipeline's driver: the reader then shared the driver's GIL (py-spy, bench/kafka.py:
20-35% of the reader thread's samples in ``atomic_write`` of its state with a
``state_interval`` of 0.05 s), which production's pipeline does not.

The process is started with ``python -c`` (this module has no ``__main__``): it unpickles
``(SourceConfig, directory)``, prints ``ready`` and waits for one line on stdin: ``go`` runs
the task until the next line (``stop``) or EOF; anything else, or EOF, ends it unstarted.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from pathlib import Path

from headwater.config import SourceConfig
from headwater.reader.task import ReaderTask

__all__ = ["Reader", "reader_process"]


class Reader:
    """The bench's reader task in a process of its own: stopped while a round's workload is
    committed, started again to time the round.

    Each process is started (Python and headwater imported, about a second of CPU) and
    waits, idle, before the workload is committed; :meth:`start` then makes its
    :class:`ReaderTask` and runs it on the task directory, :meth:`stop` asks it to stop (it
    closes the log and saves its state) and starts the next one. So the round's clock and
    CPU hold the reader's work, not an interpreter's start, and :attr:`pid` is the same
    process from a round's start to its end (its CPU from /proc)."""

    def __init__(self, config: SourceConfig, directory: Path, work: Path) -> None:
        self.directory = directory
        self.spec = work / "reader.pickle"
        self.spec.write_bytes(pickle.dumps((config, directory)))
        self.proc: subprocess.Popen[str] | None = None
        self.running = False
        self._spawn()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def _spawn(self) -> None:
        code = (
            f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            "from pathlib import Path; from readerproc import reader_process; "
            f"sys.exit(reader_process(Path({str(self.spec)!r})))"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"the reader process ended: {proc.wait()}")
        self.proc = proc

    def _send(self, line: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def start(self) -> None:
        """The waiting process runs its task (it reads from its stored position)."""
        self._send("go")
        self.running = True

    def check(self) -> None:
        """Raise SystemExit if the running reader process has ended (its task failed)."""
        if self.proc is not None and self.proc.poll() is not None:
            raise SystemExit(f"the reader process ended with {self.proc.returncode}")

    def stop(self, *, again: bool = True) -> None:
        """Stop the running task, wait for its process to close the log and end, and (with
        ``again``) start the next, waiting process."""
        if self.proc is not None:
            if self.running:
                self._send("stop")
            else:
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # never started: it ends at EOF
            if self.proc.wait(60) != 0:
                raise SystemExit(f"the reader process ended with {self.proc.returncode}")
        self.proc, self.running = None, False
        if again:
            self._spawn()


def reader_process(spec: Path) -> int:
    """The reader process of :class:`Reader`: the task of the pickled ``(SourceConfig,
    directory)`` run on ``go`` (a line on stdin) in this main thread until ``stop`` (or EOF);
    exit status 1 if the task failed."""
    config, directory = pickle.loads(spec.read_bytes())
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 0
    task = ReaderTask(config, directory)

    def stop_on_line() -> None:
        sys.stdin.readline()  # "stop", or EOF: the bench is gone
        task.request_stop()

    threading.Thread(target=stop_on_line, daemon=True).start()
    try:
        task.run()
    finally:
        task.close()  # releases the log's writer lock for the next task
    if task.state == "failed":
        print(f"reader failed: {task.error}", file=sys.stderr)
        return 1
    return 0
