"""Rule operators: the small orthogonal steps a group applies to a log record.

A record is a mapping of field name to text (or None), starting as ``{"raw": <record
text>}``. Each operator reads and writes fields; it may *reject* the record (a ``filter``
whose test fails, an ``extract`` whose regex does not match: the next group is tried) or
*fail* it (a ``cast`` or ``timestamp`` that cannot convert a non-empty value: the record
goes to the unknown table with the reason). An empty capture is None in both engines, as
Spark's ``regexp_extract`` cannot tell an empty match from a missing one.

Every operator has two implementations that must agree (tests/integration/
test_logs_spark_engine.py compares them on the same records): :meth:`Operator.apply` in
plain Python (``headwater logs preview`` and the reference for tests) and
:meth:`Operator.columns` as Spark SQL expressions, which run in the JVM on the executors
(``regexp_extract``, ``split``, ``get_json_object``, ``try_make_timestamp`` ...). The
Spark side is a :class:`SparkStep`: expressions over the input fields, the condition
that rejects, and which outputs fail when null; an expression several outputs use is
given to ``share`` (:data:`Share`), which the plan computes once per record before the
step (headwater.logs.plan). Regular expressions are written in
Python syntax with ``(?P<name>...)`` groups; the Spark side strips the names and extracts
by group number (Java's named groups allow no ``_``), so only the syntax common to Python's
``re`` and ``java.util.regex`` may be used (docs/logs.md, "Regular expressions").

Invariant: operators are frozen dataclasses holding only strings, numbers and tuples, so
a group pickles to Python workers and compares by value.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "CAST_TYPES",
    "Cast",
    "CastFailure",
    "Extract",
    "Filter",
    "JsonParse",
    "KeyValue",
    "Operator",
    "Rejected",
    "Rename",
    "Replace",
    "Select",
    "Share",
    "SparkStep",
    "Split",
    "Timestamp",
    "Trim",
    "java_regex",
    "timestamp_layout",
]

Fields = dict[str, Any]
#: ``share(expression)``: a column computed once per record before the step, for an
#: expression several outputs of the step use (Spark would evaluate it once per use).
Share = Callable[["Column"], "Column"]

#: Types a ``cast`` may produce; the value is the check its text must pass (both engines).
CAST_TYPES: dict[str, str] = {
    "int": r"^[+-]?[0-9]{1,10}$",
    "bigint": r"^[+-]?[0-9]{1,19}$",
    "double": r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$",
    "boolean": r"(?i)^(true|false)$",
    "string": "",
}
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "bigint": (-(2**63), 2**63 - 1)}
_NUL = "\x00"
# Whitespace both engines agree on (Python's \s also matches Unicode spaces, Java's not).
_WS = "[ \\t\\r\\n\\f\\x0b]"


class Rejected(Exception):
    """The record does not belong to this group (raised by :meth:`Operator.apply`)."""


class CastFailure(Exception):
    """A value could not be converted: the record goes to the unknown table."""


def java_regex(pattern: str) -> str:
    """``pattern`` (Python syntax) for ``java.util.regex``: ``(?P<name>`` becomes a plain
    group, so group numbers stay the same."""
    return re.sub(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(", pattern)


def _anchored(pattern: str) -> bool:
    """Does every match of ``pattern`` begin at the text's start? Conservatively: it
    begins with ``^`` and has no ``|`` (an alternative could start elsewhere) and no
    inline MULTILINE flag (``(?m)`` would let ``^`` match after a newline)."""
    return (
        pattern.startswith("^")
        and "|" not in pattern
        and re.search(r"\(\?[aiLmsux-]*m", pattern) is None
    )


def _empty_none(value: str | None) -> str | None:
    return None if value is None or value == "" else value


def _spark_empty_none(col: Column) -> Column:
    from pyspark.sql import functions as F

    return F.nullif(col, F.lit(""))  # evaluates ``col`` once (a CASE WHEN used it twice)


@dataclass(frozen=True, slots=True)
class SparkStep:
    """An operator as Spark expressions: ``fields`` after it (expressions over the fields
    before it; an unchanged field is the same Column object), ``reject`` the condition
    (never null) under which the record leaves the group, and ``fail``: ``(input, output,
    reason)``, the record fails when field ``input`` was not null before the step and
    field ``output`` is null after it (a conversion that did not work); reasons are the
    ones :meth:`Operator.apply` raises."""

    fields: dict[str, Column]
    reject: Column | None = None
    fail: tuple[tuple[str, str, str], ...] = ()


class Operator(ABC):
    """One step. ``apply`` works on a dict; ``columns`` on a dict of Spark columns."""

    kind = ""

    @abstractmethod
    def apply(self, fields: Fields) -> Fields: ...

    @abstractmethod
    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep: ...


def _get(fields: Fields, name: str) -> Any:
    return fields.get(name)


def _col(fields: dict[str, Column], name: str) -> Column:
    from pyspark.sql import functions as F

    return fields[name] if name in fields else F.lit(None).cast("string")


@dataclass(frozen=True, slots=True)
class Filter(Operator):
    """Keep the record when ``field`` matches ``regex`` (or does not: ``negate``), equals
    ``equals``, or is one of ``one_of``; otherwise reject it."""

    field: str
    regex: str | None = None
    equals: str | None = None
    one_of: tuple[str, ...] = ()
    negate: bool = False
    kind = "filter"

    def _test(self, value: str | None) -> bool:
        if value is None:
            return False
        if self.regex is not None:
            return re.search(self.regex, value) is not None
        if self.equals is not None:
            return value == self.equals
        return value in self.one_of

    def apply(self, fields: Fields) -> Fields:
        if self._test(_get(fields, self.field)) == self.negate:
            raise Rejected
        return fields

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        from pyspark.sql import functions as F

        value = _col(fields, self.field)
        if self.regex is not None:
            test = value.rlike(java_regex(self.regex))
        elif self.equals is not None:
            test = value == F.lit(self.equals)
        else:
            test = value.isin(list(self.one_of))
        test = F.coalesce(test, F.lit(False))
        return SparkStep(fields, test if self.negate else ~test)


@dataclass(frozen=True, slots=True)
class Extract(Operator):
    """Named groups of ``regex`` searched in ``field`` become fields; no match rejects."""

    field: str
    regex: str
    kind = "extract"

    def apply(self, fields: Fields) -> Fields:
        value = _get(fields, self.field)
        m = None if value is None else re.search(self.regex, value)
        if m is None:
            raise Rejected
        out = dict(fields)
        for name in re.compile(self.regex).groupindex:
            out[name] = _empty_none(m.group(name))
        return out

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        from pyspark.sql import functions as F

        value = _col(fields, self.field)
        pattern = java_regex(self.regex)
        groups = re.compile(self.regex).groupindex
        # One regex evaluation for the test and every group (regexp_extract would run the
        # regex once per group): the whole text is replaced by a NUL before each group;
        # it starts with a NUL if and only if the regex matched. The lazy prefix makes
        # the match the leftmost one, as a search finds it; the rest is consumed so the
        # text is replaced once. A text holding a NUL of its own (it could not be told
        # from a separator) takes a test and one evaluation per group instead.
        plain = share(~value.contains(_NUL))  # once: every output below tests it
        # a pattern anchored at the text's start needs no lazy prefix (which, when the
        # pattern fails, tries it again at every position before giving up)
        prefix = "" if _anchored(self.regex) else "(?s:.*?)"
        whole = f"^{prefix}(?:{pattern})(?s:.*)$"
        refs = _NUL.join(f"${index}" for index in groups.values())
        joined = share(F.when(plain, F.regexp_replace(value, whole, _NUL + refs)))
        parts = share(F.split(joined, "\\x00"))
        out = dict(fields)
        for k, (name, index) in enumerate(groups.items()):
            slow = F.regexp_extract(value, pattern, index)
            out[name] = _spark_empty_none(F.when(plain, F.get(parts, k + 1)).otherwise(slow))
        matched = F.when(plain, joined.startswith(_NUL)).otherwise(value.rlike(pattern))
        return SparkStep(out, ~F.coalesce(matched, F.lit(False)))


@dataclass(frozen=True, slots=True)
class Split(Operator):
    """``field`` split on the literal ``separator`` into the fields ``into`` (the last one
    keeps the rest; missing parts are None)."""

    field: str
    separator: str
    into: tuple[str, ...]
    kind = "split"

    def apply(self, fields: Fields) -> Fields:
        value = _get(fields, self.field)
        parts = [] if value is None else value.split(self.separator, len(self.into) - 1)
        out = dict(fields)
        for i, name in enumerate(self.into):
            out[name] = _empty_none(parts[i]) if i < len(parts) else None
        return out

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        from pyspark.sql import functions as F

        parts = share(F.split(_col(fields, self.field), re.escape(self.separator), len(self.into)))
        out = dict(fields)
        for i, name in enumerate(self.into):
            out[name] = _spark_empty_none(F.get(parts, i))
        return SparkStep(out)


@dataclass(frozen=True, slots=True)
class KeyValue(Operator):
    """``k=v`` pairs of ``field`` (pairs separated by ``pair_separator``, key and value by
    ``separator``) for the declared ``keys``; the first occurrence of a key wins."""

    field: str
    keys: tuple[str, ...]
    pair_separator: str = " "
    separator: str = "="
    kind = "kv"

    def _pattern(self, key: str) -> str:
        p, s = re.escape(self.pair_separator), re.escape(self.separator)
        # the value runs to the next pair separator (a character class cannot hold a
        # multi-character separator, so a lazy match up to it or the end)
        return f"(?:^|{p}){re.escape(key)}{s}(.*?)(?:{p}|$)"

    def apply(self, fields: Fields) -> Fields:
        value = _get(fields, self.field)
        out = dict(fields)
        for key in self.keys:
            m = None if value is None else re.search(self._pattern(key), value)
            out[key] = None if m is None else _empty_none(m.group(1))
        return out

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        from pyspark.sql import functions as F

        value = _col(fields, self.field)
        out = dict(fields)
        for key in self.keys:
            out[key] = _spark_empty_none(F.regexp_extract(value, self._pattern(key), 1))
        return SparkStep(out)


@dataclass(frozen=True, slots=True)
class JsonParse(Operator):
    """Top-level ``keys`` of the JSON object in ``field`` as text (objects and arrays as
    compact JSON); text that is not a JSON object gives None."""

    field: str
    keys: tuple[str, ...]
    kind = "json"

    def apply(self, fields: Fields) -> Fields:
        value = _get(fields, self.field)
        try:
            doc = json.loads(value) if value is not None else None
        except ValueError:
            doc = None
        out = dict(fields)
        for key in self.keys:
            v = doc.get(key) if isinstance(doc, dict) else None
            if isinstance(v, bool):
                v = "true" if v else "false"
            elif isinstance(v, dict | list):
                v = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
            out[key] = None if v is None else str(v)
        return out

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        from pyspark.sql import functions as F

        value = _col(fields, self.field)
        out = dict(fields)
        for key in self.keys:
            out[key] = F.get_json_object(value, f"$['{key}']")
        return SparkStep(out)


@dataclass(frozen=True, slots=True)
class Replace(Operator):
    """Every match of ``regex`` in ``field`` replaced by the literal ``text``."""

    field: str
    regex: str
    text: str = ""
    kind = "replace"

    def apply(self, fields: Fields) -> Fields:
        value = _get(fields, self.field)
        out = dict(fields)
        out[self.field] = None if value is None else re.sub(self.regex, lambda _m: self.text, value)
        return out

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        from pyspark.sql import functions as F

        # Java's replacement string treats \ and $ specially: escape them (literal text).
        literal = self.text.replace("\\", "\\\\").replace("$", "\\$")
        out = dict(fields)
        out[self.field] = F.regexp_replace(
            _col(fields, self.field), java_regex(self.regex), literal
        )
        return SparkStep(out)


@dataclass(frozen=True, slots=True)
class Trim(Operator):
    """Leading and trailing blanks (space, tab, CR, LF, FF, VT) of ``fields`` removed."""

    fields: tuple[str, ...]
    kind = "trim"

    def apply(self, fields: Fields) -> Fields:
        out = dict(fields)
        for name in self.fields:
            v = out.get(name)
            out[name] = None if v is None else re.sub(f"^{_WS}+|{_WS}+$", "", v)
        return out

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        from pyspark.sql import functions as F

        out = dict(fields)
        for name in self.fields:
            out[name] = F.regexp_replace(_col(fields, name), f"^{_WS}+|{_WS}+$", "")
        return SparkStep(out)


@dataclass(frozen=True, slots=True)
class Select(Operator):
    """Only ``fields`` are kept (``raw`` too: the unknown table needs it)."""

    fields: tuple[str, ...]
    kind = "select"

    def apply(self, fields: Fields) -> Fields:
        return {k: fields.get(k) for k in (*self.fields, "raw") if k in fields or k != "raw"}

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        out = {k: _col(fields, k) for k in self.fields}
        out["raw"] = fields["raw"]
        return SparkStep(out)


@dataclass(frozen=True, slots=True)
class Rename(Operator):
    """Fields renamed, ``mapping`` = ((old, new), ...)."""

    mapping: tuple[tuple[str, str], ...]
    kind = "rename"

    def apply(self, fields: Fields) -> Fields:
        out = dict(fields)
        for old, new in self.mapping:
            out[new] = out.pop(old, None)
        return out

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        out = dict(fields)
        for old, new in self.mapping:
            out[new] = _col(out, old)
            out.pop(old, None)
        return SparkStep(out)


@dataclass(frozen=True, slots=True)
class Cast(Operator):
    """``types`` = ((field, type), ...) with types of :data:`CAST_TYPES`; a non-None
    value that does not convert fails the record."""

    types: tuple[tuple[str, str], ...]
    kind = "cast"

    def apply(self, fields: Fields) -> Fields:
        out = dict(fields)
        for name, kind in self.types:
            v = out.get(name)
            if v is None or kind == "string":
                continue
            text = str(v)
            if not re.search(CAST_TYPES[kind], text):
                raise CastFailure(f"field {name} is not a {kind}")
            if kind in _INT_RANGE:
                lo, hi = _INT_RANGE[kind]
                if not lo <= int(text) <= hi:
                    raise CastFailure(f"field {name} is not a {kind}")
                out[name] = int(text)
            elif kind == "double":
                out[name] = float(text)
            else:
                out[name] = text.lower() == "true"
        return out

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        from pyspark.sql import functions as F

        out = dict(fields)
        fail = []
        for name, kind in self.types:
            if kind == "string" or name not in fields:
                continue  # a field never set stays null, which converts
            v = fields[name]
            ok = share(v.rlike(java_regex(CAST_TYPES[kind])))
            # try_cast: out of range gives NULL, which fails as Python's range check does
            value = F.lower(v) == F.lit("true") if kind == "boolean" else v.try_cast(kind)
            out[name] = F.when(ok, value)
            fail.append((name, name, f"field {name} is not a {kind}"))
        return SparkStep(out, None, tuple(fail))


#: Java date-time pattern letters a ``timestamp`` format may use, with what they match.
_TS_TOKENS = {
    "yyyy": r"([0-9]{4})",
    "MM": r"([0-9]{2})",
    "dd": r"([0-9]{2})",
    "HH": r"([0-9]{2})",
    "mm": r"([0-9]{2})",
    "ss": r"([0-9]{2})",
}
_TS_PARTS = ("yyyy", "MM", "dd", "HH", "mm", "ss")


def timestamp_regex(fmt: str) -> tuple[str, tuple[str, ...]]:
    """A regex for ``fmt`` (Java pattern letters ``yyyy MM dd HH mm ss`` and ``S...`` for
    the fraction, quoted 'literals', other characters literal) and the tokens in group
    order. Raises ValueError for anything else."""
    pattern, layout = timestamp_layout(fmt)
    return pattern, tuple(token for token, _, _ in layout)


def timestamp_layout(fmt: str) -> tuple[str, tuple[tuple[str, int, int], ...]]:
    """:func:`timestamp_regex`'s regex and, per token in order, ``(token, start, width)``
    in characters: every token and literal has a fixed width, so a text the regex matches
    has each part at the same place."""
    out, order, i = ["^"], [], 0
    layout: list[tuple[str, int, int]] = []
    pos = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "'":
            j = fmt.find("'", i + 1)
            if j < 0:
                raise ValueError("unterminated quote")
            literal = fmt[i + 1 : j] or "'"
            out.append(re.escape(literal))
            pos += len(literal)
            i = j + 1
            continue
        if c.isalpha():
            j = i
            while j < len(fmt) and fmt[j] == c:
                j += 1
            token = fmt[i:j]
            if c == "S" and j - i <= 9:
                out.append(f"([0-9]{{{j - i}}})")
                order.append("S")
                layout.append(("S", pos, j - i))
                pos += j - i
            elif token in _TS_TOKENS:
                out.append(_TS_TOKENS[token])
                order.append(token)
                layout.append((token, pos, len(token)))
                pos += len(token)
            else:
                raise ValueError(
                    f"pattern {token!r} is not supported (use {' '.join(_TS_PARTS)} S)"
                )
            i = j
            continue
        out.append(re.escape(c))
        pos += 1
        i += 1
    missing = [t for t in _TS_PARTS[:3] if t not in order]
    if missing:
        raise ValueError(f"the format needs {', '.join(missing)}")
    return "".join(out), tuple(layout)


@dataclass(frozen=True, slots=True)
class Timestamp(Operator):
    """``field`` parsed with ``format`` (UTC wall time plus ``offset_minutes``) into a
    timestamp field ``into``; with ``event_time`` it is the record's ``ums_ts_``. Text
    that does not parse (or a date that does not exist) fails the record."""

    field: str
    format: str
    into: str
    offset_minutes: int = 0
    event_time: bool = True
    kind = "timestamp"

    def apply(self, fields: Fields) -> Fields:
        value = fields.get(self.field)
        out = dict(fields)
        if value is None:
            out[self.into] = None
            return out
        pattern, order = timestamp_regex(self.format)
        m = re.match(pattern, value)
        parts = dict(zip(order, m.groups(), strict=True)) if m else {}
        try:
            if not m:
                raise ValueError
            frac = parts.get("S", "0")
            ts = dt.datetime(
                int(parts["yyyy"]),
                int(parts["MM"]),
                int(parts["dd"]),
                int(parts.get("HH", 0)),
                int(parts.get("mm", 0)),
                int(parts.get("ss", 0)),
                int((frac + "000000")[:6]),
                tzinfo=dt.UTC,
            )
        except ValueError:
            raise CastFailure(f"field {self.field} does not match {self.format!r}") from None
        out[self.into] = ts - dt.timedelta(minutes=self.offset_minutes)
        return out

    def columns(self, fields: dict[str, Column], share: Share) -> SparkStep:
        from pyspark.sql import functions as F

        value = _col(fields, self.field)
        pattern, layout = timestamp_layout(self.format)
        # One regex test; then every part is at a fixed place (each token has a fixed
        # width), so a substring, not a regex per part.
        ok = share(value.rlike(java_regex(pattern)))
        at = {token: (start + 1, width) for token, start, width in layout}

        def part(token: str, default: str) -> Column:
            if token not in at:
                return F.lit(default).cast("int")
            return F.substring(value, *at[token]).cast("int")

        seconds = part("ss", "0").cast("decimal(16,6)")
        if "S" in at:
            # the first 6 digits: microseconds, truncated as Python's engine does
            frac = F.substring(value, at["S"][0], min(at["S"][1], 6))
            seconds = seconds + F.concat(F.lit("0."), frac).cast("decimal(16,6)")
        made = F.try_make_timestamp(
            part("yyyy", "1970"),
            part("MM", "1"),
            part("dd", "1"),
            part("HH", "0"),
            part("mm", "0"),
            seconds,
            F.lit("UTC"),
        )
        # seconds 60 is a leap second for make_timestamp; Python refuses it: refuse too
        made = F.when(ok & (part("ss", "0") < 60), made)
        if self.offset_minutes:
            made = made - F.make_interval(mins=F.lit(self.offset_minutes))
        out = dict(fields)
        out[self.into] = made
        reason = f"field {self.field} does not match {self.format!r}"
        return SparkStep(out, None, ((self.field, self.into, reason),))
