"""The reader configuration's ``server`` section: the HTTP API of the reader process."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.config import ServerConfig, parse_reader_config
from headwater.errors import ConfigError

BASE = """\
data_dir: data
sources:
  - {name: shop, host: db1, user: repl, server_id: 7}
"""


def _parse(server: str, tmp_path: Path, env: dict[str, str] | None = None) -> ServerConfig:
    config = parse_reader_config(BASE + server, file="reader.yaml", base=tmp_path, env=env or {})
    assert config.server is not None
    return config.server


def _error(server: str, tmp_path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        _parse(server, tmp_path)
    return str(info.value)


def test_no_server_section_means_no_http_api(tmp_path: Path) -> None:
    assert parse_reader_config(BASE, base=tmp_path).server is None


def test_listen_token_file_and_limits(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("abc123\nignored\n")
    server = _parse(
        "server: {listen: '0.0.0.0:9000', token_file: tok, max_rows: 5000, max_bytes: 2MiB,"
        " max_wait: 5}\n",
        tmp_path,
    )
    assert (server.host, server.port, server.token) == ("0.0.0.0", 9000, "abc123")
    assert (server.max_rows, server.max_bytes, server.max_wait_s) == (5000, 2 << 20, 5.0)
    assert "abc123" not in repr(server)


def test_token_from_the_environment_and_defaults(tmp_path: Path) -> None:
    server = _parse("server: {token_env: HW_TOKEN}\n", tmp_path, env={"HW_TOKEN": "t0k"})
    assert (server.host, server.port, server.token) == ("127.0.0.1", 8484, "t0k")
    assert _parse("server: {}\n", tmp_path).token is None


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("server: {listen: 8484}\n", "reader.yaml:4: server.listen: must be a non-empty string"),
        ("server: {listen: 'host'}\n", "reader.yaml:4: server.listen: expected HOST:PORT"),
        ("server: {listen: 'h:99999'}\n", "reader.yaml:4: server.listen: expected HOST:PORT"),
        ("server: {lsten: 'h:1'}\n", "reader.yaml:4: server.lsten: unknown field"),
        ("server: {token_file: missing}\n", "reader.yaml:4: server.token_file: cannot read"),
        ("server: {token_env: NOPE}\n", "reader.yaml:4: server.token_env: environment variable"),
        ("server:\n  listen: 'h:1'\n  max_rows: 1\n", "reader.yaml:6: server.max_rows: must be in"),
        ("server: [1]\n", "reader.yaml:4: server: must be a mapping"),
    ],
)
def test_errors_name_file_line_and_field(server: str, message: str, tmp_path: Path) -> None:
    assert _error(server, tmp_path).startswith(message)


def test_an_empty_token_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("\n")
    assert "server.token_file: the token is empty" in _error(
        "server: {token_file: tok}\n", tmp_path
    )


@pytest.mark.parametrize(
    ("listen", "warned", "url_prefix"),
    [
        ("0.0.0.0:0", True, "http://0.0.0.0:"),
        ("127.0.0.1:0", False, "http://127.0.0.1:"),
        ("[::1]:0", False, "http://[::1]:"),
        ("localhost:0", False, "http://127.0.0.1:"),
    ],
)
def test_listening_beyond_loopback_without_a_token_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, listen: str, warned: bool, url_prefix: str
) -> None:
    from headwater.reader.serving import close_handles, start_server

    config = parse_reader_config(
        BASE + f"server: {{listen: '{listen}', fetch_workers: 0}}\n", base=tmp_path, env={}
    )
    caplog.set_level("INFO", logger="headwater.reader.serving")
    server = start_server(config, {})
    assert server is not None
    url = server.url
    close_handles(server)
    assert url.startswith(url_prefix)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [("without a token" in m and "token_file" in m) for m in warnings] == (
        [True] if warned else []
    )
