"""Directories that the driver and every executor must see as one (issue #16).

The file sinks' executors write part files under their ``path`` and the driver publishes
them there (capability ``shared_dir``). On a cluster, a path that is local to each
machine loses data silently: part files stay on the executors' disks, the driver
publishes an empty batch and the run ends with exit 0. :func:`check_shared` refuses such
a path at start instead, by trying it both ways:

1. the driver writes a probe file with a random token into the directory;
2. one Spark task per executor core (so every executor runs at least one, when the
   cluster's cores are all up) reads it and writes its own probe file beside it;
3. the driver reads every executor's probe file.

Any miss is a :class:`~headwater.errors.ConfigError` naming the sink section, the path
and the hosts that do not share it. A URI of a Hadoop-style store (``hdfs://``,
``s3a://``) is not probed: it is one store for every machine; ``file://`` is. Local
masters are one machine: nothing to check. Probe files are removed afterwards (best
effort), and their names start with ``_`` so that Spark and DuckDB globbing skip them if
one is left behind.
"""

from __future__ import annotations

import os
import secrets
import socket
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.errors import ConfigError
from headwater.pipeline.config import PipelineConfig
from headwater.pipeline.sinks import sink_context
from headwater.sinks import SINKS
from headwater.sinks.files.fs import is_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_shared", "probe_directory", "shared_dirs"]

_PREFIX = "_headwater-probe-"


def shared_dirs(config: PipelineConfig) -> list[tuple[str, int, str]]:
    """``(section path, line, directory)`` of every sink whose capabilities name a
    ``shared_dir`` field."""
    context = sink_context(config) if any(s.type in SINKS for s in config.sinks) else None
    out = []
    for section in config.sinks:
        factory = SINKS.get(section.type)
        if factory is None or context is None:
            continue
        field = factory.capabilities.shared_dir
        value = dict(section.fields).get(field) if field else None
        if value and is_uri(str(value)):
            # a Hadoop-style store (hdfs://, s3a://) is the same for every machine; a
            # file:// URI is a local path like any other (headwater.sinks.files.fs)
            url = urllib.parse.urlsplit(str(value))
            if url.scheme != "file":
                continue
            value = url.path
        if value:
            out.append((section.path, section.line, str(context.path(value))))
    return out


def probe_directory(directory: str, token: str) -> tuple[str, bool, str | None]:
    """What one task does (runs on an executor): whether the driver's probe is there with
    ``token``, and the name of the probe written back (None: it could not write)."""
    host = socket.gethostname()
    driver_probe = os.path.join(directory, f"{_PREFIX}{token}")
    try:
        with open(driver_probe, encoding="utf-8") as f:
            seen = f.read() == token
    except OSError:
        seen = False
    name = f"{_PREFIX}{token}-{host}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(token)
    except OSError:
        return host, seen, None
    return host, seen, name


def check_shared(spark: SparkSession, config: PipelineConfig) -> None:
    """Refuse (ConfigError) a file sink directory that the executors do not share with
    the driver (module docstring). Nothing to do on a local master."""
    from headwater.spark.session import is_local

    if is_local(spark.sparkContext.master or "local"):
        return
    for path, line, directory in shared_dirs(config):
        _check_one(spark, config, path, line, directory)


def _check_one(
    spark: SparkSession, config: PipelineConfig, path: str, line: int, directory: str
) -> None:
    where = Path(directory)
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"cannot create {directory}: {e.strerror}", file=config.file, line=line, field=path
        ) from None
    token = secrets.token_hex(16)
    driver_probe = where / f"{_PREFIX}{token}"
    driver_probe.write_text(token, encoding="utf-8")
    sc = spark.sparkContext
    width = max(2, sc.defaultParallelism)
    found: list[Any] = []
    try:
        found = (
            sc.parallelize(range(width), width)
            .map(lambda _: probe_directory(directory, token))
            .collect()
        )
        blind = sorted({host for host, seen, _ in found if not seen})
        unseen = sorted(
            {host for host, _, name in found if name is None or not (where / name).exists()}
        )
    finally:
        for _host, _seen, name in found:
            if name:
                (where / name).unlink(missing_ok=True)
        driver_probe.unlink(missing_ok=True)
    if blind or unseen:
        hosts = ", ".join(sorted(set(blind) | set(unseen)))
        raise ConfigError(
            f"{directory} is not shared between the driver and the executors on {hosts}"
            f" (a file the driver wrote there {'is missing' if blind else 'is there'} on"
            f" them; {'their files are not seen by the driver' if unseen else 'theirs are seen'}"
            "): file sinks need one directory that every machine mounts at the same path"
            " (docs/cluster.md)",
            file=config.file,
            line=line,
            field=f"{path}.path",
        )
