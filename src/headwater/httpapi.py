"""The client side of the reader's HTTP API, shared by its three callers.

The consumer SDK (``client.transport.Readers``), a reader follower
(``reader.follow.LeaderLink``) and the Spark source (``spark.logaccess.HttpLog``) each talk
to ``headwater.server`` the same way; what differs is what they do when a reader does not
answer (move to the next one, or fail) and which typed errors they raise. So this module
holds what is common and leaves those choices to them:

* :class:`ApiConnection`: one keep-alive HTTP/1.1 connection to one reader URL (``https``
  URLs over TLS), its timeout, the path prefix of the URL, the bearer token in the
  ``Authorization`` header. :meth:`~ApiConnection.send` makes one request; a connection
  that fails is closed (the next request opens a new one) and the error propagates.
* :class:`Answer`: status, content type and body of an answer, decoded with orjson.
* :func:`wait_started`: a task without a change log yet answers 503 with ``Retry-After``
  (``server``); a request is repeated every 0.5 s for up to ``STARTING_WAIT_S``.
* :func:`api_error`: the typed error of a non-200 answer, as the SDK and the Spark source
  raise it (a follower raises its own ``FollowError``).
* :func:`record_of` and :func:`format_description_of`: a ``raw`` record of ``/v1/fetch``
  and the FORMAT_DESCRIPTION of ``/v1/decoding`` as the store's and decoder's types.

The token is only ever in the request headers: never in a repr, an error or a log line.
"""

from __future__ import annotations

import base64
import http.client
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from headwater.binlog.framing import FormatDescription
from headwater.errors import ConfigError, HeadwaterError, PositionNotRetainedError
from headwater.position import Position
from headwater.store import Record

__all__ = [
    "STARTING_WAIT_S",
    "Answer",
    "ApiConnection",
    "api_error",
    "format_description_of",
    "has_host",
    "record_of",
    "wait_started",
]

#: How long a request waits for a task that is starting (503 with Retry-After).
STARTING_WAIT_S = 30.0
#: How often a request is repeated while its task is starting.
STARTING_POLL_S = 0.5


def has_host(url: str) -> bool:
    """Whether ``url`` names a host (callers refuse one that does not, in their terms)."""
    return bool(urllib.parse.urlsplit(url).hostname)


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer, read whole."""

    status: int
    content_type: str
    retry_after: str | None
    payload: bytes

    @property
    def starting(self) -> bool:
        """A 503 with ``Retry-After``: the task has no change log yet."""
        return self.status == 503 and self.retry_after is not None

    def json(self) -> Any:
        return orjson.loads(self.payload)

    def reason(self) -> str:
        """The ``error`` field of a JSON error answer, else its first 200 bytes as text."""
        try:
            return str(orjson.loads(self.payload).get("error", ""))
        except (orjson.JSONDecodeError, AttributeError):
            return self.payload[:200].decode("utf-8", "replace")


class ApiConnection:
    """One keep-alive connection to the reader at ``url`` (opened at the first request)."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        self.url = url
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "", parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._auth = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._conn: http.client.HTTPConnection | None = None

    def __repr__(self) -> str:
        return f"ApiConnection({self.url!r})"

    def send(self, method: str, path: str, body: Any = None) -> Answer:
        """One request (``body``: sent as JSON unless None). Raises ``OSError`` or
        ``http.client.HTTPException`` after closing the connection when it fails."""
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        headers.update(self._auth)
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self._timeout)
        try:
            self._conn.request(method, self._prefix + path, body=data, headers=headers)
            resp = self._conn.getresponse()
            payload = resp.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        return Answer(
            resp.status,
            resp.getheader("Content-Type") or "",
            resp.getheader("Retry-After"),
            payload,
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def wait_started(send: Callable[[], Answer], *, wait: float | None = None) -> Answer:
    """``send()``, repeated while the task is starting, for up to ``wait`` seconds
    (default ``STARTING_WAIT_S``); the last answer (still a 503 when the task did not start
    in time)."""
    deadline = time.monotonic() + (STARTING_WAIT_S if wait is None else wait)
    while True:
        answer = send()
        if not answer.starting or time.monotonic() > deadline:
            return answer
        time.sleep(STARTING_POLL_S)


def api_error(answer: Answer, where: str, *, bad_request_is_config: bool = True) -> HeadwaterError:
    """The error of a non-200 ``answer`` to the request ``where`` (URL and path): 410
    :class:`PositionNotRetainedError`, 404 (and 400 when ``bad_request_is_config``) and 401
    :class:`ConfigError`, anything else :class:`HeadwaterError` with the status."""
    reason = answer.reason()
    status = answer.status
    if status == 410:
        return PositionNotRetainedError(f"{where}: {reason}")
    if status == 404 or (status == 400 and bad_request_is_config):
        return ConfigError(f"{where}: {reason}", field="task" if status == 404 else None)
    if status == 401:
        return ConfigError(f"{where}: {reason or 'unauthorized'}", field="token")
    return HeadwaterError(f"{where}: HTTP {status}: {reason}")


def record_of(doc: Any) -> Record:
    """A ``raw``-format record of a ``/v1/fetch`` answer as a store :class:`Record`."""
    pos = doc["position"]
    return Record(
        Position(pos["change_id"], pos["file"], pos["offset"], pos.get("event", 0)),
        base64.b64decode(doc["payload"]["base64"]),
        ts_us=doc["ts_us"],
        gtid=doc["gtid"],
        tables=tuple((t["name"], t["rows"]) for t in doc["tables"]),
        schema_version=doc["schema_version"],
        flags=doc["flags"],
        chunk_no=doc["chunk_no"],
        seq=doc["seq"],
    )


def format_description_of(doc: Any) -> FormatDescription | None:
    """The ``format_description`` of a ``/v1/decoding`` answer (None: the task has none)."""
    fd = doc.get("format_description")
    if fd is None:
        return None
    return FormatDescription(
        int(fd["binlog_version"]),
        str(fd["server_version"]),
        int(fd["created"]),
        int(fd["header_len"]),
        base64.b64decode(fd["post_header_len"]),
        int(fd["checksum_alg"]),
    )
