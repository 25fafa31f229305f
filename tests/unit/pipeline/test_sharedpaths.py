"""The shared-directory check of file sinks (issue #16): which sections it covers, and
what one probe task does (the cluster test runs it on isolated workers)."""

from __future__ import annotations

import socket
from pathlib import Path

from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.sharedpaths import probe_directory, shared_dirs


def test_shared_dirs_are_the_file_sinks_paths(tmp_path: Path) -> None:
    config = parse_pipeline_config(
        "name: p\nsource:\n  path: task\ncheckpoint: ck\nsinks:\n"
        "  - type: mysql\n    host: h\n    schema_file: s.jsonl\n"
        "  - type: parquet_log\n    path: out/log\n"
        "  - type: parquet_mirror\n    path: /abs/mirror\n",
        file=str(tmp_path / "p.yaml"),
        base=tmp_path,
        env={},
    )
    assert shared_dirs(config) == [
        ("sinks[1]", 9, str(tmp_path / "out/log")),
        ("sinks[2]", 11, "/abs/mirror"),
    ]


def test_probe_sees_the_drivers_file_and_writes_its_own(tmp_path: Path) -> None:
    (tmp_path / "_headwater-probe-abc").write_text("abc")
    host, seen, name = probe_directory(str(tmp_path), "abc")
    assert host == socket.gethostname()
    assert seen and name is not None and (tmp_path / name).read_text() == "abc"
    assert name.startswith("_")  # skipped by Spark's and DuckDB's globbing
    _, seen, other = probe_directory(str(tmp_path), "other")
    assert not seen and other is not None and other != name
