"""Builds and runs a pipeline's streaming query: headwater source -> transforms -> sinks.

One :class:`PipelineRunner` per :class:`~headwater.pipeline.config.PipelineConfig`:

* the query reads ``spark.readStream.format("headwater")`` with the configured options,
  applies the transforms in order (:func:`~headwater.spark.transforms.apply_transforms`)
  and hands each micro-batch to every sink in the configured order through
  ``foreachBatch`` (with several sinks the batch is cached, so the source is read once
  per batch);
* a micro-batch of at most ``driverApplyMaxRows`` rows (a source option, 25,000) runs no
  Spark job: ``foreachBatch`` reads and applies it in the driver with the same decoding,
  transforms and sink transactions (:mod:`headwater.pipeline.direct`; SQL sinks, no
  ``filter`` or computed column, no signals), and its figures are patched into the
  progress reports that Spark leaves empty for it;
* a pipeline whose sinks are all message buses sends every batch but the first from the
  driver, whatever its size, with the same messages and task indexes as the Spark job's
  (:mod:`headwater.pipeline.busdirect`; same conditions, figures patched the same way);
* progress lives in the checkpoint location (Spark's offsets and commits): a restart,
  after a clean stop or a crash, resumes from the last committed batch; a batch that was
  running at a crash is replayed with the same id and the same offsets, which the SQL
  sinks' checkpoint tables turn into exactly-once;
* :meth:`PipelineRunner.run` starts the query and then, until it ends or ``stop`` is set,
  writes a progress line every ``progress`` seconds (batch, rows, rate, lag) and, when
  asked to stop, waits for the running batch to finish before stopping the query (bounded
  by ``stop_timeout``).

Sinks are built from the configuration by :func:`~headwater.pipeline.sinks.build_sink`
(``type`` selects a sink folder, which parses its own section).

Re-snapshots on signal (``snapshot`` section). The query counts the rows inserted into
the signal table in each batch (an observed metric, no extra job). When a finished batch
had some, :meth:`PipelineRunner.run` writes the batches' offset ranges to
``<checkpoint>/resnapshot-pending.json``, stops the query after its batch, reads the
signal rows of those ranges from the log, runs each snapshot request (its own state file
``resnap-<id>.json``, so a killed one resumes at chunk granularity; one that finished is
never run again), removes the pending file and restarts the query. A pending file found
at start is processed first. Why this is exact: the stream stopped after the batch at
``S``; the snapshot's waves bring each table to its state at the snapshot's last record
``E`` through their own checkpoint rows (pipeline ``<name>.resnap.<id>``), leaving the
stream's untouched; the stream then goes on from ``S + 1`` and replays ``(S, E]`` in log
order on top, and replaying a suffix of the log in order over a state that the suffix's
prefix produced gives the state the whole suffix gives (every change sets whole column
values or deletes). A crash in the fraction of a second between a batch's commit and the
pending file loses that batch's signals: send them again under a new id. A re-snapshot
that fails (a signal naming a table that does not exist, a lost source) is reported on
the progress stream and in the log, and the stream goes on without it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

import orjson

from headwater.changes.sequence import record_of, row_of, sequence_of
from headwater.errors import HeadwaterError
from headwater.pipeline.columns import source_options
from headwater.pipeline.config import PipelineConfig
from headwater.pipeline.failures import is_spark_error, spark_failure
from headwater.pipeline.sinks import build_sink
from headwater.pipeline.status import OBSERVED_IN, StatusReporter, table_counts
from headwater.spark.transforms import apply_transforms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from headwater.pipeline.busdirect import BusDirect
    from headwater.pipeline.direct import DirectApply
    from headwater.pipeline.netapply import NetApply

__all__ = [
    "PIPELINE_SPARK_CONF",
    "PipelineError",
    "PipelineRunner",
    "check_shippable",
    "pipeline_conf",
]

log = logging.getLogger(__name__)


class PipelineError(HeadwaterError):
    """The streaming query failed; the message carries Spark's error (for a rule, the rule
    file and the change's position)."""


