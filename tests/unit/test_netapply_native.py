"""The routing mode and removes of ``_native/lastwrite.c`` (the net-effect apply's key pass).

The Scanner in routing mode must keep exactly the keys the SQL sinks' Spark glue routes
to its shard: ``pmod(xxhash64(database, table, key text), shards)`` with the key text as
the change rows carry it (``changes.schema.image_json`` of the key dict; imagejson.c is
held equal to it by tests/unit/spark/test_imagejson.py) and ``direct.spark_shard`` (held
equal to Spark's xxhash64 by its own test). Row images are built by hand: a null bitmap,
then each present value (fixed width, or a length prefix and the bytes).
"""

from __future__ import annotations

import random
import struct

import pytest

from headwater._native._lastwrite import (
    DELETE,
    INSERT,
    KEY_SIGNED,
    KEY_TEXT,
    KEY_UNSIGNED,
    UNROUTABLE,
    UPDATE,
    Scanner,
    Shape,
)
from headwater.changes.schema import image_json
from headwater.pipeline.direct import spark_shard

# (int id, varchar(255) name, int v): widths 4, -1 (one length byte), 4
WIDTHS = (4, -1, 4)


def image(ident: int, name: bytes, v: int | None = 0, *, unsigned: bool = False) -> bytes:
    nulls = 0 if v is not None else 0b100
    out = bytes([nulls])
    out += struct.pack("<I" if unsigned else "<i", ident)
    out += bytes([len(name)]) + name
    if v is not None:
        out += struct.pack("<i", v)
    return out


def text_of(raw: bytes) -> str:
    return raw.decode("utf-8")


ALPHABET = ['"', "\\", "\x00", "\x01", "\x1f", "\x7f", "\b", "\t", "\n", "\f", "\r", "a", "Z",
            " ", "é", "€", "日", "😀", "/", "'", "\u2028"]  # fmt: skip


def random_text(rng: random.Random) -> bytes:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12))).encode()


@pytest.mark.parametrize("shards", [1, 3, 8])
def test_routing_equals_spark_shard_on_the_key_text(shards: int) -> None:
    rng = random.Random(shards)
    keys = {(rng.randint(-(2**31), 2**31 - 1), random_text(rng)) for _ in range(600)}
    keys |= {(0, b""), (-1, b"x"), (2**31 - 1, b'"\\')}
    ordered = sorted(keys)
    buf = b"".join(image(i, t) for i, t in ordered)
    shape = Shape(WIDTHS, ((0, KEY_SIGNED), (1, KEY_TEXT)))
    kept_by_shard: dict[int, set[int]] = {}
    for shard in range(shards):
        scanner = Scanner(1, 0)
        scanner.route("shop", "orders ü", ("id", 'näme"'), (False, False), shards, shard)
        assert scanner.scan(INSERT, shape, None, buf, 0, len(buf), 0) == len(ordered)
        seqs, _offsets = scanner.survivors()
        kept_by_shard[shard] = {s & 0xFFFFFFFF for s in struct.unpack(f"<{len(seqs) // 8}q", seqs)}
    expected: dict[int, set[int]] = {s: set() for s in range(shards)}
    for row, (ident, name) in enumerate(ordered):
        text = image_json({"id": ident, 'näme"': text_of(name)})
        expected[spark_shard("shop", "orders ü", text, shards)].add(row)
    assert kept_by_shard == expected
    assert sum(len(v) for v in expected.values()) == len(ordered)


def tagged(*values: int | bytes) -> bytes:
    out = b""
    for v in values:
        if isinstance(v, bytes):
            out += b"s" + struct.pack("<I", len(v)) + v
        elif v > 2**63 - 1:
            out += b"u" + struct.pack("<Q", v)
        else:
            out += b"i" + struct.pack("<q", v)
    return out


