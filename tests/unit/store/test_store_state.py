"""Persisted reader state: atomic save, exact load, damage detected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headwater.errors import CorruptRecordError
from headwater.position import Position
from headwater.store import ChangeIdInfo, ReaderState

STATE = ReaderState(
    position=Position(2, 14, 9876, 3),
    gtid_set="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100",
    ts_us=1_700_000_000_000_001,
    seq=4242,
    change_ids=(
        ChangeIdInfo(1, "3e11fa47-71ca-11e1-9e33-c80aa9429562", Position(1, 1, 4)),
        ChangeIdInfo(
            2,
            "11111111-2222-3333-4444-555555555555",
            Position(2, 1, 4),
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-90",
            1_700_000_000,
        ),
    ),
)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / "reader.state")
    STATE.save(path)
    assert ReaderState.load(path) == STATE
    assert os.listdir(tmp_path) == ["reader.state"]


def test_save_replaces_previous_state(tmp_path: Path) -> None:
    path = str(tmp_path / "reader.state")
    ReaderState().save(path)
    STATE.save(path)
    assert ReaderState.load(path) == STATE


def test_missing_state_is_none(tmp_path: Path) -> None:
    assert ReaderState.load(str(tmp_path / "nothing")) is None


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_damaged_state_is_reported_with_path(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "reader.state"
    STATE.save(str(path))
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[raw.index(b"9876")] = ord("8")
    elif damage == "truncate":
        del raw[len(raw) // 2 :]
    else:
        raw.clear()
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordError) as ei:
        ReaderState.load(str(path))
    assert (ei.value.path, ei.value.offset) == (str(path), 0)
