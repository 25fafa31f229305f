"""docs/prometheus-alerts.yml: well-formed Prometheus rule groups whose every headwater
metric is one headwater exports (the reader's /metrics, a pipeline's textfile), and that
cover what docs/operations.md promises: lag over a threshold, a stopped pipeline, a failed
reader task. (Parsed with PyYAML: promtool is not installed.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from headwater.pipeline.status import render_metrics
from headwater.server import TaskHandle
from headwater.server.metrics import Metrics

RULES = Path(__file__).resolve().parents[2] / "docs" / "prometheus-alerts.yml"
_METRIC = re.compile(r"\bheadwater_[a-z0-9_]+\b")


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _families(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def exported() -> set[str]:
    """Every family the reader and a pipeline render (a sample of each)."""
    task = {"t": TaskHandle(log="/nonexistent", status={"state": "failed", "lag_seconds": 1})}
    reader = _families(Metrics().render(task).decode())
    pipeline = _families(render_metrics({"name": "p", "state": "running"}))
    return reader | pipeline


def test_rules_are_well_formed_groups() -> None:
    doc = yaml.safe_load(RULES.read_text())
    assert [g["name"] for g in doc["groups"]] == ["headwater-reader", "headwater-pipeline"]
    names = [rule["alert"] for rule in _rules()]
    assert len(names) == len(set(names)), names
    for rule in _rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("warning", "critical"), rule
        assert rule["annotations"]["summary"], rule
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"]), rule


def test_every_metric_named_is_exported() -> None:
    families = exported()
    named = {m for rule in _rules() for m in _METRIC.findall(rule["expr"])}
    assert named, "the rules name no headwater metric"
    assert named - families == set()
    # the sample exports what the rules lean on (not an empty set by accident)
    assert {"headwater_task_failed", "headwater_pipeline_up"} <= families


def test_rules_cover_lag_a_stopped_pipeline_and_a_failed_task() -> None:
    exprs = {rule["alert"]: rule["expr"] for rule in _rules()}
    assert "headwater_lag_seconds >" in exprs["HeadwaterReaderLagHigh"]
    assert "headwater_pipeline_lag_seconds >" in exprs["HeadwaterPipelineLagHigh"]
    assert "headwater_pipeline_up == 0" in exprs["HeadwaterPipelineStopped"]
    assert "headwater_pipeline_last_report_timestamp_seconds" in exprs["HeadwaterPipelineStopped"]
    assert exprs["HeadwaterReaderTaskFailed"] == "headwater_task_failed == 1"


def test_failed_task_gauge_follows_the_task_state() -> None:
    states = {"a": "failed", "b": "running"}
    tasks = {
        name: TaskHandle(log="/nonexistent", status={"state": state})
        for name, state in states.items()
    }
    text = Metrics().render(tasks).decode()
    assert 'headwater_task_failed{task="a"} 1' in text
    assert 'headwater_task_failed{task="b"} 0' in text
