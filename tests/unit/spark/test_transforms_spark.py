"""Transforms on a real local Spark: order, filters over images, computed columns, masks,
rules, and rule errors surfacing with the rule file and the change's position."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from headwater.changes.schema import change_schema
from headwater.spark.rules import load_rule_script
from headwater.spark.transforms import (
    ComputeSpec,
    ExcludeSpec,
    FilterSpec,
    MaskRule,
    MaskSpec,
    RenameDatabaseSpec,
    RenameTableSpec,
    RuleSpec,
    TransformSpec,
    apply_transforms,
)

# Python workers must import headwater.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

T0 = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


def row(
    seq: int,
    table: str,
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    db: str = "shop",
) -> tuple[Any, ...]:
    image = after if after is not None else before
    key = {"id": image["id"]} if image else None
    return (
        "src", db, table, op, 1_714_521_600_000_000 + seq, T0, 0, 3, 1000 + seq, 0, f"0-1-{seq}",
        f"0-1-{seq}", seq, json.dumps(key) if key else None,
        json.dumps(before) if before is not None else None,
        json.dumps(after) if after is not None else None, 1, None,
    )  # fmt: skip


ROWS = [
    row(1, "orders", "insert", None, {"id": 1, "amount": "150.50", "email": "ann@example.com"}),
    row(2, "orders", "insert", None, {"id": 2, "amount": "9.99", "email": "bob@example.com"}),
    row(
        3,
        "orders",
        "update",
        {"id": 2, "amount": "9.99", "email": "bob@example.com"},
        {"id": 2, "amount": "120.00", "email": "bob@example.com"},
    ),
    row(4, "orders", "delete", {"id": 1, "amount": "150.50", "email": "ann@example.com"}, None),
    row(5, "customers", "insert", None, {"id": 7, "name": "Ann", "email": "ann@example.com"}),
    (
        "src",
        "shop",
        "",
        "ddl",
        1,
        T0,
        0,
        3,
        2000,
        0,
        "",
        "3:2000",
        6,
        None,
        None,
        None,
        2,
        "CREATE TABLE t (id INT)",
    ),
]


@pytest.fixture(scope="module")
def changes(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([(*r, None) for r in ROWS], change_schema())  # before_key


def run(df: DataFrame, specs: list[TransformSpec]) -> list[dict[str, Any]]:
    out = []
    for r in apply_transforms(df, specs).orderBy("sequence").collect():
        d = r.asDict()
        for name in ("key", "before", "after"):
            d[name] = json.loads(d[name]) if d[name] is not None else None
        out.append(d)
    return out


def test_no_transforms_is_the_identity(changes: DataFrame) -> None:
    assert apply_transforms(changes, []).collect() == changes.collect()


def test_filter_over_after_image_with_a_cast_keeps_other_tables_and_ddl(
    changes: DataFrame,
) -> None:
    spec = FilterSpec("after.amount::decimal(10,2) > 100 OR op = 'delete'", (r"shop\.orders",))
    assert [r["sequence"] for r in run(changes, [spec])] == [1, 3, 4, 5, 6]


def test_computed_columns_are_added_to_both_images(changes: DataFrame) -> None:
    spec = ComputeSpec(
        {"cents": "CAST(row.amount::decimal(10,2) * 100 AS BIGINT)", "domain": "'x'"},
        (r"shop\.orders",),
    )
    out = {r["sequence"]: r for r in run(changes, [spec])}
    assert out[3]["before"]["cents"] == 999 and out[3]["after"]["cents"] == 12000
    assert out[1]["before"] is None and out[1]["after"]["domain"] == "x"
    assert "cents" not in out[5]["after"]
    assert set(out[6]) == {r for r in changes.columns}


def test_masks_keep_last_and_salted_hash(changes: DataFrame) -> None:
    spec = MaskSpec(
        {"email": MaskRule("keep_last", n=11), "name": MaskRule("hash", salt=b"salt")},
        (r"shop\.customers",),
    )
    out = {r["sequence"]: r for r in run(changes, [spec])}
    assert out[5]["after"]["email"] == "****example.com"
    assert out[5]["after"]["name"] == hashlib.sha256(b"saltAnn").hexdigest()
    assert out[1]["after"]["email"] == "ann@example.com"


def test_rename_database_and_table_sync_a_into_b(changes: DataFrame) -> None:
    specs: list[TransformSpec] = [
        RenameDatabaseSpec({"shop": "shop_copy"}),
        RenameTableSpec({"shop_copy.customers": "people"}),
    ]
    out = run(changes, specs)
    assert {(r["database"], r["table"]) for r in out} == {
        ("shop_copy", "orders"),
        ("shop_copy", "people"),
        ("shop_copy", ""),
    }


def test_order_matters_filter_before_or_after_a_rename(changes: DataFrame) -> None:
    keep_big = FilterSpec("after.amount::decimal(10,2) > 100", (r"shop\.orders",))
    rename = RenameDatabaseSpec({"shop": "archive"})
    # Filter first: it sees shop.orders and drops the small insert and the delete.
    assert [r["sequence"] for r in run(changes, [keep_big, rename])] == [1, 3, 5, 6]
    # Rename first: the filter's tables no longer match; every change passes.
    assert [r["sequence"] for r in run(changes, [rename, keep_big])] == [1, 2, 3, 4, 5, 6]


def test_order_matters_mask_before_or_after_a_filter_on_the_masked_column(
    changes: DataFrame,
) -> None:
    mask = MaskSpec({"email": MaskRule("fixed", text="hidden")})
    only_ann = FilterSpec("after.email = 'ann@example.com' OR after.email IS NULL")
    assert [r["sequence"] for r in run(changes, [only_ann, mask])] == [1, 4, 5, 6]
    assert [r["sequence"] for r in run(changes, [mask, only_ann])] == [4, 6]


def test_rule_scripts_run_in_configured_order(changes: DataFrame, tmp_path: Path) -> None:
    (tmp_path / "tag.py").write_text(
        "def rule(change):\n"
        "    if change['after'] is not None:\n"
        "        change['after']['tag'] = change['after'].get('tag', '') + 'a'\n"
        "    return change\n"
    )
    (tmp_path / "drop_untagged.py").write_text(
        "def rule(change):\n"
        "    if change['op'] == 'insert' and 'tag' not in change['after']:\n"
        "        return None\n"
        "    return change\n"
    )
    tag = RuleSpec(load_rule_script(tmp_path / "tag.py"))
    drop = RuleSpec(load_rule_script(tmp_path / "drop_untagged.py"))
    tagged_first = run(changes, [tag, drop])
    assert [r["sequence"] for r in tagged_first] == [1, 2, 3, 4, 5, 6]
    assert tagged_first[0]["after"]["tag"] == "a"
    assert [r["sequence"] for r in run(changes, [drop, tag])] == [3, 4, 6]


def test_rule_error_surfaces_with_file_and_position(changes: DataFrame, tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text(
        "def rule(change):\n"
        "    if change['sequence'] == 3:\n"
        "        raise KeyError('missing_column')\n"
        "    return change\n"
    )
    spec = RuleSpec(load_rule_script(tmp_path / "boom.py"))
    with pytest.raises(Exception) as info:
        apply_transforms(changes, [ExcludeSpec(("email",)), spec]).collect()
    assert (
        f"RuleError: rule {tmp_path / 'boom.py'} failed on shop.orders update at position "
        "0:3:1003:0 (sequence 3): KeyError: 'missing_column'"
    ) in str(info.value)
