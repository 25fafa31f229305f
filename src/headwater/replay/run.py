"""Replay tables to Parquet (see the package docstring for the output layout).

A table the key-first read takes (:func:`headwater.spark.asof.key_first_read`) whose
columns all come typed from the read is written by the Spark tasks themselves, Arrow
straight to Parquet with pyarrow (:class:`ParquetParts`, one file per part): no row
crosses into the JVM. Should a part meet a value the read cannot type (e.g. integers
logged before an ALTER made the column text), the table is written again the general
way (``table_as_of(...).write.parquet``), whose JVM types it as the typed view does.

Invariant: the manifest ``_replay.json`` is written last, by temporary file and rename, so
a directory with a manifest holds every table it names, complete. A part's file is
written under a temporary name and renamed, so a retried task replaces it whole.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from headwater.errors import ConfigError
from headwater.spark.asof import PARTIAL_IMAGE, key_first_read, plan_as_of, table_as_of
from headwater.spark.asofscan import ScanSpec
from headwater.store import EARLIEST, LATEST

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = [
    "MANIFEST",
    "ParquetParts",
    "ReplayResult",
    "TableReplay",
    "replay_to_parquet",
    "spark_errors",
]

MANIFEST = "_replay.json"


@dataclass(frozen=True, slots=True)
class TableReplay:
    """One table's replay: where it went and how many rows it has."""

    table: str
    path: str
    rows: int
    columns: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What :func:`replay_to_parquet` did (also the manifest's content)."""

    as_of: str
    first_seq: int
    end_seq: int
    base: str | None
    base_position: str | None
    tables: tuple[TableReplay, ...]
    seconds: float


@contextmanager
def spark_errors() -> Iterator[None]:
    """Turn the Spark error a partial row image raises inside a query
    (:data:`headwater.spark.asof.PARTIAL_IMAGE`) into a :class:`ConfigError` saying so."""
    try:
        yield
    except Exception as exc:
        text = str(exc)
        at = text.find(PARTIAL_IMAGE)
        if at < 0:
            raise
        raise ConfigError(text[at:].split("\n", 1)[0].strip(" .'\""), field="as_of") from None


def pq_rows(path: Path) -> int:
    """Rows of the Parquet files under ``path`` (footers only)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(path.glob("*.parquet")))


class ParquetParts:
    """``mapPartitions`` body over ``parallelize(range(parts), parts)``: each part's rows
    written by the task to ``<directory>/part-NNNNN.parquet``; yields ``(part, rows, odd)``
    per part, ``odd`` when a value needed typing in the JVM (then no file is left).

    A plain RDD job, not ``spark.range(parts).mapInArrow``: the tasks return three numbers
    each, and the SQL query around them (planning, code generation, Arrow batches both
    ways) cost the JVM about 0.07 CPU-seconds and the Python workers 0.03 more per replay
    (trivial jobs of two tasks, warm session, load 3.5: JVM 0.15-0.20 against 0.08-0.13)."""

    def __init__(self, scan: ScanSpec, directory: str) -> None:
        self.scan = scan
        self.directory = directory

    def __call__(self, parts: Iterable[int]) -> Iterator[tuple[int, int, bool]]:
        from headwater.gcpause import freeze_worker_heap, gc_paused

        with gc_paused():
            for part in parts:
                rows, odd = self.write(part)
                yield part, rows, odd
        freeze_worker_heap()  # the daemon's full collection after the task: 37-45 ms

    def write(self, part: int) -> tuple[int, bool]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        scan = self.scan
        schema = scan.typed_schema()
        path = os.path.join(self.directory, f"part-{part:05d}.parquet")
        tmp = path + ".tmp"
        rows = 0
        writer = None
        try:
            for table in scan.read_part(part):
                n = table.num_rows
                if any(table[f"_t{c.index}"].null_count != n for c in scan.columns):
                    if writer is not None:
                        writer.close()
                        os.unlink(tmp)
                    return 0, True
                typed = pa.Table.from_arrays(
                    [table[f"_v{c.index}"] for c in scan.columns], schema=schema
                )
                if writer is None:
                    writer = pq.ParquetWriter(tmp, schema, **_layout(typed))
                writer.write_table(typed)
                rows += n
            if writer is None:
                writer = pq.ParquetWriter(tmp, schema)
        except BaseException:
            if writer is not None:
                writer.close()
                os.unlink(tmp)
            raise
        writer.close()
        os.replace(tmp, path)
        return rows, False


def _repeating(table: pa.Table) -> list[str]:
    """The columns worth dictionary encoding in Parquet: those whose first batch has at
    most one distinct value in :data:`_DICTIONARY_RATIO` rows. Others are written plain:
    the writer's dictionary attempt on unique values (keys, timestamps, free text) cost
    about half of the write and ends in plain pages anyway (1 MB dictionary page limit)."""
    import pyarrow.compute as pc

    n = max(table.num_rows, 1)
    return [
        name
        for name, column in zip(table.column_names, table.columns, strict=True)
        if pc.count_distinct(column, mode="all").as_py() * _DICTIONARY_RATIO <= n
    ]


#: A column is dictionary encoded when its first batch repeats values this often on average
_DICTIONARY_RATIO = 8


def _layout(table: pa.Table) -> dict[str, Any]:
    """The Parquet writer's options for a part whose first batch is ``table``: columns
    that repeat values dictionary encoded (:func:`_repeating`); the other integer columns
    DELTA_BINARY_PACKED and not compressed (keys and ids come mostly ascending in the
    survivors' log order, so their deltas pack in a few bits; random values cost about 2 %
    over plain); every other column LZ4 (``LZ4_RAW``: read by Spark 3.3+, DuckDB and
    pyarrow). With Snappy everywhere, as before, the compression was half of the write.
    bench/replay.py's 2.1 million changes, one part's 667 000 rows: 0.069 -> 0.048
    CPU-seconds, 22.1 -> 18.3 MB."""
    import pyarrow as pa

    dictionary = _repeating(table)
    deltas = [
        field.name
        for field in table.schema
        if pa.types.is_integer(field.type) and field.name not in dictionary
    ]
    return {
        "use_dictionary": dictionary,
        "column_encoding": dict.fromkeys(deltas, "DELTA_BINARY_PACKED"),
        "compression": {name: "none" if name in deltas else "lz4" for name in table.schema.names},
    }


def _write_typed(spark: SparkSession, scan: ScanSpec, path: Path) -> int | None:
    """Write the key-first read's rows of ``scan`` straight to Parquet under ``path``
    (:class:`ParquetParts`): the rows written, or None when a part needs the JVM's typing
    (nothing written)."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    parts = spark.sparkContext.parallelize(range(scan.parts), scan.parts)
    done = parts.mapPartitions(ParquetParts(scan, str(path))).collect()
    if any(odd for _part, _rows, odd in done):
        shutil.rmtree(path, ignore_errors=True)
        return None
    return sum(rows for _part, rows, _odd in done)


def replay_to_parquet(
    spark: SparkSession,
    log: str | os.PathLike[str] | Mapping[str, str],
    tables: Sequence[str],
    output: str | os.PathLike[str],
    *,
    as_of: str = LATEST,
    base: str | os.PathLike[str] | None = None,
    base_position: str | None = None,
    partitions: int | None = None,
) -> ReplayResult:
    """Rebuild ``tables`` as of ``as_of`` and write them under ``output`` (overwritten per
    table). ``base`` is a directory holding one Parquet file set per table
    (``<base>/<db>.<table>``, e.g. an earlier replay's output), taken at ``base_position``."""
    if not tables:
        raise ConfigError("name at least one table", field="tables")
    if (base is None) != (base_position is None):
        raise ConfigError("give both a base image and its position, or neither", field="base")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    done: list[TableReplay] = []
    first = end = 0
    for table in tables:
        table_base = None
        if base is not None:
            table_base = Path(base) / table
            if not table_base.exists():
                raise ConfigError(f"{table_base} does not exist", field="base")
        plan = plan_as_of(
            log, table, as_of=as_of, start=base_position or EARLIEST, partitions=partitions
        )
        first, end = plan.first_seq, plan.end_seq
        path = out / table
        scan = None if table_base is not None else key_first_read(spark, plan, table, partitions)
        if scan is not None and scan.typed:
            with spark_errors():
                rows = _write_typed(spark, scan, path)
                if rows is not None:
                    names = tuple(c.name for c in scan.columns)
                    done.append(TableReplay(table, str(path), rows, names))
                    continue
        df = table_as_of(
            spark,
            log,
            table,
            as_of=as_of,
            base=None if table_base is None else str(table_base),
            base_position=base_position,
            partitions=partitions,
            plan=plan,
        )
        with spark_errors():
            df.write.mode("overwrite").parquet(str(path))
        rows = pq_rows(path)
        done.append(TableReplay(table, str(path), rows, tuple(df.columns)))
    result = ReplayResult(
        as_of=as_of,
        first_seq=first,
        end_seq=end,
        base=None if base is None else os.fspath(base),
        base_position=base_position,
        tables=tuple(done),
        seconds=round(time.monotonic() - began, 3),
    )
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_bytes(orjson.dumps(asdict(result), option=orjson.OPT_INDENT_2))
    os.replace(tmp, out / MANIFEST)
    return result
