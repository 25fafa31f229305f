"""Reconciling a chunk with its window: for any history of changes, a chunk read at any
point of it (a prefix of the changes visible) and reconciled with a window that starts at
or before that point gives the chunk's rows as of the window's end. Plus the sequence rule
and the state file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given, strategies as st

from headwater.snapshot.state import Progress, SnapshotState
from headwater.snapshot.watermarks import READ_MARK, kid, read_sequence, reconcile

KEYS = ("id",)


@dataclass(frozen=True)
class Ch:
    op: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    sequence: int


def history(ops: list[tuple[int, int, int]]) -> tuple[list[Ch], list[dict[int, dict[str, Any]]]]:
    """Changes of a key space 0..19 from the op list, and the state after each change."""
    state: dict[int, dict[str, Any]] = {k: {"id": k, "v": 0} for k in range(0, 20, 2)}
    states = [dict(state)]
    changes: list[Ch] = []
    for n, (kind, k, k2) in enumerate(ops):
        seq = (n + 1) << 24
        if kind == 0:  # insert or update
            if k in state:
                after = {"id": k, "v": n}
                changes.append(Ch("update", state[k], after, seq))
            else:
                after = {"id": k, "v": n}
                changes.append(Ch("insert", None, after, seq))
            state[k] = after
        elif kind == 1 and k in state:  # delete
            changes.append(Ch("delete", state.pop(k), None, seq))
        elif kind == 2 and k in state and k2 not in state:  # key update
            old = state.pop(k)
            state[k2] = {"id": k2, "v": n}
            changes.append(Ch("update", old, state[k2], seq))
        else:
            continue
        states.append(dict(state))
    return changes, states


@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 19), st.integers(0, 19)), max_size=40),
    st.integers(0, 19),
    st.integers(0, 20),
    st.data(),
)
def test_chunk_read_mid_history_reconciles_to_the_state_at_high(
    ops: list[tuple[int, int, int]], lo: int, width: int, data: st.DataObject
) -> None:
    changes, states = history(ops)
    hi = lo + width
    visible = data.draw(st.integers(0, len(changes)), label="changes the SELECT saw")
    start = data.draw(st.integers(0, visible), label="window start")

    def in_chunk(key: dict[str, Any]) -> bool:
        return lo <= key["id"] < hi

    read = {kid({"id": k}): dict(v) for k, v in states[visible].items() if lo <= k < hi}
    got = reconcile(read, list(reversed(changes[start:])), KEYS, in_chunk)
    expected = {kid({"id": k}): v for k, v in states[-1].items() if lo <= k < hi}
    assert got == expected


def test_a_delete_in_the_window_is_not_resurrected_and_an_insert_is_not_lost() -> None:
    rows = {kid({"id": 1}): {"id": 1, "v": "old"}}
    window = [
        Ch("delete", {"id": 1, "v": "old"}, None, 5 << 24),
        Ch("insert", None, {"id": 2, "v": "new"}, 6 << 24),
        Ch("insert", None, {"id": 99, "v": "elsewhere"}, 7 << 24),
    ]
    got = reconcile(rows, window, KEYS, lambda k: k["id"] < 10)
    assert got == {kid({"id": 2}): {"id": 2, "v": "new"}}


def test_snapshot_sequences_sort_between_records_and_grow_with_the_wave() -> None:
    s = 41
    last_row_of_record = (s << 24) | (READ_MARK - 1)
    assert last_row_of_record < read_sequence(s, 1) < read_sequence(s, 2) < (s + 1) << 24


def test_the_state_file_round_trips_and_reports_progress(tmp_path: Path) -> None:
    state = SnapshotState(
        "abc", "src", "/task",
        {"d.t": {"key": [], "method": "even",
                 "chunks": [{"id": "d.t#0", "lo": None, "hi": [5]},
                            {"id": "d.t#1", "lo": [5], "hi": None}]}},
    )  # fmt: skip
    state.done["d.t#0"] = {"wave": 1, "high": "f.000001:4", "last_seq": 3, "rows": 5}
    path = tmp_path / "s.json"
    state.save(str(path))
    loaded = SnapshotState.load(str(path))
    assert loaded is not None and loaded.to_json() == state.to_json()
    assert loaded.pending() == ["d.t#1"]
    progress = Progress(loaded)
    progress.record([{"rows": 5}])
    d = progress.as_dict()
    assert (d["chunks_done"], d["chunks_total"], d["rows"]) == (1, 2, 5)
    assert d["tables"]["d.t"]["chunks_done"] == 1 and d["eta_s"] is not None
    assert not list(tmp_path.glob("*.tmp"))
