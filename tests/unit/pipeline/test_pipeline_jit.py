"""Which pipelines run their JVMs with C2 off by default (runner.pipeline_conf)."""

from __future__ import annotations

from pathlib import Path

from headwater.pipeline.config import PipelineConfig, parse_pipeline_config
from headwater.pipeline.runner import PIPELINE_SPARK_CONF, pipeline_conf
from headwater.spark.session import C1_ONLY, session_conf

SINK = "sinks:\n  - type: ums\n    path: out\n"
LOGS = (
    "source:\n  logs:\n    name: app\n    path: logs\n    record_start: '^x'\n"
    "    groups:\n      - name: g\n        table: t\n        columns: {a: string}\n"
    "        operators:\n          - extract: {regex: '^(?P<a>.*)'}\n"
)


def _config(
    tmp_path: Path, extra: str = "", source: str = "source:\n  path: task\n"
) -> PipelineConfig:
    text = f"name: jit\n{source}checkpoint: ck\n{SINK}{extra}"
    return parse_pipeline_config(text, file="p.yaml", base=tmp_path, env={})


def test_change_log_pipelines_default_to_c1_only(tmp_path: Path) -> None:
    conf = pipeline_conf(_config(tmp_path))
    assert conf == {**PIPELINE_SPARK_CONF, C1_ONLY: "true"}
    options = session_conf("local[2]", conf=conf)["spark.driver.extraJavaOptions"]
    assert options.endswith("-XX:TieredStopAtLevel=1")
    renamed = pipeline_conf(_config(tmp_path, "transforms:\n  - rename_table: {a.b: c}\n"))
    assert renamed[C1_ONLY] == "true"  # (renames run in the driver too)


def test_spark_sql_transforms_and_log_files_keep_c2(tmp_path: Path) -> None:
    for extra in ("transforms:\n  - filter: \"after.a > 1\"\n",
                  "transforms:\n  - compute: {x: \"after.a + 1\"}\n"):  # fmt: skip
        assert C1_ONLY not in pipeline_conf(_config(tmp_path, extra))
    assert C1_ONLY not in pipeline_conf(_config(tmp_path, source=LOGS))


def test_the_pipeline_spark_conf_decides(tmp_path: Path) -> None:
    off = _config(tmp_path, f"spark:\n  conf:\n    {C1_ONLY}: 'false'\n")
    assert pipeline_conf(off)[C1_ONLY] == "false"
    on = _config(
        tmp_path, f"spark:\n  conf:\n    {C1_ONLY}: 'true'\ntransforms:\n  - filter: \"a > 1\"\n"
    )
    assert pipeline_conf(on)[C1_ONLY] == "true"
