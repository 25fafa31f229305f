"""The change rows the SDK hands to handlers with client decoding: lazy :class:`ChangeRow` s.

:func:`~headwater.changes.decode_record` builds, per change, a frozen dataclass of 14
fields and up to three dicts (``key``, ``before``, ``after``); measured in
``bench/consumer.py`` that is about 3 µs per row, four times the compiled decoding of the
row's values. The SDK queues a change long before its handler looks at it (and a handler
may look at a few fields only), so it builds a :class:`Row` instead: the change's value
tuple(s), its ``sequence``, and one :class:`RowBlock` shared by every change of its rows
event (names, position, transaction fields). ``key``, ``before`` and ``after`` are built on
the first access of any of them, exactly as :func:`~headwater.changes.block_changes`
builds them, and kept.

A :class:`Row` *is* a :class:`ChangeRow` (a subclass: ``isinstance`` holds, sinks accept
it), equal to the ChangeRow ``decode_record`` makes of the same change; it pickles as that
ChangeRow. Like a ChangeRow it has no setters.
"""

from __future__ import annotations

from typing import Any

from headwater.changes import ChangeBlock, ChangeRow
from headwater.position import Position

__all__ = ["Row", "RowBlock"]


class RowBlock:
    """What every change of one rows event shares (one per :class:`ChangeBlock`)."""

    __slots__ = (
        "after_names",
        "before_names",
        "database",
        "gtid",
        "key_at",
        "op",
        "position",
        "schema_version",
        "source",
        "table",
        "ts_us",
        "txn_id",
    )

    def __init__(self, record: Any, block: ChangeBlock, source: str) -> None:
        gtid: str = record.gtid
        base: Position = record.position
        self.source = source
        self.database = block.database
        self.table = block.table
        self.op = block.op
        self.ts_us: int = record.ts_us
        self.position = block.position
        self.gtid = gtid
        self.txn_id = gtid or f"{base.file_num}:{base.offset}"  # as block_changes
        self.schema_version: int = record.schema_version
        self.before_names = block.before_names
        self.after_names = block.after_names
        # each key column's place in the image the key comes from (after, or before for a
        # delete), the last place of a name given twice (as dict(zip(...)) keeps), None
        # where the image lacks it (image.get(name) in block_changes)
        names = block.before_names if block.op == "delete" else block.after_names
        where = {name: i for i, name in enumerate(names)}
        self.key_at: tuple[tuple[str, int | None], ...] | None = (
            None
            if block.key_names is None
            else tuple((name, where.get(name)) for name in block.key_names)
        )


Image = dict[str, Any] | None


def _images(block: RowBlock, values: Any) -> tuple[Image, Image, Image]:
    """``(key, before, after)`` of a change, as ``ChangeBlock.images`` and
    ``block_changes`` build them. The decoder gives each image one value per name of
    its event (``RowsEvent.column_names``), so ``zip`` needs no ``strict`` check here."""
    op = block.op
    if op == "insert":
        image = values
        before = None
        after: Image = dict(zip(block.after_names, values, strict=False))
    elif op == "update":
        image = values[1]
        before = dict(zip(block.before_names, values[0], strict=False))
        after = dict(zip(block.after_names, image, strict=False))
    else:
        image = values
        before = dict(zip(block.before_names, values, strict=False))
        after = None
    key_at = block.key_at
    if key_at is None:
        return None, before, after
    if len(key_at) == 1:  # the common case
        name, i = key_at[0]
        return {name: None if i is None else image[i]}, before, after
    return {name: None if i is None else image[i] for name, i in key_at}, before, after


class Row(ChangeRow):
    """One change of a rows event; ``key``/``before``/``after`` built when first read
    (module docstring). ``values`` is the event's value tuple of the change (for an
    update, the pair ``(before, after)``)."""

    # ``sequence`` shadows ChangeRow's slot of the same name (the others are properties
    # over the shared block); ChangeRow's own slots stay unset
    __slots__ = ("_block", "_images", "_values", "sequence")

    # a Row is set once, by __init__; ChangeRow (frozen) refuses any setattr
    __setattr__ = object.__setattr__

    def __init__(self, block: RowBlock, values: Any, sequence: int) -> None:
        self._block = block
        self._values = values
        self.sequence = sequence  # type: ignore[misc]
        self._images: tuple[Image, Image, Image] | None = None

    def _built(self) -> tuple[Image, Image, Image]:
        images = self._images
        if images is None:
            images = self._images = _images(self._block, self._values)
        return images

    @property
    def key(self) -> Image:
        images = self._images
        if images is None:
            images = self._images = _images(self._block, self._values)
        return images[0]

    @property
    def before(self) -> Image:
        images = self._images
        if images is None:
            images = self._images = _images(self._block, self._values)
        return images[1]

    @property
    def after(self) -> Image:
        images = self._images
        if images is None:
            images = self._images = _images(self._block, self._values)
        return images[2]

    @property
    def source(self) -> str:
        return self._block.source

    @property
    def database(self) -> str:
        return self._block.database

    @property
    def table(self) -> str:
        return self._block.table

    @property
    def op(self) -> str:
        return self._block.op

    @property
    def ts_us(self) -> int:
        return self._block.ts_us

    @property
    def position(self) -> Position:
        return self._block.position

    @property
    def gtid(self) -> str:
        return self._block.gtid

    @property
    def txn_id(self) -> str:
        return self._block.txn_id

    @property
    def schema_version(self) -> int:
        return self._block.schema_version

    @property
    def sql(self) -> str | None:
        return None  # rows events only: DDL comes as a plain ChangeRow

    def change_row(self) -> ChangeRow:
        """The same change as a plain :class:`ChangeRow` (what ``decode_record`` makes)."""
        key, before, after = self._built()
        b = self._block
        return ChangeRow(
            b.source, b.database, b.table, b.op, b.ts_us, b.position, b.gtid, b.txn_id,
            self.sequence, key, before, after, b.schema_version,
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChangeRow):
            return _fields(self) == _fields(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(_fields(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return ChangeRow, _fields(self)


def _fields(row: ChangeRow) -> tuple[Any, ...]:
    return (
        row.source, row.database, row.table, row.op, row.ts_us, row.position, row.gtid,
        row.txn_id, row.sequence, row.key, row.before, row.after, row.schema_version, row.sql,
    )  # fmt: skip
