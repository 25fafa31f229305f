"""The pipeline's API token (issue #14): only from token_file / token_env, never inline,
never in a repr, never in a Spark option or plan string; it reaches the reader's HTTP API
in the Authorization header from the pickled reader (as on an executor)."""

from __future__ import annotations

import http.server
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from headwater.errors import ConfigError
from headwater.pipeline.config import parse_pipeline_config
from headwater.spark.offsets import parse_options

TOKEN = "tok-3f9a1c77e2b54d"

SERVER = """\
name: p
source:
  server: http://127.0.0.1:8080
  task: shop
{extra}
checkpoint: ck
sinks:
  - type: ums
    path: out
"""


def parse(extra: str, tmp_path: Path, env: dict[str, str] | None = None) -> Any:
    return parse_pipeline_config(
        SERVER.format(extra=extra), file="p.yaml", base=tmp_path, env=env or {}
    )


def error(extra: str, tmp_path: Path, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse(extra, tmp_path, env)
    return str(info.value)


def test_inline_token_refused_naming_the_field(tmp_path: Path) -> None:
    message = error(f"  token: {TOKEN}", tmp_path)
    assert "source.token" in message and "token_file" in message and "p.yaml" in message
    assert TOKEN not in message
    message = error(f"  options:\n    token: {TOKEN}", tmp_path)
    assert "source.options.token" in message and TOKEN not in message


def test_token_file_and_env_become_names_only(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text(TOKEN + "\n")
    config = parse("  token_file: tok", tmp_path)
    assert config.source.option_map()["tokenFile"] == str(tmp_path / "tok")
    assert TOKEN not in repr(config)
    config = parse("  token_env: HW_TOK", tmp_path, {"HW_TOK": TOKEN})
    assert config.source.option_map()["tokenEnv"] == "HW_TOK"
    assert TOKEN not in repr(config) and TOKEN not in str(config.source.options)


def test_token_field_errors(tmp_path: Path) -> None:
    assert "environment variable HW_TOK is not set" in error("  token_env: HW_TOK", tmp_path)
    assert "cannot read" in error("  token_file: missing", tmp_path)
    (tmp_path / "empty").write_text("\n")
    assert "the token is empty" in error("  token_file: empty", tmp_path)
    (tmp_path / "tok").write_text(TOKEN)
    both = error("  token_file: tok\n  token_env: X", tmp_path, {"X": "y"})
    assert "source.token_env" in both and "only one" in both


def test_source_options_resolve_the_token_and_hide_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tok").write_text(TOKEN + "\n")
    base = {"server": "http://h:1", "task": "t"}
    opts = parse_options({**base, "tokenFile": str(tmp_path / "tok")})
    assert opts.token == TOKEN and TOKEN not in repr(opts)
    monkeypatch.setenv("HW_TOK2", TOKEN)
    assert parse_options({**base, "tokenEnv": "HW_TOK2"}).token == TOKEN
    with pytest.raises(ConfigError) as info:
        parse_options({**base, "tokenEnv": "HW_NOT_SET_ANYWHERE"})
    assert info.value.field == "tokenEnv"
    with pytest.raises(ConfigError) as info:
        parse_options({**base, "tokenFile": str(tmp_path / "tok"), "tokenEnv": "HW_TOK2"})
    assert info.value.field == "tokenEnv"


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        _Recorder.seen.append(self.headers.get("Authorization"))
        body = orjson.dumps({"format_description": None, "schema_history": None})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_token_in_no_spark_plan_and_sent_by_the_pickled_reader(
    tmp_path: Path, spark: Any, recorder: str
) -> None:
    from pyspark.sql.types import StructType

    from headwater.spark import register
    from headwater.spark.logaccess import HttpLog
    from headwater.spark.source import HeadwaterDataSource

    (tmp_path / "tok").write_text(TOKEN + "\n")
    options = {"server": recorder, "task": "shop", "tokenFile": str(tmp_path / "tok")}
    register(spark)
    reader = spark.readStream.format("headwater")
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    plans = df._jdf.queryExecution().toString() + str(df._jdf.logicalPlan().toString())
    assert "headwater" in plans.lower()  # the plan names the source (a real plan string)
    assert TOKEN not in plans
    assert all(TOKEN not in str(v) for v in spark.sparkContext.getConf().getAll())
    # What Spark ships to an executor: the pickled reader carries the resolved token.
    stream = HeadwaterDataSource(options).streamReader(StructType())
    shipped = pickle.loads(pickle.dumps(stream))
    assert TOKEN not in repr(shipped.options)
    HttpLog(shipped.options).close()
    assert _Recorder.seen == [f"Bearer {TOKEN}"]
