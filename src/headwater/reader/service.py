"""The reader process: one :class:`~headwater.reader.task.ReaderTask` per source, each in its
own thread, started from one :class:`~headwater.config.ReaderConfig`.

Invariants: a task that fails (or cannot even open its data directory) never stops the
others or the process; its store stays open and readable and ``status()`` says why it
failed. :meth:`ReaderService.stop` (SIGTERM, SIGINT) asks every task to stop at its next
event or heartbeat; each then flushes its change log, persists its resume point and
closes. ``status()`` is the structure of ``reader status`` (docs/configuration.md); with a
``server`` section the process also serves the HTTP API over the tasks (``serving``).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

from headwater.config import ReaderConfig
from headwater.errors import ConfigError
from headwater.reader.serving import close_handles, start_server
from headwater.reader.task import ReaderTask

if TYPE_CHECKING:
    from headwater.server.app import HeadwaterServer

__all__ = ["ReaderService"]

log = logging.getLogger(__name__)


class ReaderService:
    """Runs the tasks of ``config``: ``start`` then ``wait``/``stop``, or ``run``."""

    def __init__(
        self,
        config: ReaderConfig,
        *,
        zookeeper: str | None = None,
        member: str | None = None,
        advertise: str | None = None,
    ) -> None:
        self.config = config
        # cluster mode (reader/cluster.py): each task follows or leads through ZooKeeper
        self.zookeeper, self.member, self.advertise = zookeeper, member, advertise
        self._zk: Any = None
        self.members: dict[str, Any] = {}
        self.tasks: dict[str, ReaderTask] = {
            s.name: ReaderTask(s, config.task_dir(s.name)) for s in config.sources
        }
        self._threads: dict[str, threading.Thread] = {}
        self._stopping = threading.Event()
        self.started_at = time.time()
        self.server: HeadwaterServer | None = None

    def start(self) -> None:
        """Serve the HTTP API (when configured), then open every task and start its
        thread (a task that cannot open is failed, and its stored changes still served)."""
        self.server = start_server(self.config, self.tasks)
        if self.zookeeper is not None:
            self._start_cluster()
            return
        for name, task in self.tasks.items():
            thread = threading.Thread(target=self._run_task, args=(task,), name=f"reader-{name}")
            self._threads[name] = thread
            thread.start()

    def _start_cluster(self) -> None:
        from headwater.coordination.zk import connect
        from headwater.reader.cluster import ClusterMember

        if self.server is None and self.advertise is None:
            raise ConfigError("a reader cluster member needs a server section (its HTTP API)")
        url = self.advertise or (self.server.url if self.server is not None else "")
        member = self.member or url.split("//", 1)[-1].replace("/", "_")
        self._zk = connect(self.zookeeper or "")
        token = None if self.config.server is None else self.config.server.token
        for name, task in self.tasks.items():
            m = self.members[name] = ClusterMember(task, self._zk, member, url, token=token)
            thread = threading.Thread(target=self._run_member, args=(m,), name=f"member-{name}")
            self._threads[name] = thread
            thread.start()

    def _run_member(self, m: Any) -> None:
        try:
            m.run()
        except Exception as e:
            m.task.state = "failed"
            m.task.error = f"{type(e).__name__}: {e}"
            log.exception("%s: cluster member failed", m.task.name)

    def _run_task(self, task: ReaderTask) -> None:
        try:
            task.open()
        except Exception as e:
            task.state = "failed"
            task.error = f"{type(e).__name__}: {e}"
            log.error("%s: cannot open the task: %s", task.name, task.error)
            return
        task.run()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop every task (flush, persist) and close them."""
        self._stopping.set()
        for m in self.members.values():
            m.stop()
        for task in self.tasks.values():
            task.request_stop()
        deadline = time.monotonic() + timeout
        for thread in self._threads.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
        if self.server is not None:
            close_handles(self.server)
            self.server = None
        for task in self.tasks.values():
            try:
                task.close()
            except Exception as e:
                log.error("%s: closing failed: %s", task.name, e)

    def wait(self) -> None:
        """Block until :meth:`stop` is called (by a signal handler or another thread)."""
        while not self._stopping.wait(1.0):
            pass

    def run(self) -> int:
        """Start, run until SIGTERM/SIGINT, stop cleanly; returns the exit status (0)."""

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %d: stopping", signum)
            self._stopping.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            log.info("reader running %d task(s)", len(self.tasks))
            self.wait()
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("reader stopped")
        return 0

    def status(self) -> dict[str, Any]:
        """``{"started_us", "tasks": [task status...], "metrics": {...}}`` (see docs)."""
        tasks = [t.status() for t in self.tasks.values()]
        totals = {
            key: sum(int(t[key] or 0) for t in tasks)
            for key in (
                "events_in",
                "bytes_in",
                "transactions_stored",
                "transactions_filtered",
                "records_stored",
                "reconnects",
            )
        }
        totals["tasks_failed"] = sum(1 for t in tasks if t["state"] == "failed")
        return {"started_us": int(self.started_at * 1e6), "tasks": tasks, "metrics": totals}
