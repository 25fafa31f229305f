"""Fetch work in other processes, so that API clients cannot take the capture loop's CPU.

Decoding records and encoding rows is pure Python: done in the reader process's threads it
competes for that process's GIL with the capture thread. Measured before this module (issue
14): 20 concurrent ``/v1/fetch`` clients cut a reader's capture from 316 to 13-15
transactions/s. A :class:`FetchPool` runs :func:`headwater.server.batch.fetch_batch` in
``workers`` separate processes (``spawn``: no fork of a threaded process), each at a lower
scheduling priority (``nice`` + 10), so the operating system gives the reader's capture
thread the CPU first and the GIL it needs is its own.

Invariants:

* A worker opens each change log read-only, as any other process may (``ChangeLog.open(...,
  read_only=True)``: it sees what the writer acknowledged, through the ``head`` file) and
  the schema history read-only from its file, reloaded when the file changed. It never
  writes anything.
* Work is bounded: a job carries an absolute ``CLOCK_MONOTONIC`` deadline (the clock is
  system-wide on Linux, so the same in every process) after which the worker stops adding
  to the batch; the waiting of a long-poll happens in the server process, not here, so
  ``workers`` processes never sit idle while clients queue.
* Results and refusals travel back as plain tuples (exceptions with extra state do not
  survive pickling); :meth:`FetchPool.fetch` raises the server's own errors again.
* A worker that dies (killed, out of memory) breaks only the fetch it served: the pool is
  rebuilt and the client gets a 503.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import CancelledError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from headwater.binlog.framing import FormatDescription
from headwater.errors import BinlogFormatError, PositionNotRetainedError, StoreError
from headwater.server import TaskHandle
from headwater.server.batch import Batch, fetch_batch
from headwater.server.encoding import encoder_for
from headwater.server.requests import FetchRequest

__all__ = ["FetchJob", "FetchPool"]

log = logging.getLogger(__name__)

#: How much lower than the reader the workers run (``nice`` increment).
WORKER_NICENESS = 10


@dataclass(frozen=True, slots=True)
class FetchJob:
    """Everything a worker needs for one fetch (all picklable)."""

    task: str
    source: str
    log_dir: str
    schema_path: str | None
    fde: FormatDescription | None
    request: FetchRequest
    max_scan_bytes: int
    deadline: float  # time.monotonic() after which the batch is returned as it is
    started: float  # time.monotonic() when the request arrived


class FetchPool:
    """``workers`` fetch processes; :meth:`fetch` runs one job in one of them."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("FetchPool needs at least one worker")
        self.workers = workers
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_worker,
                    initargs=(os.getpid(),),
                )
            return self._pool

    def start(self) -> FetchPool:
        """Start the processes now (else at the first fetch) and wait until they run."""
        pool = self._executor()
        for f in [pool.submit(os.getpid) for _ in range(self.workers)]:
            f.result()
        return self

    def fetch(self, job: FetchJob) -> Batch:
        """Run ``job`` in a worker; raises what :func:`fetch_batch` would have raised."""
        pool = self._executor()
        try:
            result = pool.submit(_run, job).result()
        except CancelledError:  # close() while the job waited for a worker
            raise StoreError("the server is stopping; the request may be retried") from None
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise StoreError("a fetch worker process died; the request may be retried") from None
        kind = result[0]
        if kind == "ok":
            return Batch(*result[1:])
        if kind == "gone":
            raise PositionNotRetainedError(result[1])
        if kind == "format":
            raise BinlogFormatError(result[1])
        raise StoreError(result[1])

    def run(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` (picklable, module level) in a worker and return its result
        (other read-only work over the logs, e.g. ``headwater.server.tablecounts``);
        StoreError when the server stops or the worker dies."""
        pool = self._executor()
        try:
            return pool.submit(fn, *args).result()
        except CancelledError:
            raise StoreError("the server is stopping") from None
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise StoreError("a worker process died") from None

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


# --- in the worker process ------------------------------------------------------------------

#: How often a fetch worker checks that the reader that started it is alive.
PARENT_POLL_S = 0.5

_handles: dict[str, TaskHandle] = {}
_histories: dict[str, tuple[tuple[int, int], Any]] = {}


def _init_worker(parent: int) -> None:
    os.nice(WORKER_NICENESS)
    # A reader killed with SIGKILL cannot shut its pool down, and a worker blocked on the
    # call queue never notices: it would stay forever. When the parent is gone the worker
    # is re-parented (getppid() changes), and it exits. ``parent`` is the pid the pool was
    # made in, so a worker that starts after its parent died exits at once.
    threading.Thread(
        target=_exit_with_parent, args=(parent,), name="parent-watch", daemon=True
    ).start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(0)


def _history(path: str | None) -> Any:
    """The schema history at ``path``, reloaded when the file changed (None if none)."""
    if path is None:
        return None
    from headwater.schema.history import SchemaHistory

    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    stamp = (st.st_size, st.st_mtime_ns)
    cached = _histories.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    if cached is not None:
        cached[1].close()
    history = SchemaHistory.open(path, read_only=True)
    _histories[path] = (stamp, history)
    return history


def _run(job: FetchJob) -> tuple[Any, ...]:
    handle = _handles.get(job.log_dir)
    if handle is None:
        handle = _handles[job.log_dir] = TaskHandle(log=job.log_dir)
    handle.fde = job.fde
    handle.schema = _history(job.schema_path)
    handle.source = job.source
    encoder = encoder_for(job.request.checkpoint.sub.format)
    try:
        b = fetch_batch(
            job.task,
            handle,
            handle.change_log(),
            job.request,
            encoder,
            job.max_scan_bytes,
            deadline=job.deadline,
            started=job.started,
        )
    except PositionNotRetainedError as e:
        return ("gone", str(e))
    except BinlogFormatError as e:
        return ("format", str(e))
    except StoreError as e:
        return ("store", str(e))
    return ("ok", b.items, b.nbytes, b.seq, b.row, b.more)
