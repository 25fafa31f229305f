"""Making frozen event dataclasses at the cost of plain ones, for the per-event hot paths.

The decoded events are frozen slots dataclasses. Their generated ``__init__`` stores each
field with ``object.__setattr__(self, name, value)`` (``dataclasses._field_init``), which
CPython checks against the class's own ``__setattr__`` on every call: about ten times the
cost of a plain slot store (11 fields: ~2.6 us against ~0.3 us), paid once per event.

:func:`maker` returns a function building an instance of such a class from all its fields:
it fills a *twin* -- a class with the same bases and the same ``__slots__``, but writable --
with plain attribute stores, then turns it into the frozen class by ``__class__``
assignment. CPython allows that between two heap types whose instances have the same
layout: same base and same slot names (``Objects/typeobject.c``,
``compatible_for_assignment`` and ``same_slots_added``), which the twin has by
construction; :func:`maker` checks it once, when called. The result is an ordinary
instance of the frozen class: ``type(obj) is cls``, still frozen, same ``==``, ``hash``,
``repr`` and pickling. Fields are passed positionally, every one of them, in declaration
order (no defaults: the hot paths know them all).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["maker"]

T = TypeVar("T")


def maker(cls: type[T], *, trusted: bool = False) -> Callable[..., T]:
    """``make(*all_fields) -> cls instance``, equal to ``cls(*all_fields)``.

    A class with a ``__post_init__`` (validation) is refused unless ``trusted``: then the
    maker skips it, for callers whose values are valid by construction (a position derived
    from a valid one)."""
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in params]
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__} is not a frozen dataclass")
    if tuple(getattr(cls, "__slots__", None) or ()) != tuple(names):
        raise TypeError(f"{cls.__name__} does not keep exactly its fields in __slots__")
    if hasattr(cls, "__post_init__") and not trusted:
        raise TypeError(f"{cls.__name__} has a __post_init__, which the twin would skip")
    args = ", ".join(names)
    body = "".join(f"    self.{n} = {n}\n" for n in names) or "    pass\n"
    namespace: dict[str, Any] = {}
    exec(f"def __init__(self, {args}):\n{body}", namespace)  # names are field names
    twin = type(
        f"_{cls.__name__}Twin",
        cls.__bases__,
        {
            "__slots__": tuple(names),
            "__init__": namespace["__init__"],
            # The bases may be frozen dataclasses too (BinlogEvent): writable here. Both,
            # as they share the type's tp_setattro slot: one Python-level override makes
            # every store call into Python (typeobject.c, update_one_slot).
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__module__": cls.__module__,
        },
    )

    def make(*values: Any) -> T:
        obj = twin(*values)
        obj.__class__ = cls
        return obj  # type: ignore[no-any-return]

    make.__name__ = f"make_{cls.__name__}"
    make.__doc__ = (
        f"A {cls.__name__} from all its fields, positionally (see headwater.binlog._frozen)."
    )
    # Fails here, at import, if the layouts do not match (TypeError from __class__).
    probe = make(*([None] * len(names)))
    if type(probe) is not cls:
        raise TypeError(f"{cls.__name__}: the twin did not become the class")
    return make