class BatchSink(Protocol):
    """What the runner needs of a sink: ``write_batch(df, batch_id)``."""

    def write_batch(self, df: DataFrame, batch_id: int) -> None: ...


# --- the query ------------------------------------------------------------------------------


class _ForEachBatch:
    """The ``foreachBatch`` function: every sink in order.

    With one sink the batch is not cached: that sink's job reads the source once anyway,
    and building an in-memory copy first costs more than it saves. With several, the batch
    is cached so the source is read once. The newest commit time (for the lag of progress
    lines) comes from the query's observed metrics (:data:`OBSERVED`), computed by the
    sinks' own jobs, not by an extra job.
    """

    def __init__(
        self,
        sinks: list[BatchSink],
        direct: DirectApply | None = None,
        net: NetApply | None = None,
        bus: BusDirect | None = None,
    ) -> None:
        self.sinks = sinks
        #: small batches applied in the driver (headwater.pipeline.direct), or None
        self.direct = direct
        #: large batches applied as their net effect (headwater.pipeline.netapply), or None
        self.net = net
        #: bus sinks' batches sent from the driver (headwater.pipeline.busdirect), or None
        self.bus = bus
        self.query: StreamingQuery | None = None
        self.lock = threading.Lock()
        self.batch_end_s: float | None = None
        #: batch id -> when every sink had committed it (the heartbeat lag of log sources)
        self.committed: dict[int, float] = {}
        #: the newest batch id committed (-1: none yet)
        self.last_committed = -1

    @property
    def newest_ts_us(self) -> int | None:
        """The newest commit time (µs) of the last finished batch, if any."""
        progress: Any = self.query.lastProgress if self.query is not None else None
        return _newest(self.patched(progress))

    def patched(self, progress: Any) -> Any:
        """A progress report (or a list of them) with the driver's figures of a batch it
        applied (Spark read nothing for it)."""
        if not progress:
            return progress
        reports = progress if isinstance(progress, list) else [progress]
        for path in (self.direct, self.net, self.bus):
            if path is not None:
                reports = path.patch(reports)
        return reports if isinstance(progress, list) else reports[0]

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        direct = self.direct is not None and self.direct.apply(batch_id) is not None
        if not direct and self.bus is not None:
            direct = self.bus.apply(df.sparkSession, batch_id) is not None
        if not direct and (self.net is None or self.net.apply(df.sparkSession, batch_id) is None):
            self._spark(df, batch_id)
        with self.lock:
            self.batch_end_s = time.time()
            self.committed[batch_id] = self.batch_end_s
            self.last_committed = max(self.last_committed, batch_id)
            for gone in [b for b in self.committed if b < batch_id - 1000]:
                del self.committed[gone]

    def _spark(self, df: DataFrame, batch_id: int) -> None:
        cache = len(self.sinks) > 1
        if cache:
            df = df.persist()
        try:
            for sink in self.sinks:
                sink.write_batch(df, batch_id)
        finally:
            if cache:
                df.unpersist()


#: Spark settings of pipeline sessions (the pipeline file's ``spark.conf`` overrides them).
#: Micro-batches are small and frequent, so what each one costs besides its rows counts:
#:
#: * the checkpoint is a local directory (``checkpoint:``), and Spark's default manager
#:   for it (FileContext) renames through Hadoop's local file system, whose link-status
#:   calls fork a ``readlink`` process from the JVM (seen with strace: several per
#:   micro-batch): the offset and commit files took 50-90 ms a micro-batch on two cores,
#:   15-40 ms with the FileSystem-based manager, which writes the same files the same way
#:   (temporary file, then rename: atomic on a local file system);
#: * adaptive query execution re-plans at each shuffle, a second Spark job per
#:   micro-batch; the pipeline's one shuffle (SQL sinks) has an explicit partition count,
#:   which it would leave as it is anyway, and transforms are row by row.
PIPELINE_SPARK_CONF = {
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
    "spark.sql.adaptive.enabled": "false",
}


