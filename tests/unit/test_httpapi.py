"""headwater.httpapi against a real local HTTP/1.1 server on a free port (no network mocks).

The server answers from a script (status, headers, body per request) and records what it
received (method, path, headers, body, the client's address: one address for two requests
means one keep-alive connection).
"""

from __future__ import annotations

import base64
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from headwater.binlog.framing import FormatDescription
from headwater.errors import ConfigError, HeadwaterError, PositionNotRetainedError
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

TOKEN = "s3cret-token-value"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[tuple[int, dict[str, str], bytes]] = []
        self.seen: list[dict[str, Any]] = []


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: _Server

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": dict(self.headers.items()),
                "body": body,
                "client": self.client_address,
            }
        )
        status, headers, payload = (
            self.server.script.pop(0) if self.server.script else (200, {}, b"{}")
        )
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def _url(srv: _Server, prefix: str = "") -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}{prefix}"


def _json(status: int, doc: Any, **headers: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json", **headers}, orjson.dumps(doc)


def test_a_post_sends_json_with_the_token_under_the_url_prefix(server: _Server) -> None:
    server.script = [_json(200, {"next": {"seq": 7}})]
    conn = ApiConnection(_url(server, "/api/"), token=TOKEN, timeout=5.0)
    answer = conn.send("POST", "/v1/subscribe", {"task": "t1", "start": "latest"})
    conn.close()
    assert answer.status == 200
    assert answer.content_type == "application/json"
    assert answer.json() == {"next": {"seq": 7}}
    [req] = server.seen
    assert (req["method"], req["path"]) == ("POST", "/api/v1/subscribe")
    assert req["headers"]["Content-Type"] == "application/json"
    assert req["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert orjson.loads(req["body"]) == {"task": "t1", "start": "latest"}


def test_a_get_without_body_or_token_sends_neither_header(server: _Server) -> None:
    conn = ApiConnection(_url(server), timeout=5.0)
    assert conn.send("GET", "/v1/info").json() == {}
    conn.close()
    [req] = server.seen
    assert (req["method"], req["path"], req["body"]) == ("GET", "/v1/info", b"")
    assert "Content-Type" not in req["headers"]
    assert "Authorization" not in req["headers"]


def test_requests_share_one_keep_alive_connection(server: _Server) -> None:
    conn = ApiConnection(_url(server), timeout=5.0)
    conn.send("POST", "/v1/fetch", {"n": 1})
    conn.send("POST", "/v1/fetch", {"n": 2})
    conn.close()
    conn.send("POST", "/v1/fetch", {"n": 3})  # a closed connection opens again
    conn.close()
    clients = [req["client"] for req in server.seen]
    assert clients[0] == clients[1]
    assert clients[2] != clients[0]


def test_a_refused_connection_raises_and_the_token_is_nowhere(server: _Server) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    conn = ApiConnection(f"http://127.0.0.1:{port}", token=TOKEN, timeout=5.0)
    with pytest.raises(ConnectionRefusedError) as caught:
        conn.send("POST", "/v1/fetch", {"x": 1})
    assert TOKEN not in repr(caught.value) and TOKEN not in str(caught.value)
    assert TOKEN not in repr(conn)
    assert repr(conn) == f"ApiConnection('http://127.0.0.1:{port}')"


def test_a_starting_task_is_waited_for(server: _Server) -> None:
    starting = _json(503, {"error": "task t1 is starting"}, **{"Retry-After": "1"})
    server.script = [starting, starting, _json(200, {"ok": True})]
    conn = ApiConnection(_url(server), timeout=5.0)
    answer = wait_started(lambda: conn.send("POST", "/v1/subscribe", {}), wait=10.0)
    conn.close()
    assert (answer.status, answer.json()) == (200, {"ok": True})
    assert len(server.seen) == 3


def test_the_wait_for_a_starting_task_is_bounded(server: _Server) -> None:
    starting = _json(503, {"error": "task t1 is starting"}, **{"Retry-After": "1"})
    server.script = [starting] * 10
    conn = ApiConnection(_url(server), timeout=5.0)
    began = time.monotonic()
    answer = wait_started(lambda: conn.send("POST", "/v1/subscribe", {}), wait=0.0)
    conn.close()
    assert answer.status == 503 and answer.starting
    assert time.monotonic() - began < 5.0
    assert len(server.seen) <= 2  # the first answer, and at most one after one poll


def test_a_503_without_retry_after_is_not_waited_for(server: _Server) -> None:
    server.script = [_json(503, {"error": "overloaded"}), _json(200, {})]
    conn = ApiConnection(_url(server), timeout=5.0)
    answer = wait_started(lambda: conn.send("POST", "/v1/fetch", {}), wait=10.0)
    conn.close()
    assert (answer.status, answer.starting) == (503, False)
    assert len(server.seen) == 1


def _answer(status: int, payload: bytes) -> Answer:
    return Answer(status, "application/json", None, payload)


@pytest.mark.parametrize(
    ("status", "payload", "kind", "message"),
    [
        (410, b'{"error":"seq 3 is gone"}', PositionNotRetainedError, "R/v1/x: seq 3 is gone"),
        (404, b'{"error":"no task t9"}', ConfigError, "task: R/v1/x: no task t9"),
        (400, b'{"error":"bad start"}', ConfigError, "R/v1/x: bad start"),
        (401, b'{"error":""}', ConfigError, "token: R/v1/x: unauthorized"),
        (500, b"<html>oops</html>", HeadwaterError, "R/v1/x: HTTP 500: <html>oops</html>"),
    ],
)
def test_api_error_maps_the_status(
    status: int, payload: bytes, kind: type[HeadwaterError], message: str
) -> None:
    error = api_error(_answer(status, payload), "R/v1/x")
    assert type(error) is kind
    assert str(error) == message


def test_a_400_is_a_plain_error_where_it_is_not_a_config_error() -> None:
    error = api_error(_answer(400, b'{"error":"bad"}'), "R/v1/x", bad_request_is_config=False)
    assert type(error) is HeadwaterError
    assert str(error) == "R/v1/x: HTTP 400: bad"


def test_has_host() -> None:
    assert has_host("http://reader:8080/api")
    assert not has_host("reader:8080")
    assert not has_host("http:///v1")


def test_record_and_format_description_of_api_documents() -> None:
    doc = {
        "seq": 12,
        "position": {"change_id": 3, "file": 4, "offset": 1200},
        "payload": {"base64": base64.b64encode(b"\x01\x02").decode()},
        "ts_us": 1_700_000_000_000_000,
        "gtid": "0-1-5",
        "tables": [{"name": "db.t", "rows": 2}],
        "schema_version": 4,
        "flags": 1,
        "chunk_no": 0,
    }
    rec = record_of(doc)
    assert (rec.seq, rec.position, rec.payload) == (
        12,
        Position(3, 4, 1200, 0),
        b"\x01\x02",
    )
    assert (rec.ts_us, rec.gtid, tuple(rec.tables)) == (doc["ts_us"], "0-1-5", (("db.t", 2),))
    assert (rec.schema_version, rec.flags, rec.chunk_no) == (4, 1, 0)
    assert format_description_of({}) is None
    fd = {
        "binlog_version": 4,
        "server_version": "10.11.6-MariaDB",
        "created": 0,
        "header_len": 19,
        "post_header_len": base64.b64encode(bytes(range(1, 40))).decode(),
        "checksum_alg": 1,
    }
    fde = format_description_of({"format_description": fd})
    assert fde == FormatDescription(4, "10.11.6-MariaDB", 0, 19, bytes(range(1, 40)), 1)
