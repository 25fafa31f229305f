"""headwater.logs without Spark: file offsets across a rotation by rename, multi-line
records, and the Python engine's routing, values and errors."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from headwater.errors import ConfigError
from headwater.logs.files import FilesOffset, advance, plan_chunks, read_chunk
from headwater.logs.groups import parse_rules

START = r"\d{4}-"
REQ = {
    "name": "req",
    "table": "requests",
    "columns": {"at": "timestamp", "ms": "int", "path": "string"},
    "operators": [
        {"extract": {"regex": r"^(?P<time>\S+ \S+) INFO (?P<msg>.*)"}},
        {"kv": {"field": "msg", "keys": ["path", "ms"]}},
        {"timestamp": {"field": "time", "format": "yyyy-MM-dd HH:mm:ss,SSS", "into": "at"}},
    ],
}


def _records(directory: Path, start: FilesOffset, end: FilesOffset) -> list[tuple[int, int, bytes]]:
    chunks = plan_chunks(
        str(directory), "app.log*", start, end, record_start=START, chunk_bytes=1024
    )
    return [(c.ordinal, off, text) for c in chunks for off, text in read_chunk(c)]


def test_rotation_by_rename_is_followed_and_nothing_is_read_twice(tmp_path: Path) -> None:
    entries = [
        f"2024-01-01 00:00:{i % 60:02d},000 INFO n={i}\n\tat x.y(Z.java:{i})" for i in range(60)
    ]
    log = tmp_path / "app.log"
    log.write_text("\n".join(entries[:30]) + "\n")
    o0 = FilesOffset({}, 0, 0)
    o1 = advance(str(tmp_path), "app.log*", o0, record_start=START, idle_s=3600)
    first = _records(tmp_path, o0, o1)
    assert [t.decode() for _, _, t in first] == entries[:29]  # the newest record may grow
    os.rename(log, tmp_path / "app.log.1")
    (tmp_path / "app.log").write_text("\n".join(entries[30:]) + "\n")
    o2 = advance(str(tmp_path), "app.log*", o1, record_start=START, idle_s=0)
    second = _records(tmp_path, o1, o2)
    assert [t.decode() for _, _, t in first + second] == entries
    assert {n for n, _, _ in second} == {0, 1}  # the renamed file kept its ordinal
    o3 = advance(str(tmp_path), "app.log*", o2, record_start=START, idle_s=0)
    assert _records(tmp_path, o2, o3) == []


def test_python_engine_routes_types_and_sends_cast_failures_to_unknown() -> None:
    rules = parse_rules([REQ])
    ok = rules.route("2024-01-02 03:04:05,120 INFO path=/a ms=7")
    assert (ok.table, ok.values["ms"], ok.values["path"]) == ("requests", 7, "/a")
    assert ok.values["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, 120000, tzinfo=dt.UTC)
    bad = rules.route("2024-01-02 03:04:05,120 INFO path=/a ms=x")
    assert (bad.table, bad.reason) == (
        "unknown",
        "group req, operator columns: field ms is not a int",
    )
    assert rules.route("nothing").reason == "no group matched"


def test_a_bad_regex_names_the_group_and_the_operator() -> None:
    group = {**REQ, "operators": [{"extract": {"regex": "(?P<a>[unclosed"}}]}
    with pytest.raises(
        ConfigError,
        match=r"groups\[0\]\.operators\[0\]\.extract\.regex: group req, operator 0:extract",
    ):
        parse_rules([group])
