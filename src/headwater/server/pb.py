"""The protobuf message classes of the HTTP API, built at run time (no protoc needed).

``headwater.proto`` beside this module is the documented schema; :data:`MESSAGES` below is
the same schema as data, turned into a ``FileDescriptorProto`` and then into message
classes by the protobuf runtime (upb). :func:`render_proto` prints the descriptor back as
``.proto`` text so a test can check that the two never drift apart.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import (  # type: ignore[import-untyped]  # no stubs in the dev deps
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)

__all__ = [
    "MESSAGES",
    "PACKAGE",
    "ChangeRow",
    "FetchResponse",
    "Image",
    "RawRecord",
    "Value",
    "file_descriptor",
    "render_proto",
]

PACKAGE = "headwater.v1"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "bool": _F.TYPE_BOOL,
    "sint64": _F.TYPE_SINT64,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "uint32": _F.TYPE_UINT32,
    "double": _F.TYPE_DOUBLE,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}

# (message, [(label, type, name, number, oneof)]); label: "" | "repeated" | "optional".
Field = tuple[str, str, str, int, str | None]
MESSAGES: list[tuple[str, list[Field]]] = [
    (
        "Position",
        [
            ("", "uint64", "change_id", 1, None),
            ("", "uint32", "file", 2, None),
            ("", "uint64", "offset", 3, None),
            ("", "uint32", "event", 4, None),
        ],
    ),
    (
        "Value",
        [
            ("", "bool", "null", 1, "kind"),
            ("", "sint64", "int", 2, "kind"),
            ("", "uint64", "uint", 3, "kind"),
            ("", "double", "float", 4, "kind"),
            ("", "string", "text", 5, "kind"),
            ("", "bytes", "binary", 6, "kind"),
            ("", "string", "decimal", 7, "kind"),
            ("", "string", "date", 8, "kind"),
            ("", "string", "datetime", 9, "kind"),
            ("", "string", "timestamp", 10, "kind"),
            ("", "string", "time", 11, "kind"),
            ("", "StringList", "set", 12, "kind"),
            ("", "DoubleList", "vector", 13, "kind"),
            ("", "bytes", "undecodable_text", 14, "kind"),
        ],
    ),
    ("StringList", [("repeated", "string", "values", 1, None)]),
    ("DoubleList", [("repeated", "double", "values", 1, None)]),
    ("Column", [("", "string", "name", 1, None), ("", "Value", "value", 2, None)]),
    ("Image", [("repeated", "Column", "columns", 1, None)]),
    (
        "ChangeRow",
        [
            ("", "string", "source", 1, None),
            ("", "string", "database", 2, None),
            ("", "string", "table", 3, None),
            ("", "string", "op", 4, None),
            ("", "int64", "ts_us", 5, None),
            ("", "Position", "position", 6, None),
            ("", "string", "gtid", 7, None),
            ("", "string", "txn_id", 8, None),
            ("", "uint64", "sequence", 9, None),
            ("", "Image", "key", 10, None),
            ("", "Image", "before", 11, None),
            ("", "Image", "after", 12, None),
            ("", "uint64", "schema_version", 13, None),
            ("optional", "string", "sql", 14, None),
        ],
    ),
    ("TableRows", [("", "string", "name", 1, None), ("", "uint64", "rows", 2, None)]),
    (
        "RawRecord",
        [
            ("", "uint64", "seq", 1, None),
            ("", "Position", "position", 2, None),
            ("", "int64", "ts_us", 3, None),
            ("", "string", "gtid", 4, None),
            ("repeated", "TableRows", "tables", 5, None),
            ("", "uint64", "schema_version", 6, None),
            ("", "uint32", "flags", 7, None),
            ("", "uint32", "chunk_no", 8, None),
            ("", "bytes", "payload", 9, None),
        ],
    ),
    ("Next", [("", "uint64", "seq", 1, None), ("", "uint32", "row", 2, None)]),
    (
        "FetchResponse",
        [
            ("", "string", "task", 1, None),
            ("repeated", "ChangeRow", "rows", 2, None),
            ("repeated", "RawRecord", "records", 3, None),
            ("", "string", "checkpoint", 4, None),
            ("", "Next", "next", 5, None),
            ("", "uint64", "latest_seq", 6, None),
            ("", "bool", "more", 7, None),
        ],
    ),
]


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The schema as a ``FileDescriptorProto`` (what ``protoc`` would produce)."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="headwater/v1/headwater.proto", package=PACKAGE, syntax="proto3"
    )
    for msg_name, fields in MESSAGES:
        msg = fdp.message_type.add(name=msg_name)
        oneofs: dict[str, int] = {}
        for label, type_name, name, number, oneof in fields:
            f = msg.field.add(name=name, number=number, json_name=_json_name(name))
            f.label = _F.LABEL_REPEATED if label == "repeated" else _F.LABEL_OPTIONAL
            if type_name in _SCALARS:
                f.type = _SCALARS[type_name]
            else:
                f.type = _F.TYPE_MESSAGE
                f.type_name = f".{PACKAGE}.{type_name}"
            if label == "optional":  # proto3 explicit presence: a synthetic oneof
                oneof = "_" + name
                f.proto3_optional = True
            if oneof is not None:
                if oneof not in oneofs:
                    oneofs[oneof] = len(msg.oneof_decl)
                    msg.oneof_decl.add(name=oneof)
                f.oneof_index = oneofs[oneof]
    return fdp


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def render_proto() -> str:
    """The schema as ``.proto`` text without comments, one field per line."""
    lines = ['syntax = "proto3";', f"package {PACKAGE};"]
    for msg_name, fields in MESSAGES:
        lines.append(f"message {msg_name} {{")
        in_oneof = None
        for label, type_name, name, number, oneof in fields:
            if oneof != in_oneof:
                if in_oneof is not None:
                    lines.append("}")
                if oneof is not None:
                    lines.append(f"oneof {oneof} {{")
                in_oneof = oneof
            prefix = f"{label} " if label else ""
            lines.append(f"{prefix}{type_name} {name} = {number};")
        if in_oneof is not None:
            lines.append("}")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _build() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name, _fields in MESSAGES
    }


_CLASSES = _build()
Position: Any = _CLASSES["Position"]
Value: Any = _CLASSES["Value"]
Image: Any = _CLASSES["Image"]
ChangeRow: Any = _CLASSES["ChangeRow"]
RawRecord: Any = _CLASSES["RawRecord"]
FetchResponse: Any = _CLASSES["FetchResponse"]
