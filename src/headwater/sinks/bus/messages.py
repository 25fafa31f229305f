"""Change rows as message-bus messages: routing, keys, formats, DDL messages (pure).

A change row (a dict with the columns of :mod:`headwater.changes.schema`, images as JSON
text or dicts) becomes zero or more :class:`BusMessage` values. Formats:

* ``change_row``: the change row as one JSON object, images as objects (``commit_ts``
  left out: ``ts_us`` says the same).
* ``debezium``: Debezium's change-event *value* as its JSON converter writes it with
  ``schemas.enable=false``: ``before``, ``after``, ``source``, ``op`` (``c`` create,
  ``u`` update, ``d`` delete, ``r`` snapshot read), ``ts_ms``, ``transaction``; the message
  key is the primary key object (``{"id": 1}``), as Debezium's key. ``source`` has the
  fields the Debezium MySQL connector documents (``version``, ``connector``, ``name``,
  ``ts_ms``, ``snapshot``, ``db``, ``sequence``, ``table``, ``server_id``, ``gtid``,
  ``file``, ``pos``, ``row``, ``thread``, ``query``; https://debezium.io/documentation/
  reference/stable/connectors/mysql.html, "Change event values"). An update that changes
  the primary key becomes a delete under the old key (then a tombstone when enabled) and a
  create under the new key, as Debezium emits it. Values are headwater's rendering:
  DECIMAL as a string (Debezium's ``decimal.handling.mode=string``), bytes as base64 text
  (``binary.handling.mode=base64``), temporal values as ISO 8601 text (Debezium's default
  gives epoch numbers: the one difference a consumer sees).
* ``ums``: DBUS UMS (:mod:`headwater.sinks.ums.messages`): one message per run of one
  table's consecutive changes (at most ``ums_max_rows``), keyed by its namespace.

DDL changes are their own kind of message on the schema topic/stream
(:attr:`BusOptions.schema_topic`): ``{"kind": "ddl", ...}`` for ``change_row`` and
``ums``; Debezium's schema-change value (``source``, ``ts_ms``, ``databaseName``,
``schemaName``, ``ddl``, ``tableChanges``) for ``debezium``.

Invariants: the same change rows always give the same messages, byte for byte (a replayed
micro-batch sends what it sent before), and every message has an id unique per source,
``(sequence, sub)``: the row sequence and a small index for the rows one change turns into
(buses de-duplicate replays by it). Topic names are the template with ``{source}``,
``{database}`` and ``{table}`` filled in, characters Kafka does not allow in a topic name
(anything but ``[A-Za-z0-9._-]``) replaced by ``_``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "FORMATS",
    "BusMessage",
    "BusOptions",
    "bus_messages",
    "change_row_value",
    "debezium_values",
    "route",
]

#: The message formats by name.
FORMATS = ("change_row", "debezium", "ums")
#: The value of ``source.version`` in Debezium envelopes (headwater's, not Debezium's).
SOURCE_VERSION = "headwater-0.1"
_DBZ_OPS = {"insert": "c", "read": "r", "update": "u", "delete": "d"}
_BAD = re.compile(r"[^A-Za-z0-9._-]")
_FIELDS = ("source", "database", "table")
_ROUTES: dict[tuple[str, ...], str] = {}


@dataclass(frozen=True, slots=True)
class BusOptions:
    """How changes become messages: ``format`` (one of :data:`FORMATS`), ``topic`` (a
    template per table, or one name), ``schema_topic`` (DDL messages), ``tombstones``
    (a null-valued message after each delete, for compacted topics), ``ums_max_rows``."""

    format: str = "change_row"
    topic: str = "{source}.{database}.{table}"
    schema_topic: str = "{source}.schema_changes"
    tombstones: bool = False
    ums_max_rows: int = 1000

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        for name in ("topic", "schema_topic"):
            template = getattr(self, name)
            try:
                template.format(source="s", database="d", table="t")
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(
                    f"{name}: a template may use {{source}}, {{database}}, {{table}}: {e}"
                ) from None
        if self.ums_max_rows < 1:
            raise ValueError("ums_max_rows must be a positive integer")


@dataclass(frozen=True, slots=True)
class BusMessage:
    """One message: where it goes (``topic``: a Kafka topic, a NATS subject, a Redis
    stream), its ``key`` (None: no key) and ``value`` (None: a tombstone), and its id
    ``(sequence, sub)``; ``source`` names the id's space."""

    topic: str
    key: bytes | None
    value: bytes | None
    source: str
    sequence: int
    sub: int = 0

    @property
    def id(self) -> str:
        """The id as text, unique per bus: ``source:sequence-sub``."""
        return f"{self.source}:{self.sequence}-{self.sub}"


def route(template: str, change: Mapping[str, Any]) -> str:
    """The topic of ``change`` under ``template`` (module docstring)."""
    names = tuple(str(change.get(f) or "") for f in _FIELDS)
    cache_key = (template, *names)
    found = _ROUTES.get(cache_key)
    if found is None:
        name = template.format(**dict(zip(_FIELDS, names, strict=True)))
        found = _BAD.sub("_", name)[:249]  # Kafka's longest topic name
        if len(_ROUTES) < 100_000:  # bounded: one entry per table and template
            _ROUTES[cache_key] = found
    return found


