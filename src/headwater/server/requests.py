"""Request validation for the HTTP API: subscriptions, checkpoints and fetch requests.

Every parse function takes decoded JSON and returns a frozen value or raises
:class:`RequestError`, which carries the HTTP status, the offending field (dotted path,
e.g. ``start.position.offset``) and the reason; the server answers
``{"error": reason, "field": field}``.

The checkpoint is stateless: the server keeps no subscription. It is the URL-safe base64
(no padding) of a compact JSON object, so a restarted server resumes any checkpoint::

    {"v": 1, "task": "orders", "seq": 42, "row": 3, "format": "json",
     "tables": ["shop.orders", "shop.*"] | null, "ddl": true,
     "shards": {"count": 4, "owned": [0, 2], "keys": {"shop.orders": ["customer_id"]}}}

``seq``/``row``: the next change to deliver is row ``row`` (0-based) of the changes
decoded, with the subscription's table filter, from store record ``seq``; for the raw
format ``row`` is always 0. A change row's ``sequence`` is ``seq << 24 | row``, so a
client may also resume after any row it has processed (see docs/formats.md).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from headwater.position import Position, parse_gtid_set
from headwater.server import ServerOptions
from headwater.store import EARLIEST, LATEST, AtSeq, AtTime, Start

__all__ = [
    "FORMATS",
    "Checkpoint",
    "FetchRequest",
    "RequestError",
    "Subscription",
    "decode_checkpoint",
    "encode_checkpoint",
    "parse_fetch",
    "parse_start",
    "parse_subscribe",
]

FORMATS = ("json", "protobuf", "raw", "raw+protobuf")
MAX_SHARDS = 1 << 16
CHECKPOINT_VERSION = 1


class RequestError(Exception):
    """A request the server refuses: ``status`` (400, 404, 410, ...), reason and field."""

    def __init__(self, status: int, message: str, field: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.extra = extra

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.message, "field": self.field}
        out.update(self.extra)
        return out


def _bad(field: str, message: str) -> RequestError:
    return RequestError(400, message, field)


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a consumer asked for; carried inside every checkpoint.

    ``tables``: ``db.table`` names or ``db.*`` patterns (None: every table). ``ddl``:
    whether DDL changes are delivered (they are not filtered by ``tables``). ``format``:
    ``json`` (decoded rows), ``protobuf`` (decoded rows), ``raw`` (records, JSON with base64
    payloads) or ``raw+protobuf`` (records, protobuf). ``shard_count``/``shards``: the
    shards this consumer owns; ``shard_keys``: ``db.table`` -> key columns.
    """

    task: str
    tables: tuple[str, ...] | None = None
    ddl: bool = True
    format: str = "json"
    shard_count: int = 1
    shards: tuple[int, ...] = (0,)
    shard_keys: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def raw(self) -> bool:
        return self.format.startswith("raw")

    @property
    def protobuf(self) -> bool:
        return self.format in ("protobuf", "raw+protobuf")

    def wants_table(self, database: str, table: str) -> bool:
        if self.tables is None:
            return True
        return f"{database}.{table}" in self.tables or f"{database}.*" in self.tables

    def wants_record_tables(self, tables: tuple[tuple[str, int], ...]) -> bool:
        """Raw format: a record whose table list is empty (unknown, or DDL) is kept."""
        if self.tables is None or not tables:
            return True
        for name, _rows in tables:
            database, _, table = name.partition(".")
            if self.wants_table(database, table):
                return True
        return False


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a subscription stands: the next change is row ``row`` of record ``seq``."""

    sub: Subscription
    seq: int
    row: int = 0

    def at(self, seq: int, row: int) -> Checkpoint:
        return replace(self, seq=seq, row=row)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    checkpoint: Checkpoint
    max_rows: int
    max_bytes: int
    timeout_s: float


def _obj(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _bad(field, f"must be a JSON object, got {type(value).__name__}")
    return value


def _int(value: Any, field: str, lo: int, hi: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(field, f"must be an integer, got {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise _bad(field, f"must be {bound}, got {value}")
    return value


def _str(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(field, "must be a non-empty string")
    return value


def _no_extra(body: Mapping[str, Any], allowed: set[str], prefix: str = "") -> None:
    for key in body:
        if key not in allowed:
            raise _bad(prefix + key, f"unknown field (expected one of {sorted(allowed)})")


def parse_start(value: Any) -> Start:
    """``"earliest"``, ``"latest"``, or an object with exactly one of ``seq``,
    ``position`` (object or ``"change_id:file:offset[:event]"``), ``timestamp_us``,
    ``gtid_set`` (MySQL ``uuid:1-n,...`` or MariaDB ``domain-server-seq,...``)."""
    if value in (EARLIEST, LATEST):
        return EARLIEST if value == EARLIEST else LATEST
    if isinstance(value, str):
        raise _bad("start", f"unknown start {value!r} (earliest, latest, or an object)")
    body = _obj(value, "start")
    kinds = ("seq", "position", "timestamp_us", "gtid_set")
    given = [k for k in body if k in kinds]
    _no_extra(body, set(kinds), "start.")
    if len(given) != 1:
        raise _bad("start", f"needs exactly one of {list(kinds)}")
    kind = given[0]
    field = f"start.{kind}"
    raw = body[kind]
    if kind == "seq":
        return AtSeq(_int(raw, field, 1))
    if kind == "timestamp_us":
        return AtTime(_int(raw, field, 0))
    if kind == "gtid_set":
        try:
            return parse_gtid_set(_str(raw, field))
        except ValueError as e:
            raise _bad(field, str(e)) from None
    if isinstance(raw, str):
        try:
            return Position.parse(raw)
        except ValueError as e:
            raise _bad(field, str(e)) from None
    pos = _obj(raw, field)
    _no_extra(pos, {"change_id", "file", "offset", "event"}, field + ".")
    for name in ("change_id", "file", "offset"):
        if name not in pos:
            raise _bad(f"{field}.{name}", "is required")
    return Position(
        _int(pos["change_id"], f"{field}.change_id", 0),
        _int(pos["file"], f"{field}.file", 0, 2**32 - 1),
        _int(pos["offset"], f"{field}.offset", 0),
        _int(pos.get("event", 0), f"{field}.event", 0, 2**32 - 1),
    )


def _tables(value: Any, field: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise _bad(field, "must be a non-empty list of 'db.table' or 'db.*'")
    out = []
    for i, name in enumerate(value):
        text = _str(name, f"{field}[{i}]")
        database, dot, table = text.partition(".")
        if not dot or not database or not table:
            raise _bad(f"{field}[{i}]", f"expected 'db.table' or 'db.*', got {text!r}")
        out.append(text)
    return tuple(out)


def _shards(value: Any, field: str) -> tuple[int, tuple[int, ...], tuple[Any, ...]]:
    if value is None:
        return 1, (0,), ()
    body = _obj(value, field)
    _no_extra(body, {"count", "owned", "keys"}, field + ".")
    count = _int(body.get("count", 1), f"{field}.count", 1, MAX_SHARDS)
    owned_raw = body.get("owned", list(range(count)))
    if not isinstance(owned_raw, list) or not owned_raw:
        raise _bad(f"{field}.owned", "must be a non-empty list of shard numbers")
    owned = sorted({_int(n, f"{field}.owned[{i}]", 0, count - 1) for i, n in enumerate(owned_raw)})
    keys_raw = _obj(body.get("keys", {}), f"{field}.keys")
    keys = []
    for name, cols in sorted(keys_raw.items()):
        kf = f"{field}.keys.{name}"
        _tables([name], kf)
        if not isinstance(cols, list) or not cols:
            raise _bad(kf, "must be a non-empty list of column names")
        keys.append((name, tuple(_str(c, f"{kf}[{i}]") for i, c in enumerate(cols))))
    return count, tuple(owned), tuple(keys)


def parse_subscribe(body: Any) -> tuple[Subscription, Start]:
    """A ``POST /v1/subscribe`` body: the subscription and where it starts."""
    req = _obj(body, "body")
    _no_extra(req, {"task", "tables", "ddl", "format", "shards", "start"})
    if "task" not in req:
        raise _bad("task", "is required")
    task = _str(req["task"], "task")
    fmt = req.get("format", "json")
    if fmt not in FORMATS:
        raise _bad("format", f"must be one of {list(FORMATS)}, got {fmt!r}")
    ddl = req.get("ddl", True)
    if not isinstance(ddl, bool):
        raise _bad("ddl", "must be true or false")
    count, owned, keys = _shards(req.get("shards"), "shards")
    if count > 1 and fmt.startswith("raw"):
        raise _bad("shards", "raw records cannot be sharded (sharding hashes decoded rows)")
    sub = Subscription(task, _tables(req.get("tables"), "tables"), ddl, fmt, count, owned, keys)
    return sub, parse_start(req.get("start", EARLIEST))


def encode_checkpoint(cp: Checkpoint) -> str:
    """The checkpoint token (see the module docstring)."""
    sub = cp.sub
    doc: dict[str, Any] = {
        "v": CHECKPOINT_VERSION,
        "task": sub.task,
        "seq": cp.seq,
        "row": cp.row,
        "format": sub.format,
        "tables": None if sub.tables is None else list(sub.tables),
        "ddl": sub.ddl,
        "shards": {
            "count": sub.shard_count,
            "owned": list(sub.shards),
            "keys": {name: list(cols) for name, cols in sub.shard_keys},
        },
    }
    return base64.urlsafe_b64encode(orjson.dumps(doc)).rstrip(b"=").decode("ascii")


def decode_checkpoint(token: Any, field: str = "checkpoint") -> Checkpoint:
    """Parse a checkpoint token; every defect is a 400 naming ``field``."""
    text = _str(token, field)
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        doc = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise _bad(field, "is not a checkpoint token (base64url of JSON)") from None
    if not isinstance(doc, dict) or doc.get("v") != CHECKPOINT_VERSION:
        raise _bad(field, f"is not a version {CHECKPOINT_VERSION} checkpoint")
    try:
        sub, _start = parse_subscribe(
            {k: doc.get(k) for k in ("task", "tables", "ddl", "format", "shards")}
        )
    except RequestError as e:
        raise _bad(field, f"bad {e.field}: {e.message}") from None
    seq = _int(doc.get("seq"), f"{field}.seq", 1)
    row = _int(doc.get("row"), f"{field}.row", 0, (1 << 24) - 1)
    return Checkpoint(sub, seq, row)


def parse_fetch(body: Any, limits: ServerOptions) -> FetchRequest:
    """A ``POST /v1/fetch`` body. ``max_rows`` (records for the raw formats) and
    ``max_bytes`` default to the server's ``default_rows``/``default_bytes`` and may not
    exceed ``max_rows``/``max_bytes``; ``timeout_ms`` (default 0: answer at once) may not
    exceed ``max_wait_s``."""
    req = _obj(body, "body")
    _no_extra(req, {"checkpoint", "max_rows", "max_bytes", "timeout_ms"})
    if "checkpoint" not in req:
        raise _bad("checkpoint", "is required")
    cp = decode_checkpoint(req["checkpoint"])
    rows = _int(req.get("max_rows", limits.default_rows), "max_rows", 1, limits.max_rows)
    nbytes = _int(req.get("max_bytes", limits.default_bytes), "max_bytes", 1, limits.max_bytes)
    wait_ms = int(limits.max_wait_s * 1000)
    timeout_ms = _int(req.get("timeout_ms", 0), "timeout_ms", 0, wait_ms)
    return FetchRequest(cp, rows, nbytes, timeout_ms / 1000)
