from typing_extensions import Buffer

INSERT: int
UPDATE: int
DELETE: int
#: key column kinds: an integer read signed or unsigned, or text compared by its bytes
KEY_SIGNED: int
KEY_UNSIGNED: int
KEY_TEXT: int
#: the start of the ValueError text of a key that routing mode cannot render (lastwrite.c)
UNROUTABLE: str

class Shape:
    """The present columns of one row image: ``widths`` (value_width per column) and
    ``keys``: ``(position in the image, KEY_*)`` per key column, in key order."""

    def __init__(self, widths: tuple[int, ...], keys: tuple[tuple[int, int], ...], /) -> None: ...

class Scanner:
    """The last write per key of the keys hashed to ``part`` of ``parts`` (lastwrite.c);
    ``hint``: the keys expected (sizes its table up front; any value gives the same result)."""

    keys: int
    def __init__(self, parts: int, part: int, hint: int = 0, /) -> None: ...
    def scan(
        self,
        op: int,
        first: Shape,
        second: Shape | None,
        buf: Buffer,
        pos: int,
        end: int,
        ordinal: int,
        /,
    ) -> int: ...
    def survivors(self) -> tuple[bytes, bytes]: ...
    def route(
        self,
        database: str,
        table: str,
        names: tuple[str, ...],
        ascii: tuple[bool, ...],
        shards: int,
        shard: int,
        /,
    ) -> None: ...
    def key_text(self, tagged: Buffer, /) -> tuple[bytes, int]: ...
    def removes(
        self, existing: bool = False
    ) -> tuple[int, tuple[bytes | tuple[bytes, bytes], ...]]: ...
