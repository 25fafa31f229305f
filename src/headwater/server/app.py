"""The HTTP server and its routes (standard library ``ThreadingHTTPServer``, HTTP/1.1).

One thread per connection, at most ``ServerOptions.max_connections`` of them: a new
connection past the limit closes the connection idle the longest between requests (as
nginx does with keep-alive connections), or, when every connection is in a request, gets
a 503 and is closed at once; idle and header timeouts close connections that send
nothing. A long-poll fetch blocks its thread in the store's wait
(woken when the writer acknowledges a record, no CPU), then the batch is built in a fetch
worker process (``workers.py``): this process, where the reader's capture runs, only
moves bytes. Client disconnects are one debug line; accept() failing for want of file
descriptors is logged and retried, never fatal. Routes:

=======  ===============  ===========================================================
GET      /healthz         ``{"status": "ok"}``; never needs the token
GET      /metrics         Prometheus text (metrics.py)
GET      /v1/info         the server and, per task, retained range, positions, status
POST     /v1/subscribe    resolve a start point; returns the first checkpoint
POST     /v1/fetch        the next batch after a checkpoint (batch.py), long-poll
POST     /v1/decoding     what a client needs to decode raw records itself: the task's
                          FORMAT_DESCRIPTION and its schema history file
GET      /console         the operations console, HTML (console.py)
POST     /v1/pipelines    a pipeline's status report (headwater.pipeline.status)
GET      /v1/pipelines    the pipelines reported, each judged red or not (console.py)
=======  ===============  ===========================================================

Errors are JSON ``{"error": reason, "field": field-or-null, ...}``: 400 malformed request
(field names the offending field), 401 missing or wrong bearer token, 404 unknown task or
endpoint, 405 wrong method (PUT, DELETE, ... too), 410 position no longer retained (with
``retained``: the first and last records kept), 413 body too large, 500 a record that
does not decode, 503 too many connections or a store error. Errors the HTTP layer itself
raises (a malformed request line) are JSON too. The token
is compared in constant time and never logged. A browser may send it as HTTP Basic
credentials (any user name, the token as password); ``/console`` asks for them.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hmac
import io
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from headwater import __version__
from headwater.errors import BinlogFormatError, PositionNotRetainedError, StoreError
from headwater.server import ServerOptions, TaskHandle
from headwater.server.batch import Batch, fetch_batch
from headwater.server.console import Console
from headwater.server.encoding import encoder_for
from headwater.server.metrics import Metrics
from headwater.server.requests import (
    FORMATS,
    Checkpoint,
    FetchRequest,
    RequestError,
    encode_checkpoint,
    parse_fetch,
    parse_subscribe,
)
from headwater.server.workers import FetchJob, FetchPool
from headwater.store import AtSeq, ChangeLog, LogInfo

__all__ = ["HeadwaterServer"]

log = logging.getLogger(__name__)

_ROUTES = {
    "/healthz": "GET",
    "/metrics": "GET",
    "/v1/info": "GET",
    "/v1/subscribe": "POST",
    "/v1/fetch": "POST",
    "/v1/decoding": "POST",
    "/console": "GET",
    "/v1/pipelines": "GET,POST",
}


def _info(info: LogInfo | None) -> dict[str, Any] | None:
    if info is None:
        return None
    return {
        "seq": info.seq,
        "position": info.position.to_json(),
        "ts_us": info.ts_us,
        "gtid": info.gtid,
    }


def _retained(changelog: ChangeLog) -> dict[str, Any]:
    return {"earliest": _info(changelog.earliest()), "latest": _info(changelog.latest())}


class HeadwaterServer:
    """Serves ``tasks`` (a mapping read on every request) until :meth:`close`."""

    def __init__(
        self,
        tasks: Mapping[str, TaskHandle],
        options: ServerOptions | None = None,
        console: Console | None = None,
    ):
        self.tasks = tasks
        self.options = options or ServerOptions()
        self.metrics = Metrics()
        self.console = Console(tasks) if console is None else console
        self._token = None if self.options.token is None else self.options.token.encode()
        self._pool = FetchPool(self.options.fetch_workers) if self.options.fetch_workers else None
        self.console.table_counts.pool = self._pool  # counted off the capture's process
        self._cpu = threading.Semaphore(1)  # in-process fetch work: one thread at a time
        self._httpd = _HTTPServer((self.options.host, self.options.port), _Handler, self.options)
        self._httpd.app = self
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> HeadwaterServer:
        """Start the fetch workers, serve in a background thread; returns self."""
        if self._pool is not None:
            self._pool.start()
        self.console.start()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            args=(0.05,),  # how soon close() is noticed; requests never wait on it
            name="headwater-http",
            daemon=True,
        )
        self._thread.start()
        log.info("serving %d tasks on %s", len(self.tasks), self.url)
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def close(self) -> None:
        """Stop accepting requests. Long-polls in flight end at their own timeout."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()
        self.console.close()
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> HeadwaterServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- request handling (called from handler threads) ---------------------------------

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        given = (header or "").encode("utf-8", "replace")
        if given.startswith(b"Basic "):  # a browser: any user name, the token as password
            try:
                given = b"Bearer " + base64.b64decode(given[6:], validate=True).partition(b":")[2]
            except ValueError:
                return False
        return hmac.compare_digest(given, b"Bearer " + self._token)

    def task(self, name: str, field: str) -> TaskHandle:
        handle = self.tasks.get(name)
        if handle is None:
            raise RequestError(404, f"no task named {name!r}", field)
        return handle

    def info(self) -> dict[str, Any]:
        now_us = time.time_ns() // 1000
        tasks: dict[str, Any] = {}
        for name, handle in sorted(self.tasks.items()):
            status = handle.status_dict()
            retained = _retained(handle.change_log())
            latest = retained["latest"]
            tasks[name] = {
                "source": handle.source or name,
                **retained,
                "gtid_set": status.get("gtid_set"),
                "lag_seconds": status.get("lag_seconds"),
                "latest_age_seconds": None if latest is None else (now_us - latest["ts_us"]) / 1e6,
                "status": status,
            }
        server = {"name": "headwater", "version": __version__, "api": "v1"}
        return {"server": {**server, "formats": list(FORMATS)}, "tasks": tasks}

    def decoding(self, body: Any) -> dict[str, Any]:
        """The task's FORMAT_DESCRIPTION (fields; ``post_header_len`` in base64) and its
        schema history file (base64 of the JSON lines; null when the task has none), so
        that clients of the raw formats decode exactly as the server does."""
        if not isinstance(body, dict) or not isinstance(body.get("task"), str):
            raise RequestError(400, "must be the name of a task", "task")
        handle = self.task(body["task"], "task")
        fde = handle.format_description()
        history_path = getattr(handle.schema, "path", None)
        history: str | None = None
        if history_path is not None and os.path.exists(history_path):
            with open(history_path, "rb") as f:
                history = base64.b64encode(f.read()).decode("ascii")
        return {
            "task": body["task"],
            "format_description": None
            if fde is None
            else {
                "binlog_version": fde.binlog_version,
                "server_version": fde.server_version,
                "created": fde.created,
                "header_len": fde.header_len,
                "post_header_len": base64.b64encode(fde.post_header_len).decode("ascii"),
                "checksum_alg": fde.checksum_alg,
            },
            "schema_history": history,
        }

    def subscribe(self, body: Any) -> dict[str, Any]:
        sub, start = parse_subscribe(body)
        changelog = self.task(sub.task, "task").change_log()
        try:
            with changelog.reader(start) as reader:
                seq = reader.next_seq
        except PositionNotRetainedError as e:
            raise RequestError(410, str(e), "start", retained=_retained(changelog)) from None
        cp = Checkpoint(sub, seq, 0)
        log.info("subscribe task=%s format=%s start=%s -> seq %d", sub.task, sub.format, start, seq)
        return {
            "task": sub.task,
            "checkpoint": encode_checkpoint(cp),
            "next": {"seq": seq, "row": 0},
            **_retained(changelog),
        }

    def fetch(self, body: Any) -> tuple[str, list[bytes], int]:
        req = parse_fetch(body, self.options)
        cp = req.checkpoint
        sub = cp.sub
        handle = self.task(sub.task, "checkpoint.task")
        changelog = handle.change_log()
        last = changelog.latest()
        latest_seq = 0 if last is None else last.seq
        if cp.seq > latest_seq + 1:
            raise RequestError(
                400, f"seq {cp.seq} is beyond the log's end ({latest_seq})", "checkpoint.seq"
            )
        encoder = encoder_for(sub.format)
        self.metrics.fetch_started()
        try:
            batch = self._fetch_batch(sub.task, handle, changelog, req)
        except PositionNotRetainedError as e:
            raise RequestError(410, str(e), "checkpoint", retained=_retained(changelog)) from None
        finally:
            self.metrics.fetch_ended()
        last = changelog.latest()
        tail = {
            "checkpoint": encode_checkpoint(cp.at(batch.seq, batch.row)),
            "next": {"seq": batch.seq, "row": batch.row},
            "latest_seq": 0 if last is None else last.seq,
            "more": batch.more,
        }
        pieces = encoder.envelope(sub.task, batch.items, sub.raw, tail)
        nbytes = sum(len(p) for p in pieces)
        self.metrics.fetched(sub.task, sub.format, len(batch.items), nbytes)
        return encoder.content_type, pieces, nbytes

    def _fetch_batch(
        self, name: str, handle: TaskHandle, changelog: ChangeLog, req: FetchRequest
    ) -> Batch:
        """Wait here (no CPU) for a record after the checkpoint, then build the batch in a
        worker process; in this process when the task's schema cannot be read from a file
        (or without workers), one fetch at a time."""
        started = time.monotonic()
        deadline = started + req.timeout_s
        cp = req.checkpoint
        with changelog.reader(AtSeq(cp.seq)) as reader:
            if reader.next(req.timeout_s) is None:  # the long-poll's wait, no CPU
                return Batch([], 0, cp.seq, cp.row, False)  # nothing came: no worker needed
        schema_path = getattr(handle.schema, "path", None)
        if self._pool is not None and (handle.schema is None or schema_path is not None):
            job = FetchJob(
                task=name,
                source=handle.source or name,
                log_dir=changelog.directory,
                schema_path=None if schema_path is None else os.fspath(schema_path),
                fde=None if req.checkpoint.sub.raw else handle.format_description(),
                request=req,
                max_scan_bytes=self.options.max_scan_bytes,
                deadline=deadline,
                started=started,
            )
            return self._pool.fetch(job)
        encoder = encoder_for(req.checkpoint.sub.format)
        with self._cpu:
            return fetch_batch(
                name,
                handle,
                changelog,
                req,
                encoder,
                self.options.max_scan_bytes,
                deadline=deadline,
                started=started,
            )


