"""The console's HTTP side on a real server: authentication (bearer, and Basic for
browsers), pipeline reports (validation naming the field, staleness, status files), and
the page's task rows."""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.server import ServerOptions, TaskHandle
from headwater.server.app import HeadwaterServer
from headwater.store import ChangeLog

pytestmark = pytest.mark.integration

TOKEN = "console-api-token"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HeadwaterServer]:
    log = ChangeLog.open(str(tmp_path / "log"))
    status = {"state": "failed", "error": "source gone", "position": "0:1:4:0", "lag_s": 2.5}
    tasks = {"shop": TaskHandle(log=log, status=status)}
    with HeadwaterServer(tasks, ServerOptions(token=TOKEN, fetch_workers=0)).start() as s:
        yield s
    log.close()


def request(
    server: HeadwaterServer, method: str, path: str, auth: str | None, body: Any = None
) -> tuple[int, dict[str, str], bytes]:
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    headers = {"Authorization": auth} if auth else {}
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    out = response.status, dict(response.getheaders()), response.read()
    conn.close()
    return out


def basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"ops:{password}".encode()).decode()


def report(**fields: Any) -> dict[str, Any]:
    return {"name": "orders", "state": "running", "interval_s": 1.0, **fields}


def test_console_asks_a_browser_for_the_token_and_takes_it_as_basic_password(
    server: HeadwaterServer,
) -> None:
    status, headers, _ = request(server, "GET", "/console", None)
    assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="headwater"'
    assert request(server, "GET", "/console", basic("wrong"))[0] == 401
    assert request(server, "GET", "/console", "Basic not-base64!")[0] == 401
    status, headers, page = request(server, "GET", "/console", basic(TOKEN))
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert TOKEN.encode() not in page
    assert b'<tr class="task red" data-task="shop">' in page  # failed, with its error
    assert b'<td data-field="error">source gone</td>' in page
    assert b'<td data-field="lag_seconds">2.50</td>' in page
    # the API's own endpoints take Basic too, and still answer Bearer challenges
    assert request(server, "GET", "/v1/info", basic(TOKEN))[0] == 200
    assert request(server, "GET", "/v1/info", None)[1]["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([1, 2], "body"),
        (report(name="bad name!"), "name"),
        (report(state="sleeping"), "state"),
        (report(rows_per_s="fast"), "rows_per_s"),
        (report(snapshot=[1]), "snapshot"),
        (report(tables="shop.orders"), "tables"),
    ],
)
def test_a_bad_report_is_a_400_naming_the_field(
    server: HeadwaterServer, body: Any, field: str
) -> None:
    status, _, answer = request(server, "POST", "/v1/pipelines", f"Bearer {TOKEN}", body)
    assert status == 400 and json.loads(answer)["field"] == field
    assert server.console.pipelines() == []


def test_reports_without_the_token_are_refused(server: HeadwaterServer) -> None:
    assert request(server, "POST", "/v1/pipelines", None, report())[0] == 401
    assert request(server, "PUT", "/v1/pipelines", f"Bearer {TOKEN}", report())[0] == 405


def test_a_pipeline_that_stops_reporting_turns_red_after_three_intervals(
    server: HeadwaterServer,
) -> None:
    auth = f"Bearer {TOKEN}"
    assert request(server, "POST", "/v1/pipelines", auth, report(lag_seconds=0.5))[0] == 200
    [fresh] = json.loads(request(server, "GET", "/v1/pipelines", auth)[2])["pipelines"]
    assert (fresh["name"], fresh["red"], fresh["why"]) == ("orders", False, [])
    [later] = server.console.pipelines(now=time.time() + 3.2)
    assert later["red"] and later["why"] == ["no report for 3 s"]
    request(server, "POST", "/v1/pipelines", auth, report(lag_seconds=90, lag_warning_s=60))
    [lagging] = server.console.pipelines()
    assert lagging["why"] == ["lag over 60 s"]


def test_status_files_of_local_pipelines_are_shown(server: HeadwaterServer, tmp_path: Path) -> None:
    path = tmp_path / "ck" / "status.json"
    path.parent.mkdir()
    path.write_text(json.dumps(report(name="local", updated_at=time.time(), batches=7)))
    server.console.watch_status_file(path)
    server.console.watch_status_file(tmp_path / "missing" / "status.json")
    names = {p["name"]: p for p in server.console.pipelines()}
    assert names["local"]["batches"] == 7 and not names["local"]["red"]
    assert names["missing"]["state"] == "unknown" and names["missing"]["red"]
    page = request(server, "GET", "/console", basic(TOKEN))[2].decode()
    assert '<tr class="pipeline ok" data-pipeline="local">' in page


