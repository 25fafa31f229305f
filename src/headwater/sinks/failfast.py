"""Executor failures that a retry cannot fix travel back to the driver as data (issue #16).

Spark runs a failed task again, up to ``spark.task.maxFailures`` attempts (4 on a
cluster; ``local[N]`` never retries, ``local[N,F]`` makes F attempts). That helps a lost
connection, but a configuration error (a missing privilege, a wrong password, a table
without a primary key) fails the same way on every attempt, and each attempt repeats its
side effects on the target before the run finally stops with Spark's text.

So executor code of the sinks catches such errors itself: :func:`is_terminal` says which
(any :class:`~headwater.errors.HeadwaterError` without the
:class:`~headwater.errors.TransientError` mixin: a ``ConfigError``, a ``SinkError`` that is
not a ``TransientSinkError``, ...), :func:`catch_terminal` turns one raised by a
partition function into a :class:`Failed` item of the task's output, the task succeeds
(no retry), and the driver, after collecting, raises the first with :func:`raise_failed`:
one error with its own message (table, key, statement, resume sequence), which the
pipeline prints as one ``headwater: error:`` line (``pipeline.failures``). Transient
errors and errors that are not headwater's still fail the task, and Spark retries them.

Invariant: a :class:`Failed` holds the pickled error only (its message is built without
secrets, errors.py); an error that does not pickle is carried as a ``HeadwaterError`` with
its class name and message.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from headwater.errors import HeadwaterError, TransientError

__all__ = ["Failed", "catch_terminal", "decode", "encode", "is_terminal", "raise_failed"]

P = ParamSpec("P")
T = TypeVar("T")


def is_terminal(exc: BaseException) -> bool:
    """Whether ``exc`` fails the same way however often it is retried (module docstring)."""
    return isinstance(exc, HeadwaterError) and not isinstance(exc, TransientError)


def encode(exc: BaseException) -> bytes:
    """``exc`` pickled; one that does not pickle as a ``HeadwaterError`` naming it."""
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)  # an __init__ with other arguments pickles but does not load
    except Exception:
        data = pickle.dumps(HeadwaterError(f"{type(exc).__name__}: {exc}"))
    return data


def decode(data: bytes) -> BaseException:
    """The error :func:`encode` pickled."""
    error: BaseException = pickle.loads(data)
    return error


@dataclass(frozen=True, slots=True)
class Failed:
    """A terminal error of an executor's partition, as an item of its output."""

    error: bytes

    def exception(self) -> BaseException:
        return decode(self.error)


def catch_terminal(fn: Callable[P, Iterable[T]]) -> Callable[P, Iterator[T | Failed]]:
    """``fn`` (a partition function) whose terminal error ends its output as a
    :class:`Failed` item instead of failing the task; items yielded before it stay."""

    @functools.wraps(fn)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> Iterator[T | Failed]:
        try:
            yield from fn(*args, **kwargs)
        except Exception as exc:
            if not is_terminal(exc):
                raise
            yield Failed(encode(exc))

    return guarded


def raise_failed(results: Iterable[T | Failed]) -> list[T]:
    """The collected items; raises the first :class:`Failed` item's error, if any."""
    items = list(results)
    for item in items:
        if isinstance(item, Failed):
            raise item.exception()
    return [item for item in items if not isinstance(item, Failed)]
