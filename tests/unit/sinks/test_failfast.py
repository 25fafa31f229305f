"""Which executor errors come back as data instead of failing the task (issue #16)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from headwater.errors import (
    ConfigError,
    ConnectionLostError,
    HeadwaterError,
    SinkError,
    TransientSinkError,
)
from headwater.sinks.failfast import (
    Failed,
    catch_terminal,
    decode,
    encode,
    is_terminal,
    raise_failed,
)


def test_terminal_errors_are_headwaters_that_are_not_transient() -> None:
    assert is_terminal(ConfigError("x", field="f"))
    assert is_terminal(SinkError("refused", table="d.t"))
    assert not is_terminal(TransientSinkError("deadlock"))
    assert not is_terminal(ConnectionLostError("gone"))
    assert not is_terminal(OSError("disk"))


def partition(fail: BaseException | None) -> Iterator[int]:
    yield 1
    if fail is not None:
        raise fail
    yield 2


def test_a_terminal_error_ends_the_output_and_is_raised_on_the_driver() -> None:
    out = list(catch_terminal(partition)(SinkError("refused", table="d.t", resume_sequence=7)))
    assert out[0] == 1 and isinstance(out[1], Failed) and len(out) == 2
    with pytest.raises(SinkError) as caught:
        raise_failed(out)
    assert caught.value.table == "d.t" and caught.value.resume_sequence == 7
    assert raise_failed(catch_terminal(partition)(None)) == [1, 2]


def test_other_errors_still_fail_the_task() -> None:
    with pytest.raises(TransientSinkError):
        list(catch_terminal(partition)(TransientSinkError("deadlock")))
    with pytest.raises(KeyError):
        list(catch_terminal(partition)(KeyError("k")))


class Odd(HeadwaterError):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"odd {a} {b}")


def test_an_error_that_does_not_unpickle_travels_as_its_name_and_message() -> None:
    back = decode(encode(Odd(1, 2)))
    assert type(back) is HeadwaterError and str(back) == "Odd: odd 1 2"
    config = decode(encode(ConfigError("bad", file="p.yaml", line=3, field="sinks[0]")))
    assert isinstance(config, ConfigError) and str(config) == "p.yaml:3: sinks[0]: bad"
