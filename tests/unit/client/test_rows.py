"""The SDK's lazy rows and run queues against the change rows ``block_changes`` makes;
the flusher's saving policy on a real file store."""

from __future__ import annotations

import copy
import pickle
import time
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given, strategies as st

from headwater.changes import ChangeBlock, ChangeRow, block_changes
from headwater.changes.sequence import sequence_of
from headwater.client import Batch, Consumer, ConsumerOptions, FileStore
from headwater.client.rows import Row, RowBlock, rows_of
from headwater.client.runs import Changes, Run, RunQueue, changes_of
from headwater.position import Position

_RECORD = SimpleNamespace(
    gtid="", position=Position(2, 7, 4096), ts_us=1_700_000_000_000_000, schema_version=4, seq=9
)
VALUES = st.one_of(st.integers(), st.text(max_size=4), st.none(), st.just(Decimal("1.50")))


def _rows(block: ChangeBlock, record: object = _RECORD) -> list[Row]:
    shared = RowBlock(record, block, "src")
    first = sequence_of(record.seq, block.first)  # type: ignore[attr-defined]
    return [Row(shared, values, first + i) for i, values in enumerate(block.rows)]


@given(
    op=st.sampled_from(["insert", "update", "delete"]),
    names=st.lists(st.sampled_from(["id", "k", "v", "w"]), min_size=1, max_size=4),
    key=st.one_of(st.none(), st.lists(st.sampled_from(["id", "k", "v", "x"]), max_size=3)),
    first=st.integers(min_value=0, max_value=50),
    data=st.data(),
)
def test_rows_equal_the_change_rows_of_block_changes(
    op: str, names: list[str], key: list[str] | None, first: int, data: st.DataObject
) -> None:
    # names may repeat (the last value wins, as in a dict) and key columns may be missing
    # from the image (MINIMAL images: the key holds None there)
    def image() -> tuple[object, ...]:
        return tuple(data.draw(st.lists(VALUES, min_size=len(names), max_size=len(names))))

    n = data.draw(st.integers(min_value=1, max_value=4))
    rows: list[object] = [(image(), image()) if op == "update" else image() for _ in range(n)]
    block = ChangeBlock(
        "shop", "orders", op, Position(2, 7, 4096, 3), first, rows, list(names),
        list(reversed(names)), None if key is None else tuple(key),
    )  # fmt: skip
    expected = block_changes(_RECORD, block, "src")
    got = _rows(block)
    assert got == expected and expected == got
    # rows_of, the bulk path the worker uses, of every row and of a subset
    shared = RowBlock(_RECORD, block, "src")
    first_seq = sequence_of(9, first)
    bulk = rows_of(shared, block.rows, list(range(n)), first_seq)
    assert bulk == expected and all(type(r) is Row for r in bulk)
    assert [(r.key, r.before, r.after) for r in bulk] == [
        (c.key, c.before, c.after) for c in expected
    ]
    assert rows_of(shared, block.rows, [n - 1], first_seq) == [expected[-1]]
    for row, change in zip(got, expected, strict=True):
        assert isinstance(row, ChangeRow)
        assert (row.key, row.before, row.after) == (change.key, change.before, change.after)
        assert row.sequence == change.sequence == sequence_of(9, first) + got.index(row)
        assert row.txn_id == "7:4096"  # no GTID: FILE_NUM:OFFSET, as block_changes
        assert row.table_name == "shop.orders" and row.sql is None
        assert row.after is row.after  # built once, kept
        again = pickle.loads(pickle.dumps(row))
        assert type(again) is ChangeRow and again == change
        assert copy.deepcopy(row) == change


def test_a_row_reads_its_key_from_the_after_image_and_deletes_from_before() -> None:
    update = ChangeBlock(
        "shop", "orders", "update", Position(0, 1, 4), 0,
        [((7, "old"), (8, "new"))], ["id", "note"], ["id", "note"], ("id",),
    )  # fmt: skip
    (row,) = _rows(update)
    assert row.key == {"id": 8}
    assert row.before == {"id": 7, "note": "old"} and row.after == {"id": 8, "note": "new"}
    delete = ChangeBlock(
        "shop", "orders", "delete", Position(0, 1, 4), 0, [(5, "gone")], ["id", "note"], [],
        ("id",),
    )  # fmt: skip
    (row,) = _rows(delete)
    assert (row.key, row.before, row.after) == ({"id": 5}, {"id": 5, "note": "gone"}, None)


def test_a_row_has_no_setters() -> None:
    block = ChangeBlock(
        "shop", "orders", "insert", Position(0, 1, 4), 0, [(1,)], [], ["id"], ("id",)
    )
    (row,) = _rows(block)
    for name in ("after", "op", "database"):
        try:
            setattr(row, name, None)
        except AttributeError:
            continue
        raise AssertionError(f"{name} was set")
    assert row.after == {"id": 1} and row.op == "insert"


def _block(first: int, n: int) -> ChangeBlock:
    return ChangeBlock(
        "shop", "t", "insert", Position(0, 1, 4), first, [(i,) for i in range(n)], [],
        ["id"], ("id",),
    )  # fmt: skip


