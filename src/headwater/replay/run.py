"""Replay tables to Parquet (see the package docstring for the output layout).

Invariant: the manifest ``_replay.json`` is written last, by temporary file and rename, so
a directory with a manifest holds every table it names, complete.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from headwater.errors import ConfigError
from headwater.spark.asof import PARTIAL_IMAGE, plan_as_of, table_as_of
from headwater.store import EARLIEST, LATEST

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MANIFEST", "ReplayResult", "TableReplay", "replay_to_parquet", "spark_errors"]

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
        path = out / table
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
