"""A running pipeline's status, for people and for monitoring: a JSON file, Prometheus
metrics and a report to the reader's console.

The runner calls :meth:`StatusReporter.tick` once per progress interval (with the query's
last progress report) and :meth:`StatusReporter.finish` when the query ends. Each call:

* writes ``<checkpoint>/status.json`` atomically (temp file, rename): the document below;
* writes the metrics in the Prometheus text format to ``<checkpoint>/metrics.prom`` (or the
  pipeline file's ``monitoring.metrics_file``), atomically, for node-exporter's textfile
  collector (``--collector.textfile.directory``: point it at the file's directory or copy
  the file there; the rename keeps a scrape from seeing half a file);
* when the source is a reader's HTTP API (``source.server``), POSTs the document to its
  ``/v1/pipelines`` with the source's token, so the reader's console (``/console``) lists
  the pipeline; a failed POST is one debug line, never a pipeline failure;
* logs a WARNING when the lag passes ``alerts.lag_warning_s`` (once per crossing, and
  one INFO line when it is back under).

The document (``STATUS_VERSION`` 1)::

    {"version": 1, "name": "orders", "state": "running" | "stopped" | "failed",
     "source": {"server": "http://...", "task": "shop", "path": null},
     "pid": 1234, "started_at": 1.7e9, "updated_at": 1.7e9, "interval_s": 10.0,
     "batches": 12, "batch_id": 11, "rows_in_total": 4000, "rows_out_total": 3900,
     "rows_in": 100, "rows_out": 98,           # the last batch
     "rows_per_s": 950.0, "batch_seconds": 0.42, "lag_seconds": 0.8,
     "lag_warning_s": 60.0, "lag_over_threshold": false, "errors_total": 0,
     "last_error": null,
     "heartbeat": {"batch_id": 11, "beats": 1, "lag_seconds": 0.9,   # log sources only
                   "max_lag_seconds": 0.9, "sent_at": 1.7e9, "committed_at": 1.7e9},
     "tables": {"db.t": {"rows_in_total": 3000, "rows_out_total": 2950,
                         "rows_in": 80, "rows_out": 79}},      # the last batch's
     "snapshot": {"db.t": {"chunks_done": 3, "chunks_total": 8, "rows": 150000,
                           "rows_per_s": 50000.0, "eta_s": 5.0}}}

Per-table counts come from the same pass as the batch: the runner observes
:func:`table_counts` on the rows read (``OBSERVED_IN``, before the transforms) and on the
rows handed to the sinks (``OBSERVED``'s ``tables``), Spark's ``approx_top_k`` over
``database.table``, which is exact while a batch touches fewer than ``MAX_TRACKED``
distinct tables (Spark SQL reference, ``approx_top_k``: columns with fewer distinct items
than ``maxItemsTracked`` get exact counts) and lists the ``TOP_TABLES`` busiest; rows of
tables past that are in the totals only. The report POSTed to the reader carries the
``POSTED_TABLES`` busiest tables (by rows out); the file has them all.

No secret is in it: the source's token travels only in the POST's Authorization header.
Metric names (``METRICS``; docs/operations.md and docs/prometheus-alerts.yml use them)::

    headwater_pipeline_rows_total{pipeline,direction,table}  counter (in: read, out: written);
                                                             rows of no table listed: no
                                                             table label (sum by direction
                                                             is the pipeline's total)
    headwater_pipeline_batches_total{pipeline}               counter
    headwater_pipeline_batch_seconds{pipeline}               gauge, the last batch
    headwater_pipeline_rows_per_second{pipeline}             gauge, the last batch
    headwater_pipeline_lag_seconds{pipeline}                 gauge
    headwater_pipeline_lag_warning_seconds{pipeline}         gauge (only when configured)
    headwater_pipeline_heartbeat_lag_seconds{pipeline}       gauge (log sources with heartbeats)
    headwater_pipeline_heartbeat_sent_timestamp_seconds{pipeline}  gauge (ditto)
    headwater_pipeline_errors_total{pipeline}                counter
    headwater_pipeline_up{pipeline}                          gauge, 1 running, 0 otherwise
    headwater_pipeline_last_report_timestamp_seconds{pipeline}  gauge
    headwater_pipeline_snapshot_chunks_done{pipeline,table}  gauge
    headwater_pipeline_snapshot_chunks_total{pipeline,table} gauge
    headwater_pipeline_snapshot_rows_total{pipeline,table}   counter
"""