def test_the_run_queue_takes_in_order_across_split_runs() -> None:
    a, b = _block(0, 6), _block(6, 4)
    shared_a, shared_b = RowBlock(_RECORD, a, "src"), RowBlock(_RECORD, b, "src")
    base = sequence_of(9, 0)
    ddl = block_changes(
        _RECORD, ChangeBlock("shop", "", "ddl", Position(0, 1, 4), 10, [], [], [], None,
                             "ALTER TABLE t ADD c INT"), "src",
    )  # fmt: skip
    queue = RunQueue()
    # this shard's rows: 1, 3, 4 and 5 of a; 0 and 2 of b (sequences 6 and 8); the DDL
    queue.extend(
        [Run(shared_a, base, a.rows, [1, 3, 4, 5]), Run(shared_b, base + 6, b.rows, [0, 2])]
    )
    queue.extend([Run.of(ddl), Run(shared_b, base + 6, b.rows, [])])  # an empty run counts 0
    assert len(queue) == 7
    first = queue.take(3)
    assert len(queue) == 4
    assert [c.sequence - base for c in changes_of(first)] == [1, 3, 4]
    second = queue.take(10)
    assert len(queue) == 0 and queue.take(5) == []
    changes = changes_of(second)
    assert [c.sequence - base for c in changes] == [5, 6, 8, 10]
    assert [c.after for c in changes[:3]] == [{"id": 5}, {"id": 0}, {"id": 2}]
    assert changes[3] is ddl[0]
    # a rollback puts the runs back in front, in order
    queue.extend([Run(shared_b, base + 6, b.rows, [3])])
    queue.push_front(first)
    assert [c.sequence - base for c in changes_of(queue.take(10))] == [1, 3, 4, 9]


def test_changes_stream_once_then_keep_a_list() -> None:
    a = _block(0, 5)
    shared = RowBlock(_RECORD, a, "src")
    base = sequence_of(9, 0)
    changes = Changes([Run(shared, base, a.rows, [0, 2]), Run(shared, base, a.rows, [4])])
    assert len(changes) == 3 and bool(changes)
    assert changes.next_sequence() == base + 5
    assert [c.after for c in changes] == [{"id": 0}, {"id": 2}, {"id": 4}]  # streamed
    kept = changes.list()
    assert changes[0] is kept[0] and changes[-1].sequence == base + 4
    assert [c.sequence for c in changes] == [base, base + 2, base + 4]  # from the list now
    assert changes == block_changes(_RECORD, a, "src")[0:5:2]


def test_the_flusher_saves_a_shard_at_its_own_kth_ack(tmp_path: Path) -> None:
    """Shard 0 reaches its flush_every-th ack: it is saved at once; shard 1, acked less
    often, waits for its flush_interval (long here) or the clean stop."""
    store = FileStore(tmp_path)
    store.create("g", 2, 0)
    options = ConsumerOptions(
        task="t", group="g", readers=("http://127.0.0.1:9",), shards=2, flush_every=3,
        flush_interval=60.0,
    )  # fmt: skip
    consumer = Consumer(options, lambda batch: None, store)
    consumer._running.set()
    for shard in (0, 1):
        consumer._assign(shard, None)
    consumer._spawn(consumer._flush_loop, "flusher")
    block = _block(0, 9)
    shared = RowBlock(_RECORD, block, "src")
    base = sequence_of(9, 0)
    try:
        shards = consumer._shards
        # shard 1 first: a flusher that saved every shard at any k-th ack would save it
        consumer._ack(Batch(consumer, shards[1], Changes([Run(shared, base, block.rows, [7])])))
        for i in range(3):
            consumer._ack(Batch(consumer, shards[0], Changes([Run(shared, base, block.rows, [i])])))
        deadline = time.monotonic() + 10
        while store.load("g").next[0] != base + 3:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "shard 0 was not saved at its 3rd ack"
            time.sleep(0.02)
        assert store.load("g").next[1] == 0  # type: ignore[union-attr]
    finally:
        consumer.stop(timeout=5)
    assert store.load("g").next == {0: base + 3, 1: base + 8}  # type: ignore[union-attr]


def test_a_partial_batch_waits_to_fill_only_while_the_feed_has_more(tmp_path: Path) -> None:
    """With max_wait long: 3 changes fed mid-page (more coming) wait for the batch to
    fill; the page's last handover, of a fetch that was not cut (the feed caught up),
    hands the partial batch over at once."""
    store = FileStore(tmp_path)
    store.create("g", 1, 0)
    options = ConsumerOptions(
        task="t", group="g", readers=("http://127.0.0.1:9",), batch_size=100, max_wait=30.0
    )
    got: list[tuple[float, list[int]]] = []

    def handle(batch: Batch) -> None:
        got.append((time.monotonic(), [c.sequence for c in batch.changes]))

    consumer = Consumer(options, handle, store)
    consumer._running.set()
    consumer._assign(0, None)
    block = _block(0, 9)
    shared = RowBlock(_RECORD, block, "src")
    base = sequence_of(9, 0)
    try:
        shard = consumer._shards[0]
        shard.feed([Run(shared, base, block.rows, [0, 1, 2])], base + 3, 1000, more=True)
        time.sleep(0.5)
        assert got == []  # waiting for the batch to fill
        fed = time.monotonic()
        shard.feed([Run(shared, base, block.rows, [3, 4])], base + 9, 1000, more=False)
        deadline = time.monotonic() + 10
        while not got:
            assert time.monotonic() < deadline, "the partial batch was not handed over"
            time.sleep(0.01)
        handed, sequences = got[0]
        assert sequences == [base + i for i in range(5)]
        assert handed - fed < 5.0  # not after max_wait (30 s)
    finally:
        consumer.stop(timeout=5)