def pipeline_conf(config: PipelineConfig) -> dict[str, str]:
    """The Spark settings of ``config``'s session: :data:`PIPELINE_SPARK_CONF`, then the
    pipeline's ``spark.conf``. ``headwater.jvm.c1Only`` (C2 off,
    :mod:`headwater.spark.session`) defaults to ``"true"`` for a pipeline of the change log
    whose batches can leave Spark (no ``filter`` or computed column: those run as Spark SQL
    in every batch): its JVM plans micro-batches and runs small jobs, and C2 kept compiling
    Spark's per-job code in every one (bench/pipeline.py, 2026-11-25, back to back at load
    1.2-1.8: 0.98 against 0.82 batched, the round's JVM 0.17-0.19 against 0.32-0.52 CPU-s;
    bench/latency.py --quick: a restart's first commit 10.1 against 21.4 s). Log-file
    pipelines keep C2: their groups run as generated JVM code, 1.5x slower under C1
    (bench/logs.py --quick). ``spark.conf`` overrides the default either way."""
    from headwater.pipeline.direct import sql_transforms
    from headwater.spark.session import C1_ONLY

    conf = {**PIPELINE_SPARK_CONF, **dict(config.spark_conf)}
    if config.source.logs is None and not sql_transforms(config):
        conf.setdefault(C1_ONLY, "true")
    return conf


#: Name of the query's observed metrics (``newest_ts_us``: the batch's newest commit).
OBSERVED = "headwater"
#: Observed when signals are watched: ``signals``, rows inserted into the signal table.
OBSERVED_SIGNALS = "headwater_signals"

#: Sink batch ids of re-snapshot waves: ``RESNAPSHOT_BATCH_BASE + record * 10_000 + wave``
#: (``record``: the store record of the signal), apart from the stream's and the first
#: snapshot's ids, so that sinks idempotent per batch id never take one for another.
RESNAPSHOT_BATCH_BASE = 200_000_000_000


#: How often the runner's loop looks at its stop event and at the query's end (Python
#: events: no call into the JVM).
POLL_S = 0.2


def _watch(query: StreamingQuery) -> threading.Event:
    """An event set when ``query`` has ended (stopped or failed): a daemon thread waits in
    ``awaitTermination()``, one blocked Py4J call instead of one every poll."""
    ended = threading.Event()

    def wait() -> None:
        try:
            query.awaitTermination()
        except Exception:  # the query failed: run() reads query.exception()
            pass
        finally:
            ended.set()

    threading.Thread(target=wait, name="headwater-query-watch", daemon=True).start()
    return ended


def _in_batch(status: Any) -> bool:
    """Whether a query's status says a trigger runs that is past getting its offsets."""
    if not status.get("isTriggerActive", False):
        return False
    return not str(status.get("message", "")).startswith("Getting offsets from")


def _reported_through(reports: Any) -> int:
    """The newest batch id whose own report is among ``reports`` (an idle query reports
    under the id of the batch it has yet to run: that id's report is still to come)."""
    newest = -1
    for p in reports or ():
        batch = int(p.get("batchId", -1))
        newest = max(newest, batch if p.get("numInputRows") else batch - 1)
    return newest


