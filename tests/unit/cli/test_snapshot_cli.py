"""``headwater snapshot`` refuses, before connecting anywhere, to snapshot by hand into a
pipeline that has already streamed (its sinks would skip other tables' changes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.cli.main import main


def test_snapshot_into_a_pipeline_that_has_streamed_points_to_signal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tmp_path / "ck"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"seq": 42, "row": 0}\n')
    config = tmp_path / "p.yaml"
    config.write_text(
        f"name: shop\nsource: {{path: {tmp_path / 'task'}}}\ncheckpoint: {checkpoint}\n"
        "sinks: [{type: parquet_log, path: out}]\n"
    )
    # The source port is closed: the refusal must come before any connection.
    code = main(["snapshot", "--config", str(config), "--tables", "shop.t",
                 "--source", "mysql://root@127.0.0.1:1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "pipeline shop has already streamed" in err
    assert "--signal" in err
