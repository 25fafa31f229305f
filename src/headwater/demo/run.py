"""The demo, step by step (see the package docstring); :func:`run_demo` is its contract.

Everything lives in one temporary directory (``--keep`` keeps it, and leaves both
servers running): the two sandbox servers, ``reader.yaml`` and ``pipeline.yaml`` (real
configuration files, loaded by the same loaders as ``headwater reader run`` and
``headwater pipeline run``), the reader's change log, the Spark checkpoint and the
Parquet change log. Waits are bounded polls; a step that does not finish in time fails
the demo with exit status 2.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from headwater.demo.progress import Progress
from headwater.demo.workload import DATABASE, TABLES, Workload, create_shop
from headwater.errors import HeadwaterError
from headwater.sandbox import MariadbSandbox, SandboxOptions

__all__ = ["DemoError", "DemoOptions", "run_demo"]


class DemoError(HeadwaterError):
    """A demo step failed or did not finish in time."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """``rows``: initial shop rows (snapshotted); ``seconds``: how long the live workload
    runs; ``rate``: its transactions per second; ``keep``: keep the directory and the
    servers; ``alter_target``: SQL run on the target's ``shop`` before verifying (to see
    verify catch a change made behind the pipeline's back); ``timeout``: the longest wait
    for a step (catch-up, reader start)."""

    rows: int = 2000
    seconds: float = 30.0
    rate: float = 100.0
    keep: bool = False
    alter_target: tuple[str, ...] = ()
    timeout: float = 120.0
    workdir: Path | None = None


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def run_demo(options: DemoOptions, out: TextIO, err: TextIO) -> int:
    """Run the demo; report lines go to ``out`` (the last one is
    ``demo verified tables=<n> rows=<m> mismatches=<k>``), progress to ``err``. Returns
    0 when every target table equals its source, 1 on a mismatch; raises DemoError (or
    another HeadwaterError) when a step fails."""
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="headwater-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    servers: list[MariadbSandbox] = []
    try:
        err.write(f"demo: starting a source and a target MariaDB under {workdir}\n")
        source = MariadbSandbox(SandboxOptions(server_id=1), basedir=workdir).start()
        servers.append(source)
        target = MariadbSandbox(SandboxOptions(server_id=2, log_bin=False), basedir=workdir)
        servers.append(target.start())
        return _Demo(options, workdir, source, target, out, err).run()
    finally:
        if options.keep:
            out.write(f"demo: kept {workdir}\n")
            for s in servers:
                s.release()
                out.write(f"demo: still running: {s.url} (stop: kill $(cat {s.dir}/mysqld.pid))\n")
        else:
            for s in servers:
                s.stop()
            shutil.rmtree(workdir, ignore_errors=True)


def _stored(task: Any) -> int:
    return int(task.status().get("transactions_stored", 0))


class _Demo:
    def __init__(
        self,
        options: DemoOptions,
        workdir: Path,
        source: MariadbSandbox,
        target: MariadbSandbox,
        out: TextIO,
        err: TextIO,
    ) -> None:
        self.o = options
        self.dir = workdir
        self.source = source
        self.target = target
        self.out = out
        self.err = err
        self.progress = Progress(err)

    def log(self, message: str) -> None:
        self.progress.done()
        self.err.write(f"demo: {message}\n")
        self.err.flush()

    def run(self) -> int:
        from headwater.config import load_reader_config
        from headwater.reader.service import ReaderService

        rows = create_shop(self.source, self.o.rows)
        self.log(f"created {DATABASE} ({', '.join(TABLES)}) with {rows} rows on {self.source.url}")
        reader_yaml = self.dir / "reader.yaml"
        reader_yaml.write_text(
            f"data_dir: {self.dir / 'reader'}\n"
            "sources:\n"
            f"  - name: shop\n    host: {self.source.host}\n    port: {self.source.port}\n"
            "    user: root\n    server_id: 4242\n    start: latest\n"
            "    filters: {include: ['shop\\..*']}\n"
        )
        service = ReaderService(load_reader_config(reader_yaml))
        service.start()
        try:
            task = service.tasks["shop"]
            _wait(lambda: self._running(task), self.o.timeout, "the reader to connect")
            self.log("reader capturing shop.* from the binlog")
            return self._pipeline(task)
        finally:
            service.stop()

    @staticmethod
    def _running(task: Any) -> bool:
        if task.state == "failed":
            raise DemoError(f"the reader failed: {task.error}")
        return bool(task.state == "running")

    def _pipeline(self, task: Any) -> int:
        from headwater.connections import SourceConnection
        from headwater.pipeline.config import load_pipeline_config
        from headwater.pipeline.runner import PIPELINE_SPARK_CONF, PipelineRunner
        from headwater.pipeline.snapshots import run_snapshot, stream_config
        from headwater.spark.session import build_session

        changelog = self.dir / "out" / "changelog"
        pipeline_yaml = self.dir / "pipeline.yaml"
        pipeline_yaml.write_text(
            "name: demo\n"
            f"source:\n  path: {self.dir / 'reader' / 'shop'}\n"
            f"checkpoint: {self.dir / 'checkpoint'}\n"
            "progress: 3600\n"
            "sinks:\n"
            f"  - type: mysql\n    host: {self.target.host}\n    port: {self.target.port}\n"
            "    user: root\n    create_tables: true\n    shards: 2\n"
            f"  - type: parquet_log\n    path: {changelog}\n"
        )
        config = load_pipeline_config(pipeline_yaml)
        self.log("starting Spark (local[2])")
        spark = build_session(config.master, "headwater-demo", conf=PIPELINE_SPARK_CONF)
        spark.sparkContext.setLogLevel("ERROR")
        workload = Workload(self.source, self.o.seconds, rate=self.o.rate)
        try:
            workload.start()
            self.log(f"workload running for {self.o.seconds:.0f} s; snapshotting {DATABASE}")
            t0 = time.monotonic()
            snap = run_snapshot(
                spark,
                config,
                connection=SourceConnection(
                    host=self.source.host, port=self.source.port, user="root"
                ),
                tables=[f"{DATABASE}.{t}" for t in TABLES],
            )
            snap_s = time.monotonic() - t0
            self.log(f"snapshot rows={snap.rows} in {snap_s:.1f} s; streaming from the log")
            runner = PipelineRunner(stream_config(config, snap), spark=spark)
            query = runner.start()
            try:
                stats = self._stream(task, runner, query, workload)
            finally:
                query.stop()
        finally:
            workload.stop()
            spark.stop()
        return self._finish(snap.rows, snap_s, workload, stats, changelog)

    def _stream(self, task: Any, runner: Any, query: Any, workload: Workload) -> dict[str, Any]:
        applied: dict[int, int] = {}
        lags: list[float] = []
        t0 = time.monotonic()

        def tick() -> None:
            if query.exception() is not None:
                raise DemoError(f"the pipeline failed: {query.exception()}")
            for p in query.recentProgress:
                applied[int(p.batchId)] = int(p.numInputRows)
            newest = runner.writer.newest_ts_us
            lag = time.time() - newest / 1e6 if newest else None
            if lag is not None and workload.running:
                lags.append(lag)
            self.progress.show(
                f"demo: written={workload.rows} captured_txns={_stored(task)}"
                f" applied={sum(applied.values())} lag={'-' if lag is None else f'{lag:.2f}s'}"
            )

        while workload.running:
            tick()
            time.sleep(0.5)  # display refresh period, not synchronization
        workload.stop()
        self.log(f"workload stopped: {workload.transactions} transactions, {workload.rows} rows")
        target_gtid = str(self.source.query("SELECT @@gtid_binlog_pos")[0][0])
        _wait(
            lambda: self._running(task) and str(task.gtid_set) == target_gtid,
            self.o.timeout,
            f"the reader to reach GTID {target_gtid}",
        )
        query.processAllAvailable()
        tick()
        self.progress.done()
        stream_s = time.monotonic() - t0
        return {"applied": sum(applied.values()), "seconds": stream_s, "lags": lags}

    def _finish(
        self,
        snap_rows: int,
        snap_s: float,
        workload: Workload,
        stats: dict[str, Any],
        changelog: Path,
    ) -> int:
        from headwater.verify import VerifyOptions, parse_endpoint, verify
        from headwater.verify.report import print_report

        if self.o.alter_target:
            self.target.execute(*self.o.alter_target, database=DATABASE)
            self.log(
                f"ran {len(self.o.alter_target)} statement(s) on the target"
                " behind the pipeline's back"
            )
        self.log("verifying every target table against its source")
        report = verify(
            parse_endpoint(f"{self.source.url}/{DATABASE}", role="source", env={}),
            parse_endpoint(self.target.url, role="target", env={}),
            VerifyOptions(tables=tuple(f"{DATABASE}.{t}" for t in TABLES), chunk_size=1000),
        )
        lags = sorted(stats["lags"])
        w = self.out.write
        w(f"demo: snapshot rows={snap_rows} seconds={snap_s:.1f}\n")
        w(
            f"demo: workload transactions={workload.transactions} rows={workload.rows}"
            f" seconds={workload.elapsed:.1f}\n"
        )
        w(
            f"demo: pipeline changes_applied={stats['applied']} seconds={stats['seconds']:.1f}"
            f" throughput={stats['applied'] / max(stats['seconds'], 1e-9):.0f} rows/s\n"
        )
        if lags:
            q = (
                statistics.quantiles(lags, n=100, method="inclusive")
                if len(lags) > 1
                else [lags[0]] * 99
            )
            w(f"demo: lag p50={q[49]:.2f}s p95={q[94]:.2f}s max={lags[-1]:.2f}s\n")
        w(f"demo: target {self.target.url}/{DATABASE}\n")
        w(
            f"demo: parquet change log {changelog}"
            f"{'' if self.o.keep else ' (removed; --keep keeps it)'}\n"
        )
        print_report(report, self.out, max_keys=20, prefix="demo verified")
        return 1 if report.mismatches else 0
