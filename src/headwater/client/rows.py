"""The change rows the SDK hands to handlers with client decoding: lazy :class:`ChangeRow` s.

:func:`~headwater.changes.decode_record` builds, per change, a frozen dataclass of 14
fields and up to three dicts (``key``, ``before``, ``after``); measured in
``bench/consumer.py`` that is about 3 µs per row, four times the compiled decoding of the
row's values. The SDK queues a change long before its handler looks at it (and a handler
may look at a few fields only), so it queues value tuples (:mod:`.runs`) and builds a
:class:`Row` only when the handler iterates its batch: its ``sequence``, ``key``,
``before`` and ``after`` (the dicts exactly as :func:`~headwater.changes.block_changes`
builds them) and one :class:`RowBlock` shared by every change of its rows event (names,
position, transaction fields). :func:`rows_of` builds the rows of one run at a time: the
dicts in C-level ``map`` loops and each row through a writable twin class (as
``headwater.binlog._frozen``) with five plain slot stores, so a handler reads ``key`` and
``after`` as plain slots (measured, ``bench/consumer.py``'s handler: 0.15 against 0.19 s
of CPU per 100000 rows for rows whose dicts were built on first read through properties).

A :class:`Row` *is* a :class:`ChangeRow` (a subclass: ``isinstance`` holds, sinks accept
it), equal to the ChangeRow ``decode_record`` makes of the same change; it pickles as that
ChangeRow. Like a ChangeRow it has no setters.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any

from headwater.changes import ChangeBlock, ChangeRow
from headwater.position import Position

__all__ = ["Row", "RowBlock", "rows_of"]


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
    """One change of a rows event (module docstring): ``sequence``, ``key``, ``before``
    and ``after`` are ChangeRow's own slots, the other fields come from the shared block.
    ``Row(block, values, sequence)`` builds one from the event's value tuple of the change
    (for an update, the pair ``(before, after)``); :func:`rows_of` builds many faster."""

    __slots__ = ("_block",)
    _block: RowBlock

    def __init__(self, block: RowBlock, values: Any, sequence: int) -> None:
        key, before, after = _images(block, values)
        store = object.__setattr__  # ChangeRow (frozen) refuses setattr: no setters
        store(self, "_block", block)
        store(self, "sequence", sequence)
        store(self, "key", key)
        store(self, "before", before)
        store(self, "after", after)

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
        b = self._block
        return ChangeRow(
            b.source, b.database, b.table, b.op, b.ts_us, b.position, b.gtid, b.txn_id,
            self.sequence, self.key, self.before, self.after, b.schema_version,
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


class _RowTwin(ChangeRow):
    """:class:`Row` 's writable twin: same base, same slots (so an instance may become a
    Row by ``__class__`` assignment, ``headwater.binlog._frozen`` says why), plain stores."""

    __slots__ = ("_block",)
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__

    def __init__(self, block: RowBlock, sequence: int, key: Any, before: Any, after: Any):
        self._block = block
        self.sequence = sequence  # type: ignore[misc]
        self.key = key  # type: ignore[misc]
        self.before = before  # type: ignore[misc]
        self.after = after  # type: ignore[misc]


def rows_of(block: RowBlock, items: Sequence[Any], at: Sequence[int], first: int) -> list[Row]:
    """The rows ``items[i]`` for ``i`` in ``at`` (the change at ``i`` has sequence
    ``first + i``), equal to ``[Row(block, items[i], first + i) for i in at]``."""
    values = [items[i] for i in at]
    op = block.op
    befores: Any
    afters: Any
    if op == "insert":
        image = values
        befores = repeat(None)
        afters = list(map(dict, map(zip, repeat(block.after_names), values)))
    elif op == "update":
        image = [v[1] for v in values]
        befores = list(map(dict, map(zip, repeat(block.before_names), [v[0] for v in values])))
        afters = list(map(dict, map(zip, repeat(block.after_names), image)))
    else:
        image = values
        befores = list(map(dict, map(zip, repeat(block.before_names), values)))
        afters = repeat(None)
    key_at = block.key_at
    keys: Any
    if key_at is None:
        keys = repeat(None)
    elif len(key_at) == 1 and key_at[0][1] is not None:  # the common case
        name, k = key_at[0]
        keys = [{name: v[k]} for v in image]
    else:
        keys = [{name: None if k is None else v[k] for name, k in key_at} for v in image]
    rows: list[Any] = list(
        map(_RowTwin, repeat(block), [first + i for i in at], keys, befores, afters)
    )
    for row in rows:
        row.__class__ = Row
    return rows
