"""What the HTTP API refuses and how (400 with the field, 401, 404, 405, 410 with the
retained range, 413), and what it reports (/metrics as Prometheus text, /healthz)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.sandbox import MariadbSandbox
from headwater.server import ServerOptions
from headwater.server.requests import Checkpoint, Subscription, encode_checkpoint
from tests.integration.server_support import Api, Http, Stored, log_workload, open_api

DB = "hw_server_errors"
TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def stored(mariadb: MariadbSandbox) -> Iterator[Stored]:
    yield from log_workload(mariadb, DB)


@pytest.fixture
def api(stored: Stored, tmp_path: Path) -> Iterator[Api]:
    with open_api(stored, tmp_path) as api:
        yield api


def test_bearer_token_guards_every_endpoint_but_healthz(
    stored: Stored, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG", logger="headwater.server")
    with open_api(stored, tmp_path, ServerOptions(token=TOKEN)) as api:
        anonymous = Http(api.server.url)
        wrong = Http(api.server.url, token="s3cret-tokem")
        right = Http(api.server.url, token=TOKEN)
        assert anonymous.get("/healthz").json() == {"status": "ok"}
        for method, path, body in [
            ("GET", "/v1/info", None),
            ("GET", "/metrics", None),
            ("POST", "/v1/subscribe", {"task": "orders"}),
            ("POST", "/v1/fetch", {"checkpoint": "x"}),
        ]:
            for client in (anonymous, wrong):
                reply = client.call(method, path, body)
                assert reply.status == 401, path
                assert reply.json()["field"] == "Authorization"
                assert reply.headers["WWW-Authenticate"].startswith("Bearer")
        assert right.get("/v1/info").status == 200
        assert right.get("/metrics").status == 200
        right.fetch(right.subscribe(task="orders"), max_rows=1)
    assert TOKEN not in caplog.text and "s3cret" not in caplog.text


def _forged(**sub: Any) -> str:
    return encode_checkpoint(Checkpoint(Subscription(**sub), seq=1))


SUBSCRIBE_CASES: list[tuple[Any, str]] = [
    ({}, "task"),
    ({"task": ""}, "task"),
    ({"task": "orders", "format": "xml"}, "format"),
    ({"task": "orders", "color": "red"}, "color"),
    ({"task": "orders", "start": "yesterday"}, "start"),
    ({"task": "orders", "start": {"seq": 0}}, "start.seq"),
    ({"task": "orders", "start": {"seq": "5"}}, "start.seq"),
    ({"task": "orders", "start": {"seq": 1, "timestamp_us": 5}}, "start"),
    ({"task": "orders", "start": {"position": {"change_id": 0, "file": 1}}},
     "start.position.offset"),
    ({"task": "orders", "start": {"position": "1:2"}}, "start.position"),
    ({"task": "orders", "start": {"timestamp_us": -1}}, "start.timestamp_us"),
    ({"task": "orders", "start": {"gtid_set": "not-a-gtid"}}, "start.gtid_set"),
    ({"task": "orders", "tables": ["nodot"]}, "tables[0]"),
    ({"task": "orders", "tables": []}, "tables"),
    ({"task": "orders", "ddl": "yes"}, "ddl"),
    ({"task": "orders", "shards": {"count": 0}}, "shards.count"),
    ({"task": "orders", "shards": {"count": 2, "owned": [2]}}, "shards.owned[0]"),
    ({"task": "orders", "shards": {"count": 2, "owned": []}}, "shards.owned"),
    ({"task": "orders", "shards": {"count": 2, "keys": {"db.t": []}}}, "shards.keys.db.t"),
    ({"task": "orders", "shards": {"count": 2}, "format": "raw"}, "shards"),
    ([1, 2], "body"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field"), SUBSCRIBE_CASES)
def test_malformed_subscribe_is_400_naming_the_field(api: Api, body: Any, field: str) -> None:
    reply = api.http.post("/v1/subscribe", body)
    assert reply.status == 400, reply.body
    doc = reply.json()
    assert doc["field"] == field and doc["error"]


def test_malformed_fetch_is_400_naming_the_field(api: Api) -> None:
    good = api.http.subscribe(task="orders")
    cases: list[tuple[Any, str]] = [
        ({}, "checkpoint"),
        ({"checkpoint": "!!!"}, "checkpoint"),
        ({"checkpoint": "e30"}, "checkpoint"),  # base64url of "{}": not a v1 checkpoint
        ({"checkpoint": good, "max_rows": 0}, "max_rows"),
        ({"checkpoint": good, "max_rows": 10**9}, "max_rows"),
        ({"checkpoint": good, "max_bytes": -1}, "max_bytes"),
        ({"checkpoint": good, "timeout_ms": -5}, "timeout_ms"),
        ({"checkpoint": good, "timeout_ms": 3_600_000}, "timeout_ms"),
        ({"checkpoint": good, "extra": 1}, "extra"),
    ]
    for body, field in cases:
        reply = api.http.post("/v1/fetch", body)
        assert (reply.status, reply.json()["field"]) == (400, field), body
    beyond = encode_checkpoint(Checkpoint(Subscription("orders"), seq=10_000))
    reply = api.http.post("/v1/fetch", {"checkpoint": beyond})
    assert (reply.status, reply.json()["field"]) == (400, "checkpoint.seq")
    for raw_body, field in [(b"{not json", "body"), (b"", "body")]:
        reply = api.http.call("POST", "/v1/subscribe", raw_body=raw_body)
        assert (reply.status, reply.json()["field"]) == (400, field)


def test_unknown_task_is_404_and_unknown_endpoint_404_wrong_method_405(api: Api) -> None:
    reply = api.http.post("/v1/subscribe", {"task": "nope"})
    assert (reply.status, reply.json()["field"]) == (404, "task")
    reply = api.http.post("/v1/fetch", {"checkpoint": _forged(task="nope")})
    assert (reply.status, reply.json()["field"]) == (404, "checkpoint.task")
    assert api.http.get("/v2/info").status == 404
    assert api.http.get("/v1/fetch").status == 405
    assert api.http.post("/v1/info", {}).status == 405


def test_request_body_over_the_limit_is_413(stored: Stored, tmp_path: Path) -> None:
    with open_api(stored, tmp_path, ServerOptions(max_body_bytes=100)) as api:
        reply = api.http.post("/v1/subscribe", {"task": "orders", "tables": ["a.b"] * 50})
        assert reply.status == 413


def test_position_outside_retention_is_410_with_the_retained_range(
    stored: Stored, tmp_path: Path
) -> None:
    with open_api(stored, tmp_path, segment_bytes=4096, retention_bytes=16384) as api:
        old = api.http.subscribe(task="orders")  # seq 1, before retention runs
        assert api.log.apply_retention()
        first = api.log.earliest()
        assert first is not None and first.seq > 1
        for reply in [
            api.http.post("/v1/subscribe", {"task": "orders", "start": {"seq": 1}}),
            api.http.post("/v1/fetch", {"checkpoint": old}),
        ]:
            assert reply.status == 410
            doc = reply.json()
            assert doc["retained"]["earliest"]["seq"] == first.seq
            assert doc["retained"]["latest"]["seq"] == len(stored.records)
            assert doc["field"] in ("start", "checkpoint")
        reply = api.http.post("/v1/subscribe", {"task": "orders", "start": "earliest"})
        assert reply.json()["next"]["seq"] == first.seq


_SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? '
    r"(-?[0-9.eE+-]+|NaN|[+-]Inf)$"
)


def parse_prometheus(text: str) -> dict[str, float]:
    """A strict reader of the text format: HELP/TYPE before samples, one sample a line."""
    assert text.endswith("\n")
    typed: dict[str, str] = {}
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _h, _t, name, kind = line.split(" ")
            assert kind in ("counter", "gauge") and name not in typed
            typed[name] = kind
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        assert m.group(1) in typed, f"{m.group(1)} has no TYPE line"
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return samples


def test_metrics_are_prometheus_text_and_count_fetches(api: Api) -> None:
    reply = api.http.get("/metrics")
    assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    before = parse_prometheus(reply.body.decode())
    task = '{task="orders"}'
    assert before[f"headwater_events_in_total{task}"] == 1234
    assert before[f"headwater_bytes_in_total{task}"] == 56789
    assert before[f"headwater_transactions_stored_total{task}"] == len(api.records)
    assert before[f"headwater_lag_seconds{task}"] == 0.25
    assert before[f"headwater_log_last_seq{task}"] == len(api.records)
    rows_key = 'headwater_fetch_rows_total{format="json",task="orders"}'
    assert rows_key not in before

    token = api.http.subscribe(task="orders")
    page = api.http.fetch(token, max_rows=40)
    api.http.fetch(page["checkpoint"], max_rows=2)
    api.status["lag_seconds"] = 3.5
    after = parse_prometheus(api.http.get("/metrics").body.decode())
    assert after[rows_key] == 42
    assert after['headwater_fetch_requests_total{format="json",task="orders"}'] == 2
    assert after['headwater_fetch_bytes_total{format="json",task="orders"}'] > 2000
    assert after[f"headwater_lag_seconds{task}"] == 3.5
    assert after['headwater_http_requests_total{code="200",endpoint="/v1/fetch"}'] == 2
    assert after["headwater_fetch_in_flight"] == 0
