"""The ``headwater_logs`` PySpark data source: log records of a directory's files.

::

    spark.dataSource.register(LogFilesDataSource)
    records = (spark.readStream.format("headwater_logs")
               .option("path", "/var/log/app").option("files", "app.log*")
               .option("recordStart", r"\\d{4}-\\d{2}-\\d{2} ")      # optional: multi-line
               .load())                              # file, file_num, offset, raw, read_us

Offsets are :class:`~headwater.logs.files.FilesOffset` dicts (per-file byte offsets, by
inode and fingerprint), kept by Spark in the query's checkpoint location: a restart after
SIGKILL replays the batch that was running with the same offsets, hence the same records,
and goes on from there, so no record is lost or read twice into a sink that is
idempotent per batch or per key (the SQL sinks are; ``ums_id_`` is the key).

``latestOffset`` runs on the driver (listing and the tail of each file); ``read`` on the
executors, one partition per ``chunkBytes`` of a file (records are cut at record starts,
:func:`~headwater.logs.files.read_chunk`), and yields Arrow batches.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit

from headwater.errors import ConfigError
from headwater.logs.files import (
    FileChunk,
    FilesOffset,
    advance,
    chunk_data,
    plan_chunks,
    record_spans,
    texts_of,
)
from headwater.logs.plan import RECORD_SCHEMA_DDL

if TYPE_CHECKING:
    import pyarrow

__all__ = ["LogFilesDataSource", "LogFilesStreamReader", "LogOptions", "log_options"]

_ARROW_ROWS = 65536
_ARROW_BYTES = 1 << 30


def _schema() -> pyarrow.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("file", pa.string()),
            ("file_num", pa.int32()),
            ("offset", pa.int64()),
            ("raw", pa.string()),
            ("read_us", pa.int64()),
        ]
    )


class LogOptions:
    """The source's options (strings, as Spark passes them), checked."""

    def __init__(self, options: dict[str, str]) -> None:
        # Spark passes option names case-insensitively (lower-cased): look them up so
        options = {k.lower(): v for k, v in options.items()}
        if "path" not in options:
            raise ConfigError("missing: path (the directory of the log files)", field="path")
        self.path = options["path"]
        self.files = options.get("files", "*.log*")
        self.record_start = options.get("recordstart") or None
        if self.record_start is not None:
            try:
                re.compile(self.record_start.encode())
            except re.error as e:
                raise ConfigError(f"bad regular expression: {e}", field="recordStart") from None
        try:
            self.idle_s = int(options.get("idlems", "2000")) / 1000
            self.chunk_bytes = int(options.get("chunkbytes", str(8 << 20)))
            self.partitions = int(options.get("partitions", "1"))
        except ValueError as e:
            raise ConfigError(
                f"not an integer: {e}", field="idleMs/chunkBytes/partitions"
            ) from None
        if self.chunk_bytes < 1024:
            raise ConfigError("must be at least 1024", field="chunkBytes")
        if self.partitions < 1:
            raise ConfigError("must be at least 1", field="partitions")


def log_options(options: dict[str, str]) -> LogOptions:
    return LogOptions(options)


class LogFilesDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "headwater_logs"

    def schema(self) -> str:
        return RECORD_SCHEMA_DDL

    def streamReader(self, schema: Any) -> LogFilesStreamReader:
        return LogFilesStreamReader(LogOptions(dict(self.options)))


class _Chunk(InputPartition):
    def __init__(self, chunk: FileChunk) -> None:
        super().__init__(chunk)
        self.chunk = chunk


class LogFilesStreamReader(DataSourceStreamReader):
    def __init__(self, options: LogOptions) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, Any]:
        return FilesOffset({}, 0, 0).to_dict()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        prev = FilesOffset.from_dict(start)
        o = self.options
        end = advance(o.path, o.files, prev, record_start=o.record_start, idle_s=o.idle_s)
        if all(prev.files.get(k, {}).get("off") == e["off"] for k, e in end.files.items()):
            return start  # nothing new: the same offset, so Spark runs no batch
        return end.to_dict()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        o = self.options
        chunks = plan_chunks(
            o.path,
            o.files,
            FilesOffset.from_dict(start),
            FilesOffset.from_dict(end),
            record_start=o.record_start,
            chunk_bytes=o.chunk_bytes,
            parallelism=o.partitions,
        )
        return [_Chunk(c) for c in chunks]

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        if not isinstance(partition, _Chunk):
            return
        c = partition.chunk
        data, lo = chunk_data(c)
        starts, ends = record_spans(
            data, lo, c.hi, aligned_mid=c.lo > c.first, record_start=c.record_start
        )
        i = 0
        while i < len(starts):
            # at most _ARROW_ROWS records and _ARROW_BYTES bytes (int32 offsets)
            j = min(i + _ARROW_ROWS, int(starts.searchsorted(starts[i] + _ARROW_BYTES)))
            j = max(j, i + 1)
            yield _batch(c, data, lo, starts[i:j], ends[i:j])
            i = j

    def commit(self, end: dict[str, Any]) -> None:
        FilesOffset.from_dict(end)  # a malformed offset is a bug: fail loudly


def _batch(c: FileChunk, data: bytes, lo: int, starts: Any, ends: Any) -> pyarrow.RecordBatch:
    """The records ``data[starts[i]:ends[i]]`` as an Arrow batch. The records are
    consecutive, each followed by its newline, so the file's bytes are the values buffer
    as they are (no copy, no Python object per record): the offsets are the starts, each
    value ends with its newline, which one vectorized slice removes (after the CRs of CRLF
    line ends)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(starts)
    first, last = int(starts[0]), int(ends[-1])
    if last < len(data):
        values = pa.py_buffer(data).slice(first, last + 1 - first)
    else:  # a last line without its newline (never in a chunk: they end at a newline)
        values = pa.py_buffer(data[first:] + b"\n")
    offsets = np.append(starts - first, last + 1 - first).astype(np.int32)
    raw = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), values])
    try:
        text = raw.cast(pa.string())  # validates UTF-8 in C
    except pa.ArrowInvalid:  # not UTF-8: replacement characters, as Python decodes it
        texts = texts_of(data, lo, starts, ends)
        text = pa.array([t.decode("utf-8", "replace") + "\n" for _, t in texts], pa.string())
    else:
        if data.find(b"\r", first, last + 1) >= 0:  # CRLF line ends: as Python cuts them
            text = pc.replace_substring(text, "\r\n", "\n")
    text = pc.utf8_slice_codeunits(text, 0, -1)
    return pa.RecordBatch.from_arrays(
        [
            pa.nulls(n, pa.string()).fill_null(c.name),
            pa.array(np.full(n, c.ordinal, np.int32)),
            pa.array(starts + lo),
            text,
            pa.array(np.full(n, c.at_us, np.int64)),
        ],
        schema=_schema(),
    )
