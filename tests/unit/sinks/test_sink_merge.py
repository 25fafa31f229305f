"""Net-effect collapse (headwater.sinks.merge): the batch's net effect equals its changes."""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any
from unittest import mock

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from headwater.changes import ChangeRow
from headwater.errors import SinkError
from headwater.position import Position
from headwater.sinks import merge
from headwater.sinks.base import as_change
from headwater.sinks.merge import (
    DELETE,
    ROLE_KEY,
    ROLE_NEW,
    ROLE_OLD,
    UPSERT,
    ChangeColumns,
    NetEffect,
    collapse,
    collapse_columns,
    explode,
    key_id,
    route,
    route_row,
    shard_of,
)

POS = Position(0, 1, 4, 0)


def change(op: str, seq: int, key: dict[str, Any] | None, before: Any, after: Any) -> ChangeRow:
    return ChangeRow(
        source="src",
        database="shop",
        table="t",
        op=op,
        ts_us=0,
        position=POS,
        gtid="",
        txn_id="",
        sequence=seq,
        key=key,
        before=before,
        after=after,
        schema_version=0,
    )


def net(changes: list[ChangeRow]) -> list[NetEffect]:
    return collapse(ev for c in changes for ev in explode(c))


def apply_net(state: dict[str, dict[str, Any]], effects: list[NetEffect]) -> None:
    for e in effects:
        if e.action == DELETE:
            state.pop(e.key_id, None)
        else:
            state[e.key_id] = {**state.get(e.key_id, {}), **(e.image or {})}


def apply_one(state: dict[str, dict[str, Any]], c: ChangeRow) -> None:
    """The reference: what a target does with each change, in order."""
    if c.op == "delete":
        state.pop(key_id(c.key or {}), None)
        return
    if c.op == "update":
        state.pop(key_id({"id": (c.before or {})["id"]}), None)
    state[key_id(c.key or {})] = dict(c.after or {})


