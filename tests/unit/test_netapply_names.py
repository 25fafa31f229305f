"""The net path's names after the transforms (headwater.pipeline.netapply.target_of) equal
what the sinks see (TransformedSchema) and what the row operations do to a change."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.pipeline.netapply import NetPlan, NetRefused, target_of
from headwater.schema.model import Column, TableDef
from headwater.spark.transforms import (
    ExcludeSpec,
    IncludeSpec,
    MaskRule,
    MaskSpec,
    RenameColumnsSpec,
    RenameDatabaseSpec,
    RenameTableSpec,
    TransformedSchema,
    TransformSpec,
    row_op,
)

DEF = TableDef(
    "shop",
    "orders",
    (
        Column("id", "int", "int"),
        Column("sku", "varchar", "varchar(20)", charset="utf8mb4"),
        Column("qty", "int", "int"),
        Column("note", "varchar", "varchar(50)", charset="utf8mb4"),
    ),
    primary_key=("id", "sku"),
)


class _Base:
    def table_at(self, database: str, table: str, position: Any) -> TableDef | None:
        return DEF if (database, table) == ("shop", "orders") else None


CASES: list[tuple[TransformSpec, ...]] = [
    (),
    (RenameDatabaseSpec({"shop": "s2"}),),
    (RenameTableSpec({"shop.orders": "o2"}), RenameColumnsSpec({"sku": "code", "qty": "n"})),
    (RenameTableSpec({"shop.orders": "x.o3"}), ExcludeSpec(("note",))),
    (
        IncludeSpec(("qty", "id", "sku")),
        RenameColumnsSpec({"id": "ident"}, tables=(r"shop\.orders",)),
    ),
    (RenameColumnsSpec({"note": "n"}, tables=(r"other\..*",)), ExcludeSpec(("qty",))),
]


@pytest.mark.parametrize("specs", CASES)
def test_target_equals_the_sinks_view_and_the_row_operations(
    specs: tuple[TransformSpec, ...],
) -> None:
    target = target_of(specs, DEF)
    view = TransformedSchema(_Base(), specs)
    name = view.target_name("shop", "orders")
    assert (target.database, target.table) == name
    edited = view.table_at(*name, None)
    assert tuple(n for _i, n in target.columns) == edited.column_names
    assert target.key == edited.primary_key
    # a change through the row operations: the same names, the same values
    change: Any = {
        "database": "shop", "table": "orders", "op": "update",
        "key": {"id": 1, "sku": "a"}, "before_key": None,
        "after": {"id": 1, "sku": "a", "qty": 2, "note": "x"}, "before": None,
    }  # fmt: skip
    for i, spec in enumerate(specs):
        change = row_op(spec, i)(change)
    assert (change["database"], change["table"]) == name
    assert tuple(change["key"]) == target.key
    values = ("1", "a", "2", "x")
    assert {n: str(change["after"][n]) for _i, n in target.columns} == {
        n: values[i] for i, n in target.columns
    }


def test_a_mask_and_a_key_left_out_are_refused() -> None:
    with pytest.raises(NetRefused, match="MaskSpec"):
        target_of((MaskSpec({"note": MaskRule("fixed", "x")}),), DEF)
    with pytest.raises(NetRefused, match="'id'"):
        target_of((ExcludeSpec(("note", "id")),), DEF)
    with pytest.raises(NetRefused, match="'sku'"):
        target_of((IncludeSpec(("qty", "id")),), DEF)
    target_of((ExcludeSpec(("id",), tables=(r"other\..*",)),), DEF)


def test_sequences_bound_the_range() -> None:
    plan = NetPlan(None, 5, 9, (), 2, 1)  # type: ignore[arg-type]
    assert plan.first_sequence == 5 << 24
    assert plan.last_sequence == (9 << 24) - 1


def test_progress_reports_get_the_net_batches_figures(tmp_path: Any) -> None:
    from headwater.pipeline.direct import DirectBatch
    from headwater.pipeline.netapply import NetApply
    from headwater.pipeline.runner import OBSERVED
    from headwater.pipeline.status import OBSERVED_IN

    net = NetApply(tmp_path, None, [], ())  # type: ignore[arg-type]
    net.batches[4] = DirectBatch(
        rows_in=10, rows_out=10, tables_in={"a.t": 10}, tables_out={"b.t": 10},
        newest_ts_us=123, seconds=0.5,
    )  # fmt: skip
    spark_read = {"batchId": 5, "numInputRows": 7}
    reports = net.patch([{"batchId": 4, "numInputRows": 0}, spark_read])
    assert reports[1] is spark_read
    patched = reports[0]
    assert patched["numInputRows"] == 10
    assert patched["processedRowsPerSecond"] == 20.0
    assert patched["observedMetrics"][OBSERVED_IN] == {"tables": [{"item": "a.t", "count": 10}]}
    assert patched["observedMetrics"][OBSERVED] == {
        "newest_ts_us": 123, "rows_out": 10, "tables": [{"item": "b.t", "count": 10}],
    }  # fmt: skip
