"""UMS output: changes as DBUS "Unified Message Schema" messages, for files and message buses.

One message holds changes of one table (its namespace), in order::

    {"protocol": {"type": "data_increment_data", "version": "1.3"},
     "schema": {"namespace": "shop_src.shop.orders",
                "batch_id": 0,
                "fields": [{"name": "ums_id_",  "type": "long",     "nullable": false},
                           {"name": "ums_ts_",  "type": "datetime", "nullable": false},
                           {"name": "ums_op_",  "type": "string",   "nullable": false},
                           {"name": "ums_uid_", "type": "string",   "nullable": false},
                           {"name": "id", "type": "long", "nullable": true}, ...]},
     "payload": [{"tuple": [281474993487872, "2024-05-01 12:00:00.000001", "i",
                            "0-1-100", 1, ...]}]}

* ``namespace``: ``source.database.table`` (DBUS: ``type.ds.schema.table.version...``;
  ours has no version part because a change row carries ``schema_version`` separately and
  one table's messages must share one key). It is the message key for a bus (one
  partition per table keeps each table's order).
* ``ums_id_``: the change row ``sequence``: 64-bit, stable (derived from the change's
  place in the change log, the same on every re-read), strictly increasing per source.
* ``ums_ts_``: commit time, UTC, ``YYYY-MM-DD HH:MM:SS.ffffff``.
* ``ums_op_``: ``i`` (insert and snapshot read), ``u`` (update), ``d`` (delete).
* ``ums_uid_``: the transaction id (GTID, or ``FILE_NUM:OFFSET``).
* Then the row's columns: the after image (the before image for deletes). ``fields``
  lists every column present in the message's changes in first-seen order; a change that
  lacks one (MINIMAL images) has ``null`` there. Types are inferred from the JSON values
  (``long``, ``double``, ``boolean``, ``string``, ``binary`` for ``{"base64": ...}``;
  DECIMAL and temporal values are strings in headwater's rendering, so ``string``).

DDL changes have no UMS form and are skipped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame

__all__ = [
    "UMS_VERSION",
    "encode_ums",
    "to_ums",
    "ums_message",
    "ums_messages",
    "ums_namespace",
]

UMS_VERSION = "1.3"
_OPS = {"insert": "i", "read": "i", "update": "u", "delete": "d"}
_HEAD = (
    {"name": "ums_id_", "type": "long", "nullable": False},
    {"name": "ums_ts_", "type": "datetime", "nullable": False},
    {"name": "ums_op_", "type": "string", "nullable": False},
    {"name": "ums_uid_", "type": "string", "nullable": False},
)
_EPOCH = dt.datetime(1970, 1, 1)


def ums_namespace(change: Mapping[str, Any]) -> str:
    """``source.database.table`` of a change (a change-row dict)."""
    return f"{change['source']}.{change['database']}.{change['table']}"


def _image(change: Mapping[str, Any]) -> dict[str, Any]:
    image = change["before"] if change["op"] == "delete" else change["after"]
    if isinstance(image, (str, bytes)):
        image = orjson.loads(image)
    return dict(image or {})


def _type(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict) and "base64" in value:
        return "binary"
    return "string"


def _ts(ts_us: int) -> str:
    return (_EPOCH + dt.timedelta(microseconds=ts_us)).strftime("%Y-%m-%d %H:%M:%S.%f")


def ums_message(changes: Iterable[Mapping[str, Any]], batch_id: int = 0) -> dict[str, Any]:
    """One UMS message of ``changes`` (change-row dicts of ONE namespace, images as dicts
    or JSON text), in the given order. Raises ValueError for mixed namespaces or DDL."""
    namespace = None
    rows: list[tuple[Mapping[str, Any], dict[str, Any]]] = []
    types: dict[str, str | None] = {}
    for change in changes:
        ns = ums_namespace(change)
        if namespace is None:
            namespace = ns
        elif ns != namespace:
            raise ValueError(f"one UMS message holds one namespace: {namespace} and {ns}")
        if change["op"] not in _OPS:
            raise ValueError(f"no UMS form for a {change['op']} change")
        image = _image(change)
        for name, value in image.items():
            if types.get(name) is None:
                types[name] = _type(value)
        rows.append((change, image))
    if namespace is None:
        raise ValueError("a UMS message needs at least one change")
    fields = [*_HEAD] + [
        {"name": name, "type": kind or "string", "nullable": True} for name, kind in types.items()
    ]
    payload = [
        {
            "tuple": [
                int(change["sequence"]),
                _ts(int(change["ts_us"])),
                _OPS[change["op"]],
                str(change["txn_id"]),
                *(image.get(name) for name in types),
            ]
        }
        for change, image in rows
    ]
    return {
        "protocol": {"type": "data_increment_data", "version": UMS_VERSION},
        "schema": {"namespace": namespace, "batch_id": batch_id, "fields": fields},
        "payload": payload,
    }


def encode_ums(message: Mapping[str, Any]) -> bytes:
    """A UMS message as compact UTF-8 JSON (the bytes a file line or bus message holds)."""
    return orjson.dumps(message)


def ums_messages(
    changes: Iterable[Mapping[str, Any]], batch_id: int = 0, max_rows: int = 1000
) -> Iterator[tuple[str, bytes]]:
    """``(namespace, encoded message)`` pairs for ``changes`` of any tables: consecutive
    changes of one namespace share a message of at most ``max_rows`` changes, so each
    table's changes stay in order across messages. DDL changes are skipped."""
    run: list[Mapping[str, Any]] = []
    for change in changes:
        if change["op"] not in _OPS:
            continue
        if run and (ums_namespace(run[0]) != ums_namespace(change) or len(run) >= max_rows):
            yield ums_namespace(run[0]), encode_ums(ums_message(run, batch_id))
            run = []
        run.append(change)
    if run:
        yield ums_namespace(run[0]), encode_ums(ums_message(run, batch_id))


def to_ums(df: DataFrame, batch_id: int = 0, max_rows: int = 1000) -> DataFrame:
    """A DataFrame of UMS messages (``namespace`` string, ``value`` string: the JSON)
    from change rows, one message per run of one table's changes within a partition,
    ordered by ``sequence`` within each table (repartitioned by namespace first)."""
    import warnings

    from pyspark.sql import functions as F

    ordered = df.repartition(
        F.col("source"), F.col("database"), F.col("table")
    ).sortWithinPartitions("source", "database", "table", "sequence")

    def encode(batches: Iterator[pyarrow.RecordBatch]) -> Iterator[pyarrow.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            pairs = list(ums_messages(batch.to_pylist(), batch_id, max_rows))
            yield pa.RecordBatch.from_pydict(
                {"namespace": [n for n, _ in pairs], "value": [v.decode() for _, v in pairs]},
                schema=pa.schema([("namespace", pa.string()), ("value", pa.string())]),
            )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pandas 3 notice; see transforms
        return ordered.mapInArrow(encode, "namespace string, value string")
