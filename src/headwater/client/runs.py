"""A shard's queue of changes, held as runs of a rows event's value tuples.

Why not a queue of change objects: an object per queued change is what made the
consumer's process slower than a bare fetch loop. A change waits in its shard's queue
from the moment the raw feed decodes it until its worker takes it, and CPython's cyclic
garbage collector counts every container allocated and not yet freed: change objects
that wait trigger young collections every 700, survive them, are promoted, and end up
in full collections of the whole process (``bench/consumer.py`` counted about 350 young,
32 middle and 3 full collections per 100000 rows, against about 20 young ones for the bare
loop, which drops each change at once; with the collector off the SDK used 0.15-0.2 s
less CPU per 100000 rows, twice what the compiled decoder takes for the rows' values).

So the raw feed queues, per shard and rows event, one :class:`Run`: the event's list of
value tuples (shared by every shard), the indexes of this shard's rows in it, and the
sequence of the event's first change. The decoder's value tuples hold no containers, so
the first young collection untracks them; what waits is a few lists per event. The
worker makes the :class:`~headwater.client.rows.Row` objects of the changes it takes,
outside the queue's lock, and they live as long as the handler keeps them.

A run can also hold ready change objects (``block`` None): DDL statements, rows decoded
by the server (``decode="json"``/``"protobuf"``), a rolled-back batch put back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence as SequenceABC
from itertools import chain
from typing import TYPE_CHECKING, Any, overload

from headwater.client.rows import RowBlock, rows_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from headwater.changes import ChangeRow

__all__ = ["Changes", "Run", "RunQueue", "changes_of"]


class Run:
    """Changes of one shard, in log order: with ``block``, rows ``at`` (indexes into
    ``items``, a rows event's value tuples; the change at index ``i`` has sequence
    ``first + i``); without, ``items`` are change objects (``at`` is None)."""

    __slots__ = ("at", "block", "first", "items")

    def __init__(
        self, block: RowBlock | None, first: int, items: Sequence[Any], at: list[int] | None
    ) -> None:
        self.block = block
        self.first = first
        self.items = items
        self.at = at

    @staticmethod
    def of(changes: Sequence[ChangeRow]) -> Run:
        """A run of ready change objects."""
        return Run(None, 0, changes, None)

    def __len__(self) -> int:
        at = self.at
        return len(self.items) if at is None else len(at)

    def next_sequence(self) -> int:
        """The sequence after this run's last change (the run is not empty)."""
        at = self.at
        if at is None:
            return int(self.items[-1].sequence) + 1
        return self.first + at[-1] + 1


class RunQueue:
    """Runs of one shard; ``len`` counts changes. Not locked: the shard's condition
    guards it."""

    __slots__ = ("_runs", "_size")

    def __init__(self) -> None:
        self._runs: deque[Run] = deque()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, runs: Sequence[Run]) -> None:
        for run in runs:
            n = len(run)
            if n:
                self._runs.append(run)
                self._size += n

    def push_front(self, runs: Sequence[Run]) -> None:
        """Put ``runs`` back before everything queued (a rollback)."""
        for run in reversed(runs):
            n = len(run)
            if n:
                self._runs.appendleft(run)
                self._size += n

    def take(self, n: int) -> list[Run]:
        """Up to ``n`` changes from the front, as runs (:func:`changes_of` makes the
        change objects; do it outside the lock)."""
        out: list[Run] = []
        runs = self._runs
        while n > 0 and runs:
            run = runs[0]
            size = len(run)
            if size <= n:
                runs.popleft()
                out.append(run)
            else:  # split: the front part goes, the rest stays queued
                size = n
                if run.at is None:
                    out.append(Run.of(run.items[:n]))
                    run.items = run.items[n:]
                else:
                    out.append(Run(run.block, run.first, run.items, run.at[:n]))
                    run.at = run.at[n:]
            n -= size
            self._size -= size
        return out


def changes_of(runs: Sequence[Run]) -> list[ChangeRow]:
    """The change objects of ``runs``, in order."""
    out: list[ChangeRow] = []
    for run in runs:
        block, at = run.block, run.at
        if block is None or at is None:
            out += run.items
        else:
            out += rows_of(block, run.items, at, run.first)
    return out


def _stream(runs: Sequence[Run]) -> Iterator[ChangeRow]:
    # built a run at a time (at most a batch), read as the loop goes; chained in C, not by
    # a generator resumed per change (about 0.015 s of CPU per 100000 changes)
    return chain.from_iterable(map(_changes_of_run, runs))


def _changes_of_run(run: Run) -> Sequence[ChangeRow]:
    block, at = run.block, run.at
    if block is None or at is None:
        return run.items
    return rows_of(block, run.items, at, run.first)


class Changes(SequenceABC["ChangeRow"]):
    """A batch's changes (``Batch.changes``): a sequence of :class:`ChangeRow`, in log
    order, made from runs as they are read. Iterating makes each change as the loop
    reaches it (a handler that does not keep it lets it go at once: no burst of objects
    for the garbage collector, module docstring); indexing, slicing or a second
    iteration make the list once and keep it."""

    __slots__ = ("_iterated", "_list", "_runs", "_size")

    def __init__(self, runs: Sequence[Run]) -> None:
        self._runs = runs
        self._size = sum(len(run) for run in runs)
        self._list: list[ChangeRow] | None = None
        self._iterated = False

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[ChangeRow]:
        if self._list is None and not self._iterated:
            self._iterated = True
            return _stream(self._runs)
        return iter(self.list())

    @overload
    def __getitem__(self, index: int) -> ChangeRow: ...
    @overload
    def __getitem__(self, index: slice) -> list[ChangeRow]: ...
    def __getitem__(self, index: int | slice) -> ChangeRow | list[ChangeRow]:
        return self.list()[index]

    def list(self) -> list[ChangeRow]:
        """The changes as a list (made once)."""
        if self._list is None:
            self._list = changes_of(self._runs)
        return self._list

    def runs(self) -> Sequence[Run]:
        return self._runs

    def next_sequence(self) -> int:
        """The sequence after the last change (not empty)."""
        return self._runs[-1].next_sequence()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SequenceABC) and not isinstance(other, (str, bytes)):
            return self.list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Changes({self.list()!r})"
