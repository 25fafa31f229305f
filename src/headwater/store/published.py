"""The acknowledged point of a change log, and the log's lifecycle (closed, failed).

One :class:`Published` per open log, shared by the objects the log owns: the writer moves
it (``publish``), the flusher and the readers wait on it, and readers in other processes
rebuild it from the ``head`` file (catalog.py). Invariants: ``acked`` only grows, and
moves only to the end of a whole transaction; ``base``/``end`` is where that transaction
ends (active segment base, byte offset); every change happens under ``lock``, and nothing
sleeps or does I/O under it except the one ``pwrite`` of ``head``.
"""

from __future__ import annotations

import logging
import threading

from headwater.errors import StoreError
from headwater.store.catalog import write_head

__all__ = ["Published"]

log = logging.getLogger(__name__)


class Published:
    """Acknowledged seq and where it ends; closed/failed; the condition variables."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.lock = threading.Lock()
        #: notified when ``acked`` moves, the log fails or closes, or a segment rolls
        self.cond = threading.Condition(self.lock)
        #: wakes the flusher (data pending, a waiter, closing)
        self.flush_cond = threading.Condition(self.lock)
        self.acked = 0
        self.base = 1
        self.end = 0
        self.closed = False
        self.failed: BaseException | None = None
        #: the ``head`` file: written by the writer, read by readers in other processes
        self.head_fd = -1

    def publish(self, base: int, end: int, seq: int) -> None:
        """Acknowledge up to ``seq`` (which sits at ``end`` of segment ``base``); monotone:
        an older mark (``flush``, the flusher and a roll may race) changes nothing."""
        with self.lock:
            if seq <= self.acked:
                return
            self.acked, self.base, self.end = seq, base, end
            write_head(self.head_fd, base, end, seq)
            self.cond.notify_all()

    def fail(self, e: BaseException) -> StoreError:
        """Mark the log failed (it refuses appends from now on) and wake everyone."""
        with self.lock:
            if self.failed is None:
                self.failed = e
            self.cond.notify_all()
            self.flush_cond.notify_all()
        log.exception("change log write failed; the log refuses further appends")
        return StoreError(f"{self.dir}: write failed: {e}")

    def check_writable(self, read_only: bool) -> None:
        if read_only:
            raise StoreError(f"{self.dir}: opened read-only")
        if self.closed:
            raise StoreError(f"{self.dir}: the log is closed")
        if self.failed is not None:
            raise StoreError(f"{self.dir}: the log failed: {self.failed}")
