"""The table definition in force at each row of a shard's batch, in few lookups.

A shard transaction needs, for the rows it writes, the definition of their table at
their position (:meth:`~headwater.sinks.base.SchemaSource.table_at`): how many columns
the table has (a full image needs no merge) and the statement shape of each net effect.
Asked per row, that cost a :class:`~headwater.position.Position` (validated) and a
history lookup per position: with single-row transactions, where every change has a
position of its own, more than the rest of the apply step together (bench/apply.py
``--single``).

A :class:`~headwater.sinks.base.SchemaSource` returns the *same object* for every
position of one interval between two schema changes of a table (its contract, which
:class:`~headwater.schema.history.SchemaHistory`, :class:`~headwater.sinks.base.SchemaFile`
and the transforms' view keep). So when the rows at the two ends of a run of one table's
rows (in sequence order, one source: positions only grow) get the same object, every row
between is in that interval and gets it too. :func:`row_definitions` looks up the ends
of each table's run and bisects only where they differ: ``2 + 2 * changes * log2(rows)``
lookups for a run with ``changes`` schema changes inside it, two for the usual run.
A lookup that finds no definition is never spread to other rows (each such row is asked
on its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from headwater.schema.model import TableDef

if TYPE_CHECKING:
    from headwater.sinks.base import SchemaSource
    from headwater.sinks.merge import ChangeColumns

__all__ = ["row_definitions"]


def row_definitions(
    cols: ChangeColumns, rows: Sequence[int], schema: SchemaSource
) -> dict[int, TableDef | None]:
    """The definition of each row of ``rows`` (indexes into ``cols``, in sequence order)
    at its position: ``{row: definition or None}`` (module docstring)."""
    src, db, tbl = cols.source, cols.database, cols.table
    out: dict[int, TableDef | None] = {}
    if not rows:
        return out
    runs: list[list[int]]
    if all(
        len(set(map(column.__getitem__, rows))) == 1 for column in (src, db, tbl)
    ):  # one table of one source: one run, no tuple per row
        runs = [list(rows)]
    else:
        by_table: dict[tuple[str, str, str], list[int]] = {}
        for i in rows:
            by_table.setdefault((src[i], db[i], tbl[i]), []).append(i)
        runs = list(by_table.values())

    def look(i: int) -> TableDef | None:
        if i not in out:
            out[i] = schema.table_at(db[i], tbl[i], cols.position(i))
        return out[i]

    for run in runs:
        _fill(run, 0, len(run) - 1, look, out)
    return out


def _fill(
    run: list[int],
    lo: int,
    hi: int,
    look: Callable[[int], TableDef | None],
    out: dict[int, TableDef | None],
) -> None:
    """Rows ``run[lo..hi]`` (inclusive) resolved: the ends looked up, the rows between
    given the ends' definition when it is one object, else the halves done alike."""
    # An explicit stack: a run with many schema changes must not recurse deeply.
    todo = [(lo, hi)]
    while todo:
        lo, hi = todo.pop()
        low, high = look(run[lo]), look(run[hi])
        if hi - lo <= 1:
            continue
        if low is not None and low is high:
            out.update(dict.fromkeys(run[lo + 1 : hi], low))
            continue
        mid = (lo + hi) // 2
        todo.append((mid, hi))
        todo.append((lo, mid))