def test_insert_update_delete_of_one_key_is_nothing() -> None:
    rows = [
        change("insert", 1, {"id": 1}, None, {"id": 1, "v": "a"}),
        change("update", 2, {"id": 1}, {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
        change("delete", 3, {"id": 1}, {"id": 1, "v": "b"}, None),
    ]
    assert net(rows) == []


def test_update_of_the_key_is_delete_of_old_and_upsert_of_new() -> None:
    rows = [change("update", 7, {"id": 2}, {"id": 1, "v": "a"}, {"id": 2, "v": "a"})]
    effects = net(rows)
    assert [(e.action, e.key) for e in effects] == [(DELETE, {"id": 1}), (UPSERT, {"id": 2})]
    assert effects[1].image == {"id": 2, "v": "a"}


def test_delete_then_insert_is_an_upsert_of_the_new_image() -> None:
    rows = [
        change("delete", 1, {"id": 1}, {"id": 1, "v": "a"}, None),
        change("insert", 2, {"id": 1}, None, {"id": 1, "v": "z"}),
    ]
    (effect,) = net(rows)
    assert (effect.action, effect.image, effect.first_sequence, effect.last_sequence) == (
        UPSERT,
        {"id": 1, "v": "z"},
        1,
        2,
    )


def test_minimal_images_merge_the_columns_of_each_update() -> None:
    rows = [
        change("update", 1, {"id": 1}, {"id": 1}, {"id": 1, "a": 1}),
        change("update", 2, {"id": 1}, {"id": 1}, {"id": 1, "b": None}),
    ]
    (effect,) = net(rows)
    assert effect.image == {"id": 1, "a": 1, "b": None}


def test_order_comes_from_sequence_not_from_input_order() -> None:
    rows = [
        change("update", 5, {"id": 1}, {"id": 1, "v": 1}, {"id": 1, "v": 2}),
        change("update", 4, {"id": 1}, {"id": 1, "v": 0}, {"id": 1, "v": 1}),
    ]
    (effect,) = net(rows)
    assert effect.image == {"id": 1, "v": 2}


def test_a_table_without_primary_key_is_refused_with_its_name() -> None:
    with pytest.raises(SinkError, match=r"no primary key.*table shop\.t"):
        explode(change("insert", 1, None, None, {"v": 1}))


def test_change_rows_as_json_text_are_accepted() -> None:
    c = as_change(
        {
            "source": "s",
            "database": "shop",
            "table": "t",
            "op": "insert",
            "sequence": 9,
            "change_id": 0,
            "file_num": 1,
            "offset": 4,
            "event_index": 2,
            "key": '{"id": 1}',
            "before": None,
            "after": '{"id": 1, "d": "1.50"}',
        }
    )
    assert (c.key, c.after, c.position) == ({"id": 1}, {"id": 1, "d": "1.50"}, Position(0, 1, 4, 2))


def test_shard_hash_is_the_http_api_formula() -> None:
    # docs/formats.md, "Sharding": crc32c("shop"/"orders"/42/"ann") is 0xF4E5EDAF
    assert shard_of("shop", "orders", {"id": 42, "name": "ann"}, 2**32) == 0xF4E5EDAF


def test_routing_sends_the_old_key_delete_to_the_old_keys_shard() -> None:
    c = change("update", 3, {"id": 2}, {"id": 1, "v": 0}, {"id": 2, "v": 0})
    routed = list(route([c], 16))
    assert [(s, ev.kind) for s, ev in routed] == [
        (shard_of("shop", "t", {"id": 1}, 16), DELETE),
        (shard_of("shop", "t", {"id": 2}, 16), "put"),
    ]


@st.composite
def histories(draw: st.DrawFn) -> tuple[dict[str, dict[str, Any]], list[ChangeRow]]:
    """An initial state and a valid sequence of changes on it (keys 0..4)."""
    keys = range(5)
    values = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=2))
    initial = {k: {"id": k, "v": draw(values)} for k in keys if draw(st.booleans())}
    live = dict(initial)
    changes: list[ChangeRow] = []
    for seq in range(draw(st.integers(0, 25))):
        present = sorted(live)
        absent = [k for k in keys if k not in live]
        ops = ["read"] + (["insert"] if absent else []) + (["update", "delete"] if present else [])
        if present and absent:
            ops.append("rekey")
        op = draw(st.sampled_from(ops))
        if op == "read":
            k = draw(st.sampled_from(list(keys)))
            live[k] = {"id": k, "v": draw(values)}
            changes.append(change("read", seq, {"id": k}, None, live[k]))
        elif op == "insert":
            k = draw(st.sampled_from(absent))
            live[k] = {"id": k, "v": draw(values)}
            changes.append(change("insert", seq, {"id": k}, None, live[k]))
        elif op == "update":
            k = draw(st.sampled_from(present))
            before, live[k] = live[k], {"id": k, "v": draw(values)}
            changes.append(change("update", seq, {"id": k}, before, live[k]))
        elif op == "delete":
            k = draw(st.sampled_from(present))
            changes.append(change("delete", seq, {"id": k}, live.pop(k), None))
        else:
            old, new = draw(st.sampled_from(present)), draw(st.sampled_from(absent))
            before = live.pop(old)
            live[new] = {**before, "id": new}
            changes.append(change("update", seq, {"id": new}, before, live[new]))
    state = {key_id({"id": k}): row for k, row in initial.items()}
    return state, changes


@settings(max_examples=400, deadline=None)
@given(histories(), st.randoms())
def test_net_effect_equals_applying_every_change_in_order(
    history: tuple[dict[str, dict[str, Any]], list[ChangeRow]], rnd: Any
) -> None:
    initial, changes = history
    expected = dict(initial)
    for c in changes:
        apply_one(expected, c)
    shuffled = list(changes)
    rnd.shuffle(shuffled)  # input order does not matter: sequence orders
    got = dict(initial)
    effects = net(shuffled)
    rnd.shuffle(effects)  # net effects touch distinct keys: any order
    apply_net(got, effects)
    assert got == expected
    assert len({e.key_id for e in effects}) == len(effects)


def columnar_net(
    changes: list[ChangeRow], count: int, width: int | None = None, arrow: bool = False
) -> dict[int, list[NetEffect]]:
    """The Spark glue's path: each row's copies (route_row on ``key`` and ``before_key``,
    as JSON text as the Arrow columns carry them) spread over ``count`` shards by a hash
    of the key text, then collapse_columns per shard (told the tables have ``width``
    columns, when given)."""
    copies: dict[int, list[tuple[ChangeRow, int, str | None]]] = {}
    for c in changes:
        key_text = None if c.key is None else orjson.dumps(c.key).decode()
        old = None
        if c.op == "update" and c.key and c.before and all(k in c.before for k in c.key):
            moved = {k: c.before[k] for k in c.key}
            old = None if moved == c.key else orjson.dumps(moved).decode()
        for role, text in route_row(c.op, key_text, old):
            shard = zlib.crc32(f"{c.database}.{c.table}.{text}".encode()) % count
            copies.setdefault(shard, []).append((c, role, text))
    out: dict[int, list[NetEffect]] = {}
    for shard, rows in copies.items():
        cols = ChangeColumns(
            [c.source for c, _, _ in rows],
            [c.database for c, _, _ in rows],
            [c.table for c, _, _ in rows],
            [c.op for c, _, _ in rows],
            [c.sequence for c, _, _ in rows],
            [c.position.change_id for c, _, _ in rows],
            [c.position.file_num for c, _, _ in rows],
            [c.position.offset for c, _, _ in rows],
            [c.position.event_index for c, _, _ in rows],
            [text for _, _, text in rows],
            [None if c.after is None else orjson.dumps(c.after).decode() for c, _, _ in rows],
            [role for _, role, _ in rows],
        )
        if arrow:  # the glue's Arrow table beside the lists: keys grouped in Arrow/numpy
            cols.arrow = pa.table(
                {"key": cols.key, "op": cols.op, "role": pa.array(cols.role, pa.int32())}
            )
        order = sorted(range(len(rows)), key=cols.sequence.__getitem__)
        with mock.patch.object(merge, "_ARROW_ROWS", 0):
            out[shard] = collapse_columns(cols, order, None if width is None else lambda i: width)
    return out


