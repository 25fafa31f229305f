"""headwater.gcpause: the collector paused for a block, and a worker's heap frozen at the
end of a task."""

from __future__ import annotations

import gc
import weakref

from headwater.gcpause import freeze_worker_heap, gc_paused


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_gc_paused_restores_the_collector_after_an_exception() -> None:
    assert gc.isenabled()
    try:
        with gc_paused():
            assert not gc.isenabled()
            raise ValueError("inside")
    except ValueError:
        pass
    assert gc.isenabled()


def test_freeze_worker_heap_collects_the_tasks_cycles_and_freezes_what_lives() -> None:
    garbage_a, garbage_b = _Node(), _Node()
    garbage_a.other, garbage_b.other = garbage_b, garbage_a  # a cycle only gc can free
    dead = weakref.ref(garbage_a)
    del garbage_a, garbage_b
    alive = _Node()
    alive.other = alive
    try:
        freeze_worker_heap()
        assert dead() is None  # the task's garbage was collected, not frozen
        assert gc.get_freeze_count() > 0
        # what lived is frozen: a collection no longer sees it
        assert not any(o is alive for o in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(o is alive for o in gc.get_objects())
