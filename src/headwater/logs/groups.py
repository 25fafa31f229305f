"""Rule-operator groups: parsing them from configuration, and running them in Python.

A :class:`LogRules` is the whole structuring of one log source: ordered :class:`Group` s
(each: a name, an output table, its columns and types, an ordered list of operators from
:mod:`headwater.logs.operators`), the unknown table, and the heartbeat line pattern. The
first group that does not reject a record takes it (DBUS's rule-operator groups); a group
that fails it (a cast) sends it to the unknown table with the reason; heartbeat lines go to
the heartbeat table; a record no group takes goes to the unknown table.

:meth:`LogRules.route` is the Python engine (preview and the tests' reference);
:mod:`headwater.logs.plan` is the same routing as Spark SQL. Parsing takes plain values
(what YAML gives) and raises :class:`~headwater.errors.ConfigError` naming the dotted
field (``groups[1].operators[2].extract.regex``) and, for a regex that does not compile,
the group, the operator and the error.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from headwater.errors import ConfigError
from headwater.logs.operators import (
    CAST_TYPES,
    Cast,
    CastFailure,
    Extract,
    Filter,
    JsonParse,
    KeyValue,
    Operator,
    Rejected,
    Rename,
    Replace,
    Select,
    Split,
    Timestamp,
    Trim,
    timestamp_regex,
)

__all__ = ["COLUMN_TYPES", "Group", "Heartbeat", "LogRules", "Routed", "parse_rules"]

#: Output column types: the cast types plus ``timestamp`` (made by a timestamp operator).
COLUMN_TYPES = (*CAST_TYPES, "timestamp")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
#: Columns every output table has (UMS): the record's id and its event time.
UMS_COLUMNS = (("ums_id_", "bigint"), ("ums_ts_", "timestamp"))
UNKNOWN_COLUMNS = (
    ("file", "string"),
    ("offset", "bigint"),
    ("raw", "string"),
    ("reason", "string"),
)
HEARTBEAT_COLUMNS = (("sent_ts", "timestamp"), ("read_ts", "timestamp"), ("lag_ms", "bigint"))


@dataclass(frozen=True, slots=True)
class Group:
    """One rule-operator group: ``operators`` in order, then the implicit conversion of
    ``columns`` to their types (those no explicit ``cast`` converted)."""

    name: str
    table: str
    columns: tuple[tuple[str, str], ...]
    operators: tuple[Operator, ...]

    @property
    def final_cast(self) -> Cast:
        done = {n for op in self.operators if isinstance(op, Cast) for n, _ in op.types}
        return Cast(
            tuple(
                (n, t)
                for n, t in self.columns
                if t in CAST_TYPES and n not in done and t != "string"
            )
        )

    @property
    def event_time(self) -> str | None:
        """The field that is the record's ``ums_ts_`` (the last event-time timestamp)."""
        names = [op.into for op in self.operators if isinstance(op, Timestamp) and op.event_time]
        return names[-1] if names else None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Lines matching ``regex`` are heartbeats; its group ``ts`` parsed with ``format`` is
    when it was written. Each lands in ``table`` with the time it was read and the lag."""

    regex: str
    format: str
    table: str = "heartbeat"


@dataclass(frozen=True, slots=True)
class Routed:
    """Where the Python engine sent one record: ``table`` and its typed ``values``,
    ``group`` (None: unknown or heartbeat), the ``reason`` for the unknown table, and
    ``steps``: (group, operator label, fields after it) for the preview."""

    table: str
    values: dict[str, Any]
    group: str | None
    reason: str | None = None
    steps: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LogRules:
    groups: tuple[Group, ...]
    unknown_table: str = "unknown"
    heartbeat: Heartbeat | None = None

    def tables(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """Every output table and its columns (UMS columns first)."""
        out = {g.table: (*UMS_COLUMNS, *g.columns) for g in self.groups}
        out[self.unknown_table] = (*UMS_COLUMNS, *UNKNOWN_COLUMNS)
        if self.heartbeat is not None:
            out[self.heartbeat.table] = (UMS_COLUMNS[0], *HEARTBEAT_COLUMNS)
        return out

    def route(
        self, raw: str, *, file: str = "", offset: int = 0, read_ts: dt.datetime | None = None
    ) -> Routed:
        """The Python engine: where ``raw`` goes and with which values (module docstring)."""
        steps: list[tuple[str, str, dict[str, Any]]] = []
        if self.heartbeat is not None:
            m = re.search(self.heartbeat.regex, raw)
            if m is not None:
                ts = Timestamp("ts", self.heartbeat.format, "ts")
                try:
                    sent = ts.apply({"ts": m.group("ts")})["ts"]
                except CastFailure as e:
                    return self._unknown(raw, file, offset, f"heartbeat: {e}", steps)
                values: dict[str, Any] = {"sent_ts": sent, "read_ts": read_ts, "lag_ms": None}
                if read_ts is not None and sent is not None:
                    values["lag_ms"] = (read_ts - sent) // dt.timedelta(milliseconds=1)
                return Routed(self.heartbeat.table, values, None)
        for group in self.groups:
            fields: dict[str, Any] = {"raw": raw}
            try:
                for i, op in enumerate((*group.operators, group.final_cast)):
                    fields = op.apply(fields)
                    label = f"{i}:{op.kind}" if i < len(group.operators) else "columns"
                    steps.append((group.name, label, dict(fields)))
            except Rejected:
                steps.append((group.name, f"{i}:{op.kind} rejected", {}))
                continue
            except CastFailure as e:
                where = f"{i}:{op.kind}" if i < len(group.operators) else "columns"
                reason = f"group {group.name}, operator {where}: {e}"
                return self._unknown(raw, file, offset, reason, steps)
            values = {name: fields.get(name) for name, _ in group.columns}
            if group.event_time is not None:
                values["ums_ts_"] = fields.get(group.event_time)
            return Routed(group.table, values, group.name, None, steps)
        return self._unknown(raw, file, offset, "no group matched", steps)

    def _unknown(self, raw: str, file: str, offset: int, reason: str, steps: list[Any]) -> Routed:
        values = {"file": file, "offset": offset, "raw": raw, "reason": reason}
        return Routed(self.unknown_table, values, None, reason, steps)


# --- parsing --------------------------------------------------------------------------------


def _err(path: str, message: str) -> ConfigError:
    return ConfigError(message, field=path)


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _err(path, "must be a non-empty string")
    return value


def _name(value: Any, path: str) -> str:
    text = _text(value, path)
    if not _IDENT.match(text):
        raise _err(path, f"{text!r} is not a plain identifier (letters, digits, _)")
    return text


def _names(value: Any, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _err(path, "must be a name or a non-empty list of names")
    return tuple(_name(v, f"{path}[{i}]") for i, v in enumerate(value))


def _regex(value: Any, path: str, group: str, op: str) -> str:
    text = _text(value, path)
    try:
        re.compile(text)
    except re.error as e:
        raise _err(
            path, f"group {group}, operator {op}: bad regular expression {text!r}: {e}"
        ) from None
    if "(?P=" in text or "(?<" in text.replace("(?<=", "").replace("(?<!", ""):
        raise _err(
            path,
            f"group {group}, operator {op}: use (?P<name>...) groups, no named back-references",
        )
    return text


def _fields(value: Any, path: str, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _err(path, f"must be a mapping of {', '.join(sorted(allowed))}")
    for key in value:
        if key not in allowed:
            raise _err(
                f"{path}.{key}", f"unknown field; expected one of {', '.join(sorted(allowed))}"
            )
    for key in sorted(required - value.keys()):
        raise _err(f"{path}.{key}", "missing (required)")
    return value


_OPERATORS = (
    "filter",
    "extract",
    "split",
    "kv",
    "json",
    "replace",
    "trim",
    "select",
    "rename",
    "cast",
    "timestamp",
)


def _operator(node: Any, path: str, group: str, index: int) -> Operator:
    if not isinstance(node, dict) or len(node) != 1:
        raise _err(path, f"must be a mapping with exactly one of {', '.join(_OPERATORS)}")
    ((kind, value),) = node.items()
    if kind not in _OPERATORS:
        raise _err(f"{path}.{kind}", f"unknown operator; expected one of {', '.join(_OPERATORS)}")
    where, label = f"{path}.{kind}", f"{index}:{kind}"
    if kind == "filter":
        f = _fields(value, where, {"field", "regex", "not_regex", "equals", "in"}, set())
        tests = [k for k in ("regex", "not_regex", "equals", "in") if k in f]
        if len(tests) != 1:
            raise _err(where, "give exactly one of regex, not_regex, equals, in")
        fld = _name(f.get("field", "raw"), f"{where}.field")
        if "equals" in f:
            return Filter(fld, equals=str(f["equals"]))
        if "in" in f:
            if not isinstance(f["in"], list) or not f["in"]:
                raise _err(f"{where}.in", "must be a non-empty list")
            return Filter(fld, one_of=tuple(str(v) for v in f["in"]))
        key = tests[0]
        return Filter(
            fld, regex=_regex(f[key], f"{where}.{key}", group, label), negate=key == "not_regex"
        )
    if kind == "extract":
        f = _fields(value, where, {"field", "regex"}, {"regex"})
        regex = _regex(f["regex"], f"{where}.regex", group, label)
        if not re.compile(regex).groupindex:
            raise _err(
                f"{where}.regex", f"group {group}, operator {label}: needs (?P<name>...) groups"
            )
        for name in re.compile(regex).groupindex:
            _name(name, f"{where}.regex ({name})")
        return Extract(_name(f.get("field", "raw"), f"{where}.field"), regex)
    if kind == "split":
        f = _fields(value, where, {"field", "separator", "into"}, {"separator", "into", "field"})
        return Split(
            _name(f["field"], f"{where}.field"),
            _text(f["separator"], f"{where}.separator"),
            _names(f["into"], f"{where}.into"),
        )
    if kind == "kv":
        f = _fields(
            value, where, {"field", "keys", "pair_separator", "separator"}, {"field", "keys"}
        )
        return KeyValue(
            _name(f["field"], f"{where}.field"),
            _names(f["keys"], f"{where}.keys"),
            _text(f.get("pair_separator", " "), f"{where}.pair_separator"),
            _text(f.get("separator", "="), f"{where}.separator"),
        )
    if kind == "json":
        f = _fields(value, where, {"field", "keys"}, {"field", "keys"})
        keys = f["keys"] if isinstance(f["keys"], list) else [f["keys"]]
        for i, k in enumerate(keys):
            if not isinstance(k, str) or not k or "'" in k or "]" in k:
                raise _err(f"{where}.keys[{i}]", "must be a key without ' or ]")
        return JsonParse(_name(f["field"], f"{where}.field"), tuple(keys))
    if kind == "replace":
        f = _fields(value, where, {"field", "regex", "with"}, {"field", "regex"})
        text = f.get("with", "")
        if not isinstance(text, str):
            raise _err(f"{where}.with", "must be a string")
        return Replace(
            _name(f["field"], f"{where}.field"),
            _regex(f["regex"], f"{where}.regex", group, label),
            text,
        )
    if kind == "trim":
        return Trim(_names(value, where))
    if kind == "select":
        return Select(_names(value, where))
    if kind == "rename":
        if not isinstance(value, dict) or not value:
            raise _err(where, "must map old field names to new ones")
        return Rename(
            tuple((_name(k, f"{where}.{k}"), _name(v, f"{where}.{k}")) for k, v in value.items())
        )
    if kind == "cast":
        if not isinstance(value, dict) or not value:
            raise _err(where, "must map field names to types")
        types = []
        for k, v in value.items():
            if v not in CAST_TYPES:
                raise _err(
                    f"{where}.{k}", f"unknown type {v!r}; expected one of {', '.join(CAST_TYPES)}"
                )
            types.append((_name(k, f"{where}.{k}"), str(v)))
        return Cast(tuple(types))
    f = _fields(
        value,
        where,
        {"field", "format", "into", "offset_minutes", "event_time"},
        {"field", "format"},
    )
    fmt = _text(f["format"], f"{where}.format")
    try:
        timestamp_regex(fmt)
    except ValueError as e:
        raise _err(f"{where}.format", f"group {group}, operator {label}: {e}") from None
    offset = f.get("offset_minutes", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or abs(offset) > 24 * 60:
        raise _err(f"{where}.offset_minutes", "must be an integer of minutes (at most a day)")
    fld = _name(f["field"], f"{where}.field")
    return Timestamp(
        fld,
        fmt,
        _name(f.get("into", fld), f"{where}.into"),
        offset,
        bool(f.get("event_time", True)),
    )


def _group(node: Any, path: str, tables: set[str]) -> Group:
    f = _fields(
        node,
        path,
        {"name", "table", "columns", "operators"},
        {"name", "table", "columns", "operators"},
    )
    name = _name(f["name"], f"{path}.name")
    table = _name(f["table"], f"{path}.table")
    if table in tables:
        raise _err(f"{path}.table", f"table {table} is already another group's output")
    cols = f["columns"]
    if not isinstance(cols, dict) or not cols:
        raise _err(f"{path}.columns", "must map column names to types")
    columns = []
    for k, v in cols.items():
        if v not in COLUMN_TYPES:
            raise _err(
                f"{path}.columns.{k}",
                f"unknown type {v!r}; expected one of {', '.join(COLUMN_TYPES)}",
            )
        if k in ("ums_id_", "ums_ts_"):
            raise _err(f"{path}.columns.{k}", "is a UMS column every table has")
        columns.append((_name(k, f"{path}.columns.{k}"), str(v)))
    ops = f["operators"]
    if not isinstance(ops, list) or not ops:
        raise _err(f"{path}.operators", "must be a non-empty list of operators")
    operators = tuple(_operator(o, f"{path}.operators[{i}]", name, i) for i, o in enumerate(ops))
    made = {op.into for op in operators if isinstance(op, Timestamp)}
    for k, v in columns:
        if v == "timestamp" and k not in made:
            raise _err(
                f"{path}.columns.{k}", "a timestamp column must be made by a timestamp operator"
            )
    return Group(name, table, tuple(columns), operators)


def parse_rules(
    groups: Any, *, unknown_table: Any = "unknown", heartbeat: Any = None, path: str = ""
) -> LogRules:
    """:class:`LogRules` from plain values (the ``groups``, ``unknown_table`` and
    ``heartbeat`` fields of a ``logs`` source section); ``path`` prefixes field names."""
    p = f"{path}." if path else ""
    if not isinstance(groups, list) or not groups:
        raise _err(f"{p}groups", "must be a non-empty list of groups")
    tables: set[str] = set()
    parsed = []
    for i, g in enumerate(groups):
        group = _group(g, f"{p}groups[{i}]", tables)
        tables.add(group.table)
        parsed.append(group)
    names = [g.name for g in parsed]
    if len(set(names)) != len(names):
        raise _err(f"{p}groups", "group names must be unique")
    unknown = _name(unknown_table, f"{p}unknown_table")
    if unknown in tables:
        raise _err(f"{p}unknown_table", f"{unknown} is a group's table")
    beat = None
    if heartbeat is not None:
        f = _fields(heartbeat, f"{p}heartbeat", {"regex", "format", "table"}, {"regex", "format"})
        regex = _regex(f["regex"], f"{p}heartbeat.regex", "heartbeat", "regex")
        if "ts" not in re.compile(regex).groupindex:
            raise _err(
                f"{p}heartbeat.regex", "needs a (?P<ts>...) group: when the heartbeat was written"
            )
        try:
            timestamp_regex(_text(f["format"], f"{p}heartbeat.format"))
        except ValueError as e:
            raise _err(f"{p}heartbeat.format", str(e)) from None
        table = _name(f.get("table", "heartbeat"), f"{p}heartbeat.table")
        if table in tables or table == unknown:
            raise _err(f"{p}heartbeat.table", f"{table} is already an output table")
        beat = Heartbeat(regex, f["format"], table)
    return LogRules(tuple(parsed), unknown, beat)
