from typing import Any

def join(n: int, pieces: list[Any], /) -> list[bytes]:
    """The ``n`` values joined from ``pieces`` (constant bytes, per-group texts, int64
    and string column buffers; busjoin.c)."""

def join_buffer(n: int, pieces: list[Any], /) -> tuple[bytes, bytes]:
    """The same values in one buffer: ``(offsets, data)``, ``n + 1`` native int64 offsets
    into ``data`` (busjoin.c)."""