def _signal_batches(
    query: StreamingQuery | list[Any], seen: int
) -> tuple[list[tuple[int, int]], int]:
    """Sequence ranges ``[lo, hi)`` of finished batches after ``seen`` whose observed
    signal count is positive, and the newest batch id looked at (``query``: the query, or
    its ``recentProgress`` fetched already).

    Only reports of batches that read rows count: a query waiting for data reports its
    progress under the id of the batch it has yet to run, so taking that id as seen hid
    the batch's own report when it came (a signal right after a restart was missed)."""
    from headwater.spark.offsets import LogOffset

    out: list[tuple[int, int]] = []
    newest = seen
    for p in query if isinstance(query, list) else query.recentProgress:
        batch = int(p.get("batchId", -1))
        if batch <= seen or not p.get("numInputRows"):
            continue
        newest = max(newest, batch)
        metrics = (p.get("observedMetrics") or {}).get(OBSERVED_SIGNALS)
        if metrics is None or not metrics["signals"]:  # a Row (or a dict)
            continue
        src = p["sources"][0]
        lo, hi = (
            LogOffset.from_dict(orjson.loads(o) if isinstance(o, str) else o)
            for o in (src["startOffset"], src["endOffset"])
        )
        out.append((sequence_of(lo.seq, lo.row), sequence_of(hi.seq, hi.row)))
    return out, newest


def _write_pending(path: Path, ranges: list[tuple[int, int]]) -> None:
    """Add ``ranges`` to the pending file (atomically; ranges already there stay)."""
    from headwater.store._fs import atomic_write

    old = orjson.loads(path.read_bytes())["ranges"] if path.exists() else []
    doc = {"ranges": [*old, *([lo, hi] for lo, hi in ranges)]}
    atomic_write(str(path), orjson.dumps(doc))