def test_key_text_is_the_change_rows_text() -> None:
    rng = random.Random(7)
    scanner = Scanner(1, 0)
    scanner.route("d", "t", ("a", "b"), (False, False), 5, 0)
    for _ in range(500):
        a = rng.choice([rng.randint(-(2**63), 2**64 - 1), rng.randint(-9, 9)])
        b = random_text(rng)
        text, shard = scanner.key_text(tagged(a, b))
        want = image_json({"a": a, "b": b.decode()})
        assert text.decode() == want
        assert shard == spark_shard("d", "t", want, 5)


def test_unsigned_key_above_int64() -> None:
    shape = Shape((8,), ((0, KEY_UNSIGNED),))
    big = 2**64 - 5
    buf = b"\x00" + struct.pack("<Q", big)
    scanner = Scanner(1, 0)
    shard = spark_shard("d", "t", image_json({"id": big}), 4)
    scanner.route("d", "t", ("id",), (False,), 4, shard)
    assert scanner.scan(INSERT, shape, None, buf, 0, len(buf), 0) == 1
    assert scanner.keys == 1
    assert scanner.key_text(tagged(big))[0] == f'{{"id":{big}}}'.encode()


@pytest.mark.parametrize(
    ("raw", "ascii_only"),
    [
        (b"\xff", False),
        (b"a\xc3", False),
        (b"\xed\xa0\x80", False),
        (b"\xc0\xaf", False),
        (b"\xf4\x90\x80\x80", False),
        ("é".encode(), True),
    ],
)
def test_text_the_decoder_escapes_is_unroutable(raw: bytes, ascii_only: bool) -> None:
    shape = Shape((-1,), ((0, KEY_TEXT),))
    buf = b"\x00" + bytes([len(raw)]) + raw
    scanner = Scanner(1, 0)
    scanner.route("d", "t", ("k",), (ascii_only,), 2, 0)
    with pytest.raises(ValueError, match=UNROUTABLE):
        scanner.scan(INSERT, shape, None, buf, 0, len(buf), 0)
    ok = Scanner(1, 0)
    ok.route("d", "t", ("k",), (False,), 1, 0)
    good = b"\x00\x03abc"
    assert ok.scan(INSERT, shape, None, good, 0, len(good), 0) == 1


def test_removes_are_the_keys_whose_last_write_is_a_remove() -> None:
    """A random workload of inserts, updates (keeping or moving the key, chains and swaps
    through a free key), deletes and reinserts, one rows event per change, on a table
    that holds some keys when the range begins: after every 40 changes, removes() and
    survivors() against a model of the last writes, and removes(existing=True) against
    the model's removes whose first write did not create them."""
    rng = random.Random(3)
    shape = Shape(WIDTHS, ((0, KEY_SIGNED), (1, KEY_TEXT)))
    pool = [(i, random_text(rng)) for i in range(-3, 9)]
    state: dict[tuple[int, bytes], int | None] = {k: 0 for k in pool[::3]}  # held before
    last: dict[tuple[int, bytes], bool] = {}
    created: dict[tuple[int, bytes], bool] = {}  # per key: its first write created it
    scanner = Scanner(1, 0)
    scanner.route("db", "t", ("id", "name"), (False, False), 1, 0)
    kinds = [0, 0]  # removes seen at the checks: of keys that existed, of created ones
    for step in range(800):
        key = rng.choice(pool)
        other = rng.choice(pool)
        v = None if step % 5 == 0 else step
        second = None
        if key not in state:
            state[key] = v
            last[key] = True
            created.setdefault(key, True)
            op, buf = INSERT, image(key[0], key[1], v)
        elif rng.random() < 0.3:
            del state[key]
            last[key] = False
            created.setdefault(key, False)
            op, buf = DELETE, image(key[0], key[1], state.get(key, 0))
        elif other not in state:  # move (a chain when it moves again; swaps via free keys)
            del state[key]
            state[other] = v
            last[key] = False
            last[other] = True
            created.setdefault(key, False)
            created.setdefault(other, True)
            op, buf, second = UPDATE, image(*key) + image(other[0], other[1], v), shape
        else:
            state[key] = v
            last[key] = True
            created.setdefault(key, False)
            op, buf, second = UPDATE, image(*key) + image(key[0], key[1], v), shape
        scanner.scan(op, shape, second, buf, 0, len(buf), step)
        if step % 40 != 39:
            continue
        removed = {k for k, put in last.items() if not put}
        assert _removed(scanner.removes()) == removed
        existing = {k for k in removed if not created[k]}
        assert _removed(scanner.removes(existing=True)) == existing
        kinds[0] += len(existing)
        kinds[1] += len(removed - existing)
        seqs, _ = scanner.survivors()
        assert len(seqs) // 8 == sum(last.values())
    assert kinds[0] > 10 and kinds[1] > 10  # the workload holds both kinds