def test_pipeline_lag_chart_from_its_reports(server: HeadwaterServer, tmp_path: Path) -> None:
    """Each report's lag is a point of the pipeline's chart (one per ``sample_s`` slice of
    time, the newest report of a slice wins); a watched status file gives a point when a
    sample finds it rewritten."""
    auth = f"Bearer {TOKEN}"
    now = time.time() // 5 * 5  # slices of sample_s (5 s) start at multiples of 5
    for at, lag in [(now - 30, 4.0), (now - 20, 2.5), (now - 19, 1.5), (now - 2, 0.5)]:
        body = report(updated_at=at, lag_seconds=lag)
        assert request(server, "POST", "/v1/pipelines", auth, body)[0] == 200
    # now - 20 and now - 19 are in one slice: the later report replaced the earlier
    assert server.console.pipeline_lags("orders") == [
        (now - 30, 4.0),
        (now - 19, 1.5),
        (now - 2, 0.5),
    ]
    path = tmp_path / "ck" / "status.json"
    path.parent.mkdir()
    path.write_text(json.dumps(report(name="local", updated_at=now - 10, lag_seconds=7.0)))
    server.console.watch_status_file(path)
    server.console.sample(now)
    server.console.sample(now)  # the file did not change: no second point
    assert server.console.pipeline_lags("local") == [(now - 10, 7.0)]
    page = request(server, "GET", "/console", basic(TOKEN))[2].decode()
    assert '<svg class="chart pipeline-lag" data-pipeline="orders" data-points="3"' in page
    assert '<svg class="chart pipeline-lag" data-pipeline="local" data-points="1"' in page
    assert "lag (s): 0.50" in page  # the newest point is the caption's


def test_reader_file_console_section_configures_the_served_console(tmp_path: Path) -> None:
    from headwater.config import parse_reader_config
    from headwater.reader.serving import close_handles, start_server

    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    doc = report(name="from-file", updated_at=time.time(), lag_seconds=1.25)
    (checkpoint / "status.json").write_text(json.dumps(doc))
    config = parse_reader_config(
        "data_dir: data\n"
        "sources: [{name: shop, host: db1, user: repl, password_env: PW, server_id: 7}]\n"
        'server: {listen: "127.0.0.1:0", fetch_workers: 0}\n'
        "console: {pipelines: [ck], sample_interval: 0.5, refresh_interval: 7}\n",
        file="reader.yaml",
        base=tmp_path,
        env={"PW": "x"},
    )
    server = start_server(config, {})
    assert server is not None
    try:
        assert (server.console.sample_s, server.console.refresh_s) == (0.5, 7)
        page = request(server, "GET", "/console", None)[2].decode()
        assert '<meta http-equiv="refresh" content="7">' in page
        assert '<tr class="pipeline ok" data-pipeline="from-file">' in page
        assert '<td data-field="lag_seconds">1.25</td>' in page
    finally:
        close_handles(server)


def test_pipeline_rows_per_table_are_shown_busiest_first(server: HeadwaterServer) -> None:
    from headwater.server.console import TABLES_SHOWN

    tables = {
        f"shop.t{i:02d}": {"rows_in_total": 10 * i, "rows_out_total": 10 * i, "rows_in": i}
        for i in range(TABLES_SHOWN + 5)
    }
    body = report(tables=tables)
    assert request(server, "POST", "/v1/pipelines", f"Bearer {TOKEN}", body)[0] == 200
    page = request(server, "GET", "/console", basic(TOKEN))[2].decode()
    shown = page.count('<tr class="pipeline-table" data-pipeline="orders"')
    assert shown == TABLES_SHOWN
    busiest = f"shop.t{TABLES_SHOWN + 4:02d}"
    row = f'<tr class="pipeline-table" data-pipeline="orders" data-table="{busiest}">'
    assert page.index(row) < page.index('data-table="shop.t05"')
    assert 'data-table="shop.t04"' not in page  # the least busy are left out
    assert f'<td data-field="rows_out_total">{10 * (TABLES_SHOWN + 4)}</td>' in page