#: What a connection past ``max_connections`` gets before it is closed.
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: 48\r\n\r\n"
    b'{"error": "too many connections", "field": null}'
)
_NO_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class _HTTPServer(ThreadingHTTPServer):
    """Bounded: ``max_connections`` handler threads at most (see the module docstring)."""

    daemon_threads = True
    block_on_close = False  # long-polls finish on their own; close() does not wait for them
    app: HeadwaterServer

    def __init__(
        self, address: tuple[str, int], handler: type[_Handler], options: ServerOptions
    ) -> None:
        self.request_queue_size = options.backlog  # read by server_activate (listen)
        if ":" in address[0]:  # an IPv6 address ("::", "::1")
            self.address_family = socket.AF_INET6
        self.options = options
        self._slots = threading.BoundedSemaphore(options.max_connections)
        self.refused = 0
        self.evicted = 0
        self._idle: dict[socket.socket, float] = {}
        self._idle_lock = threading.Lock()
        self._last_warning = 0.0
        super().__init__(address, handler)

    def _warn(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last_warning >= 10.0:  # at most one line per 10 s under a flood
            self._last_warning = now
            log.warning(message, *args)

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as e:
            if e.errno in _NO_FDS:
                # The connection stays in the backlog; pausing keeps the accept loop from
                # spinning until descriptors are free again.
                self._warn("HTTP API: cannot accept a connection: %s", e)
                time.sleep(0.1)
            raise

    def idle(self, conn: socket.socket, idle: bool) -> None:
        """Handlers say when their connection waits for a request (and when not)."""
        with self._idle_lock:
            if idle:
                self._idle[conn] = time.monotonic()
            else:
                self._idle.pop(conn, None)

    def _evict_idle(self) -> bool:
        """Close the connection idle the longest (its handler sees the end of the stream
        and exits, freeing its slot); False when every connection is in a request."""
        with self._idle_lock:
            if not self._idle:
                return False
            conn = min(self._idle, key=self._idle.__getitem__)
            del self._idle[conn]
        self.evicted += 1
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        return True

    def verify_request(self, request: Any, client_address: Any) -> bool:
        if self._slots.acquire(blocking=False):
            return True
        # At the limit, an idle keep-alive connection makes room for the new one (as
        # nginx does), so idle connections alone never lock clients out.
        while self._evict_idle():
            if self._slots.acquire(timeout=1.0):
                return True
        self.refused += 1
        self._warn(
            "HTTP API: %d connections open (max_connections); refusing %s",
            self.options.max_connections,
            client_address,
        )
        try:
            request.setblocking(False)
            request.send(_BUSY)
        except OSError:
            pass
        return False  # the caller closes it

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        e = sys.exc_info()[1]
        if isinstance(e, (ConnectionError, TimeoutError)):
            log.debug("HTTP client %s went away: %s", client_address, e)
        else:
            log.error("HTTP request from %s failed", client_address, exc_info=True)


class _RequestReader(io.RawIOBase):
    """A connection's reads with the handler's whole-request deadline: once a request has
    begun (its request line is in), its headers and body must arrive within
    ``header_timeout_s`` in all, not per read -- a client dripping one byte per second
    (slowloris) would otherwise hold a connection slot, which is not idle and so never
    evicted, for ever."""

    def __init__(self, sock: socket.socket, handler: _Handler) -> None:
        super().__init__()
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        deadline = self._handler.read_deadline
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request was not received within header_timeout")
            self._sock.settimeout(min(left, self._handler.server.options.header_timeout_s))
        return self._sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in several writes: without TCP_NODELAY, Nagle plus the
    # client's delayed ACK stall each keep-alive response by ~40 ms.
    disable_nagle_algorithm = True
    server: _HTTPServer
    server_version = f"headwater/{__version__}"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # Methods the API does not take: a JSON 405 (as documented), not the HTML 501.
    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_OPTIONS(self) -> None:
        self._dispatch("OPTIONS")

    read_deadline: float | None = None

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own reader: replaced, its reference dropped
        self.rfile = io.BufferedReader(_RequestReader(self.connection, self))

    def handle_one_request(self) -> None:
        # Between requests a connection may stay idle this long; then it is closed. While
        # idle it may also be closed to make room for a new connection (verify_request).
        self.read_deadline = None
        self.connection.settimeout(self.server.options.idle_timeout_s)
        self.server.idle(self.connection, True)
        try:
            super().handle_one_request()
        finally:
            self.server.idle(self.connection, False)

    def parse_request(self) -> bool:
        # Once a request started, each read of it (headers, body) gets the header timeout.
        self.server.idle(self.connection, False)
        timeout = self.server.options.header_timeout_s
        self.connection.settimeout(timeout)
        self.read_deadline = time.monotonic() + timeout  # headers and body, in all
        return super().parse_request()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The HTTP layer's own errors (bad request line, header too long, unknown
        method) as JSON like every other error, and the connection closed."""
        self.close_connection = True
        body = orjson.dumps({"error": message or HTTPStatus(code).phrase, "field": None})
        self.send_response(code, HTTPStatus(code).phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    def _dispatch(self, method: str) -> None:
        app = self.server.app
        path = self.path.split("?", 1)[0]
        endpoint = path if path in _ROUTES else "other"
        try:
            body = self._read_body()
            self.read_deadline = None  # the request is in; a long-poll may take its time
            code = self._route(app, method, path, body)
        except RequestError as e:
            code = e.status
            self._json(code, e.body(), {"Retry-After": "1"} if code == 503 else None)
        except BinlogFormatError as e:
            log.error("fetch failed: %s", e)
            code = 500
            self._json(code, {"error": str(e), "field": None})
        except StoreError as e:
            log.error("store error: %s", e)
            code = 503
            self._json(code, {"error": str(e), "field": None})
        app.metrics.inc("headwater_http_requests_total", endpoint=endpoint, code=str(code))

    def _read_body(self) -> bytes:
        length_text = self.headers.get("Content-Length", "0")
        try:
            length = int(length_text)
        except ValueError:
            raise RequestError(400, "Content-Length is not a number", "Content-Length") from None
        if length > self.server.app.options.max_body_bytes:
            self.close_connection = True
            raise RequestError(413, f"request body over {length} bytes", "body")
        return self.rfile.read(length) if length > 0 else b""

    def _route(self, app: HeadwaterServer, method: str, path: str, body: bytes) -> int:
        if path == "/healthz" and method == "GET":
            return self._json(200, {"status": "ok"})
        if not app.authorized(self.headers.get("Authorization")):
            scheme = "Basic" if path == "/console" else "Bearer"  # Basic: the browser asks
            self._json(
                401,
                {"error": "missing or wrong bearer token", "field": "Authorization"},
                {"WWW-Authenticate": f'{scheme} realm="headwater"'},
            )
            return 401
        want = _ROUTES.get(path)
        if want is None:
            raise RequestError(404, f"no endpoint {path}", None)
        if method not in want.split(","):
            raise RequestError(405, f"{path} takes {want}", None)
        if path == "/metrics":
            data = app.metrics.render(app.tasks, app.console.table_counts.totals())
            return self._send(200, "text/plain; version=0.0.4; charset=utf-8", [data])
        if path == "/v1/info":
            return self._json(200, app.info())
        if path == "/console":
            page = app.console.render(app.info())
            return self._send(200, "text/html; charset=utf-8", [page])
        if path == "/v1/pipelines" and method == "GET":
            return self._json(200, {"pipelines": app.console.pipelines()})
        doc = self._parse_json(body)
        if path == "/v1/subscribe":
            return self._json(200, app.subscribe(doc))
        if path == "/v1/decoding":
            return self._json(200, app.decoding(doc))
        if path == "/v1/pipelines":
            return self._json(200, app.console.report(doc))
        content_type, pieces, _n = app.fetch(doc)
        return self._send(200, content_type, pieces)

    @staticmethod
    def _parse_json(body: bytes) -> Any:
        if not body:
            raise RequestError(400, "the request needs a JSON body", "body")
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise RequestError(400, f"not JSON: {e}", "body") from None

    def _json(self, code: int, doc: Any, headers: dict[str, str] | None = None) -> int:
        return self._send(code, "application/json", [orjson.dumps(doc)], headers)

    def _send(
        self,
        code: int,
        content_type: str,
        pieces: list[bytes],
        headers: dict[str, str] | None = None,
    ) -> int:
        self.send_response(code, HTTPStatus(code).phrase)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(sum(len(p) for p in pieces)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        for piece in pieces:
            self.wfile.write(piece)
        return code