def _removed(result: tuple[int, tuple[bytes | tuple[bytes, bytes], ...]]) -> set[tuple[int, bytes]]:
    """removes()'s (count, (ids, (offsets, data))) as a set of (id, name) keys."""
    count, columns = result
    if not columns:
        assert count == 0
        return set()
    ids, text = columns
    assert isinstance(ids, bytes) and isinstance(text, tuple)
    offsets, data = text
    got_ids = struct.unpack(f"<{count}q", ids)
    ends = struct.unpack(f"<{count + 1}i", offsets)
    got = {(got_ids[i], data[ends[i] : ends[i + 1]]) for i in range(count)}
    assert len(got) == count
    return got


def _scan(events: list[tuple[int, bytes, bool]]) -> Scanner:
    shape = Shape(WIDTHS, ((0, KEY_SIGNED), (1, KEY_TEXT)))
    scanner = Scanner(1, 0)
    scanner.route("db", "t", ("id", "name"), (False, False), 1, 0)
    for ordinal, (op, buf, pair) in enumerate(events):
        scanner.scan(op, shape, shape if pair else None, buf, 0, len(buf), ordinal)
    return scanner


def _insert(k: int) -> tuple[int, bytes, bool]:
    return (INSERT, image(k, b"k"), False)


def _delete(k: int) -> tuple[int, bytes, bool]:
    return (DELETE, image(k, b"k"), False)


def _update(k: int, to: int) -> tuple[int, bytes, bool]:
    return (UPDATE, image(k, b"k") + image(to, b"k", 1), True)


def test_a_key_inserted_then_deleted_is_not_an_existing_remove() -> None:
    scanner = _scan([_insert(1), _update(1, 1), _delete(1)])
    assert _removed(scanner.removes()) == {(1, b"k")}
    assert _removed(scanner.removes(existing=True)) == set()
    assert scanner.survivors() == (b"", b"")


def test_a_key_that_existed_and_is_deleted_is_a_remove() -> None:
    """First write an update (key kept) or a delete: the key existed when the range
    began."""
    scanner = _scan([_update(1, 1), _delete(1), _delete(2)])
    assert _removed(scanner.removes(existing=True)) == {(1, b"k"), (2, b"k")}


def test_a_key_deleted_reinserted_and_deleted_is_a_remove() -> None:
    """Its first write was the delete: it existed, and the insert does not change that."""
    scanner = _scan([_delete(1), _insert(1), _delete(1), _insert(2), _delete(2), _insert(2),
                     _delete(2)])  # fmt: skip
    assert _removed(scanner.removes(existing=True)) == {(1, b"k")}
    assert _removed(scanner.removes()) == {(1, b"k"), (2, b"k")}


