"""FetchAhead against a real HTTP server on 127.0.0.1 (a stand-in reader that answers
``/v1/fetch`` with the token it was asked for, slowly for tokens starting ``slow``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import orjson
import pytest

from headwater.client.transport import FetchAhead, Readers


class _Reader(BaseHTTPRequestHandler):
    asked: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        token = body["checkpoint"]
        type(self).asked.append(token)
        if token.startswith("slow"):
            time.sleep(1.0)
        answer = {"checkpoint": token + "+", "records": [], "max_bytes": body["max_bytes"]}
        data = orjson.dumps(answer)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    _Reader.asked = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Reader)
    server.daemon_threads = True  # a slow answer still running is not waited for
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _fetches(url: str) -> FetchAhead:
    return FetchAhead(lambda: Readers([url], "t"), max_rows=7, timeout_ms=0)


def test_take_returns_the_answer_fetched_ahead_without_asking_again(url: str) -> None:
    fetches = _fetches(url)
    fetches.ahead("a", 1 << 20)
    time.sleep(0.2)
    answer = fetches.take("a", 1 << 10, lambda: False)
    assert answer == {"checkpoint": "a+", "records": [], "max_bytes": 1 << 20}  # as asked ahead
    assert _Reader.asked == ["a"]
    fetches.close()


def test_take_of_another_token_drops_the_one_ahead(url: str) -> None:
    fetches = _fetches(url)
    fetches.ahead("slow-a", 1 << 20)
    began = time.monotonic()
    assert fetches.take("b", 1 << 20, lambda: False)["checkpoint"] == "b+"
    assert time.monotonic() - began < 0.9  # on its own connection, not behind slow-a
    fetches.close()


def test_an_interrupted_take_returns_none_at_once(url: str) -> None:
    fetches = _fetches(url)
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    began = time.monotonic()
    assert fetches.take("slow-c", 1 << 20, stop.is_set) is None
    assert time.monotonic() - began < 0.5
    fetches.close()
