"""Transforms on real rows: a live source captured by the reader, the pipeline with
renames, a mask, a filter and a rule script into a second MariaDB; and the order of
transforms changing the result on the same captured rows (batch read of the task)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from headwater.pipeline.config import parse_pipeline_config
from headwater.sandbox import MariadbSandbox
from headwater.spark import register
from tests.integration.test_pipeline_e2e import (  # noqa: F401  (reader is a fixture)
    reader,
    run_available_now,
    write_config,
)
from tests.integration.test_reader_capture import Running, wait_caught_up

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

RULE = """\
def rule(change):
    # Drop orders of customer c0; tag the rest with the source database.
    after = change["after"]
    if after is not None and after.get("customer") == "c0":
        return None
    if after is not None:
        after["note"] = (after.get("note") or "") + "@" + change["database"]
    return change
"""


def fill(server: MariadbSandbox, db: str) -> None:
    server.execute(
        "CREATE TABLE customers (id INT PRIMARY KEY, email VARCHAR(80) NOT NULL,"
        " phone VARCHAR(20) NULL)",
        "INSERT INTO customers VALUES (1, 'ann@example.com', '+44 20 7946 0001'),"
        " (2, 'bob@example.com', NULL), (3, 'cy@example.com', '555-0100')",
        "UPDATE customers SET phone = '555-0199' WHERE id = 2",
        "INSERT INTO orders VALUES (1, 'c0', 10.00, NULL, 0), (2, 'c1', 250.00, 'big', 0),"
        " (3, 'c2', 99.99, NULL, 0), (4, 'c3', 100.01, 'x', 0)",
        "UPDATE orders SET amount = 300.00, version = 1 WHERE id = 3",
        "DELETE FROM orders WHERE id = 4",
        database=db,
    )


def test_renames_mask_filter_and_rule_on_captured_rows(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    running, task_dir = reader
    fill(mariadb, db)
    wait_caught_up(running.task, mariadb)
    (tmp_path / "tag.py").write_text(RULE)
    (tmp_path / "salt").write_text("pepper\n")
    dst = f"{db}_tx"[:60]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
    transforms = (
        f"  - filter: \"after.amount::decimal(10,2) > 50 OR op = 'delete'\"\n"
        f"    tables: ['{dst}\\.orders']\n"
        "  - rule: tag.py\n"
        f"    tables: ['{dst}\\.orders']\n"
        "  - mask:\n"
        "      email: {hash: sha256, salt_file: salt}\n"
        "      phone: {keep_last: 4}\n"
        f"    tables: ['{dst}\\.clients']\n"
    )
    config = write_config(
        tmp_path / "pipeline.yaml", task_dir, src_db=db, dst_db=dst, target=mariadb_target,
        extra_transforms="  - rename_table: {" + f"{dst}.customers: clients" + "}\n" + transforms,
        name="transforms",  # its own checkpoint rows: the e2e tests' "e2e" ones are ahead
    )  # fmt: skip
    run_available_now(spark, config)
    clients = mariadb_target.query(f"SELECT id, email, phone FROM `{dst}`.clients ORDER BY id")
    digest = {e: hashlib.sha256(b"pepper" + e.encode()).hexdigest() for e in
              ("ann@example.com", "bob@example.com", "cy@example.com")}  # fmt: skip
    assert clients == [
        (1, digest["ann@example.com"], "************0001"),
        (2, digest["bob@example.com"], "****0199"),
        (3, digest["cy@example.com"], "****0100"),
    ]
    orders = mariadb_target.query(f"SELECT id, customer, note FROM `{dst}`.orders ORDER BY id")
    # 1: amount 10 filtered out; 2: kept and tagged; 3: inserted below the filter, then
    # updated above it (only the update arrives, as an upsert); 4: deleted.
    assert orders == [(2, "c1", f"big@{dst}"), (3, "c2", f"@{dst}")]
    mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")


def test_transform_order_changes_the_result_on_captured_rows(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    running, task_dir = reader
    fill(mariadb, db)
    wait_caught_up(running.task, mariadb)
    register(spark)
    from headwater.spark.transforms import apply_transforms

    changes = spark.read.format("headwater").option("path", str(task_dir)).load()
    changes = changes.where("op != 'ddl'").cache()
    base = (
        f"name: o\nsource: {{path: {task_dir}}}\ncheckpoint: ck\nsinks: [{{type: ums, path: u}}]\n"
    )
    mask_then_filter = parse_pipeline_config(
        base + "transforms:\n  - mask: {email: {fixed: hidden}}\n"
        "  - filter: \"after.email LIKE '%@example.com'\"\n",
        base=tmp_path,
    )
    filter_then_mask = parse_pipeline_config(
        base + "transforms:\n  - filter: \"after.email LIKE '%@example.com'\"\n"
        "  - mask: {email: {fixed: hidden}}\n",
        base=tmp_path,
    )

    def result(config: object) -> list[tuple[str, int, object]]:
        rows = apply_transforms(changes, config.transforms).collect()  # type: ignore[attr-defined]
        return sorted(
            (r["table"], r["sequence"], json.loads(r["after"]).get("email") if r["after"] else None)
            for r in rows
        )

    first = result(filter_then_mask)
    second = result(mask_then_filter)
    # Filter first: customers' rows pass (real emails), then get masked.
    assert [e for t, _, e in first if t == "customers"] == ["hidden"] * 4
    # Mask first: no email matches any more, and orders (no email: the predicate is NULL)
    # are dropped either way.
    assert [t for t, _, _ in second] == []
    assert len(first) == 4
    changes.unpersist()
