"""An update's key when its after image lacks key columns (MINIMAL row images).

MariaDB's MINIMAL image logs an UPDATE's after image with only the columns the statement
set (sql/table.cc, ``TABLE::mark_columns_per_binlog_row_image``): an update that left the
key alone has no key column in its after image, and the change's key must come from the
before image. Every path that builds a change's key agrees: the Spark source's columns
(the C renderers and the Python one) and :class:`ChangeRow`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson

from headwater._native._imagejson import JsonColumns
from headwater.changes import ChangeBlock, block_changes
from headwater.changes.schema import before_key
from headwater.position import Position
from headwater.spark.partitions import _arrow, _images

POS = Position(2, 5, 400, 1)


def _block(before: list[str], after: list[str], rows: list[Any]) -> ChangeBlock:
    return ChangeBlock("db", "t", "update", POS, 0, rows, before, after, ("id", "tag"))


# (before image, after image) rows: the key left alone (after lacks it), the key changed
# (after holds the new one), one key column in the after image only.
ROWS = [((1, "a", 10), (20,)), ((2, "b", 30), (40,))]


def _columns(block: ChangeBlock, builder: bool) -> list[list[Any]]:
    if builder:
        out: Any = JsonColumns()
        _images(block, 0, len(block.rows), out)
        return [column.to_pylist() for column in _arrow(out)]
    lists: Any = ([], [], [], [])
    _images(block, 0, len(block.rows), lists)
    return [list(column) for column in lists]


def test_key_left_alone_comes_from_the_before_image() -> None:
    for builder in (False, True):
        block = _block(["id", "tag", "n"], ["n"], list(ROWS))
        key, before, after, old = _columns(block, builder)
        assert [orjson.loads(k) for k in key] == [{"id": 1, "tag": "a"}, {"id": 2, "tag": "b"}]
        assert [orjson.loads(a) for a in after] == [{"n": 20}, {"n": 40}]
        assert [orjson.loads(b) for b in before] == [
            {"id": 1, "tag": "a", "n": 10},
            {"id": 2, "tag": "b", "n": 30},
        ]
        assert old == [None, None]  # the key did not change


def test_key_column_set_by_the_statement_is_the_after_image() -> None:
    # UPDATE t SET id = 7 WHERE id = 1: the after image holds id, not tag
    for builder in (False, True):
        block = _block(["id", "tag", "n"], ["id"], [((1, "a", 10), (7,))])
        key, _before, _after, old = _columns(block, builder)
        assert [orjson.loads(k) for k in key] == [{"id": 7, "tag": "a"}]
        assert [orjson.loads(o) for o in old] == [{"id": 1, "tag": "a"}]


def test_full_images_are_unchanged() -> None:
    for builder in (False, True):
        block = _block(["id", "tag", "n"], ["id", "tag", "n"], [((1, "a", 10), (1, "a", 11))])
        key, _before, _after, old = _columns(block, builder)
        assert [orjson.loads(k) for k in key] == [{"id": 1, "tag": "a"}] and old == [None]


def test_change_rows_take_the_key_from_the_before_image() -> None:
    record = SimpleNamespace(gtid="0-1-5", position=POS, ts_us=1, schema_version=1, seq=3)
    rows = block_changes(record, _block(["id", "tag", "n"], ["n"], list(ROWS)), "src")
    assert [r.key for r in rows] == [{"id": 1, "tag": "a"}, {"id": 2, "tag": "b"}]
    assert [r.after for r in rows] == [{"n": 20}, {"n": 40}]
    assert [before_key(r) for r in rows] == [None, None]
    moved = block_changes(record, _block(["id", "tag", "n"], ["id"], [((1, "a", 10), (7,))]), "s")
    assert moved[0].key == {"id": 7, "tag": "a"}
    assert before_key(moved[0]) == {"id": 1, "tag": "a"}
