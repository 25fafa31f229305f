from collections.abc import Sequence

from typing_extensions import Buffer

SLOW: int
MORE: int
LIMIT: int
SHAPE: int
#: bit 0: CRC32C by SSE4.2, bit 1: CRC32 by PCLMULQDQ folding (self-checked at import)
HW_CRC: int

_Last = tuple[int, int, int, int, int, int]

class Scanner:
    in_transaction: bool
    shapes: int
    resume: int
    txn_offset: int
    def __init__(self, id_size: int = 6) -> None: ...
    def add_shape(self, body: Buffer, name: Buffer, widths: Buffer) -> None: ...
    def clear(self) -> None: ...
    def reset(self) -> None: ...
    def scan(
        self,
        buf: Buffer,
        start: int,
        end: int,
        seq: int,
        *,
        crc: bool = True,
        verify: bool = True,
        change_id: int = 0,
        file_num: int = 0,
        schema_version: int = 0,
        chunk_bytes: int = 8 << 20,
        after_file: int = -1,
        after_offset: int = -1,
        gtid_domain: int = -1,
        gtid_floor: int = -1,
        dropped: Buffer,
        max_out: int = 4 << 20,
        out: bytearray,
        seq0: int = 0,
    ) -> tuple[int, int, int, int, int, int, _Last | None]: ...

def stamp(
    frames: Buffer,
    start: int,
    seq0: int,
    off0: int,
    seg_limit: int,
    block_bytes: int,
    interval: int,
    open_first: bool,
    max_ts: int,
) -> tuple[int, int, list[int], list[tuple[int, int, tuple[int, int, int] | None]], int, int]: ...
def crc32c(data: Buffer, crc: int = 0) -> int: ...
def crc32(data: Buffer) -> int: ...
def _portable_crc(which: int, data: Buffer) -> int: ...
def events(payload: Buffer, mask: Buffer, /) -> list[tuple[int, int, int, int]] | None: ...
def shard_column(prefix: int, values: Sequence[object], index: int = -1) -> list[int] | None: ...
