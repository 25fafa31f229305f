"""Pipeline configuration: what a valid file gives, and errors naming file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.errors import ConfigError
from headwater.pipeline.config import load_pipeline_config, parse_pipeline_config
from headwater.spark.transforms import (
    ComputeSpec,
    ExcludeSpec,
    FilterSpec,
    IncludeSpec,
    MaskSpec,
    RenameColumnsSpec,
    RenameDatabaseSpec,
    RenameTableSpec,
    RuleSpec,
)

BASE = """\
name: shop-sync
source:
  path: data/shop
checkpoint: ck
sinks:
  - type: ums
    path: out
"""


def parse(text: str, tmp_path: Path, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return parse_pipeline_config(text, file="p.yaml", base=tmp_path, env=env or {})


def error(text: str, tmp_path: Path, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, tmp_path, env)
    return str(info.value)


def test_minimal_config_resolves_paths_and_source_options(tmp_path: Path) -> None:
    config = parse(BASE, tmp_path)
    assert config.name == "shop-sync"
    assert config.checkpoint == tmp_path / "ck"
    assert config.source.option_map() == {"path": str(tmp_path / "data/shop")}
    assert config.source.schema_file == tmp_path / "data/shop/schema.jsonl"
    assert [(s.type, dict(s.fields), s.line) for s in config.sinks] == [("ums", {"path": "out"}, 6)]
    assert config.master == "local[2]" and config.transforms == ()


def test_every_transform_kind_in_order(tmp_path: Path) -> None:
    (tmp_path / "salt").write_text("s3cret\n")
    (tmp_path / "r.py").write_text("def rule(change):\n    return change\n")
    text = (
        BASE
        + """\
transforms:
  - filter: "after.amount::int > 5"
    tables: ['shop\\.orders']
  - include: [id, amount]
  - exclude: [secret]
    tables: ['shop\\..*']
  - rename_database: {shop: shop_copy}
  - rename_table: {shop_copy.orders: orders_v2}
  - rename_columns: {amount: total}
  - compute: {cents: "row.total::int * 100"}
  - mask:
      email: {hash: sha256, salt_file: salt}
      phone: {keep_last: 4, char: "#"}
      name: {keep_first: 1}
      ssn: {fixed: "XXX"}
  - rule: r.py
"""
    )
    config = parse(text, tmp_path)
    kinds = [type(t) for t in config.transforms]
    assert kinds == [
        FilterSpec,
        IncludeSpec,
        ExcludeSpec,
        RenameDatabaseSpec,
        RenameTableSpec,
        RenameColumnsSpec,
        ComputeSpec,
        MaskSpec,
        RuleSpec,
    ]
    first = config.transforms[0]
    assert isinstance(first, FilterSpec) and first.tables == ("shop\\.orders",)
    mask = config.transforms[7]
    assert isinstance(mask, MaskSpec)
    assert mask.columns["email"].salt == b"s3cret"
    assert "s3cret" not in repr(mask)
    assert (mask.columns["phone"].kind, mask.columns["phone"].n) == ("keep_last", 4)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("spark: {masterr: x}\n", "p.yaml:8: spark.masterr: unknown field"),
        (
            "transforms:\n  - filter: a\n    include: [x]\n",
            "p.yaml:9: transforms[0]: give exactly one of",
        ),
        (
            "transforms:\n  - mask: {email: {keep_last: x}}\n",
            "p.yaml:9: transforms[0].mask.email.keep_last: must be an integer",
        ),
        (
            "transforms:\n  - tables: ['(']\n    exclude: [a]\n",
            "p.yaml:9: transforms[0].tables[0]: bad regular expression",
        ),
        (
            "transforms:\n  - rule: missing.py\n",
            "p.yaml:9: transforms[0].rule: cannot read",
        ),
        (
            "transforms:\n  - mask: {email: {hash: sha256, salt_env: NOPE}}\n",
            "p.yaml:9: transforms[0].mask.email.salt_env: environment variable NOPE is not set",
        ),
        (
            'transforms:\n  - compute: {x: "before.a + row.b"}\n  - filter: row.a = 1\n',
            "p.yaml:10: transforms[1].filter: row.a: row. is only for computed columns",
        ),
        (
            "transforms:\n  - rename_table: {orders: x}\n",
            "p.yaml:9: transforms[0].rename_table.orders: expected db.table",
        ),
        ("trigger: soon\n", "p.yaml:8: trigger: must be a number"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path: Path, extra: str, expected: str) -> None:
    assert error(BASE + extra, tmp_path).startswith(expected)


def test_rule_file_with_a_syntax_error_is_reported_at_load(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def rule(change)\n    return change\n")
    message = error(BASE + "transforms:\n  - rule: bad.py\n", tmp_path)
    assert message.startswith("p.yaml:9: transforms[0].rule: rule ")
    assert "bad.py: cannot load: SyntaxError" in message


def test_rule_file_without_rule_function(tmp_path: Path) -> None:
    (tmp_path / "none.py").write_text("def other(change):\n    return change\n")
    message = error(BASE + "transforms:\n  - rule: none.py\n", tmp_path)
    assert "defines no function rule(change)" in message


def test_source_needs_path_or_server(tmp_path: Path) -> None:
    text = BASE.replace("  path: data/shop\n", "  server: http://x:1\n")
    assert error(text, tmp_path) == "p.yaml:3: source.task: missing: server needs the task's name"
    text = BASE.replace("  path: data/shop\n", "  path: a\n  server: http://x:1\n")
    assert error(text, tmp_path).startswith("p.yaml:3: source: give either path")


def test_source_options_are_checked_by_the_source(tmp_path: Path) -> None:
    text = BASE.replace("  path: data/shop\n", "  path: d\n  starting_position: yesterday\n")
    message = error(text, tmp_path)
    assert message.startswith("p.yaml:4: source (startingPosition): ")


def test_missing_sinks_and_unknown_top_field(tmp_path: Path) -> None:
    assert error("name: a\nsource: {path: x}\ncheckpoint: c\n", tmp_path) == (
        "p.yaml:1: sinks: missing (required)"
    )
    assert error(BASE + "sinkz: []\n", tmp_path).startswith("p.yaml:8: sinkz: unknown field")


def test_load_from_file_anchors_relative_paths(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "pipeline.yaml"
    path.parent.mkdir()
    path.write_text(BASE)
    config = load_pipeline_config(path)
    assert config.checkpoint == tmp_path / "conf" / "ck"
    assert config.file == str(path)
