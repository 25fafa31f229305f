from typing_extensions import Buffer

SLOW: int
MORE: int
LIMIT: int
SHAPE: int

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
        crc: bool,
        verify: bool,
        change_id: int,
        file_num: int,
        schema_version: int,
        chunk_bytes: int,
        after_file: int,
        after_offset: int,
        gtid_domain: int,
        gtid_floor: int,
        dropped: Buffer,
        max_out: int,
        out: bytearray,
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