from __future__ import annotations

import glob
import json
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.logs.lag import heartbeat_lag

if TYPE_CHECKING:
    from headwater.pipeline.config import PipelineConfig

__all__ = [
    "MAX_TRACKED",
    "METRICS",
    "OBSERVED_IN",
    "STATUS_VERSION",
    "TOP_TABLES",
    "StatusReporter",
    "render_metrics",
    "snapshot_progress",
    "table_counts",
]

log = logging.getLogger(__name__)

STATUS_VERSION = 1

#: Name of the query's observed metrics on the rows read, before the transforms.
OBSERVED_IN = "headwater_in"
#: Tables listed per batch, and distinct tables a batch may touch with exact counts.
TOP_TABLES = 1000
MAX_TRACKED = 10000
#: Tables in the report POSTed to the reader (its body is bounded).
POSTED_TABLES = 100


def table_counts(F: Any) -> Any:
    """The aggregate of rows per ``database.table`` of a batch (module docstring), an
    array of ``(item, count)`` structs: observed, so it costs no second pass."""
    return F.expr(
        f"approx_top_k(concat_ws('.', `database`, `table`), {TOP_TABLES}, {MAX_TRACKED})"
    ).alias("tables")


#: Every metric family a pipeline exports: name -> (type, help).
METRICS: dict[str, tuple[str, str]] = {
    "headwater_pipeline_rows_total": (
        "counter",
        "Change rows read (direction=in) and handed to the sinks after transforms (out), "
        "per table (no table label: rows of tables not listed).",
    ),
    "headwater_pipeline_batches_total": ("counter", "Micro-batches finished."),
    "headwater_pipeline_batch_seconds": ("gauge", "Duration of the last micro-batch."),
    "headwater_pipeline_rows_per_second": ("gauge", "Rows per second of the last micro-batch."),
    "headwater_pipeline_lag_seconds": (
        "gauge",
        "Now minus the newest commit time written by the last micro-batch.",
    ),
    "headwater_pipeline_lag_warning_seconds": ("gauge", "The configured lag warning threshold."),
    "headwater_pipeline_heartbeat_lag_seconds": (
        "gauge",
        "Log sources: the sinks' commit of the last batch with a heartbeat line minus when"
        " its newest heartbeat was written.",
    ),
    "headwater_pipeline_heartbeat_sent_timestamp_seconds": (
        "gauge",
        "Log sources: when the newest heartbeat line committed was written (Unix time).",
    ),
    "headwater_pipeline_errors_total": ("counter", "Failures of the streaming query."),
    "headwater_pipeline_up": ("gauge", "1 while the pipeline runs, 0 once stopped or failed."),
    "headwater_pipeline_last_report_timestamp_seconds": (
        "gauge",
        "When the pipeline last wrote its status (Unix time).",
    ),
    "headwater_pipeline_snapshot_chunks_done": ("gauge", "Snapshot chunks done, per table."),
    "headwater_pipeline_snapshot_chunks_total": ("gauge", "Snapshot chunks planned, per table."),
    "headwater_pipeline_snapshot_rows_total": ("counter", "Snapshot rows written, per table."),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(doc: dict[str, Any]) -> str:
    """The Prometheus text (format 0.0.4) of one status document."""
    name = str(doc["name"])
    base = f'pipeline="{_escape(name)}"'
    samples: dict[str, list[tuple[str, float]]] = {m: [] for m in METRICS}
    samples["headwater_pipeline_rows_total"] += _table_rows(base, doc)
    beat = doc.get("heartbeat") or {}
    plain = {
        "headwater_pipeline_batches_total": doc.get("batches"),
        "headwater_pipeline_batch_seconds": doc.get("batch_seconds"),
        "headwater_pipeline_rows_per_second": doc.get("rows_per_s"),
        "headwater_pipeline_lag_seconds": doc.get("lag_seconds"),
        "headwater_pipeline_lag_warning_seconds": doc.get("lag_warning_s"),
        "headwater_pipeline_heartbeat_lag_seconds": beat.get("lag_seconds"),
        "headwater_pipeline_heartbeat_sent_timestamp_seconds": beat.get("sent_at"),
        "headwater_pipeline_errors_total": doc.get("errors_total", 0),
        "headwater_pipeline_up": 1 if doc.get("state") == "running" else 0,
        "headwater_pipeline_last_report_timestamp_seconds": doc.get("updated_at"),
    }
    for metric, value in plain.items():
        if value is not None:
            samples[metric].append((base, value))
    for table, snap in sorted((doc.get("snapshot") or {}).items()):
        labels = f'{base},table="{_escape(table)}"'
        samples["headwater_pipeline_snapshot_chunks_done"].append((labels, snap["chunks_done"]))
        samples["headwater_pipeline_snapshot_chunks_total"].append((labels, snap["chunks_total"]))
        samples["headwater_pipeline_snapshot_rows_total"].append((labels, snap["rows"]))
    lines: list[str] = []
    for metric, (kind, text) in METRICS.items():
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}"]
        lines += [f"{metric}{{{labels}}} {_number(v)}" for labels, v in samples[metric]]
    return "\n".join(lines) + "\n"


