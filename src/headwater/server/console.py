"""The operations console: ``GET /console`` (one server-rendered HTML page) and the
pipelines' reports (``POST /v1/pipelines``, ``GET /v1/pipelines``).

Served by the reader's HTTP server on its port, behind its token (a browser sends it as
HTTP Basic credentials, any user name and the token as password; scripts as a bearer
token). The page has no script and loads nothing else: charts are inline SVG drawn here,
so nothing comes from a CDN and nothing needs a JavaScript library. It reloads itself
every ``refresh_s`` seconds (``<meta http-equiv="refresh">``).

What it shows:

* every task: state, source position, GTID set, change id, retained range, lag, last
  error (what ``/v1/info`` serves);
* per task, rows per table between its last heartbeats (``TableCounts``, DBUS's
  statistic: ``headwater.server.tablecounts``), counted as the sampler runs;
* per task, the lag over the last hour and the ingest rate (records stored per second),
  from samples this process takes every ``sample_s`` seconds into a ring buffer
  (``window_s / sample_s`` samples per task; lost on restart: Prometheus keeps history);
  the lag is the reader's, from the source's heartbeats and commit times;
* every pipeline that reported (``headwater.pipeline.status`` POSTs its status document
  each progress interval when its source is this server), and every local pipeline whose
  ``status.json`` the server was told about (:meth:`Console.watch_status_file`): batches,
  rows in and out (in all, and per table: the ``TABLES_SHOWN`` busiest), rows/s, lag,
  last error, snapshot progress per table (chunks, rows/s, ETA). A pipeline is red
  when it failed or stopped, when its lag is over its ``lag_warning_s``, or when its
  last report is older than ``stale_after`` times its interval (a killed pipeline
  reports nothing more);
* per pipeline, its lag over the last hour: the ``lag_seconds`` of its reports (POSTed,
  or read from its status file at each sample), one point per ``sample_s`` of time.

The reader file's ``console`` section (``headwater.config.ConsoleConfig``) sets
``sample_s``, ``refresh_s`` and the local pipelines' status files
(``headwater.reader.serving`` builds the console from it).

Reports are kept in memory, at most ``MAX_PIPELINES`` names (the oldest report makes
room); a report is a JSON object of at most the server's ``max_body_bytes``.
"""

from __future__ import annotations

import html
import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from headwater.server import TaskHandle
from headwater.server.requests import RequestError
from headwater.server.tablecounts import Interval, TableCounts

__all__ = ["MAX_PIPELINES", "Console", "Sample"]

log = logging.getLogger(__name__)

