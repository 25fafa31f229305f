"""Sharded fetches over HTTP: every row of the stream lands in exactly one shard, the one a
client computes itself from the documented hash, and stays there across fetches."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c

from headwater.sandbox import MariadbSandbox
from tests.integration.server_support import Api, Stored, log_workload, open_api

DB = "hw_server_shards"


@pytest.fixture(scope="module")
def stored(mariadb: MariadbSandbox) -> Iterator[Stored]:
    yield from log_workload(mariadb, DB)


@pytest.fixture
def api(stored: Stored, tmp_path: Path) -> Iterator[Api]:
    with open_api(stored, tmp_path) as api:
        yield api


def client_shard(row: dict[str, Any], count: int, columns: list[str] | None = None) -> int:
    """The shard of a JSON change row, computed from docs/formats.md alone."""

    def part(b: bytes) -> bytes:
        return struct.pack("<I", len(b)) + b

    def canonical(v: Any) -> bytes:
        if v is None:
            return b"null"
        if isinstance(v, dict) and "base64" in v:
            return base64.b64decode(v["base64"])
        return str(v).encode()

    if columns is None:
        values = [] if row["key"] is None else list(row["key"].values())
    else:
        image = row["after"] if row["after"] is not None else row["before"]
        values = [image.get(c) for c in columns]
    data = part(row["database"].encode()) + part(row["table"].encode())
    data += b"".join(part(canonical(v)) for v in values)
    return int(crc32c(data)) % count


def test_shards_partition_the_stream_exactly(api: Api) -> None:
    everything, _cp, _n = api.http.drain(api.http.subscribe(task="orders"), max_rows=500)
    count = 3
    by_shard: dict[int, list[Any]] = {}
    for shard in range(count):
        token = api.http.subscribe(task="orders", shards={"count": count, "owned": [shard]})
        by_shard[shard], _cp, _n = api.http.drain(token, max_rows=500)
        assert by_shard[shard], f"shard {shard} got nothing"
        assert {client_shard(r, count) for r in by_shard[shard]} == {shard}
    seqs = [r["sequence"] for rows in by_shard.values() for r in rows]
    assert len(seqs) == len(set(seqs))  # disjoint
    assert sorted(seqs) == [r["sequence"] for r in everything]  # union is the stream
    # Owning two shards is the union of the two, in log order.
    token = api.http.subscribe(task="orders", shards={"count": count, "owned": [2, 0]})
    both, _cp, _n = api.http.drain(token, max_rows=500)
    assert [r["sequence"] for r in both] == sorted(r["sequence"] for r in by_shard[0] + by_shard[2])


def test_a_rows_shard_is_stable_across_fetches_and_page_sizes(api: Api) -> None:
    shards = {"count": 4, "owned": [1]}
    first, _cp, n_small = api.http.drain(
        api.http.subscribe(task="orders", shards=shards), max_rows=3
    )
    second, _cp, n_big = api.http.drain(
        api.http.subscribe(task="orders", shards=shards), max_rows=1000
    )
    assert first == second and n_small > n_big
    # Updates and deletes of a key land where its insert did.
    keyed = [r for r in first if r["table"] == "acct"]
    ops_by_id: dict[int, set[str]] = {}
    for r in keyed:
        ops_by_id.setdefault(r["key"]["id"], set()).add(r["op"])
    assert any(ops >= {"insert", "update"} for ops in ops_by_id.values())
    assert any(ops >= {"insert", "delete"} for ops in ops_by_id.values())


def test_configured_shard_key_per_table(api: Api) -> None:
    count = 2
    keys = {f"{DB}.acct": ["owner"]}
    rows_by_shard = []
    for shard in range(count):
        token = api.http.subscribe(
            task="orders",
            tables=[f"{DB}.acct"],
            ddl=False,
            shards={"count": count, "owned": [shard], "keys": keys},
        )
        rows, _cp, _n = api.http.drain(token, max_rows=500)
        assert {client_shard(r, count, ["owner"]) for r in rows} == {shard}
        rows_by_shard.append(rows)
    owners = [{(r["after"] or r["before"])["owner"] for r in rows} for rows in rows_by_shard]
    assert owners[0] and owners[1] and not owners[0] & owners[1]  # one owner, one shard


def test_keyless_table_and_ddl_rows_go_to_one_shard_per_table(api: Api) -> None:
    count = 5
    homes: dict[tuple[str, str], set[int]] = {}
    for shard in range(count):
        token = api.http.subscribe(task="orders", shards={"count": count, "owned": [shard]})
        rows, _cp, _n = api.http.drain(token, max_rows=1000)
        for r in rows:
            if r["key"] is None:
                kind = "ddl" if r["op"] == "ddl" else "row"
                homes.setdefault((r["table"], kind), set()).add(shard)
    assert ("nokey", "row") in homes and ("", "ddl") in homes
    assert all(len(s) == 1 for s in homes.values())