def _table_rows(base: str, doc: dict[str, Any]) -> list[tuple[str, float]]:
    """``headwater_pipeline_rows_total``'s samples: per table and direction, and the rows
    of no table listed without the label (always one such sample when no table is)."""
    tables = doc.get("tables") or {}
    out: list[tuple[str, float]] = []
    for direction in ("in", "out"):
        listed = 0
        for table, counts in sorted(tables.items()):
            value = int(counts.get(f"rows_{direction}_total", 0))
            listed += value
            labels = f'{base},direction="{direction}",table="{_escape(table)}"'
            out.append((labels, value))
        rest = int(doc.get(f"rows_{direction}_total", 0)) - listed
        if rest > 0 or not tables:
            out.append((f'{base},direction="{direction}"', max(rest, 0)))
    return out


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def snapshot_progress(checkpoint: Path) -> dict[str, dict[str, Any]]:
    """Per table, the progress of the snapshots whose state files are in ``checkpoint``
    (``snapshot.json``, ``resnap-*.json``: headwater.snapshot.state's layout), the newest
    file last so its numbers win: chunks done and planned, rows, rows/s, ETA in seconds
    (None once done or before a chunk finished)."""
    out: dict[str, dict[str, Any]] = {}
    paths = [checkpoint / "snapshot.json", *map(Path, glob.glob(str(checkpoint / "resnap-*.json")))]
    existing = sorted((p for p in paths if p.exists()), key=lambda p: p.stat().st_mtime)
    for path in existing:
        try:
            state = json.loads(path.read_bytes())
            tables, done = state["tables"], state.get("done") or {}
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or not a snapshot state: the next tick reads it
        for table, plan in tables.items():
            ids = {c["id"] for c in plan.get("chunks", [])}
            finished = [d for cid, d in done.items() if cid in ids]
            rows = sum(int(d.get("rows", 0)) for d in finished)
            seconds = sum(float(d.get("seconds", 0.0)) for d in finished)
            left = len(ids) - len(finished)
            out[table] = {
                "chunks_done": len(finished),
                "chunks_total": len(ids),
                "rows": rows,
                "rows_per_s": round(rows / seconds, 1) if seconds > 0 else None,
                "eta_s": round(left * seconds / len(finished), 1) if finished and left else None,
            }
    return out


