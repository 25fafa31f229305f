from collections.abc import Callable
from typing import Any

_Picks = list[tuple[str, int]]

_Column = tuple[int, int, bytes, bytes, bytes | None]

class JsonColumns:
    """The ``key``, ``before``, ``after``, ``before_key`` columns (0-3) of a record batch
    being built, as Arrow string buffers (int32 offsets, UTF-8 data, validity bits)."""

    def __len__(self) -> int: ...
    def append(self, column: int, text: str | None, /) -> None: ...
    def take(self) -> list[_Column]:
        """``(length, null_count, offsets, data, validity or None)`` of each column, for
        ``pyarrow.StringArray.from_buffers``; the builder is empty afterwards."""

def render_block(
    op: str,
    rows: list[Any],
    lo: int,
    hi: int,
    before_names: list[str],
    after_names: list[str],
    picks: _Picks | None,
    old_picks: _Picks | None,
    out: tuple[list[str | None], list[str | None], list[str | None], list[str | None]]
    | JsonColumns,
    plain: Callable[[Any], str],
    escaped: Callable[[Any], str],
    /,
) -> bool:
    """Append the JSON images of ``rows[lo:hi]`` of a rows block (``op`` insert, update or
    delete; update rows are ``(before, after)`` pairs) to the four columns of ``out``
    (``key``, ``before``, ``after``, ``before_key``: lists or a builder), as
    ``headwater.spark.partitions._images_python`` does. ``picks``: ``(key name, index in
    the after image, -1: absent)`` (for deletes, the before image), None: no key;
    ``old_picks``: the same in the before image of an update when ``before_key`` can be
    known, else None. ``plain``/``escaped`` render one value of a type not rendered in C
    (orjson with json_default; the same after _escape_surrogates). Returns False, having
    appended nothing, when the names are not distinct (left to the Python path); on an
    error the columns are left as they were."""

#: the column kind names (``headwater.binlog._columns.native_spec``) render_raw writes
RAW_KINDS: frozenset[str]

class RowShape:
    """The column kinds of one row image rendered from bytes: ``specs`` holds one
    ``(kind name, a, b, obj)`` per present column (``native_spec``'s, kinds in
    :data:`RAW_KINDS`; ValueError otherwise)."""

    columns: int
    def __init__(self, specs: tuple[tuple[str, int, int, object], ...], /) -> None: ...

def render_raw(
    op: str,
    before: RowShape | None,
    after: RowShape | None,
    body: bytes,
    pos: int,
    end: int,
    lo: int,
    hi: int,
    before_names: list[str],
    after_names: list[str],
    picks: _Picks | None,
    old_picks: _Picks | None,
    out: tuple[list[str | None], list[str | None], list[str | None], list[str | None]]
    | JsonColumns,
    /,
) -> bool:
    """Append to ``out`` the JSON images of rows ``[lo, hi)`` of the rows in
    ``body[pos:end]`` (a rows event's row images: ``before`` and ``after`` for updates,
    ``after`` for inserts, ``before`` for deletes), the text :func:`render_block` appends
    for the values ``headwater._native._rowimage`` decodes from those bytes. Returns
    False, having appended nothing, wherever that text could differ or the bytes do not
    frame (see rowjson.c): the caller then decodes the rows. Only a :class:`JsonColumns`
    is written (lists: False)."""