class PipelineRunner:
    """Runs one pipeline (see the module docstring). ``spark``: an existing session (tests);
    otherwise one is built with ``master`` (default: the configuration's)."""

    def __init__(
        self,
        config: PipelineConfig,
        *,
        master: str | None = None,
        spark: SparkSession | None = None,
    ) -> None:
        self.config = config
        self.master = master or config.master
        self._spark = spark
        self.sinks = [build_sink(s, config) for s in config.sinks]
        for section, sink in zip(config.sinks, self.sinks, strict=True):
            check_shippable(sink, config, section.line, section.path)
        from headwater.pipeline.busdirect import BusDirect
        from headwater.pipeline.direct import DirectApply
        from headwater.pipeline.netapply import NetApply

        self.writer = _ForEachBatch(
            self.sinks,
            DirectApply.of(config, self.sinks),
            NetApply.of(config, self.sinks),
            BusDirect.of(config, self.sinks),
        )
        self.query: StreamingQuery | None = None
        #: results of the re-snapshots this runner ran (signals)
        self.resnapshots: list[Any] = []
        # status file, metrics, console report
        self.status = StatusReporter(config, commits=self.writer.committed)

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from headwater.spark.session import build_session

            # (build_session points local Python workers at this interpreter; a cluster's
            # workers run the Python that has headwater there: docs/cluster.md)
            self._spark = build_session(
                self.master,
                f"headwater-pipeline-{self.config.name}",
                conf=pipeline_conf(self.config),
            )
        return self._spark

    def changes(self) -> DataFrame:
        """The transformed change stream (a streaming DataFrame)."""
        from headwater.spark import register

        spark = self.spark
        logs = self.config.source.logs
        if logs is not None:  # a log-file source (headwater.logs): its own stream
            from pyspark.sql import functions as F

            from headwater.logs.config import log_changes, write_schema

            assert self.config.source.schema_file is not None
            write_schema(logs, self.config.source.schema_file)
            read = log_changes(spark, logs).observe(OBSERVED_IN, table_counts(F))
            rows = apply_transforms(read, self.config.transforms)
            return rows.observe(OBSERVED, *_observed_columns(F))
        register(spark)
        reader = spark.readStream.format("headwater")
        # Only the columns the plan reads (headwater.pipeline.columns).
        for key, value in source_options(self.config, self.sinks).items():
            reader = reader.option(key, value)
        from pyspark.sql import functions as F

        raw = reader.load().observe(OBSERVED_IN, table_counts(F))  # rows read, per table
        if self.config.snapshot is not None:
            # Before the transforms: signal rows are matched on the source's names, and a
            # filter that drops them from the sinks still lets them be counted.
            db, _, table = self.config.snapshot.signal_table.partition(".")
            is_signal = (
                (F.col("database") == db) & (F.col("table") == table) & (F.col("op") == "insert")
            )
            raw = raw.observe(
                OBSERVED_SIGNALS, F.sum(F.when(is_signal, 1).otherwise(0)).alias("signals")
            )
        changes = apply_transforms(raw, self.config.transforms)
        return changes.observe(OBSERVED, *_observed_columns(F))

    def start(self, *, available_now: bool = False) -> StreamingQuery:
        """Start the query; ``available_now`` processes what the log holds now, then ends."""
        self.config.checkpoint.mkdir(parents=True, exist_ok=True)
        writer = (
            self.changes()
            .writeStream.queryName(self.config.name.replace("-", "_").replace(".", "_"))
            .option("checkpointLocation", str(self.config.checkpoint))
            .foreachBatch(self.writer)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        elif self.config.trigger_s > 0:
            writer = writer.trigger(processingTime=f"{self.config.trigger_s} seconds")
        self.query = writer.start()
        self.writer.query = self.query
        return self.query

    def run(
        self,
        *,
        available_now: bool = False,
        stop: threading.Event | None = None,
        progress: TextIO | None = None,
        stop_timeout: float = 300.0,
    ) -> int:
        """Run until the query ends (``available_now``) or ``stop`` is set; returns 0.

        Progress lines go to ``progress`` (default stderr). Raises PipelineError when the
        query fails.
        """
        out = progress or sys.stderr
        stop = stop or threading.Event()
        if stop.is_set():  # asked to stop before the query started: nothing to wait for
            return 0
        from headwater.pipeline.sharedpaths import check_shared

        check_shared(self.spark, self.config)  # on a cluster: file sinks' paths are shared
        self.resnapshot_pending()
        query = self.start(available_now=available_now)
        self.status.tick((), None)
        out.write(f"pipeline {self.config.name}: started\n")
        out.flush()
        last_line = time.monotonic()
        last_batch = -1
        seen_batch = -1
        # Polling (issue #17, an idle pipeline's CPU): every call on the query is a Py4J
        # round trip, and recentProgress is one per report kept (up to 100, each turned
        # into JSON in the JVM and parsed here). The loop waits on Python events only: a
        # thread blocked in awaitTermination() says when the query ended, and the query's
        # reports are fetched only when a batch committed since they were last fetched.
        done = _watch(query)
        status_through = signals_through = -1  # batches whose reports were fetched
        try:
            while not done.is_set():
                if stop.is_set():
                    self._stop_after_batch(query, stop_timeout)
                    break
                stop.wait(POLL_S)
                committed = self.writer.last_committed
                if time.monotonic() - last_line >= self.config.progress_s:
                    last_batch = self._progress_line(query, out, last_batch)
                    if committed > status_through:
                        reports = self._recent(query)
                        status_through = _reported_through(reports)
                    else:  # no batch since: the last report says whether it is idle
                        last = self.writer.patched(query.lastProgress)
                        reports = [last] if last else []
                    self.status.tick(reports, self.writer.newest_ts_us)
                    last_line = time.monotonic()
                if self.config.snapshot is not None and committed > signals_through:
                    recent = query.recentProgress
                    signals_through = _reported_through(recent)
                    signalled, seen_batch = _signal_batches(recent, seen_batch)
                    if signalled:
                        _write_pending(self._pending_path, signalled)
                        self._stop_after_batch(query, stop_timeout)
                        self._progress_line(query, out, last_batch)
                        self.resnapshot_pending(out)
                        if stop.is_set():
                            return 0
                        query = self.start(available_now=available_now)
                        done = _watch(query)
            error = query.exception()
            if error is not None:
                raise error
        except Exception as exc:
            if not is_spark_error(exc):
                raise
            # An executor's error, wrapped by Spark (headwater.pipeline.failures): one line;
            # the whole trace only at debug level.
            log.debug("pipeline %s failed", self.config.name, exc_info=True)
            message = f"pipeline {self.config.name} failed: {spark_failure(exc)}"
            raise PipelineError(message) from None
        finally:
            self._progress_line(query, out, last_batch)
            self.status.count(self._recent(query), self.writer.newest_ts_us)
            ended = sys.exc_info()[1]  # the error leaving run(), if any
            self.status.finish(ended if isinstance(ended, Exception) else None)
            if self.writer.direct is not None:
                self.writer.direct.close()
            if self.writer.net is not None:
                self.writer.net.close()
            if self.writer.bus is not None:
                self.writer.bus.close()
        return 0

    @property
    def _pending_path(self) -> Path:
        return self.config.checkpoint / "resnapshot-pending.json"

    def resnapshot_pending(self, out: TextIO | None = None) -> list[Any]:
        """Run the snapshot requests of the pending file (module docstring), if any;
        returns the results of the snapshots run now."""
        path = self._pending_path
        if self.config.snapshot is None or not path.exists():
            return []
        import orjson

        from headwater.snapshot.signals import SnapshotRequest

        ranges = [tuple(r) for r in orjson.loads(path.read_bytes())["ranges"]]
        requests: dict[str, SnapshotRequest] = {}
        for lo, hi in ranges:
            for request in self._signals_between(int(lo), int(hi)):
                requests.setdefault(request.id, request)
        results = []
        for request in requests.values():
            try:
                result = self._resnapshot(request, out or sys.stderr)
            except Exception as exc:
                # A signal naming a missing table, or one the snapshot cannot chunk, must
                # not wedge the pipeline (the pending file would replay it at every
                # start): report it and go on streaming.
                log.error("re-snapshot %s failed: %s", request.id, exc, exc_info=True)
                (out or sys.stderr).write(
                    f"pipeline {self.config.name}: re-snapshot {request.id} failed: {exc};"
                    " the stream goes on\n"
                )
                continue
            if result is not None:
                results.append(result)
        path.unlink()
        return results

    def _signals_between(self, lo: int, hi: int) -> list[Any]:
        """The snapshot requests among the changes with sequence in ``[lo, hi)``."""
        from headwater.changes import decode_record
        from headwater.snapshot.signals import signal_requests
        from headwater.spark.logaccess import open_log
        from headwater.spark.offsets import parse_options

        assert self.config.snapshot is not None
        table = self.config.snapshot.signal_table
        db, _, name = table.partition(".")
        options = parse_options(dict(self.config.source.options))
        log_ = open_log(options)
        try:
            rows = []
            # hi is exclusive: record_of(hi) is read only when the range ends inside it.
            end = record_of(hi) + 1 if row_of(hi) else record_of(hi)
            for rec in log_.records(record_of(lo), end):
                if not any(t == table for t, _ in rec.tables):
                    continue
                changes = decode_record(
                    rec,
                    source=options.source_name,
                    fde=log_.fde,
                    schema=log_.schema,
                    want=lambda d, t: d == db and t == name,
                )
                rows += [c for c in changes if lo <= c.sequence < hi]
        finally:
            log_.close()
        return signal_requests(rows, table)

    def _resnapshot(self, request: Any, out: TextIO) -> Any:
        """One re-snapshot under its own checkpoint identity and state file; None when
        its state file says it finished before."""
        from headwater.pipeline.snapshots import run_snapshot
        from headwater.snapshot.runner import SnapshotOptions
        from headwater.snapshot.state import SnapshotState

        settings = self.config.snapshot
        assert settings is not None
        ident = re.sub(r"[^A-Za-z0-9_.-]", "_", request.id)[:40] or "signal"
        state_path = self.config.checkpoint / f"resnap-{ident}.json"
        state = SnapshotState.load(str(state_path))
        if state is not None and state.finished_us is not None:
            log.info("re-snapshot %s finished before; not run again", request.id)
            return None
        out.write(f"pipeline {self.config.name}: re-snapshot {request.id} of"
                  f" {', '.join(request.tables)} (stream paused)\n")  # fmt: skip
        out.flush()
        config = dataclasses.replace(self.config, name=f"{self.config.name}.resnap.{ident}")
        result = run_snapshot(
            self.spark,
            config,
            connection=settings.connection,
            tables=list(request.tables),
            state_path=state_path,
            options=SnapshotOptions(
                chunk_rows=settings.chunk_rows,
                batch_base=RESNAPSHOT_BATCH_BASE + record_of(request.sequence) * 10_000,
            ),
        )
        out.write(f"pipeline {self.config.name}: re-snapshot {request.id} done,"
                  f" {result.rows} rows; stream resumes\n")  # fmt: skip
        out.flush()
        self.resnapshots.append(result)
        return result

    def _stop_after_batch(self, query: StreamingQuery, timeout: float) -> None:
        """Stop ``query`` once its running batch is done. A trigger that is only getting
        offsets (Spark's status message "Getting offsets from ...") is an idle source's
        wait (headwater.spark.source, "Idle": up to 4 s), not a batch: it is stopped at
        once (``query.stop()`` interrupts it; its offsets are not written yet)."""
        deadline = time.monotonic() + timeout
        while query.isActive and _in_batch(query.status):
            if time.monotonic() > deadline:
                log.warning("the running batch did not end in %.0f s; stopping anyway", timeout)
                break
            query.awaitTermination(0.05)  # type: ignore[arg-type]
        query.stop()

    def _recent(self, query: StreamingQuery) -> Any:
        return self.writer.patched(query.recentProgress)

    def _progress_line(self, query: StreamingQuery, out: TextIO, last_batch: int) -> int:
        p = self.writer.patched(query.lastProgress)
        if not p or p.get("batchId", -1) == last_batch:
            return last_batch
        newest = _newest(p)
        lag = f"{time.time() - newest / 1e6:.2f}s" if newest else "-"
        rows = p.get("numInputRows", 0)
        rate = p.get("processedRowsPerSecond", 0.0) or 0.0
        duration = (p.get("durationMs") or {}).get("triggerExecution", 0)
        out.write(
            f"pipeline {self.config.name}: batch={p.get('batchId')} rows={rows} "
            f"rate={rate:.0f} rows/s lag={lag} batch_ms={duration}\n"
        )
        out.flush()
        return int(p.get("batchId", last_batch))


def check_shippable(obj: Any, config: PipelineConfig, line: int | None, path: str) -> None:
    """Pickle ``obj`` once on the driver, as Spark will to ship it: the connections in it
    read their passwords now (headwater.connections), so a variable or file the driver
    lacks is a ConfigError here, at start, not a task failure that Spark retries
    ``spark.task.maxFailures`` times on every executor. Objects that are not pickled
    whole (a sink that ships only its settings) are left to their own checks."""
    import pickle

    from headwater.errors import ConfigError

    try:
        pickle.dumps(obj)
    except ConfigError as e:
        raise ConfigError(
            f"{path}: {e}", file=config.file, line=line, field=e.field or path
        ) from None
    except Exception as e:  # not picklable as a whole: nothing to check here
        log.debug("%s is not pickled whole (%s)", path, e)


def _observed_columns(F: Any) -> list[Any]:
    """The query's observed metrics (:data:`OBSERVED`): the newest commit time, for the
    lag, and the rows handed to the sinks, in all and per table, for the status
    (headwater.pipeline.status)."""
    return [
        F.max("ts_us").alias("newest_ts_us"),
        F.count(F.lit(1)).alias("rows_out"),
        table_counts(F),
    ]


def _newest(progress: Any) -> int | None:
    """``newest_ts_us`` of a progress report's observed metrics (None: not there)."""
    if not progress:
        return None
    metrics = progress.get("observedMetrics") or {}
    row = metrics.get(OBSERVED)
    try:
        newest = None if row is None else row["newest_ts_us"]  # a Row or a dict
    except (KeyError, ValueError):
        return None
    return None if newest is None else int(newest)