@dataclass
class StatusReporter:
    """Keeps a pipeline's counters and writes its status (see the module docstring)."""

    config: PipelineConfig
    started_at: float = field(default_factory=time.time)
    batches: int = 0
    rows_in_total: int = 0
    rows_out_total: int = 0
    errors_total: int = 0
    last_error: str | None = None
    #: per table: rows_in_total, rows_out_total, and the last batch's rows_in, rows_out
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    _last: dict[str, Any] = field(default_factory=dict)
    _seen_batch: int = -1
    _lag_warned: bool = False
    _post_failed: bool = False
    #: batch id -> when its sinks committed (the runner's), for the heartbeat lag
    commits: dict[int, float] = field(default_factory=dict)
    #: the heartbeat lag of the last batch that had heartbeats (headwater.logs.lag)
    heartbeat: dict[str, Any] | None = None

    @property
    def status_path(self) -> Path:
        return self.config.checkpoint / "status.json"

    @property
    def metrics_path(self) -> Path:
        return self.config.monitoring.metrics_file or self.config.checkpoint / "metrics.prom"

    def tick(self, reports: Any, newest_ts_us: int | None) -> None:
        """Count the query's finished batches (each once) and publish the status."""
        self.count(reports, newest_ts_us)
        self.publish("running")

    def count(self, reports: Any, newest_ts_us: int | None) -> None:
        """Count the batches of ``reports`` (the query's ``recentProgress``: several
        batches may finish between two ticks) not counted before; note the lag: now minus
        the newest commit time written (``newest_ts_us`` when the reports carry none), or
        0 when the last report read nothing (the pipeline has all the change log holds:
        the reader's lag is then the whole lag)."""
        reports = list(reports or ())
        for progress in reports:
            batch = int(progress.get("batchId", -1))
            rows_in = int(progress.get("numInputRows") or 0)
            # an idle query reports the batch it waits to run: not a batch, and not seen
            if batch <= self._seen_batch or not rows_in:
                continue
            self._seen_batch = batch
            rows_out = _observed(progress, "rows_out")
            rows_out = rows_in if rows_out is None else rows_out
            newest_ts_us = _observed(progress, "newest_ts_us") or newest_ts_us
            self.batches += 1
            self.rows_in_total += rows_in
            self.rows_out_total += rows_out
            self._count_tables(
                _observed_tables(progress, OBSERVED_IN), _observed_tables(progress, None)
            )
            beat = heartbeat_lag(progress, self.commits.get(batch))
            if beat is not None:
                self.heartbeat = beat.to_dict()
            duration_ms = (progress.get("durationMs") or {}).get("triggerExecution", 0)
            self._last = {
                "batch_id": batch,
                "rows_in": rows_in,
                "rows_out": rows_out,
                "rows_per_s": float(progress.get("processedRowsPerSecond") or 0.0),
                "batch_seconds": duration_ms / 1000,
            }
        if reports and not reports[-1].get("numInputRows"):
            self._last["lag_seconds"] = 0.0
        elif newest_ts_us:
            self._last["lag_seconds"] = round(max(0.0, time.time() - newest_ts_us / 1e6), 3)
        self._check_lag()

    def _count_tables(self, rows_in: dict[str, int], rows_out: dict[str, int]) -> None:
        """Add one batch's rows per table; the last batch's counts are its own."""
        for counts in self.tables.values():
            counts["rows_in"] = counts["rows_out"] = 0
        for direction, batch in (("in", rows_in), ("out", rows_out)):
            for table, n in batch.items():
                counts = self.tables.setdefault(
                    table, {"rows_in_total": 0, "rows_out_total": 0, "rows_in": 0, "rows_out": 0}
                )
                counts[f"rows_{direction}_total"] += n
                counts[f"rows_{direction}"] = n

    def finish(self, error: BaseException | str | None) -> None:
        """The query ended: ``stopped``, or ``failed`` with its error (one line)."""
        if error is not None:
            self.errors_total += 1
            self.last_error = str(error).splitlines()[0][:500] if str(error) else repr(error)
        self.publish("stopped" if error is None else "failed")

    def document(self, state: str) -> dict[str, Any]:
        options = self.config.source.option_map()
        return {
            "version": STATUS_VERSION,
            "name": self.config.name,
            "state": state,
            "source": {
                "server": options.get("server"),
                "task": options.get("task"),
                "path": options.get("path"),
            },
            "pid": os.getpid(),
            "started_at": self.started_at,
            "updated_at": time.time(),
            "interval_s": self.config.progress_s,
            "batches": self.batches,
            "batch_id": self._last.get("batch_id"),
            "rows_in_total": self.rows_in_total,
            "rows_out_total": self.rows_out_total,
            "rows_in": self._last.get("rows_in", 0),
            "rows_out": self._last.get("rows_out", 0),
            "rows_per_s": self._last.get("rows_per_s"),
            "batch_seconds": self._last.get("batch_seconds"),
            "lag_seconds": self._last.get("lag_seconds"),
            "lag_warning_s": self.config.monitoring.lag_warning_s,
            "lag_over_threshold": self._lag_warned,
            "errors_total": self.errors_total,
            "last_error": self.last_error,
            "heartbeat": self.heartbeat,
            "tables": {t: dict(c) for t, c in sorted(self.tables.items())},
            "snapshot": snapshot_progress(self.config.checkpoint),
        }

    def publish(self, state: str) -> dict[str, Any]:
        """Write the status file and the metrics file, POST to the reader; never raises
        for a write that fails (logged: a status never stops a pipeline)."""
        doc = self.document(state)
        data = json.dumps(doc).encode()
        try:
            self.config.checkpoint.mkdir(parents=True, exist_ok=True)
            _replace(self.status_path, data)
            self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
            _replace(self.metrics_path, render_metrics(doc).encode())
        except OSError as e:
            log.warning("pipeline %s: cannot write its status: %s", self.config.name, e)
        if self.config.monitoring.report:
            self._post(json.dumps(_posted(doc)).encode())
        return doc

    def _check_lag(self) -> None:
        threshold = self.config.monitoring.lag_warning_s
        lag = self._last.get("lag_seconds")
        if threshold is None or lag is None:
            return
        if lag > threshold and not self._lag_warned:
            self._lag_warned = True
            log.warning(
                "pipeline %s: lag %.1f s is over the warning threshold (%.1f s)",
                self.config.name,
                lag,
                threshold,
            )
        elif lag <= threshold and self._lag_warned:
            self._lag_warned = False
            log.info(
                "pipeline %s: lag %.1f s is back under %.1f s", self.config.name, lag, threshold
            )

    def _post(self, data: bytes) -> None:
        options = self.config.source.option_map()
        server = options.get("server")
        if not server:
            return
        headers = {"Content-Type": "application/json"}
        token = _token(options)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        url = server.rstrip("/") + "/v1/pipelines"
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=2.0) as response:
                response.read()
            self._post_failed = False
        except (OSError, urllib.error.URLError) as e:
            level = logging.DEBUG if self._post_failed else logging.INFO
            log.log(level, "pipeline %s: status not reported to %s: %s", self.config.name, url, e)
            self._post_failed = True


