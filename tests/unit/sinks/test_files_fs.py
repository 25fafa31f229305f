"""The file sinks' filesystem layer without Spark: a plain path (the OS's calls) and a
``file://`` URI (pyarrow.fs, as on executors) behave the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.sinks.files.fs import ArrowStore, LocalStore, is_uri, store_for


def test_uris_and_plain_paths_are_told_apart() -> None:
    assert [is_uri(p) for p in ("file:///x", "hdfs://nn:8020/x", "s3a://b/k", "/x", "x/y",
                                "C:\\x")] == [True, True, True, False, False, False]  # fmt: skip
    assert isinstance(store_for("/x"), LocalStore)
    assert isinstance(store_for("file:///x"), ArrowStore)


def test_s3a_is_s3_to_pyarrow_and_the_bucket_is_part_of_the_path() -> None:
    assert ArrowStore.location("s3a://bucket/a/b.parquet") == ("s3", "bucket", "bucket/a/b.parquet")
    assert ArrowStore.location("hdfs://nn:8020/a/b") == ("hdfs", "nn:8020", "/a/b")
    assert ArrowStore.location("file:///a/b") == ("file", "", "/a/b")


@pytest.mark.parametrize("uri", [False, True], ids=["plain", "file-uri"])
def test_publish_operations(tmp_path: Path, uri: bool) -> None:
    root = tmp_path.as_uri() if uri else str(tmp_path)
    store = store_for(root)
    folder = store.join(root, "table_id=d.t", "date=1970-01-01")
    store.makedirs(folder)
    for name in ("a.parquet", "b.parquet"):
        (tmp_path / "table_id=d.t" / "date=1970-01-01" / name).write_text(name)
    (tmp_path / "top.parquet").write_text("top")
    assert sorted(store.files(root)) == [
        (".", "top.parquet"),
        ("table_id=d.t/date=1970-01-01", "a.parquet"),
        ("table_id=d.t/date=1970-01-01", "b.parquet"),
    ]
    store.replace(store.join(folder, "a.parquet"), store.join(folder, "b.parquet"))
    assert (tmp_path / "table_id=d.t" / "date=1970-01-01" / "b.parquet").read_text() == "a.parquet"
    assert not store.exists(store.join(folder, "a.parquet"))
    found = store.glob(store.join(root, "table_id=*", "date=*", "b*.parquet"))
    assert [store.normal(f) for f in found] == [store.normal(store.join(folder, "b.parquet"))]
    assert store.glob(store.join(root, "table_id=*", "date=*", "top*.parquet")) == []
    store.remove(store.join(folder, "b.parquet"))
    store.rmtree(store.join(root, "table_id=d.t"))
    store.rmtree(store.join(root, "missing"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["top.parquet"]
