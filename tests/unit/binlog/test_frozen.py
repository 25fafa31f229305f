"""headwater.binlog._frozen.maker: frozen event dataclasses built without the cost of their
generated __init__ are the same objects as the ones it builds."""

from __future__ import annotations

import dataclasses
import pickle
import uuid

import pytest

from headwater.binlog._context import BinlogEvent
from headwater.binlog._control import XidEvent
from headwater.binlog._frozen import maker
from headwater.binlog._gtid import GtidEvent, MariadbGtidEvent
from headwater.binlog.constants import ColumnType as T
from headwater.binlog.rows import RowsEvent
from headwater.binlog.tablemap import TableMap

TM = TableMap(
    table_id=5,
    flags=0,
    schema="s",
    table="t",
    column_types=(T.LONG,),
    column_meta=(0,),
    nullable=(False,),
)

CASES: list[tuple[type, tuple[object, ...]]] = [
    (XidEvent, (77,)),
    (MariadbGtidEvent, (9, 0, 1, 8, None, None, 0, None, None)),
    (GtidEvent, (1, uuid.UUID(int=3), 4, 2, 5, 6, 7, 7, 100, 80036, 80036, None, "")),
    (RowsEvent, ("insert", 30, 5, 1, TM, 1, (), (0,), [(1,)], b"", {})),
]


@pytest.mark.parametrize(("cls", "values"), CASES, ids=[c[0].__name__ for c in CASES])
def test_made_objects_are_the_class_s_own(cls: type, values: tuple[object, ...]) -> None:
    made = maker(cls)(*values)
    built = cls(*values)
    assert type(made) is cls
    assert made == built and repr(made) == repr(built)
    assert dataclasses.astuple(made) == dataclasses.astuple(built)
    assert pickle.loads(pickle.dumps(made)) == built
    name = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(made, name)


def test_hashable_events_hash_alike() -> None:
    values = (9, 0, 1, 8, None, None, 0, None, None)
    assert hash(maker(MariadbGtidEvent)(*values)) == hash(MariadbGtidEvent(*values))
    assert isinstance(maker(XidEvent)(1), BinlogEvent)


def test_classes_it_cannot_make_are_refused() -> None:
    @dataclasses.dataclass(slots=True)
    class Plain:
        a: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("negative")

    for cls in (Plain, NoSlots, Checked):
        with pytest.raises(TypeError, match=cls.__name__):
            maker(cls)
