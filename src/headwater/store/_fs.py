"""Small file-system helpers with the durability rules of the store.

Invariant: a file that other code may trust after a crash is only ever made visible under
its final name by ``rename`` of a fully written and fsynced temp file, followed by an
fsync of the directory (so the rename itself survives a power cut).
"""

from __future__ import annotations

import os

__all__ = ["atomic_write", "fsync_dir"]

TMP_SUFFIX = ".tmp"


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
