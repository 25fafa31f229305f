"""Helpers of the snapshot integration tests: tables of several key shapes, a concurrent
workload on them, a reader task capturing them, and a comparison of source and target."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from headwater.config import FilterConfig
from headwater.sandbox import MariadbSandbox
from tests.integration.test_reader_capture import Running, source_config, start_at

#: name -> (DDL, key columns, all columns)
SHAPES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "ints": (
        "CREATE TABLE ints (id INT PRIMARY KEY, v VARCHAR(30) NOT NULL, n INT NOT NULL)",
        ("id",),
        ("id", "v", "n"),
    ),
    "comp": (
        "CREATE TABLE comp (a INT NOT NULL, b VARCHAR(12) NOT NULL, v VARCHAR(30) NOT NULL,"
        " n INT NOT NULL, PRIMARY KEY (a, b))",
        ("a", "b"),
        ("a", "b", "v", "n"),
    ),
    "strs": (
        "CREATE TABLE strs (code VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY,"
        " v VARCHAR(30) NOT NULL, n INT NOT NULL)",
        ("code",),
        ("code", "v", "n"),
    ),
    "skew": (
        "CREATE TABLE skew (id BIGINT PRIMARY KEY, v VARCHAR(30) NOT NULL, n INT NOT NULL)",
        ("id",),
        ("id", "v", "n"),
    ),
}


def key_values(table: str, i: int) -> tuple[object, ...]:
    """The i-th key of a table's key space (skew: dense low keys, then huge sparse ones)."""
    if table == "ints":
        return (i,)
    if table == "comp":
        return (i // 7, f"b{i % 7:03d}")
    if table == "strs":
        return (("Ab" if i % 2 else "aC") + f"{i:07d}",)
    return (i if i < 0.8 * ROWS else 10**12 + i * 7919,)


ROWS = 2000


def fill(server: MariadbSandbox, db: str, rows: int = ROWS) -> None:
    server.execute(*(ddl for ddl, _, _ in SHAPES.values()), database=db)
    conn = server.connect(db)
    try:
        with conn.cursor() as cur:
            for table, (_, _key, cols) in SHAPES.items():
                values = [(*key_values(table, i), f"v{i}", 0) for i in range(rows)]
                marks = ", ".join(["%s"] * len(cols))
                cur.executemany(f"INSERT INTO {table} VALUES ({marks})", values)
    finally:
        conn.close()


@dataclass
class Churn:
    """Updates, deletes and re-inserts of existing keys, and inserts of new keys, on every
    table, in a thread, until stopped."""

    server: MariadbSandbox
    db: str
    seed: int
    rows: int = ROWS
    statements: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: BaseException | None = None

    def step(self, cur: object, rng: random.Random) -> None:
        table = rng.choice(list(SHAPES))
        _, key, cols = SHAPES[table]
        # New keys beyond the filled ones, but not for ``ints``: its snapshot must plan
        # "even" chunks (a dense key, max - min + 1 <= DENSE_SPAN * count), and keys up to
        # rows + 200 with the deletes before the plan made it sparse under load (CI).
        i = rng.randrange(self.rows if table == "ints" else self.rows + 200)
        k = key_values(table, i)
        where = " AND ".join(f"{c} = %s" for c in key)
        r = rng.random()
        if r < 0.45:
            sql, args = (
                f"UPDATE {table} SET v = %s, n = n + 1 WHERE {where}",
                (f"u{rng.random()}", *k),
            )
        elif r < 0.7:
            sql, args = f"DELETE FROM {table} WHERE {where}", k
        else:
            marks = ", ".join(["%s"] * len(cols))
            sql = f"REPLACE INTO {table} VALUES ({marks})"
            args = (*k, f"r{rng.random()}", rng.randrange(100))
        cur.execute(sql, args)  # type: ignore[attr-defined]
        self.statements += 1

    def run(self) -> None:
        rng = random.Random(self.seed)
        conn = self.server.connect(self.db)
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    self.step(cur, rng)
        except BaseException as e:
            self.error = e
        finally:
            conn.close()

    def __enter__(self) -> Churn:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(30)
        if self.error is not None:
            raise self.error


def rows_of(server: MariadbSandbox, db: str, table: str) -> list[tuple[str | None, ...]]:
    _, key, cols = SHAPES[table]
    order = ", ".join(f"CAST({c} AS BINARY)" for c in key)
    got = server.query(f"SELECT {', '.join(cols)} FROM `{db}`.`{table}` ORDER BY {order}")
    return [tuple(None if v is None else str(v) for v in row) for row in got]


def assert_equal(source: MariadbSandbox, db: str, target: MariadbSandbox, dst: str) -> None:
    for table in SHAPES:
        expected = rows_of(source, db, table)
        assert expected, table
        got = rows_of(target, dst, table)
        if got != expected:
            missing = sorted(set(expected) - set(got))[:5]
            extra = sorted(set(got) - set(expected))[:5]
            raise AssertionError(
                f"{dst}.{table} differs from {db}.{table}: {len(got)} rows against"
                f" {len(expected)}; missing or different {missing}; extra or different {extra}"
            )


@pytest.fixture
def captured(mariadb: MariadbSandbox, db: str, tmp_path: Path) -> Iterator[tuple[Running, Path]]:
    """Filled tables, then a reader task capturing ``db`` (in a thread)."""
    yield from capture(mariadb, db, tmp_path, ROWS)


def capture(
    mariadb: MariadbSandbox, db: str, tmp_path: Path, rows: int
) -> Iterator[tuple[Running, Path]]:
    fill(mariadb, db, rows)
    task_dir = tmp_path / "task"
    config = source_config(
        mariadb,
        f"snap_{abs(hash(db)) % 10**6}",
        start=start_at(mariadb),
        filters=FilterConfig(include=(f"{db}\\..*",)),
    )
    running = Running(config, task_dir)
    server_marker = "CREATE TABLE marker (id INT PRIMARY KEY)"  # something to capture
    mariadb.execute(server_marker, database=db)
    try:
        yield running, task_dir
    finally:
        running.stop()


def pipeline_yaml(
    path: Path,
    task_dir: Path,
    *,
    src: str,
    dst: str,
    target: MariadbSandbox,
    transforms: str = "",
) -> Path:
    """A pipeline renaming ``src`` to ``dst`` into ``target``; ``transforms``: YAML list
    items after the rename (a value-editing one keeps snapshots on the general path)."""
    path.write_text(
        f"name: snap\nsource:\n  path: {task_dir}\n"
        f"checkpoint: {path.parent / 'ck'}\nprogress: 1\n"
        f"transforms:\n  - rename_database: {{{src}: {dst}}}\n{transforms}"
        f"sinks:\n  - type: mysql\n    host: {target.host}\n    port: {target.port}\n"
        "    user: root\n    create_tables: true\n    shards: 2\n    ddl: skip\n"
        "    checkpoint_database: hw_snap\n"
    )
    return path
