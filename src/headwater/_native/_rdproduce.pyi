from typing import Any

def load(path: str, /) -> None:
    """librdkafka from ``path`` (dlopen, once per process; rdproduce.c)."""

def version() -> int | None:
    """librdkafka's version number, or None if not loaded."""

def err2str(code: int, /) -> str:
    """librdkafka's text of an error code."""

class Producer:
    """A librdkafka producer (rdproduce.c)."""

    def __init__(self, settings: list[tuple[str, str]], /) -> None: ...
    def produce(self, topic: str, value: Any, key: Any, partition: int, /) -> int: ...
    def produce_rows(
        self,
        n: int,
        topics: tuple[str, ...],
        groups: Any,
        goffset: int,
        kvalid: Any,
        koffsets: Any,
        kdata: Any,
        koffset: int,
        kwide: bool,
        voffsets: bytes,
        vdata: bytes,
        single: bool,
        /,
    ) -> tuple[int, int]: ...
    def poll(self, timeout_ms: int, /) -> int: ...
    def flush(self, timeout_ms: int, /) -> int: ...
    def take_error(self) -> tuple[int, str, int] | None: ...
    def close(self) -> None: ...