MAX_PIPELINES = 1000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_STATES = ("running", "stopped", "failed")
_NUMBERS = (
    "batches",
    "rows_in_total",
    "rows_out_total",
    "rows_per_s",
    "batch_seconds",
    "lag_seconds",
    "lag_warning_s",
    "interval_s",
    "errors_total",
    "updated_at",
)


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample of a task: when (Unix time), its lag and last stored record seq."""

    at: float
    lag_s: float | None
    last_seq: int | None


class Console:
    """The console's state: task samples and pipeline reports (module docstring)."""

    def __init__(
        self,
        tasks: Mapping[str, TaskHandle],
        *,
        sample_s: float = 5.0,
        window_s: float = 3600.0,
        refresh_s: float = 5.0,
        stale_after: float = 3.0,
    ) -> None:
        self.tasks = tasks
        self.sample_s = sample_s
        self.window_s = window_s
        self.refresh_s = refresh_s
        self.stale_after = stale_after
        self._size = max(2, int(window_s / sample_s) + 1)
        self._samples: dict[str, deque[Sample]] = {}
        self._reports: dict[str, tuple[dict[str, Any], float]] = {}
        self._lags: dict[str, deque[tuple[float, float]]] = {}  # pipeline -> (at, lag)
        self.table_counts = TableCounts()  # rows per table between heartbeats, per task
        self._files: list[Path] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the sampler -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="headwater-console", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.sample_s)

    def sample(self, now: float | None = None) -> None:
        """Take one sample of every task (a failing task is skipped, and logged)."""
        at = time.time() if now is None else now
        for name, handle in list(self.tasks.items()):
            try:
                status = handle.status_dict()
                last = handle.change_log().latest()
            except Exception as e:  # a task whose log is not there yet, or is failing
                log.debug("console: no sample of task %s: %s", name, e)
                continue
            lag = _float(status.get("lag_seconds"))
            sample = Sample(at, lag, None if last is None else last.seq)
            with self._lock:
                self._samples.setdefault(name, deque(maxlen=self._size)).append(sample)
            try:
                self.table_counts.update(name, handle, status)
            except Exception as e:  # counts come back at a later sample
                log.warning("console: rows per table of task %s not counted: %s", name, e)
        for doc, _at in self._read_files().values():
            self._note_lag(doc)

    def samples(self, task: str) -> list[Sample]:
        with self._lock:
            return list(self._samples.get(task, ()))

    def pipeline_lags(self, pipeline: str) -> list[tuple[float, float]]:
        """The (time, lag seconds) points of a pipeline's reports, oldest first."""
        with self._lock:
            return list(self._lags.get(pipeline, ()))

    def _note_lag(self, doc: dict[str, Any]) -> None:
        """Keep the lag of a status document as a point of its pipeline's chart: at its
        ``updated_at``, one point per ``sample_s`` slice of time (the newest report of a
        slice replaces its point), the oldest dropped past the window."""
        name, at, lag = (
            doc.get("name"),
            _float(doc.get("updated_at")),
            _float(doc.get("lag_seconds")),
        )
        if not isinstance(name, str) or at is None or lag is None:
            return
        with self._lock:
            points = self._lags.setdefault(name, deque(maxlen=self._size))
            if points and at <= points[-1][0]:
                return  # the same report again (a file not rewritten since the last sample)
            if points and at // self.sample_s == points[-1][0] // self.sample_s:
                points[-1] = (at, lag)
            else:
                points.append((at, lag))

    # --- pipelines -------------------------------------------------------------------------

    def watch_status_file(self, path: str | Path) -> None:
        """Show the pipeline whose ``status.json`` is at ``path`` (a local pipeline)."""
        with self._lock:
            self._files.append(Path(path))

    def report(self, body: Any) -> dict[str, Any]:
        """Keep a pipeline's status document (``POST /v1/pipelines``); 400 names the field."""
        if not isinstance(body, dict):
            raise RequestError(400, "must be a JSON object (a pipeline status)", "body")
        name = body.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise RequestError(400, "must be a pipeline name (letters, digits, _ . -)", "name")
        if body.get("state") not in _STATES:
            raise RequestError(400, f"must be one of {', '.join(_STATES)}", "state")
        for key in _NUMBERS:
            value = body.get(key)
            if value is not None and (not isinstance(value, (int, float)) or value is True):
                raise RequestError(400, "must be a number", key)
        for key in ("snapshot", "tables"):
            value = body.get(key)
            if value is not None and not isinstance(value, dict):
                raise RequestError(400, "must be an object of tables", key)
        with self._lock:
            self._reports.pop(name, None)
            while len(self._reports) >= MAX_PIPELINES:
                oldest = next(iter(self._reports))
                del self._reports[oldest]
                self._lags.pop(oldest, None)
            self._reports[name] = (body, time.time())
        self._note_lag(body)
        return {"pipeline": name, "accepted": True}

    def pipelines(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every pipeline known, by name, each with ``received_at``, ``stale``, ``red``
        and ``why`` (the reasons it is red)."""
        now = time.time() if now is None else now
        docs = self._read_files()
        with self._lock:
            docs.update(self._reports)  # a live report wins over a file of the same name
        return [self._judge(doc, at, now) for _, (doc, at) in sorted(docs.items())]

    def _read_files(self) -> dict[str, tuple[dict[str, Any], float]]:
        """The watched status files' documents by pipeline name, each with its
        ``updated_at`` (a file that cannot be read is a pipeline in state ``unknown``)."""
        with self._lock:
            files = list(self._files)
        docs: dict[str, tuple[dict[str, Any], float]] = {}
        for path in files:
            try:
                doc = json.loads(path.read_bytes())
                docs[str(doc["name"])] = (doc, float(doc["updated_at"]))
            except (OSError, ValueError, KeyError, TypeError) as e:
                name = path.parent.name or str(path)
                docs[name] = ({"name": name, "state": "unknown", "last_error": str(e)}, 0.0)
        return docs

    def _judge(self, doc: dict[str, Any], received: float, now: float) -> dict[str, Any]:
        interval = _float(doc.get("interval_s")) or 10.0
        age = now - received
        why = []
        if doc.get("state") != "running":
            why.append(str(doc.get("state")))
        if age > self.stale_after * interval:
            why.append(f"no report for {age:.0f} s")
        lag, limit = _float(doc.get("lag_seconds")), _float(doc.get("lag_warning_s"))
        if lag is not None and limit is not None and lag > limit:
            why.append(f"lag over {limit:g} s")
        return {**doc, "received_at": received, "age_s": age, "red": bool(why), "why": why}

    # --- the page --------------------------------------------------------------------------

    def render(self, info: dict[str, Any], now: float | None = None) -> bytes:
        """The console page for ``info`` (``HeadwaterServer.info()``)."""
        now = time.time() if now is None else now
        pipelines = self.pipelines(now)
        parts = [_HEAD.format(refresh=max(1, round(self.refresh_s)))]
        tasks = info.get("tasks", {})
        parts.append(f"<h1>headwater {_e(info['server'].get('version'))}</h1>")
        parts.append(
            f'<p class="summary">{len(tasks)} tasks, {len(pipelines)} pipelines, '
            f"{sum(p['red'] for p in pipelines)} red; at {_clock(now)}</p>"
        )
        parts.append("<h2>Tasks</h2>")
        parts.append(_TASK_HEAD)
        parts.extend(self._task_row(name, task) for name, task in tasks.items())
        parts.append("</tbody></table>")
        parts.append("<h2>Pipelines</h2>")
        parts.append(_PIPELINE_HEAD)
        parts.extend(_pipeline_row(p) for p in pipelines)
        parts.append("</tbody></table>")
        tables = [(p["name"], t, c) for p in pipelines for t, c in _tables(p)]
        if tables:
            parts.append("<h2>Pipeline rows per table</h2>")
            parts.append(_TABLES_HEAD)
            parts.extend(_table_row(*row) for row in tables)
            parts.append("</tbody></table>")
        snapshots = [(p["name"], t, s) for p in pipelines for t, s in _snapshots(p)]
        if snapshots:
            parts.append("<h2>Snapshots</h2>")
            parts.append(_SNAPSHOT_HEAD)
            parts.extend(_snapshot_row(*row) for row in snapshots)
            parts.append("</tbody></table>")
        counted = [(name, self.table_counts.intervals(name)) for name in tasks]
        if any(intervals for _, intervals in counted):
            parts.append("<h2>Rows per table between heartbeats</h2>")
            totals = self.table_counts.totals()
            parts.extend(
                _heartbeat_table(name, intervals, totals.get(name, {}))
                for name, intervals in counted
                if intervals
            )
        parts.append("<h2>Lag and ingest, last hour</h2>")
        parts.extend(self._charts(name, now) for name in tasks)
        if pipelines:
            parts.append("<h2>Pipeline lag, last hour</h2>")
            parts.extend(self._pipeline_chart(str(p["name"]), now) for p in pipelines)
        parts.append("</body></html>\n")
        return "".join(parts).encode("utf-8")

    def _task_row(self, name: str, task: dict[str, Any]) -> str:
        status = task.get("status") or {}
        earliest, latest = task.get("earliest"), task.get("latest")
        retained = (
            "-"
            if earliest is None or latest is None
            else f"{earliest['seq']}..{latest['seq']} ({_clock(earliest['ts_us'] / 1e6)} .. "
            f"{_clock(latest['ts_us'] / 1e6)})"
        )
        state = str(status.get("state") or "-")
        error = status.get("error")
        cls = "red" if state == "failed" or error else "ok"
        cells = [
            ("task", name),
            ("state", state),
            ("position", status.get("position") or "-"),
            ("gtid_set", task.get("gtid_set") or "-"),
            ("change_id", status.get("change_id", "-")),
            ("latest_seq", "-" if latest is None else latest["seq"]),
            ("retained", retained),
            ("lag_seconds", _num(task.get("lag_seconds"), 2)),
            ("error", error or ""),
        ]
        return f'<tr class="task {cls}" data-task="{_e(name)}">{_cells(cells)}</tr>'

    def _charts(self, name: str, now: float) -> str:
        samples = [s for s in self.samples(name) if s.at >= now - self.window_s]
        lag = [(s.at, s.lag_s) for s in samples if s.lag_s is not None]
        rate = [
            (b.at, (b.last_seq - a.last_seq) / (b.at - a.at))
            for a, b in pairwise(samples)
            if a.last_seq is not None and b.last_seq is not None and b.at > a.at
        ]
        return (
            f'<div class="charts" data-task="{_e(name)}"><h3>{_e(name)}</h3>'
            + _chart("lag", name, "lag (s)", lag, now - self.window_s, now)
            + _chart("ingest", name, "records stored / s", rate, now - self.window_s, now)
            + "</div>"
        )

    def _pipeline_chart(self, name: str, now: float) -> str:
        t0 = now - self.window_s
        points = [(at, lag) for at, lag in self.pipeline_lags(name) if at >= t0]
        return (
            f'<div class="charts" data-pipeline="{_e(name)}"><h3>{_e(name)}</h3>'
            + _chart("pipeline-lag", name, "lag (s)", points, t0, now, owner="pipeline")
            + "</div>"
        )


def _pipeline_row(p: dict[str, Any]) -> str:
    source = p.get("source") or {}
    where = source.get("task") or source.get("path") or "-"
    cells = [
        ("pipeline", p.get("name")),
        ("state", p.get("state")),
        ("source", where),
        ("batches", p.get("batches", "-")),
        ("rows_in_total", p.get("rows_in_total", "-")),
        ("rows_out_total", p.get("rows_out_total", "-")),
        ("rows_per_s", _num(p.get("rows_per_s"), 0)),
        ("batch_seconds", _num(p.get("batch_seconds"), 3)),
        ("lag_seconds", _num(p.get("lag_seconds"), 2)),
        ("last_report", f"{p['age_s']:.0f} s ago"),
        ("last_error", p.get("last_error") or ""),
        ("why", ", ".join(p["why"])),
    ]
    cls = "red" if p["red"] else "ok"
    return f'<tr class="pipeline {cls}" data-pipeline="{_e(p.get("name"))}">{_cells(cells)}</tr>'


#: Heartbeat intervals shown per task (the newest), and tables (the busiest in them).
INTERVALS_SHOWN = 6
TASK_TABLES_SHOWN = 20


def _heartbeat_table(task: str, intervals: list[Interval], totals: dict[str, int]) -> str:
    """Rows per table in the task's last heartbeat intervals (one column each, headed by
    the heartbeat that ended it; * when records had gone before they were counted), and
    since the server began counting."""
    shown = intervals[-INTERVALS_SHOWN:]
    recent: dict[str, int] = {}
    for interval in shown:
        for table, n in interval.rows.items():
            recent[table] = recent.get(table, 0) + n
    tables = sorted(recent, key=lambda t: (-recent[t], t))[:TASK_TABLES_SHOWN]
    head = "".join(
        f"<th>{_e(_clock(i.end_us / 1e6)[11:])}{'' if i.complete else '*'}</th>" for i in shown
    )
    rows = "".join(
        f'<tr data-table="{_e(t)}"><td data-field="table">{_e(t)}</td>'
        + "".join(f'<td data-field="interval">{i.rows.get(t, 0)}</td>' for i in shown)
        + f'<td data-field="total">{totals.get(t, 0)}</td></tr>'
        for t in tables
    )
    return (
        f'<table class="heartbeat-counts" data-task="{_e(task)}"><caption>{_e(task)}: rows per '
        f"table between heartbeats (columns end at the heartbeat, UTC)</caption><thead><tr>"
        f"<th>table</th>{head}<th>since counting</th></tr></thead><tbody>{rows}</tbody></table>"
    )


#: Tables shown per pipeline (the most rows written first; /v1/pipelines has them all).
TABLES_SHOWN = 20


def _tables(p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    tables = p.get("tables")
    if not isinstance(tables, dict):
        return []
    rows = [(str(t), c) for t, c in tables.items() if isinstance(c, dict)]
    rows.sort(key=lambda tc: (-(_float(tc[1].get("rows_out_total")) or 0.0), tc[0]))
    return rows[:TABLES_SHOWN]


def _table_row(pipeline: str, table: str, c: dict[str, Any]) -> str:
    cells = [
        ("pipeline", pipeline),
        ("table", table),
        ("rows_in_total", c.get("rows_in_total", "-")),
        ("rows_out_total", c.get("rows_out_total", "-")),
        ("rows_in", c.get("rows_in", "-")),
        ("rows_out", c.get("rows_out", "-")),
    ]
    return (
        f'<tr class="pipeline-table" data-pipeline="{_e(pipeline)}" data-table="{_e(table)}">'
        f"{_cells(cells)}</tr>"
    )


def _snapshots(p: dict[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    snapshot = p.get("snapshot")
    if isinstance(snapshot, dict):
        yield from ((str(t), s) for t, s in sorted(snapshot.items()) if isinstance(s, dict))


def _snapshot_row(pipeline: str, table: str, s: dict[str, Any]) -> str:
    cells = [
        ("pipeline", pipeline),
        ("table", table),
        ("chunks", f"{s.get('chunks_done', '-')} / {s.get('chunks_total', '-')}"),
        ("rows", s.get("rows", "-")),
        ("rows_per_s", _num(s.get("rows_per_s"), 0)),
        ("eta_s", _num(s.get("eta_s"), 0)),
    ]
    return f'<tr class="snapshot" data-table="{_e(table)}">{_cells(cells)}</tr>'


#: Points drawn per chart at most (an hour of 5 s samples is 720).
_MAX_POINTS = 240
_W, _H = 480, 120


def _chart(
    kind: str,
    task: str,
    title: str,
    points: list[tuple[float, float]],
    t0: float,
    t1: float,
    owner: str = "task",
) -> str:
    """An inline SVG line chart of ``points`` (time, value) over ``[t0, t1]``, its
    ``data-<owner>`` attribute naming whose it is (a task or a pipeline)."""
    if len(points) > _MAX_POINTS:  # keep every n-th point and the newest
        step = len(points) / _MAX_POINTS
        points = [points[int(i * step)] for i in range(_MAX_POINTS - 1)] + [points[-1]]
    top = max((v for _, v in points), default=0.0)
    top = top * 1.1 if top > 0 else 1.0
    span = max(t1 - t0, 1e-9)
    xy = " ".join(
        f"{(t - t0) / span * _W:.1f},{_H - max(v, 0.0) / top * _H:.1f}" for t, v in points
    )
    last = "-" if not points else f"{points[-1][1]:.2f}"
    return (
        f'<figure class="chart"><figcaption>{_e(title)}: {last} (max {top / 1.1:.2f})'
        f'</figcaption><svg class="chart {kind}" data-{owner}="{_e(task)}" '
        f'data-points="{len(points)}" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
        f'role="img" aria-label="{_e(title)}"><rect width="{_W}" height="{_H}" class="bg"/>'
        f'<polyline points="{xy}"/></svg></figure>'
    )


def _cells(cells: list[tuple[str, Any]]) -> str:
    return "".join(f'<td data-field="{k}">{_e(v)}</td>' for k, v in cells)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: Any, digits: int) -> str:
    number = _float(value)
    return "-" if number is None else f"{number:.{digits}f}"


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + "Z"


_HEAD = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{refresh}"><title>headwater console</title><style>
body{{font:14px system-ui,sans-serif;margin:1em 2em;color:#222}}
table{{border-collapse:collapse;margin-bottom:1em}}
th,td{{border:1px solid #ccc;padding:2px 6px;text-align:left;max-width:28em;
overflow-wrap:anywhere}}
tr.red td{{background:#fdd;color:#900}} tr.ok td[data-field=state]{{color:#070}}
.charts{{display:inline-block;margin:0 1em 1em 0}} figure{{margin:0}}
svg.chart .bg{{fill:#f8f8f8}} svg.chart polyline{{fill:none;stroke-width:1.5}}
svg.lag polyline{{stroke:#c60}} svg.ingest polyline{{stroke:#06c}}
svg.pipeline-lag polyline{{stroke:#909}}
</style></head><body>
"""
_TASK_HEAD = (
    '<table id="tasks"><thead><tr><th>task</th><th>state</th><th>source position</th>'
    "<th>GTID set</th><th>change id</th><th>last seq</th><th>retained</th><th>lag (s)</th>"
    "<th>last error</th></tr></thead><tbody>"
)
_PIPELINE_HEAD = (
    '<table id="pipelines"><thead><tr><th>pipeline</th><th>state</th><th>source</th>'
    "<th>batches</th><th>rows in</th><th>rows out</th><th>rows/s</th><th>batch (s)</th>"
    "<th>lag (s)</th><th>last report</th><th>last error</th><th>why red</th></tr></thead>"
    "<tbody>"
)
_TABLES_HEAD = (
    '<table id="pipeline-tables"><thead><tr><th>pipeline</th><th>table</th><th>rows in</th>'
    "<th>rows out</th><th>last batch in</th><th>last batch out</th></tr></thead><tbody>"
)
_SNAPSHOT_HEAD = (
    '<table id="snapshots"><thead><tr><th>pipeline</th><th>table</th><th>chunks</th>'
    "<th>rows</th><th>rows/s</th><th>ETA (s)</th></tr></thead><tbody>"
)
