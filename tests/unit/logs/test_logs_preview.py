"""``headwater logs preview``: each operator's output table and where each record went,
from a pipeline file and a sample file (the Python engine; no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.cli.main import main

PIPELINE = r"""
name: preview-test
checkpoint: ck
source:
  logs:
    name: app
    path: logs
    record_start: '^\d{4}-'
    groups:
      - name: req
        table: requests
        columns: {at: timestamp, path: string, ms: int}
        operators:
          - extract: {regex: '^(?P<time>\S+ \S+) INFO (?P<msg>.*)'}
          - filter: {field: msg, regex: '^request '}
          - kv: {field: msg, keys: [path, ms]}
          - timestamp: {field: time, format: 'yyyy-MM-dd HH:mm:ss,SSS', into: at}
      - name: err
        table: errors
        columns: {exception: string, trace: string}
        operators:
          - extract: {regex: '^\S+ \S+ ERROR (?P<exception>[\w.]+): (?P<rest>(?s:.*))'}
          - split: {field: rest, separator: "\n", into: [message, trace]}
sinks:
  - type: parquet_mirror
    path: out
"""
SAMPLE = (
    "2024-01-02 03:04:05,120 INFO request path=/a ms=7\n"
    "2024-01-02 03:04:06,000 ERROR java.io.IOException: boom\n"
    "\tat a.b(C.java:1)\n"
    "2024-01-02 03:04:07,000 INFO request path=/b ms=slow\n"
    "2024-01-02 03:04:08,000 INFO started\n"
)


def test_preview_prints_each_operator_output_and_the_group_of_each_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    (tmp_path / "sample.log").write_text(SAMPLE)
    args = ["logs", "preview", "--config", str(tmp_path / "pipeline.yaml")]
    assert main([*args, "--sample", str(tmp_path / "sample.log")]) == 0
    out = capsys.readouterr().out.splitlines()
    i = out.index("group req -> table requests")
    assert out[i + 1 : i + 7] == [
        "  after 0:extract:",
        "    record  time                     msg",
        "    1       2024-01-02 03:04:05,120  request path=/a ms=7",
        "    3       2024-01-02 03:04:07,000  request path=/b ms=slow",
        "    4       2024-01-02 03:04:08,000  started",
        "    stopped here: 2 rejected",
    ]
    j = out.index("  after 1:filter:")
    assert out[j + 4] == "    stopped here: 4 rejected"
    k = out.index("  after columns:")
    assert out[k + 1 : k + 4] == [
        "    record  time                     msg                   path  ms  at",
        "    1       2024-01-02 03:04:05,120  request path=/a ms=7  /a    7   "
        "2024-01-02 03:04:05.120000",
        "    stopped here: 3 failed (field ms is not a int)",
    ]
    e = out.index("group err -> table errors")
    assert out[e + 1 : e + 4] == [
        "  after 0:extract:",
        "    record  exception            rest",
        "    2       java.io.IOException  boom\\n\\tat a.b(C.java:1)",
    ]
    r = out.index("records:")
    assert out[r + 1] == (
        "  1 (offset 0) -> requests (group req): at=2024-01-02 03:04:05.120000, path=/a, ms=7,"
        " ums_ts_=2024-01-02 03:04:05.120000"
    )
    second, third, fourth = (SAMPLE.index(f"03:04:0{s},") - 11 for s in (6, 7, 8))
    assert out[r + 3] == (
        f"  2 (offset {second}) -> errors (group err): exception=java.io.IOException,"
        " trace=\\tat a.b(C.java:1)"
    )
    assert out[r + 5] == (
        f"  3 (offset {third}) -> unknown (group req, operator columns: field ms is not a int):"
        f" offset={third}, reason=group req, operator columns: field ms is not a int"
    )
    assert out[r + 6] == "      2024-01-02 03:04:07,000 INFO request path=/b ms=slow"
    assert out[r + 7] == (
        f"  4 (offset {fourth}) -> unknown (no group matched): offset={fourth},"
        " reason=no group matched"
    )


def test_preview_without_a_logs_source_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pipeline.yaml").write_text(
        "name: p\ncheckpoint: ck\nsource: {path: x}\nsinks: [{type: parquet_mirror, path: o}]\n"
    )
    (tmp_path / "s.log").write_text("x\n")
    args = ["logs", "preview", "--config", str(tmp_path / "pipeline.yaml")]
    assert main([*args, "--sample", str(tmp_path / "s.log")]) == 2
    assert "source.logs" in capsys.readouterr().err
