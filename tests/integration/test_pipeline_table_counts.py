"""Per-table row counts of a pipeline, observed by a real Spark streaming query in the
same pass as its batches (``approx_top_k`` over ``database.table``, before and after a
filter), counted by ``StatusReporter`` from ``recentProgress`` and written to status.json
and metrics.prom."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.runner import OBSERVED, _observed_columns
from headwater.pipeline.status import OBSERVED_IN, StatusReporter, table_counts

pytestmark = pytest.mark.integration


def _rows(db: str, table: str, n: int, start: int) -> list[str]:
    return [
        json.dumps({"database": db, "table": table, "op": "insert", "ts_us": start + i})
        for i in range(n)
    ]


def test_rows_per_table_in_and_out_over_two_batches(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    source = tmp_path / "in"
    source.mkdir()
    # batch 0: 5 shop.orders, 3 shop.items, 2 crm.people; batch 1: 4 shop.orders
    (source / "a.json").write_text(
        "\n".join(
            _rows("shop", "orders", 5, 0)
            + _rows("shop", "items", 3, 10)
            + _rows("crm", "people", 2, 20)
        )
    )
    config = parse_pipeline_config(
        "name: counts\nsource:\n  path: task\ncheckpoint: ck\nprogress: 1\n"
        "sinks:\n  - type: ums\n    path: out\n",
        file="p.yaml",
        base=tmp_path,
        env={},
    )
    reporter = StatusReporter(config)
    schema = "database string, `table` string, op string, ts_us long"

    def run() -> None:
        read = (
            spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .observe(OBSERVED_IN, table_counts(F))
        )
        out = read.filter(F.col("database") == "shop").observe(OBSERVED, *_observed_columns(F))
        query = (
            out.writeStream.option("checkpointLocation", str(tmp_path / "spark-ck"))
            .foreachBatch(lambda df, batch_id: df.count())  # the sinks consume the batch
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        reporter.tick(query.recentProgress, None)

    run()
    (source / "b.json").write_text("\n".join(_rows("shop", "orders", 4, 30)))
    run()  # a second query on the same checkpoint: batch 1

    doc = json.loads((tmp_path / "ck" / "status.json").read_text())
    assert (doc["batches"], doc["rows_in_total"], doc["rows_out_total"]) == (2, 14, 12)
    assert doc["tables"] == {
        "crm.people": {"rows_in_total": 2, "rows_out_total": 0, "rows_in": 0, "rows_out": 0},
        "shop.items": {"rows_in_total": 3, "rows_out_total": 3, "rows_in": 0, "rows_out": 0},
        "shop.orders": {"rows_in_total": 9, "rows_out_total": 9, "rows_in": 4, "rows_out": 4},
    }
    metrics = (tmp_path / "ck" / "metrics.prom").read_text()
    base = 'headwater_pipeline_rows_total{pipeline="counts"'
    assert f'{base},direction="in",table="shop.orders"}} 9\n' in metrics
    assert f'{base},direction="out",table="shop.items"}} 3\n' in metrics
    assert f'{base},direction="out",table="crm.people"}} 0\n' in metrics
    # every row is in a table listed: no sample without the table label
    assert f'{base},direction="in"}}' not in metrics
