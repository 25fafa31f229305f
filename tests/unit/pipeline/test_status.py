"""Pipeline status: the status file, the Prometheus textfile, the lag warning, snapshot
progress from state files, and the report POSTed to a real reader HTTP server."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from headwater.errors import ConfigError
from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.status import METRICS, StatusReporter, render_metrics, snapshot_progress
from headwater.server import ServerOptions
from headwater.server.app import HeadwaterServer

TOKEN = "pipeline-status-token"


def _config(tmp_path: Path, extra: str = "", source: str = "  path: task\n") -> Any:
    text = (
        f"name: orders-sync\nsource:\n{source}checkpoint: ck\nprogress: 2\n"
        f"sinks:\n  - type: ums\n    path: out\n{extra}"
    )
    return parse_pipeline_config(text, file="p.yaml", base=tmp_path, env={})


def _progress(batch: int, rows: int, rows_out: int, ms: int = 420) -> dict[str, Any]:
    """A progress report as Spark's ``StreamingQuery.lastProgress`` gives it (a dict)."""
    return {
        "batchId": batch,
        "numInputRows": rows,
        "processedRowsPerSecond": rows / (ms / 1000),
        "durationMs": {"triggerExecution": ms},
        "observedMetrics": {"headwater": {"newest_ts_us": 0, "rows_out": rows_out}},
    }


def _samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_monitoring_section_parses_and_rejects_bad_values(tmp_path: Path) -> None:
    config = _config(
        tmp_path, "monitoring: {lag_warning_s: 30, metrics_file: m/x.prom, report: false}\n"
    )
    assert config.monitoring.lag_warning_s == 30.0
    assert config.monitoring.metrics_file == tmp_path / "m/x.prom"
    assert config.monitoring.report is False
    with pytest.raises(ConfigError, match=r"p.yaml:9: monitoring.lag_warning_s: must be a number"):
        _config(tmp_path, "monitoring: {lag_warning_s: soon}\n")
    with pytest.raises(ConfigError, match=r"monitoring.lag_warn"):
        _config(tmp_path, "monitoring: {lag_warn: 3}\n")


def test_ticks_count_each_batch_once_and_write_status_and_metrics(tmp_path: Path) -> None:
    reporter = StatusReporter(_config(tmp_path))
    newest = int((time.time() - 5) * 1e6)
    reporter.tick([_progress(0, 100, 90)], newest)
    # recentProgress again with the same report, an idle one (no batch) and a new one
    reporter.tick([_progress(0, 100, 90), _progress(1, 0, 0), _progress(2, 50, 50, ms=250)], newest)
    doc = json.loads((tmp_path / "ck" / "status.json").read_text())
    assert doc["name"] == "orders-sync"
    assert doc["state"] == "running"
    assert doc["source"] == {"server": None, "task": None, "path": str(tmp_path / "task")}
    assert (doc["batches"], doc["batch_id"]) == (2, 2)
    assert (doc["rows_in_total"], doc["rows_out_total"]) == (150, 140)
    assert (doc["rows_in"], doc["rows_out"]) == (50, 50)
    assert doc["batch_seconds"] == 0.25
    assert doc["rows_per_s"] == 200.0
    assert 4.5 < doc["lag_seconds"] < 30
    assert doc["interval_s"] == 2.0
    assert doc["last_error"] is None
    metrics = _samples((tmp_path / "ck" / "metrics.prom").read_text())
    assert metrics['headwater_pipeline_rows_total{pipeline="orders-sync",direction="in"}'] == 150
    assert metrics['headwater_pipeline_rows_total{pipeline="orders-sync",direction="out"}'] == 140
    assert metrics['headwater_pipeline_batches_total{pipeline="orders-sync"}'] == 2
    assert metrics['headwater_pipeline_up{pipeline="orders-sync"}'] == 1
    assert metrics['headwater_pipeline_batch_seconds{pipeline="orders-sync"}'] == 0.25


