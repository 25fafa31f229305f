"""File sink paths given as URIs (issue #16): a Hadoop-style store is one for every machine
and is not probed; a ``file://`` URI is a local path and is."""

from __future__ import annotations

from pathlib import Path

from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.sharedpaths import shared_dirs


def test_only_file_uris_are_probed(tmp_path: Path) -> None:
    config = parse_pipeline_config(
        "name: p\nsource:\n  path: task\ncheckpoint: ck\nsinks:\n"
        "  - type: parquet_log\n    path: hdfs://nn:8020/hw/log\n"
        "  - type: parquet_mirror\n    path: s3a://bucket/mirror\n    schema_file: s.jsonl\n"
        "  - type: parquet_log\n    path: file:///shared/log\n",
        file=str(tmp_path / "p.yaml"),
        base=tmp_path,
        env={},
    )
    assert shared_dirs(config) == [("sinks[2]", 11, "/shared/log")]
