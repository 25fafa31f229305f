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
    through a free key), deletes and reinserts, one rows event per change: removes() and
    survivors() against a model of the last writes."""
    rng = random.Random(3)
    shape = Shape(WIDTHS, ((0, KEY_SIGNED), (1, KEY_TEXT)))
    state: dict[tuple[int, bytes], int | None] = {}
    last: dict[tuple[int, bytes], bool] = {}
    events: list[tuple[int, bytes, bool]] = []  # (op, buf, has second image)
    pool = [(i, random_text(rng)) for i in range(-3, 9)]
    for step in range(800):
        key = rng.choice(pool)
        other = rng.choice(pool)
        v = None if step % 5 == 0 else step
        if key not in state:
            state[key] = v
            last[key] = True
            events.append((INSERT, image(key[0], key[1], v), False))
        elif rng.random() < 0.3:
            del state[key]
            last[key] = False
            events.append((DELETE, image(key[0], key[1], state.get(key, 0)), False))
        elif other not in state:  # move (a chain when it moves again; swaps via free keys)
            del state[key]
            state[other] = v
            last[key] = False
            last[other] = True
            events.append((UPDATE, image(key[0], key[1]) + image(other[0], other[1], v), True))
        else:
            state[key] = v
            last[key] = True
            events.append((UPDATE, image(key[0], key[1]) + image(key[0], key[1], v), True))
    scanner = Scanner(1, 0)
    scanner.route("db", "t", ("id", "name"), (False, False), 1, 0)
    for ordinal, (op, buf, pair) in enumerate(events):
        scanner.scan(op, shape, shape if pair else None, buf, 0, len(buf), ordinal)
    count, (ids, (offsets, data)) = scanner.removes()
    assert isinstance(ids, bytes)
    got_ids = struct.unpack(f"<{count}q", ids)
    ends = struct.unpack(f"<{count + 1}i", offsets)
    got = {(got_ids[i], data[ends[i] : ends[i + 1]]) for i in range(count)}
    assert got == {k for k, put in last.items() if not put}
    assert count == len(got)
    seqs, _ = scanner.survivors()
    assert len(seqs) // 8 == len(state) == sum(last.values())


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
    change: ``(op, buf, has a second image)``."""
    rng = random.Random(seed)
    live: set[tuple[int, bytes]] = set()
    pool = [(i, random_text(rng)) for i in range(-20, 60)]
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