def _obj(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        decoded = orjson.loads(value)
        return None if decoded is None else dict(decoded)
    return dict(value)


def _key_bytes(key: Mapping[str, Any] | None) -> bytes | None:
    return None if key is None else orjson.dumps(dict(key))


_IMAGES = ("key", "before", "after", "before_key")


def change_row_bytes(change: Mapping[str, Any]) -> bytes:
    """The ``change_row`` format of one change, encoded: the scalar columns, then the
    images. Images that arrive as JSON text (the pipeline's compact orjson rendering) are
    spliced in as they are, not parsed and encoded again: the same bytes, several times
    faster (formatting is most of a bus sink's executor time)."""
    head = orjson.dumps({k: v for k, v in change.items() if k != "commit_ts" and k not in _IMAGES})
    parts = [head[:-1]]
    for name in _IMAGES:
        if name not in change:
            continue
        value = change[name]
        if isinstance(value, str):
            text = value.encode()
        elif isinstance(value, bytes):
            text = value
        else:
            text = orjson.dumps(value)
        parts.append(b',"' + name.encode() + b'":' + text)
    parts.append(b"}")
    return b"".join(parts)


def change_row_value(change: Mapping[str, Any]) -> dict[str, Any]:
    """The ``change_row`` format of one change (images as objects)."""
    out = {k: v for k, v in change.items() if k != "commit_ts"}
    for name in ("key", "before", "after", "before_key"):
        if name in out:
            out[name] = _obj(out[name])
    return out


def _dbz_values(image: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {
        k: v["base64"] if isinstance(v, dict) and set(v) == {"base64"} else v
        for k, v in image.items()
    }


def _dbz_source(change: Mapping[str, Any]) -> dict[str, Any]:
    gtid = change.get("gtid") or None
    return {
        "version": SOURCE_VERSION,
        "connector": "mysql",
        "name": change.get("source") or "",
        "ts_ms": int(change.get("ts_us") or 0) // 1000,
        "snapshot": "true" if change["op"] == "read" else "false",
        "db": change.get("database") or "",
        "sequence": None,
        "table": change.get("table") or None,
        "server_id": 0,  # not in a change row
        "gtid": gtid,
        # The binlog file's number (the change row keeps the number, not the base name).
        "file": str(change.get("file_num") or 0),
        "pos": int(change.get("offset") or 0),
        "row": int(change.get("event_index") or 0),
        "thread": None,
        "query": None,
    }


def debezium_values(change: Mapping[str, Any]) -> list[tuple[dict[str, Any] | None, Any]]:
    """``(key, value)`` pairs of one row change in Debezium's format (module docstring);
    a value of None is a tombstone slot (the caller keeps it or not)."""
    op = change["op"]
    before = _dbz_values(_obj(change.get("before")))
    after = _dbz_values(_obj(change.get("after")))
    key = _obj(change.get("key"))
    source = _dbz_source(change)
    ts_ms = source["ts_ms"]

    def envelope(o: str, b: Any, a: Any) -> dict[str, Any]:
        return {"before": b, "after": a, "source": source, "op": o, "ts_ms": ts_ms,
                "transaction": None}  # fmt: skip

    old_key = _obj(change.get("before_key"))
    if op == "update" and old_key is not None:
        return [(old_key, envelope("d", before, None)), (old_key, None),
                (key, envelope("c", None, after))]  # fmt: skip
    out: list[tuple[dict[str, Any] | None, Any]] = [(key, envelope(_DBZ_OPS[op], before, after))]
    if op == "delete":
        out.append((key, None))
    return out


def _ddl_value(change: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    if fmt == "debezium":
        return {
            "source": _dbz_source(change),
            "ts_ms": int(change.get("ts_us") or 0) // 1000,
            "databaseName": change.get("database") or "",
            "schemaName": None,
            "ddl": change.get("sql") or "",
            "tableChanges": [],
        }
    return {"kind": "ddl", **change_row_value(change)}


def _row_messages(change: Mapping[str, Any], options: BusOptions) -> Iterator[BusMessage]:
    source, seq = str(change.get("source") or ""), int(change["sequence"])
    topic = route(options.topic, change)
    if options.format == "debezium":
        for sub, (key, value) in enumerate(debezium_values(change)):
            if value is None and not options.tombstones:
                continue
            body = None if value is None else orjson.dumps(value)
            yield BusMessage(topic, _key_bytes(key), body, source, seq, sub)
        return
    raw = change.get("key")
    key_bytes = raw.encode() if isinstance(raw, str) else _key_bytes(_obj(raw))
    yield BusMessage(topic, key_bytes, change_row_bytes(change), source, seq)
    if change["op"] == "delete" and options.tombstones:
        yield BusMessage(topic, key_bytes, None, source, seq, 1)


def bus_messages(changes: Iterable[Mapping[str, Any]], options: BusOptions) -> Iterator[BusMessage]:
    """The messages of ``changes`` (in the order given, which the caller makes the
    sequence order of each table or of the whole batch)."""
    from headwater.sinks.ums.messages import encode_ums, ums_message, ums_namespace

    run: list[Mapping[str, Any]] = []

    def flush() -> Iterator[BusMessage]:
        if run:
            first = run[0]
            yield BusMessage(
                route(options.topic, first),
                ums_namespace(first).encode(),
                encode_ums(ums_message(run)),
                str(first.get("source") or ""),
                int(first["sequence"]),
            )
            run.clear()

    for change in changes:
        if change["op"] == "ddl":
            yield from flush()
            value = orjson.dumps(_ddl_value(change, options.format))
            yield BusMessage(
                route(options.schema_topic, change),
                (change.get("database") or "").encode(),
                value,
                str(change.get("source") or ""),
                int(change["sequence"]),
            )
        elif options.format == "ums":
            if run and (
                ums_namespace(run[0]) != ums_namespace(change) or len(run) >= options.ums_max_rows
            ):
                yield from flush()
            run.append(change)
        else:
            yield from _row_messages(change, options)
    yield from flush()
