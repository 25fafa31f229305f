"""Server metrics in the Prometheus text exposition format (version 0.0.4).

Two sources: counters the server keeps itself (HTTP requests by endpoint and status, and
per task and format: fetches, rows and records served, bytes served), and, read at scrape
time, each task's status dict (``TaskHandle.status``; keys in ``STATUS_KEYS``) and its log's
retained range. Rates are left to Prometheus (``rate(headwater_fetch_rows_total[1m])``).

Families (all labelled ``task`` except the HTTP one)::

    headwater_events_in_total, headwater_bytes_in_total,
    headwater_transactions_stored_total                    counters from the task status
    headwater_lag_seconds                                  gauge from the task status
    headwater_task_failed                                  gauge, 1 when its state is failed
    headwater_log_first_seq, headwater_log_last_seq,
    headwater_log_last_commit_timestamp_seconds            gauges from the change log
    headwater_fetch_requests_total{task,format}
    headwater_fetch_rows_total{task,format}                rows (records for raw formats)
    headwater_fetch_bytes_total{task,format}               response body bytes
    headwater_http_requests_total{endpoint,code}
    headwater_fetch_in_flight                              fetches being answered (gauge)
    headwater_task_table_rows_total{task,table}            rows per table in the heartbeat
                                                           intervals counted (tablecounts.py)
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Mapping

from headwater.server import TaskHandle

__all__ = ["Metrics"]

log = logging.getLogger(__name__)

_HELP = {
    "headwater_events_in_total": ("counter", "Binlog events received by the reader task."),
    "headwater_bytes_in_total": ("counter", "Binlog bytes received by the reader task."),
    "headwater_transactions_stored_total": (
        "counter",
        "Transactions appended to the change log by the reader task.",
    ),
    "headwater_lag_seconds": ("gauge", "Reader task lag behind the source's commit time."),
    "headwater_task_failed": ("gauge", "1 when the reader task's state is failed, else 0."),
    "headwater_log_first_seq": ("gauge", "First retained record seq of the change log."),
    "headwater_log_last_seq": ("gauge", "Last acknowledged record seq of the change log."),
    "headwater_log_last_commit_timestamp_seconds": (
        "gauge",
        "Commit time of the change log's last record.",
    ),
    "headwater_fetch_requests_total": ("counter", "Fetch requests answered."),
    "headwater_fetch_rows_total": ("counter", "Change rows (raw formats: records) served."),
    "headwater_fetch_bytes_total": ("counter", "Fetch response body bytes served."),
    "headwater_http_requests_total": ("counter", "HTTP requests by endpoint and status."),
    "headwater_fetch_in_flight": ("gauge", "Fetches being answered (long-polls included)."),
    "headwater_task_table_rows_total": (
        "counter",
        "Rows per table in the task's heartbeat intervals counted since the server started.",
    ),
}
_STATUS = {
    "events_in": "headwater_events_in_total",
    "bytes_in": "headwater_bytes_in_total",
    "transactions_stored": "headwater_transactions_stored_total",
    "lag_seconds": "headwater_lag_seconds",
}

Labels = tuple[tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class Metrics:
    """Thread-safe counters, rendered with the tasks' gauges on each scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Labels, float]] = {}
        self._in_flight = 0
        self._changed = threading.Condition(self._lock)

    def fetch_started(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._changed.notify_all()

    def fetch_ended(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._changed.notify_all()

    def wait_in_flight(self, count: int, timeout: float) -> bool:
        """Wait until at least ``count`` fetches are being answered (for tests and
        operators); False after ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._in_flight >= count, timeout)

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            family = self._counters.setdefault(name, {})
            family[key] = family.get(key, 0) + value

    def fetched(self, task: str, fmt: str, rows: int, nbytes: int) -> None:
        self.inc("headwater_fetch_requests_total", 1, task=task, format=fmt)
        self.inc("headwater_fetch_rows_total", rows, task=task, format=fmt)
        self.inc("headwater_fetch_bytes_total", nbytes, task=task, format=fmt)

    def render(
        self,
        tasks: Mapping[str, TaskHandle],
        table_rows: Mapping[str, Mapping[str, int]] | None = None,
    ) -> bytes:
        """The exposition; ``table_rows``: per task, rows per table between heartbeats
        (``TableCounts.totals``)."""
        samples: dict[str, list[tuple[Labels, float]]] = {name: [] for name in _HELP}
        for name, handle in sorted(tasks.items()):
            self._task_samples(name, handle, samples)
        for task, rows in sorted((table_rows or {}).items()):
            samples["headwater_task_table_rows_total"].extend(
                ((("task", task), ("table", table)), n) for table, n in sorted(rows.items())
            )
        with self._lock:
            for name, family in self._counters.items():
                samples.setdefault(name, []).extend(sorted(family.items()))
            samples["headwater_fetch_in_flight"].append(((), self._in_flight))
        lines: list[str] = []
        for name, (kind, text) in _HELP.items():
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(_lines(name, samples[name]))
        return ("\n".join(lines) + "\n").encode("utf-8")

    @staticmethod
    def _task_samples(
        name: str, handle: TaskHandle, samples: dict[str, list[tuple[Labels, float]]]
    ) -> None:
        labels: Labels = (("task", name),)
        try:
            status = handle.status_dict()
        except Exception:  # a failing status callable must not break the scrape
            log.exception("status of task %s failed", name)
            status = {}
        for key, metric in _STATUS.items():
            value = status.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                samples[metric].append((labels, value))
        if status.get("state") is not None:
            samples["headwater_task_failed"].append((labels, int(status["state"] == "failed")))
        try:
            changelog = handle.change_log()
            first, last = changelog.earliest(), changelog.latest()
        except Exception:
            log.exception("change log of task %s unreadable", name)
            return
        if first is not None and last is not None:
            samples["headwater_log_first_seq"].append((labels, first.seq))
            samples["headwater_log_last_seq"].append((labels, last.seq))
            samples["headwater_log_last_commit_timestamp_seconds"].append(
                (labels, last.ts_us / 1e6)
            )


def _lines(name: str, samples: Iterable[tuple[Labels, float]]) -> Iterable[str]:
    for labels, value in samples:
        if labels:
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            yield f"{name}{{{inner}}} {_number(value)}"
        else:
            yield f"{name} {_number(value)}"
