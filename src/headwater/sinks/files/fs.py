"""The file system under the Parquet sinks: a plain path, or a URI of a Hadoop-style store
(issue #16).

A sink's ``path`` is either a plain path (the local or a shared POSIX file system, as
before) or a URI: ``file:///...``, ``hdfs://namenode:8020/...``, ``s3a://bucket/...``
(or ``s3://``, ``gs://``). Spark's own writer writes a batch's part files to the URI
through Hadoop's ``FileSystem``; what headwater does to files itself goes through a
:class:`FileStore`, one of:

* :class:`LocalStore` for plain paths: ``os.replace``, ``os.walk``, ``glob`` (unchanged);
* :class:`HadoopStore` on the driver, for URIs: Hadoop's ``FileSystem`` API through the
  SparkSession's JVM (``Path(uri).getFileSystem(hadoopConfiguration)``: ``rename``,
  ``delete``, ``listFiles``, ``globStatus``, ``mkdirs``), so it reaches exactly what Spark's
  writer reached, with the same ``spark.hadoop.*`` settings and credentials;
* :class:`ArrowStore` where there is no JVM (executors' Python workers: the mirror's
  copy-on-write rewrites; the Spark-less ``write_changes``): ``pyarrow.fs`` from the URI
  (local, HDFS through libhdfs, S3 with the AWS default credential chain, GCS).
  ``s3a://`` is S3 to pyarrow: it is read as ``s3://``.

What is atomic where (``replace``): on a local or shared POSIX file system and on HDFS a
rename is atomic, so a published file appears whole and a replaced one is swapped in one
step (HDFS's ``FileSystem.rename`` does not overwrite: a replayed batch's file is deleted,
then renamed over; a reader can miss that one file between the two calls). On object
stores (S3, GCS) a rename is a copy and a delete: each file still appears whole (an
object is written at once), but not at one instant with its batch's other files, and an
interrupted publication leaves both copies, which the batch's replay settles (the sinks
publish under deterministic names and remove the batch's files they did not write).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import glob as globbing
import os
import re
import shutil
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from headwater.errors import SinkError

if TYPE_CHECKING:
    import pyarrow.fs
    from pyspark.sql import SparkSession

__all__ = ["ArrowStore", "FileStore", "HadoopStore", "LocalStore", "is_uri", "store_for"]

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(path: str) -> bool:
    """Whether ``path`` is a URI (``scheme://...``) rather than a plain path."""
    return bool(_URI.match(path))


class FileStore(Protocol):
    """The file operations the Parquet sinks use (module docstring)."""

    def join(self, *parts: str) -> str: ...
    def normal(self, path: str) -> str: ...
    def makedirs(self, path: str) -> None: ...
    def exists(self, path: str) -> bool: ...
    def replace(self, src: str, dst: str) -> None: ...
    def files(self, root: str) -> Iterator[tuple[str, str]]: ...
    def glob(self, pattern: str) -> list[str]: ...
    def remove(self, path: str) -> None: ...
    def rmtree(self, path: str) -> None: ...
    def arrow(self, path: str) -> tuple[pyarrow.fs.FileSystem | None, str]: ...


def store_for(path: str, spark: SparkSession | None = None) -> FileStore:
    """The store for ``path``: a :class:`LocalStore` for a plain path, else a
    :class:`HadoopStore` when a session is given (the driver), else an
    :class:`ArrowStore`."""
    if not is_uri(path):
        return LocalStore()
    if spark is not None:
        return HadoopStore(spark, path)
    return ArrowStore()


def _uri_join(*parts: str) -> str:
    head, *rest = parts
    return "/".join([head.rstrip("/"), *(p.strip("/") for p in rest if p and p != ".")])


class LocalStore:
    """Plain paths: the operating system's calls."""

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def normal(self, path: str) -> str:
        return os.path.normpath(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def files(self, root: str) -> Iterator[tuple[str, str]]:
        """``(directory relative to root, file name)`` of every file under ``root``."""
        for folder, _, names in os.walk(root):
            for name in names:
                yield os.path.relpath(folder, root), name

    def glob(self, pattern: str) -> list[str]:
        return globbing.glob(pattern)

    def remove(self, path: str) -> None:
        os.remove(path)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def arrow(self, path: str) -> tuple[pyarrow.fs.FileSystem | None, str]:
        return None, path


class HadoopStore:
    """URIs on the driver: Hadoop's ``FileSystem`` through the session's JVM (py4j)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        jvm: Any = spark._jvm  # (py4j: how PySpark itself reaches the JVM)
        self._path = jvm.org.apache.hadoop.fs.Path
        conf = spark._jsc.hadoopConfiguration()
        fs = self._path(root).getFileSystem(conf)
        if fs.getScheme() == "file":
            # Hadoop's local file system is a ChecksumFileSystem: it keeps a ".<name>.crc"
            # beside each file it writes and renames it along. Published files go without
            # one (it stays in staging): a later rewrite by pyarrow (the mirror, the
            # Spark-free writer) would leave it stale, and Spark then refuses the file
            # (ChecksumException; org.apache.hadoop.fs.ChecksumFileSystem#getChecksumFile).
            fs = fs.getRawFileSystem()
        self._fs = fs
        self._local = fs.getUri().getScheme() == "file"

    def join(self, *parts: str) -> str:
        return _uri_join(*parts)

    def normal(self, path: str) -> str:
        return str(self._fs.makeQualified(self._path(path)).toString())

    def makedirs(self, path: str) -> None:
        self._fs.mkdirs(self._path(path))

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def replace(self, src: str, dst: str) -> None:
        s, d = self._path(src), self._path(dst)
        if not self._local and self._fs.exists(d):
            # HDFS and S3A do not rename over an existing file (false, or an exception):
            # delete it first (module docstring); a local rename replaces it atomically
            self._fs.delete(d, False)
        if not self._fs.rename(s, d):
            raise SinkError(f"cannot publish {src} as {dst}: the file system refused the rename")

    def files(self, root: str) -> Iterator[tuple[str, str]]:
        base = self.normal(root).rstrip("/")
        found = self._fs.listFiles(self._path(root), True)
        while found.hasNext():
            full = str(found.next().getPath().toString())
            folder, _, name = full.rpartition("/")
            rel = folder[len(base) :].strip("/") if folder.startswith(base) else folder
            yield rel or ".", name

    def glob(self, pattern: str) -> list[str]:
        statuses = self._fs.globStatus(self._path(pattern))
        return [str(s.getPath().toString()) for s in statuses or []]

    def remove(self, path: str) -> None:
        self._fs.delete(self._path(path), False)

    def rmtree(self, path: str) -> None:
        self._fs.delete(self._path(path), True)

    def arrow(self, path: str) -> tuple[pyarrow.fs.FileSystem | None, str]:
        return ArrowStore().arrow(path)


@functools.cache
def _arrow_fs(scheme: str, netloc: str) -> pyarrow.fs.FileSystem:
    import pyarrow.fs as pafs

    fs, _ = pafs.FileSystem.from_uri(f"{scheme}://{netloc}/")
    return fs


class ArrowStore:
    """URIs where there is no JVM: ``pyarrow.fs`` (module docstring)."""

    @staticmethod
    def location(path: str) -> tuple[str, str, str]:
        """``(scheme, authority, path within the file system)`` of a URI as pyarrow sees
        it: an object store's bucket is part of the path; ``s3a`` is ``s3``."""
        url = urllib.parse.urlsplit(path)
        scheme = "s3" if url.scheme == "s3a" else url.scheme
        if scheme in ("s3", "gs", "gcs"):
            return scheme, url.netloc, f"{url.netloc}{url.path}"
        return scheme, url.netloc, url.path or "/"

    def arrow(self, path: str) -> tuple[pyarrow.fs.FileSystem | None, str]:
        """The pyarrow file system of ``path`` (one per scheme and authority, cached) and
        the path within it."""
        scheme, authority, inner = self.location(path)
        return _arrow_fs(scheme, authority), inner

    def join(self, *parts: str) -> str:
        return _uri_join(*parts)

    def normal(self, path: str) -> str:
        fs, inner = self.arrow(path)
        return f"{type(fs).__name__}:{os.path.normpath(inner)}"

    def makedirs(self, path: str) -> None:
        fs, inner = self.arrow(path)
        assert fs is not None
        fs.create_dir(inner, recursive=True)

    def exists(self, path: str) -> bool:
        import pyarrow.fs as pafs

        fs, inner = self.arrow(path)
        assert fs is not None
        return bool(fs.get_file_info(inner).type != pafs.FileType.NotFound)

    def replace(self, src: str, dst: str) -> None:
        fs, s = self.arrow(src)
        _, d = self.arrow(dst)
        assert fs is not None
        fs.move(s, d)  # pyarrow replaces an existing destination file

    def files(self, root: str) -> Iterator[tuple[str, str]]:
        import pyarrow.fs as pafs

        fs, inner = self.arrow(root)
        assert fs is not None
        base = inner.rstrip("/")
        selector = pafs.FileSelector(inner, recursive=True, allow_not_found=True)
        for info in fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                folder, _, name = info.path.rpartition("/")
                yield folder[len(base) :].strip("/") or ".", name

    def glob(self, pattern: str) -> list[str]:
        """Files matching ``pattern`` (``*`` within one level, below its fixed part)."""
        fixed = pattern.split("*", 1)[0].rpartition("/")[0]
        depth = pattern.count("/") - fixed.count("/")
        out = []
        for rel, name in self.files(fixed):
            full = _uri_join(fixed, rel if rel != "." else "", name)
            if full.count("/") - fixed.count("/") == depth and fnmatch.fnmatch(full, pattern):
                out.append(full)
        return out

    def remove(self, path: str) -> None:
        fs, inner = self.arrow(path)
        assert fs is not None
        fs.delete_file(inner)

    def rmtree(self, path: str) -> None:
        fs, inner = self.arrow(path)
        assert fs is not None
        with contextlib.suppress(FileNotFoundError):
            fs.delete_dir(inner)