def test_finish_with_an_error_says_failed_and_counts_it(tmp_path: Path) -> None:
    reporter = StatusReporter(_config(tmp_path))
    reporter.tick([_progress(0, 10, 10)], None)
    reporter.finish(RuntimeError("pipeline orders-sync failed: sink down\ntrace..."))
    doc = json.loads((tmp_path / "ck" / "status.json").read_text())
    assert doc["state"] == "failed"
    assert doc["last_error"] == "pipeline orders-sync failed: sink down"
    assert doc["errors_total"] == 1
    metrics = _samples((tmp_path / "ck" / "metrics.prom").read_text())
    assert metrics['headwater_pipeline_up{pipeline="orders-sync"}'] == 0
    assert metrics['headwater_pipeline_errors_total{pipeline="orders-sync"}'] == 1
    reporter.finish(None)
    assert json.loads((tmp_path / "ck" / "status.json").read_text())["state"] == "stopped"


def test_lag_over_the_threshold_logs_one_warning_per_crossing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = StatusReporter(_config(tmp_path, "monitoring: {lag_warning_s: 10}\n"))
    caplog.set_level(logging.INFO, "headwater.pipeline.status")
    old = int((time.time() - 60) * 1e6)
    reporter.tick([_progress(0, 1, 1)], old)
    reporter.tick([_progress(1, 1, 1)], old)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "lag 60" in warnings[0].getMessage() and "(10.0 s)" in warnings[0].getMessage()
    doc = json.loads((tmp_path / "ck" / "status.json").read_text())
    assert doc["lag_over_threshold"] is True and doc["lag_warning_s"] == 10.0
    reporter.tick([_progress(2, 1, 1)], time.time_ns() // 1000)
    assert any("back under" in r.getMessage() for r in caplog.records)
    assert json.loads((tmp_path / "ck" / "status.json").read_text())["lag_over_threshold"] is False


def test_snapshot_progress_per_table_from_state_files(tmp_path: Path) -> None:
    state = {
        "version": 1,
        "snapshot_id": "s1",
        "tables": {
            "shop.a": {"chunks": [{"id": f"shop.a#{i}"} for i in range(4)]},
            "shop.b": {"chunks": [{"id": "shop.b#0"}]},
        },
        "done": {
            "shop.a#0": {"rows": 1000, "seconds": 0.5},
            "shop.a#1": {"rows": 1000, "seconds": 1.5},
            "shop.b#0": {"rows": 7, "seconds": 0.1},
        },
    }
    (tmp_path / "snapshot.json").write_text(json.dumps(state))
    progress = snapshot_progress(tmp_path)
    assert progress["shop.a"] == {
        "chunks_done": 2,
        "chunks_total": 4,
        "rows": 2000,
        "rows_per_s": 1000.0,
        "eta_s": 2.0,
    }
    assert progress["shop.b"]["chunks_done"] == 1 and progress["shop.b"]["eta_s"] is None
    text = render_metrics({"name": "p", "state": "running", "snapshot": progress})
    samples = _samples(text)
    assert samples['headwater_pipeline_snapshot_chunks_done{pipeline="p",table="shop.a"}'] == 2
    assert samples['headwater_pipeline_snapshot_chunks_total{pipeline="p",table="shop.a"}'] == 4


def test_every_metric_has_help_and_type(tmp_path: Path) -> None:
    text = render_metrics({"name": 'we"ird', "state": "stopped"})
    for name, (kind, _help) in METRICS.items():
        assert f"# TYPE {name} {kind}\n" in text
    assert 'pipeline="we\\"ird"' in text


def test_status_is_posted_to_a_server_source_with_its_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    with HeadwaterServer({}, ServerOptions(token=TOKEN, fetch_workers=0)).start() as server:
        source = f"  server: {server.url}\n  task: shop\n  token_file: token\n"
        reporter = StatusReporter(_config(tmp_path, source=source))
        reporter.tick([_progress(0, 5, 4)], None)
        [seen] = server.console.pipelines()
        assert (seen["name"], seen["state"]) == ("orders-sync", "running")
        assert seen["rows_out_total"] == 4
        assert seen["source"]["task"] == "shop"
        assert seen["red"] is False
        reporter.finish(None)
        [seen] = server.console.pipelines()
        assert seen["state"] == "stopped" and seen["red"] is True
        assert TOKEN not in json.dumps(seen)


def test_lag_is_the_newest_commit_written_and_zero_once_caught_up(tmp_path: Path) -> None:
    reporter = StatusReporter(_config(tmp_path))
    written = _progress(0, 10, 10)
    written["observedMetrics"]["headwater"]["newest_ts_us"] = int((time.time() - 8) * 1e6)
    reporter.tick([written], None)
    assert 7.5 < json.loads((tmp_path / "ck" / "status.json").read_text())["lag_seconds"] < 30
    reporter.tick([written, _progress(1, 0, 0)], None)  # the query waits: nothing to read
    assert json.loads((tmp_path / "ck" / "status.json").read_text())["lag_seconds"] == 0.0


def _with_tables(
    progress: dict[str, Any], rows_in: dict[str, int], rows_out: dict[str, int]
) -> dict[str, Any]:
    """``progress`` with the observed per-table counts as Spark reports them (a list of
    ``{item, count}``, the busiest first)."""
    observed = progress["observedMetrics"]
    observed["headwater_in"] = {"tables": [{"item": t, "count": n} for t, n in rows_in.items()]}
    observed["headwater"]["tables"] = [{"item": t, "count": n} for t, n in rows_out.items()]
    return progress


def test_rows_per_table_totals_and_last_batch(tmp_path: Path) -> None:
    reporter = StatusReporter(_config(tmp_path))
    reporter.tick(
        [_with_tables(_progress(0, 7, 5), {"s.a": 4, "s.b": 3}, {"s.a": 4, "s.b": 1})], None
    )
    reporter.tick([_with_tables(_progress(1, 2, 2), {"s.a": 2}, {"s.a": 2})], None)
    doc = json.loads((tmp_path / "ck" / "status.json").read_text())
    assert doc["tables"] == {
        "s.a": {"rows_in_total": 6, "rows_out_total": 6, "rows_in": 2, "rows_out": 2},
        "s.b": {"rows_in_total": 3, "rows_out_total": 1, "rows_in": 0, "rows_out": 0},
    }
    metrics = _samples((tmp_path / "ck" / "metrics.prom").read_text())
    rows = 'headwater_pipeline_rows_total{pipeline="orders-sync",direction='
    assert metrics[rows + '"in",table="s.a"}'] == 6
    assert metrics[rows + '"out",table="s.b"}'] == 1
    # every row is in a listed table: no sample without the label
    assert rows + '"in"}' not in metrics and rows + '"out"}' not in metrics


def test_rows_of_tables_not_listed_have_no_table_label(tmp_path: Path) -> None:
    """A batch over more tables than listed (or a report without the counts): the rest of
    the total is one sample without ``table``, so a sum by direction is the total."""
    reporter = StatusReporter(_config(tmp_path))
    reporter.tick([_with_tables(_progress(0, 10, 10), {"s.a": 6}, {"s.a": 6})], None)
    reporter.tick([_progress(1, 5, 4)], None)  # no per-table counts observed
    metrics = _samples((tmp_path / "ck" / "metrics.prom").read_text())
    rows = 'headwater_pipeline_rows_total{pipeline="orders-sync",direction='
    assert metrics[rows + '"in",table="s.a"}'] == 6
    assert metrics[rows + '"in"}'] == 9
    assert metrics[rows + '"out"}'] == 8
    assert sum(v for k, v in metrics.items() if k.startswith(rows + '"out"')) == 14


def test_the_posted_report_carries_the_busiest_tables(tmp_path: Path) -> None:
    from headwater.pipeline.status import POSTED_TABLES

    tables = {f"s.t{i:03d}": i + 1 for i in range(POSTED_TABLES + 20)}
    total = sum(tables.values())
    with HeadwaterServer({}, ServerOptions(fetch_workers=0)).start() as server:
        source = f"  server: {server.url}\n  task: shop\n"
        reporter = StatusReporter(_config(tmp_path, source=source))
        reporter.tick([_with_tables(_progress(0, total, total), tables, tables)], None)
        [seen] = server.console.pipelines()
    assert len(seen["tables"]) == POSTED_TABLES
    assert "s.t019" not in seen["tables"] and "s.t020" in seen["tables"]  # the 20 least busy
    written = json.loads((tmp_path / "ck" / "status.json").read_text())
    assert len(written["tables"]) == POSTED_TABLES + 20  # the file has them all
