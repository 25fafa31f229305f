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
3. publish the mark (``Published.publish``, monotone), which wakes waiters and readers.

Invariants: the flusher never holds the published lock during I/O; it syncs only descriptors taken
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
    from headwater.store.writer import Writer

__all__ = ["Flusher"]

log = logging.getLogger(__name__)


class Flusher:
    """The flusher thread of one :class:`~headwater.store.writer.Writer`."""

    def __init__(self, writer: Writer) -> None:
        self._w = writer
        self._thread = threading.Thread(target=self.run, name="headwater-store-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def run(self) -> None:
        w = self._w
        pub, segs = w.pub, w.segs
        opts = w.opts
        group_s = opts.group_commit_ms / 1000.0
        group_bytes = opts.group_commit_bytes
        cond = pub.flush_cond
        while True:
            with pub.lock:
                while w.dirty_since is None and not pub.closed:
                    cond.wait(segs.idle_wait())
                    if w.dirty_since is None and not pub.closed and segs.timer_due():
                        break
                if pub.closed:
                    return
                if w.dirty_since is not None:
                    deadline = w.dirty_since + group_s
                    while not pub.closed and not w.waiters and w.unsynced < group_bytes:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        cond.wait(remaining)
                    if pub.closed:
                        return
            try:
                self.cycle()
                w.roll_if_idle()
            except StoreError:
                return

    def cycle(self) -> None:
        """One group commit: write what an idle appender left, sync to the mark, publish."""
        w = self._w
        pub = w.pub
        with pub.lock:
            idle = bool(w.buf) and (
                w.waiters > 0 or time.monotonic() - w.buf_since >= w.opts.group_commit_ms / 1000.0
            )
        if idle:
            w.write_out()
        with pub.lock:
            retired, w.segs.retired = w.segs.retired, []
            mark = w.written
            w.unsynced = 0
            w.dirty_since = w.buf_since if w.buf else None
            pub.cond.notify_all()
        for fd in retired:
            os.close(fd)
        if mark is None or mark.seq <= pub.acked:
            return
        if w.opts.durability is not Durability.NONE:
            try:
                os.fdatasync(mark.fd)
            except BaseException as e:
                raise pub.fail(e) from e
        pub.publish(mark.base, mark.end, mark.seq)
