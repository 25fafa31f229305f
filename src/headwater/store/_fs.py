"""Small file-system helpers with the durability rules of the store.

Invariant: a file that other code may trust after a crash is only ever made visible under
its final name by ``rename`` of a fully written and fsynced temp file, followed by an
fsync of the directory (so the rename itself survives a power cut).
"""

from __future__ import annotations

import os

__all__ = ["atomic_write", "fsync_dir", "write_all", "writev_all"]

TMP_SUFFIX = ".tmp"
IOV_MAX = 1024


def fsync_dir(path: str) -> None:
    """Make creations, renames and unlinks in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync of the directory."""
    tmp = path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def writev_all(fd: int, pieces: list[bytes | bytearray | memoryview]) -> None:
    """Write the pieces in order with as few system calls as possible (no joining copy)."""
    for i in range(0, len(pieces), IOV_MAX):
        batch = pieces[i : i + IOV_MAX]
        n = os.writev(fd, batch)
        total = sum(map(len, batch))
        if n < total:  # a short write (rare for files): finish the rest plainly
            write_all(fd, b"".join(batch)[n:])


def write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