def _replace(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` by a temporary file and a rename (a reader never
    sees half a file), without fsync: the document is rewritten every interval and a
    crash may lose the last one, while each fsync here (of the file and of the checkpoint
    directory) forced a journal commit of the file system that Spark's offset and commit
    logs of the running micro-batch share."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _observed(progress: Any, key: str) -> int | None:
    from headwater.pipeline.runner import OBSERVED

    row = (progress.get("observedMetrics") or {}).get(OBSERVED)
    try:
        value = None if row is None else row[key]
    except (KeyError, ValueError, IndexError):
        return None
    return None if value is None else int(value)


def _observed_tables(progress: Any, name: str | None) -> dict[str, int]:
    """Rows per table of a progress report's observed :func:`table_counts`: ``name``'s
    (``OBSERVED_IN``), or the runner's ``OBSERVED`` (None); {} when not there."""
    if name is None:
        from headwater.pipeline.runner import OBSERVED

        name = OBSERVED
    row = (progress.get("observedMetrics") or {}).get(name)
    try:
        items = None if row is None else row["tables"]
        return {str(e["item"]): int(e["count"]) for e in items or () if e["item"] is not None}
    except (KeyError, ValueError, IndexError, TypeError):
        return {}


def _posted(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as POSTed: the ``POSTED_TABLES`` tables with the most rows out."""
    tables = doc.get("tables") or {}
    if len(tables) <= POSTED_TABLES:
        return doc
    busiest = sorted(tables.items(), key=lambda kv: (-kv[1]["rows_out_total"], kv[0]))
    return {**doc, "tables": dict(sorted(busiest[:POSTED_TABLES]))}


def _token(options: dict[str, str]) -> str | None:
    """The source's token (file or variable, as the Spark source reads it); never logged."""
    if "tokenFile" in options:
        try:
            with open(options["tokenFile"], encoding="utf-8") as fh:
                return fh.readline().strip() or None
        except OSError:
            return None
    if "tokenEnv" in options:
        return os.environ.get(options["tokenEnv"]) or None
    return None
