"""Step-by-step preview of a log source's groups on sample records (``headwater logs
preview``; DBUS's verification of each operator while the rules are written).

:func:`preview` runs the Python engine (:meth:`headwater.logs.groups.LogRules.route`, the
reference the Spark engine is tested against) on every record and renders:

* for each group, for each operator, the table of its output fields, one row per record
  that reached that operator (records an earlier group took never reach later groups;
  a record an operator rejects leaves the group there, a record a conversion fails is
  listed as failed);
* then, for each record, where it went: the table, the group that took it (or the
  reason it went to the unknown table) and its typed values.

Records are cut from the sample as the pipeline cuts them (:func:`headwater.logs.files.
records_of`: lines, or multi-line records with ``record_start``). Values are shown with
``repr``-like escapes (a newline as ``\\n``) and cut at :data:`WIDTH` characters, so a
stack trace stays on one row.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from headwater.logs.groups import LogRules, Routed

__all__ = ["WIDTH", "PreviewRecord", "preview", "render_value"]

#: Widest value shown in a cell (longer ones end with "...").
WIDTH = 40


@dataclass(frozen=True, slots=True)
class PreviewRecord:
    number: int  # 1-based, in sample order
    offset: int
    raw: str
    routed: Routed


def render_value(value: Any, width: int = WIDTH) -> str:
    """One cell: None as ``-``, timestamps ISO in UTC, control characters escaped."""
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        text = value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    else:
        text = str(value)
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return text if len(text) <= width else text[: width - 3] + "..."


def _table(header: list[str], rows: list[list[str]], indent: str) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [indent + line.rstrip()]
    for r in rows:
        out.append(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return out


def preview(
    rules: LogRules,
    records: list[tuple[int, str]],
    *,
    file: str = "",
    read_ts: dt.datetime | None = None,
) -> tuple[list[PreviewRecord], str]:
    """Route ``records`` (``(offset, text)``) and render the preview (module docstring)."""
    done = [
        PreviewRecord(i + 1, off, raw, rules.route(raw, file=file, offset=off, read_ts=read_ts))
        for i, (off, raw) in enumerate(records)
    ]
    lines: list[str] = []
    for group in rules.groups:
        lines.append(f"group {group.name} -> table {group.table}")
        labels = [f"{i}:{op.kind}" for i, op in enumerate(group.operators)] + ["columns"]
        for label in labels:
            header = ["record"]
            rows: list[tuple[int, dict[str, Any] | None]] = []
            stopped: list[str] = []
            for rec in done:
                for g, step, fields in rec.routed.steps:
                    if g != group.name:
                        continue
                    if step == label:
                        rows.append((rec.number, fields))
                    elif step == f"{label} rejected":
                        stopped.append(f"{rec.number} rejected")
                if (
                    rec.routed.group is None
                    and rec.routed.reason is not None
                    and rec.routed.reason.startswith(f"group {group.name}, operator {label}:")
                ):
                    stopped.append(f"{rec.number} failed ({rec.routed.reason.split(': ', 1)[1]})")
            lines.append(f"  after {label}:")
            if not rows and not stopped:
                lines.append("    (no record reached it)")
                continue
            for _, shown in rows:
                for name in shown or {}:
                    if name != "raw" and name not in header:
                        header.append(name)
            if rows:
                cells = [
                    [str(n)] + [render_value((f or {}).get(h)) for h in header[1:]] for n, f in rows
                ]
                lines += _table(header, cells, "    ")
            if stopped:
                lines.append("    stopped here: " + ", ".join(stopped))
    lines.append("records:")
    for rec in done:
        r = rec.routed
        how = f"group {r.group}" if r.group is not None else (r.reason or "heartbeat")
        values = ", ".join(
            f"{k}={render_value(v, 100)}" for k, v in r.values.items() if k not in ("raw", "file")
        )
        lines.append(f"  {rec.number} (offset {rec.offset}) -> {r.table} ({how}): {values}")
        lines.append(f"      {render_value(rec.raw, 100)}")
    return done, "\n".join(lines) + "\n"
