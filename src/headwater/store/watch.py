"""Waiting for a file to change: how readers in other processes wait on the ``head`` file.

inotify on Linux (through libc, no dependency); where it is unavailable, a bounded 50 ms
poll, so a waiter is late by at most that much and never blocks forever.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import time

__all__ = ["FileWatch"]


class FileWatch:
    """Wait until a file is modified: inotify on Linux, else a short bounded poll."""

    IN_MODIFY = 0x2
    IN_ATTRIB = 0x4
    IN_NONBLOCK = 0o4000
    IN_CLOEXEC = 0o2000000

    def __init__(self, path: str) -> None:
        self.fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(self.IN_NONBLOCK | self.IN_CLOEXEC)
            if fd >= 0:
                if (
                    libc.inotify_add_watch(fd, os.fsencode(path), self.IN_MODIFY | self.IN_ATTRIB)
                    < 0
                ):
                    os.close(fd)
                else:
                    self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    def wait(self, timeout: float | None) -> None:
        if self.fd < 0:
            time.sleep(0.05 if timeout is None else min(timeout, 0.05))
            return
        ready, _w, _x = select.select([self.fd], [], [], timeout)
        if ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self.fd, 4096):
                    pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
