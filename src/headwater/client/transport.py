"""The SDK's HTTP access to readers: ``/v1/subscribe``, ``/v1/fetch``, ``/v1/decoding``.

One keep-alive connection to one of the configured readers; a refused or broken connection
moves to the next reader in the list (they serve the same task: positions and sequences mean
the same on every reader), so a request is retried once per reader before it fails. A fetch
answer in protobuf comes back as a ``pb.FetchResponse``, any other answer as parsed JSON.
Tokens go in the ``Authorization`` header and never into errors or logs.
"""

from __future__ import annotations

import base64
import http.client
import logging
import threading
from collections.abc import Callable
from typing import Any

from headwater.binlog.framing import FormatDescription
from headwater.changes import SchemaLookup
from headwater.errors import ConfigError, HeadwaterError
from headwater.httpapi import (
    Answer,
    ApiConnection,
    api_error,
    format_description_of,
    has_host,
    record_of,
    wait_started,
)
from headwater.position import Position
from headwater.store import EARLIEST, LATEST, AtSeq, AtTime, Start

__all__ = ["FetchAhead", "Readers", "record_of", "start_request"]

log = logging.getLogger(__name__)


def start_request(start: Start) -> Any:
    """``start`` as the ``start`` field of ``/v1/subscribe``."""
    if start in (EARLIEST, LATEST):
        return start
    if isinstance(start, AtSeq):
        return {"seq": start.seq}
    if isinstance(start, AtTime):
        return {"timestamp_us": start.ts_us}
    if isinstance(start, Position):
        return {"position": str(start)}
    return {"gtid_set": str(start)}


class Readers:
    """A task served by one or more readers (failover in list order)."""

    def __init__(
        self, urls: list[str], task: str, *, token: str | None = None, timeout: float = 90.0
    ) -> None:
        if not urls:
            raise ConfigError("no reader URL given", field="readers")
        for url in urls:
            if not has_host(url):
                raise ConfigError(f"no host in reader URL {url!r}", field="readers")
        self.urls = list(urls)
        self.task = task
        self._token = token
        self._timeout = timeout
        self._index = 0
        self._conn: ApiConnection | None = None

    def _connection(self) -> ApiConnection:
        if self._conn is None:
            url = self.urls[self._index]
            self._conn = ApiConnection(url, token=self._token, timeout=self._timeout)
        return self._conn

    def _exchange(self, path: str, body: Any) -> Answer:
        """One request, to the current reader or, if it does not answer, the next ones."""
        last: Exception | None = None
        for _attempt in range(len(self.urls) + 1):
            try:
                return self._connection().send("POST", path, body)
            except (OSError, http.client.HTTPException) as e:
                self._conn = None  # closed by send
                last = e
                log.warning("reader %s: %r; trying the next", self.urls[self._index], e)
                self._index = (self._index + 1) % len(self.urls)
        raise HeadwaterError(f"no reader of task {self.task} answered {path}: {last!r}")

    def call(self, path: str, body: Any) -> Any:
        answer = wait_started(lambda: self._exchange(path, body))
        if answer.status == 200:
            if answer.content_type.startswith("application/x-protobuf"):
                from headwater.server import pb

                return pb.FetchResponse.FromString(answer.payload)
            return answer.json()
        raise api_error(answer, f"{self.urls[self._index]}{path}")

    def subscribe(self, start: Start, **fields: Any) -> Any:
        return self.call(
            "/v1/subscribe", {"task": self.task, "start": start_request(start), **fields}
        )

    def fetch(self, checkpoint: str, *, max_rows: int, max_bytes: int, timeout_ms: int) -> Any:
        body = {
            "checkpoint": checkpoint,
            "max_rows": max_rows,
            "max_bytes": max_bytes,
            "timeout_ms": timeout_ms,
        }
        return self.call("/v1/fetch", body)

    def decoding(self) -> tuple[FormatDescription | None, SchemaLookup | None]:
        """The source's FORMAT_DESCRIPTION and schema history, so raw records decode here
        exactly as in the reader (MINIMAL row metadata included)."""
        from headwater.schema.history import SchemaHistory

        answer = self.call("/v1/decoding", {"task": self.task})
        fde = format_description_of(answer)
        schema = None
        history = answer.get("schema_history")
        if history is not None:
            schema = SchemaHistory.loads(
                base64.b64decode(history),
                mariadb=fde.is_mariadb if fde is not None else True,
                name=f"task {self.task} schema history",
            )
        return fde, schema

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Job:
    __slots__ = ("answer", "done", "error", "max_bytes", "token")

    def __init__(self, token: str, max_bytes: int) -> None:
        self.token = token
        self.max_bytes = max_bytes
        self.done = threading.Event()
        self.answer: Any = None
        self.error: BaseException | None = None


class FetchAhead:
    """``/v1/fetch`` of one stream, one request ahead of its consumer.

    :meth:`take` returns the answer for a checkpoint token; :meth:`ahead` starts fetching
    the next token in the background while the caller decodes the current answer, so the
    reader (another process, often another machine) serves the next page meanwhile. A
    request runs in its own daemon thread on a connection of a small pool (``make``
    creates one when none is idle): a request that is no longer wanted (the stream
    re-subscribed, or :meth:`take` was interrupted) is abandoned, never waited for, and
    its connection returns to the pool when it ends. Not thread-safe: one caller.
    """

    def __init__(self, make: Callable[[], Readers], **fetch_args: Any) -> None:
        self._make = make
        self._args = fetch_args
        self._idle: list[Readers] = []
        self._lock = threading.Lock()
        self._closed = False
        self._pending: _Job | None = None

    def ahead(self, token: str, max_bytes: int) -> None:
        """Start fetching ``token`` (a request started before and not taken is dropped)."""
        job = _Job(token, max_bytes)
        self._pending = job
        threading.Thread(target=self._run, args=(job,), name="consumer-fetch", daemon=True).start()

    def take(self, token: str, max_bytes: int, interrupted: Callable[[], bool]) -> Any:
        """The answer for ``token`` (fetched ahead, whatever its ``max_bytes``, or now), or
        None as soon as ``interrupted()`` (checked every 20 ms while waiting). Raises what
        the fetch raised."""
        job = self._pending
        if job is None or job.token != token:
            self.ahead(token, max_bytes)
            job = self._pending
        assert job is not None
        self._pending = None
        while not job.done.wait(0.02):
            if interrupted():
                return None
        if job.error is not None:
            raise job.error
        return job.answer

    def _run(self, job: _Job) -> None:
        with self._lock:
            readers = self._idle.pop() if self._idle else None
        try:
            if readers is None:
                readers = self._make()
            job.answer = readers.fetch(job.token, max_bytes=job.max_bytes, **self._args)
        except BaseException as e:  # handed to take(), in the caller's thread
            job.error = e
        finally:
            job.done.set()
            if readers is not None:
                with self._lock:
                    closed = self._closed
                    if not closed:
                        self._idle.append(readers)
                if closed:
                    readers.close()

    def close(self) -> None:
        """Close the idle connections; a request still running closes its own when done."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        self._pending = None
        for readers in idle:
            readers.close()
