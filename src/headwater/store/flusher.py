"""The group-commit flusher: the thread that makes appended records durable and visible.

The appending thread writes its own buffer to the OS (log.py); the flusher wakes every
``group_commit_ms`` after data became pending (sooner once ``group_commit_bytes`` are
written but unsynced, or when someone waits in ``wait_acked``) and runs one cycle:

1. if the appender left a buffer behind (it has sat for a whole window, or someone waits),
   write it out; a busy appender's buffer is left alone (taking it would only make the two
   threads contend);
2. take the *written mark* (segment, end, seq of the last whole transaction handed to the
   OS, and the descriptor it was written to) and ``fdatasync`` it while appends go on into
   the page cache;
3. publish the mark (``ChangeLog._publish``, monotone), which wakes waiters and readers.

Invariants: the flusher never holds ``_lock`` during I/O; it syncs only descriptors taken
from a mark, and closes descriptors retired by a segment roll only at the start of its
next cycle, so a sync is never run on a closed (or reused) descriptor. It also starts the
time-based roll of an idle log (``roll_interval_s``), so an idle active segment is sealed
on time even when nothing is appended.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from headwater.errors import StoreError
from headwater.store.options import Durability

if TYPE_CHECKING:
    from headwater.store.log import ChangeLog

__all__ = ["Flusher"]

log = logging.getLogger(__name__)


class Flusher:
    """The flusher thread of one writable :class:`~headwater.store.log.ChangeLog`."""

    def __init__(self, owner: ChangeLog) -> None:
        self._log = owner
        self._thread = threading.Thread(target=self.run, name="headwater-store-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def run(self) -> None:
        lg = self._log
        opts = lg._opts
        group_s = opts.group_commit_ms / 1000.0
        group_bytes = opts.group_commit_bytes
        cond = lg._flush_cond
        while True:
            with lg._lock:
                while lg._dirty_since is None and not lg._closed:
                    cond.wait(lg._idle_wait())
                    if lg._dirty_since is None and not lg._closed and lg._roll_timer_due():
                        break
                if lg._closed:
                    return
                if lg._dirty_since is not None:
                    deadline = lg._dirty_since + group_s
                    while not lg._closed and not lg._waiters and lg._unsynced < group_bytes:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        cond.wait(remaining)
                    if lg._closed:
                        return
            try:
                self.cycle()
                lg._roll_if_idle()
            except StoreError:
                return

    def cycle(self) -> None:
        """One group commit: write what an idle appender left, sync to the mark, publish."""
        lg = self._log
        with lg._lock:
            idle = bool(lg._buf) and (
                lg._waiters > 0
                or time.monotonic() - lg._buf_since >= lg._opts.group_commit_ms / 1000.0
            )
        if idle:
            lg._write_out()
        with lg._lock:
            retired, lg._retired = lg._retired, []
            mark = lg._written
            lg._unsynced = 0
            lg._dirty_since = lg._buf_since if lg._buf else None
            lg._cond.notify_all()
        for fd in retired:
            os.close(fd)
        if mark is None or mark.seq <= lg._acked:
            return
        if lg._opts.durability is not Durability.NONE:
            try:
                os.fdatasync(mark.fd)
            except BaseException as e:
                raise lg._fail(e) from e
        lg._publish(mark.base, mark.end, mark.seq)
