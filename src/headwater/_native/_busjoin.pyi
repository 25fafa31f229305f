from typing import Any

def join(n: int, pieces: list[Any], /) -> list[bytes]:
    """The ``n`` values joined from ``pieces`` (constant bytes, per-group texts, int64
    and string column buffers; busjoin.c)."""