def test_a_key_moved_away_and_back() -> None:
    """1 existed: moved to 2 (created by the move) and back: 1 is put, 2 is no remove.
    3 inserted, moved to 4 and 4 deleted: neither is a remove. 5 existed, moved to 6,
    6 deleted: 5 is a remove, 6 is not. 7 moved into 8 within one event and back out
    (a swap through a free key in one rows event): 8 is no remove."""
    swap = (UPDATE, image(7, b"k") + image(8, b"k", 1) + image(8, b"k") + image(7, b"k", 2), True)
    scanner = _scan([
        _update(1, 2), _update(2, 1),
        _insert(3), _update(3, 4), _delete(4),
        _update(5, 6), _delete(6),
        swap,
    ])  # fmt: skip
    assert _removed(scanner.removes()) == {(2, b"k"), (3, b"k"), (4, b"k"), (5, b"k"),
                                           (6, b"k"), (8, b"k")}  # fmt: skip
    assert _removed(scanner.removes(existing=True)) == {(5, b"k")}
    seqs, _offsets = scanner.survivors()
    assert len(seqs) // 8 == 2  # 1 and 7


def test_a_key_moved_onto_itself_existed() -> None:
    """An update whose after key equals its before key (by value: an INT and a BIGINT
    image of 9 give one key) puts a key that existed: deleted later, it is a remove."""
    wide = Shape((8, -1, 4), ((0, KEY_SIGNED), (1, KEY_TEXT)))
    narrow = Shape(WIDTHS, ((0, KEY_SIGNED), (1, KEY_TEXT)))
    after = b"\x00" + struct.pack("<q", 9) + b"\x01k" + struct.pack("<i", 1)
    move = image(9, b"k") + after
    scanner = Scanner(1, 0)
    scanner.route("db", "t", ("id", "name"), (False, False), 1, 0)
    scanner.scan(UPDATE, narrow, wide, move, 0, len(move), 0)
    gone = image(9, b"k")
    scanner.scan(DELETE, narrow, None, gone, 0, len(gone), 1)
    assert _removed(scanner.removes(existing=True)) == {(9, b"k")}


def test_removes_of_nothing() -> None:
    scanner = Scanner(1, 0)
    assert scanner.removes() == (0, ())


def test_route_rejects_bad_arguments() -> None:
    scanner = Scanner(1, 0)
    with pytest.raises(ValueError):
        scanner.route("d", "t", ("a",), (False,), 2, 2)
    with pytest.raises(ValueError):
        scanner.route("d", "t", ("a", "b"), (False,), 2, 0)
    scanner.route("d", "t", ("a", "b"), (False, False), 2, 0)
    shape = Shape((4,), ((0, KEY_SIGNED),))
    buf = b"\x00" + struct.pack("<i", 1)
    with pytest.raises(ValueError, match="differ"):
        scanner.scan(INSERT, shape, None, buf, 0, len(buf), 0)


def _events(seed: int, steps: int) -> list[tuple[int, bytes, bool]]:
    """Random inserts, key-moving and key-keeping updates and deletes, one rows event a
    change, on a table holding a quarter of the keys when the range begins: ``(op, buf,
    has a second image)``."""
    rng = random.Random(seed)
    pool = [(i, random_text(rng)) for i in range(-20, 60)]
    live: set[tuple[int, bytes]] = set(pool[::4])
    events: list[tuple[int, bytes, bool]] = []
    for step in range(steps):
        key, other = rng.choice(pool), rng.choice(pool)
        if key not in live:
            live.add(key)
            events.append((INSERT, image(key[0], key[1], step), False))
        elif rng.random() < 0.3:
            live.discard(key)
            events.append((DELETE, image(key[0], key[1]), False))
        elif other not in live:
            live.discard(key)
            live.add(other)
            events.append((UPDATE, image(*key) + image(other[0], other[1], step), True))
        else:
            events.append((UPDATE, image(*key) + image(key[0], key[1], step), True))
    return events


