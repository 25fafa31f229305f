"""Transforms on single changes (no Spark): image shorthands, masks, renames, rules."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from headwater.spark.rules import RuleError, RuleScript, load_rule_script
from headwater.spark.transforms import (
    ExcludeSpec,
    IncludeSpec,
    MaskRule,
    MaskSpec,
    RenameColumnsSpec,
    RenameDatabaseSpec,
    RenameTableSpec,
    RuleSpec,
    image_sql,
    row_op,
)


def change(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "source": "src",
        "database": "shop",
        "table": "orders",
        "op": "update",
        "ts_us": 1,
        "commit_ts": None,
        "change_id": 0,
        "file_num": 3,
        "offset": 1234,
        "event_index": 2,
        "gtid": "0-1-5",
        "txn_id": "0-1-5",
        "sequence": 77,
        "key": {"id": 1},
        "before": {"id": 1, "email": "ann@example.com", "amount": "1.00"},
        "after": {"id": 1, "email": "ann@example.com", "amount": "2.50"},
        "schema_version": 1,
        "sql": None,
    }
    base.update(kw)
    return base


def test_image_shorthand_becomes_get_json_object() -> None:
    assert image_sql("after.amount::decimal(9,2) > 1") == (
        "get_json_object(`after`, '$[\\'amount\\']')::decimal(9,2) > 1"
    )


def test_image_shorthand_leaves_literals_and_qualified_names_alone() -> None:
    text = "'after.x' = t.after.y AND `after.z` = 1 AND x.key.a = 2"
    assert image_sql(text) == text


def test_image_shorthand_quoted_column_and_row_image() -> None:
    assert image_sql("row.`unit price`", row_image="before") == (
        "get_json_object(`before`, '$[\\'unit price\\']')"
    )
    with pytest.raises(ValueError, match=r"row\. is only for computed columns"):
        image_sql("row.a = 1")


def test_mask_keep_last_fixed_keep_first() -> None:
    assert MaskRule("keep_last", n=4).apply("4111111111111111") == "************1111"
    assert MaskRule("keep_first", n=1, char="#").apply("Ann") == "A##"
    assert MaskRule("keep_first", n=5).apply("Ann") == "Ann"
    assert MaskRule("fixed", text="***").apply(12345) == "***"
    assert MaskRule("fixed").apply(None) is None


def test_mask_hash_is_salted_sha256_of_the_value_text() -> None:
    rule = MaskRule("hash", salt=b"pepper")
    assert rule.apply("ann") == hashlib.sha256(b"pepperann").hexdigest()
    assert rule.apply(42) == hashlib.sha256(b"pepper42").hexdigest()
    assert "pepper" not in repr(rule)


def test_mask_applies_to_key_before_and_after() -> None:
    op = row_op(MaskSpec({"id": MaskRule("fixed", text="x")}))
    out = op(change())
    assert out is not None
    assert out["key"] == {"id": "x"} and out["before"]["id"] == "x" and out["after"]["id"] == "x"


def test_include_and_exclude_touch_images_not_the_key() -> None:
    out = row_op(IncludeSpec(("id", "amount")))(change())
    assert out is not None
    assert out["after"] == {"id": 1, "amount": "2.50"} and out["key"] == {"id": 1}
    out = row_op(ExcludeSpec(("id",)))(change())
    assert out is not None
    assert "id" not in out["before"] and out["key"] == {"id": 1}


def test_transforms_skip_tables_that_do_not_match() -> None:
    op = row_op(ExcludeSpec(("email",), tables=(r"shop\.customers",)))
    out = op(change())
    assert out is not None and "email" in out["after"]


def test_rename_database_table_and_columns() -> None:
    c = row_op(RenameDatabaseSpec({"shop": "copy"}))(change())
    assert c is not None and c["database"] == "copy"
    c = row_op(RenameTableSpec({"copy.orders": "archive.orders_v2"}))(c)
    assert c is not None and (c["database"], c["table"]) == ("archive", "orders_v2")
    c = row_op(RenameColumnsSpec({"id": "order_id"}))(c)
    assert c is not None and c["key"] == {"order_id": 1} and "order_id" in c["after"]


def test_ddl_changes_only_follow_renames() -> None:
    ddl = change(op="ddl", key=None, before=None, after=None, sql="ALTER TABLE orders ADD x INT")
    assert row_op(ExcludeSpec(("id",)))(dict(ddl)) == ddl
    renamed = row_op(RenameDatabaseSpec({"shop": "copy"}))(dict(ddl))
    assert renamed is not None and renamed["database"] == "copy"


def write_rule(tmp_path: Path, body: str) -> RuleScript:
    path = tmp_path / "rule.py"
    path.write_text(body)
    return load_rule_script(path)


def test_rule_may_edit_in_place_return_partial_dict_or_drop(tmp_path: Path) -> None:
    script = write_rule(
        tmp_path,
        "def rule(change):\n"
        "    if change['op'] == 'delete':\n"
        "        return None\n"
        "    return {'table': change['table'] + '_x'}\n",
    )
    op = row_op(RuleSpec(script))
    out = op(change())
    assert out is not None and out["table"] == "orders_x" and out["sequence"] == 77
    assert op(change(op="delete")) is None


def test_rule_error_names_file_and_position(tmp_path: Path) -> None:
    script = write_rule(tmp_path, "def rule(change):\n    return 1 / 0\n")
    with pytest.raises(RuleError) as info:
        row_op(RuleSpec(script))(change())
    assert str(info.value) == (
        f"rule {tmp_path / 'rule.py'} failed on shop.orders update at position 0:3:1234:2 "
        "(sequence 77): ZeroDivisionError: division by zero"
    )


def test_rule_returning_unknown_keys_or_wrong_type(tmp_path: Path) -> None:
    op = row_op(RuleSpec(write_rule(tmp_path, "def rule(change):\n    return {'colour': 1}\n")))
    with pytest.raises(RuleError, match=r"unknown keys \['colour'\]"):
        op(change())
    op = row_op(RuleSpec(write_rule(tmp_path, "def rule(change):\n    return [change]\n")))
    with pytest.raises(RuleError, match=r"returned list on shop\.orders update"):
        op(change())
