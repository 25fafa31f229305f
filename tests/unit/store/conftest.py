"""Fixtures for the change log store tests: tiny options that force rotation, record makers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from headwater.position import Position
from headwater.store import Durability, Record, StoreOptions

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def tiny_options(**kw: object) -> StoreOptions:
    base: dict[str, object] = {
        "segment_bytes": 2048,
        "index_interval_bytes": 256,
        "group_commit_ms": 1.0,
        "group_commit_bytes": 4096,
        "max_pending_bytes": 65536,
        "memory_tail_bytes": 4096,
        "retention_age_s": None,
        "retention_bytes": None,
        "compress_after_s": None,
        "compress_block_bytes": 1024,
        "roll_interval_s": None,
        "durability": Durability.GROUP,
    }
    base.update(kw)
    return StoreOptions(**base)  # type: ignore[arg-type]


def make_record(
    i: int,
    size: int = 60,
    *,
    gtid: str | None = None,
    ts: int | None = None,
    flags: int = 3,
    chunk_no: int = 0,
) -> Record:
    """Record number i: position offset 100*i, ts 1000*i, GTID uuid:i, payload tagged with i."""
    payload = (f"rec{i}:".encode() + bytes([i % 251]) * size)[: max(size, 8)]
    return Record(
        Position(1, 1, 100 * i),
        payload,
        ts_us=1000 * i if ts is None else ts,
        gtid=f"{UUID}:{i}" if gtid is None else gtid,
        tables=(("db.t", i % 5),),
        schema_version=7,
        flags=flags,
        chunk_no=chunk_no,
    )


@pytest.fixture
def opts() -> Callable[..., StoreOptions]:
    return tiny_options


@pytest.fixture
def rec() -> Callable[..., Record]:
    return make_record