@pytest.mark.parametrize("shards", [2, 3])
def test_fan_out_keeps_what_one_scan_per_shard_keeps(shards: int) -> None:
    """One scan through a fanning Scanner leaves in each shard's Scanner the survivors and
    removes that a Scanner routed to that shard alone keeps from the same events."""
    shape = Shape(WIDTHS, ((0, KEY_SIGNED), (1, KEY_TEXT)))
    route = ("shop", "orders", ("id", "name"), (False, False), shards)
    events = _events(shards, 1500)
    alone = []
    for k in range(shards):
        scanner = Scanner(1, 0)
        scanner.route(*route, k)
        for ordinal, (op, buf, pair) in enumerate(events):
            scanner.scan(op, shape, shape if pair else None, buf, 0, len(buf), ordinal)
        alone.append(scanner)
    fanned = tuple(Scanner(1, 0) for _ in range(shards))
    for k, scanner in enumerate(fanned):
        scanner.route(*route, k)
    router = Scanner(1, 0)
    router.route(*route, 0)
    router.fan(fanned)
    rows = 0
    for ordinal, (op, buf, pair) in enumerate(events):
        rows += router.scan(op, shape, shape if pair else None, buf, 0, len(buf), ordinal)
    assert rows == len(events)
    assert router.keys == 0  # the router keeps nothing itself
    for k in range(shards):
        assert fanned[k].survivors() == alone[k].survivors()
        assert fanned[k].removes() == alone[k].removes()
        assert fanned[k].removes(existing=True) == alone[k].removes(existing=True)
        assert 0 < fanned[k].removes(existing=True)[0] < fanned[k].removes()[0]
        assert fanned[k].keys == alone[k].keys
    assert sum(s.keys for s in fanned) > 0
    assert all(s.keys for s in fanned)  # every shard got keys (80 keys over 2 or 3)


def test_fan_out_error_applies_nothing_of_the_event() -> None:
    """A row that does not route (invalid UTF-8 in the key) fails the scan, and none of
    the event's earlier rows reach any shard."""
    shape = Shape(WIDTHS, ((0, KEY_SIGNED), (1, KEY_TEXT)))
    fanned = tuple(Scanner(1, 0) for _ in range(2))
    for k, scanner in enumerate(fanned):
        scanner.route("d", "t", ("id", "name"), (False, False), 2, k)
    router = Scanner(1, 0)
    router.route("d", "t", ("id", "name"), (False, False), 2, 0)
    router.fan(fanned)
    buf = b"".join(image(i, b"ok") for i in range(50)) + image(99, b"\xff")
    with pytest.raises(ValueError, match=UNROUTABLE):
        router.scan(INSERT, shape, None, buf, 0, len(buf), 0)
    assert [s.keys for s in fanned] == [0, 0]
    good = image(1, b"a")
    assert router.scan(INSERT, shape, None, good, 0, len(good), 1) == 1
    assert sum(s.keys for s in fanned) == 1


def test_fan_rejects_what_does_not_route_alike() -> None:
    def routed(shards: int, shard: int, table: str = "t") -> Scanner:
        s = Scanner(1, 0)
        s.route("d", table, ("a",), (False,), shards, shard)
        return s

    with pytest.raises(ValueError, match="after route"):
        Scanner(1, 0).fan((routed(2, 0), routed(2, 1)))
    with pytest.raises(ValueError, match="one Scanner per shard"):
        routed(2, 0).fan((routed(2, 0),))
    with pytest.raises(ValueError, match="place 1"):
        routed(2, 0).fan((routed(2, 0), routed(2, 0)))
    with pytest.raises(ValueError, match="place 0"):
        routed(2, 0).fan((routed(2, 0, "other"), routed(2, 1)))
    with pytest.raises(ValueError, match="place 0"):
        routed(2, 0).fan((routed(3, 0), routed(3, 1)))
    with pytest.raises(TypeError):
        routed(2, 0).fan((routed(2, 0), object()))
    router = routed(2, 0)
    router.fan((routed(2, 0), routed(2, 1)))
    with pytest.raises(ValueError, match="set once"):
        router.fan((routed(2, 0), routed(2, 1)))
