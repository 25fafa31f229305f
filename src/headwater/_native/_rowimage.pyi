from typing_extensions import Buffer

#: whether Decimals are built in place (CPython's layout checked at import) or from text
DECIMAL_DIRECT: int
#: column kind name -> code (headwater.binlog._columns.native_spec maps a column to one)
KINDS: dict[str, int]

class Image:
    """The column kinds of one row image shape: ``specs`` holds one ``(kind, a, b, obj)``
    per present column (see rowimage.c)."""

    columns: int
    def __init__(self, specs: tuple[tuple[int, int, int, object], ...], /) -> None: ...

def rows(image: Image, buf: bytes, pos: int, end: int, /) -> list[tuple[object, ...]] | None: ...
def pairs(
    before: Image, after: Image, buf: bytes, pos: int, end: int, /
) -> list[tuple[tuple[object, ...], tuple[object, ...]]] | None: ...
def image(image: Image, buf: bytes, pos: int, /) -> tuple[tuple[object, ...], int] | None: ...
def count(first: Image, second: Image | None, buf: Buffer, pos: int, end: int, /) -> int | None: ...
def _decimal_direct(on: bool, /) -> bool: ...