def comparable(effects: list[NetEffect]) -> list[tuple[Any, ...]]:
    return sorted(
        (e.database, e.table, orjson.dumps(e.key), e.action, orjson.dumps(e.image),
         e.first_sequence, e.last_sequence)
        for e in effects
    )  # fmt: skip


@st.composite
def minimal_histories(draw: st.DrawFn) -> list[ChangeRow]:
    """Changes whose update images hold only some columns (MINIMAL row images)."""
    _, changes = draw(histories())
    out = []
    for c in changes:
        if c.op == "update" and c.after is not None and draw(st.booleans()):
            keep = {k: v for k, v in c.after.items() if k == "id" or draw(st.booleans())}
            c = dataclasses.replace(c, after=keep)
        out.append(c)
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(histories().map(lambda h: h[1]), minimal_histories()),
    st.integers(1, 4),
    st.sampled_from([None, 2]),
    st.booleans(),
)
def test_columnar_routing_and_collapse_equal_explode_and_collapse(
    changes: list[ChangeRow], count: int, width: int | None, arrow: bool
) -> None:
    """With the tables' width (2: ``id``, ``v``) a full last image stands for the key's
    earlier ones; without it every image is merged; both equal the reference, on lists
    and with the glue's Arrow table (``arrow``)."""
    by_shard = columnar_net(changes, count, width, arrow)
    reference = net(changes)
    assert comparable([e for effects in by_shard.values() for e in effects]) == comparable(
        reference
    )
    for shard, effects in by_shard.items():  # each key's effect is in the key's shard
        for e in effects:
            text = f"{e.database}.{e.table}.{orjson.dumps(e.key).decode()}"
            assert zlib.crc32(text.encode()) % count == shard


@settings(max_examples=200, deadline=None)
@given(histories(), histories(), st.randoms())
def test_columnar_collapse_keeps_keys_of_two_tables_apart(
    first: tuple[dict[str, dict[str, Any]], list[ChangeRow]],
    second: tuple[dict[str, dict[str, Any]], list[ChangeRow]],
    rnd: Any,
) -> None:
    """Two tables with the same key texts, interleaved (collapse_columns keys rows by
    their text alone only when every row is of one table)."""
    changes = [
        dataclasses.replace(c, table=table, sequence=2 * c.sequence + n)
        for n, (table, (_, history)) in enumerate((("t", first), ("u", second)))
        for c in history
    ]  # fmt: skip
    rnd.shuffle(changes)
    by_shard = columnar_net(changes, 1)
    assert comparable([e for effects in by_shard.values() for e in effects]) == comparable(
        net(changes)
    )


def test_routing_a_key_update_gives_the_old_key_delete_and_the_new_key_put() -> None:
    routed = route_row("update", '{"id":2}', '{"id":1}')
    assert routed == [(ROLE_OLD, '{"id":1}'), (ROLE_NEW, '{"id":2}')]
    assert route_row("update", '{"id":1}', None) == [(ROLE_KEY, '{"id":1}')]
    assert route_row("delete", '{"id":1}', None) == [(ROLE_KEY, '{"id":1}')]
    assert route_row("insert", None, None) == [(ROLE_KEY, None)]


def test_columnar_collapse_refuses_a_keyless_row_with_its_table() -> None:
    cols = ChangeColumns(["s"], ["shop"], ["t"], ["insert"], [7], [0], [1], [4], [0],
                         [None], ['{"v":1}'], [ROLE_KEY])  # fmt: skip
    with pytest.raises(SinkError, match=r"no primary key.*table shop\.t"):
        collapse_columns(cols, [0])
