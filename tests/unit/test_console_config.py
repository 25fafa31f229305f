"""The reader file's ``console`` section: local pipelines' status files and the console's
sample and refresh intervals, with errors that name the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.config import ConsoleConfig, parse_reader_config
from headwater.errors import ConfigError

BASE = """\
data_dir: data
sources:
  - {name: shop, host: db1, user: repl, password_env: PW, server_id: 4242}
"""
SERVER = 'server: {listen: "127.0.0.1:0"}\n'
ENV = {"PW": "secret"}


def _parse(text: str, base: Path) -> ConsoleConfig:
    return parse_reader_config(BASE + text, file="reader.yaml", base=base, env=ENV).console


def _error(text: str, base: Path) -> str:
    with pytest.raises(ConfigError) as info:
        _parse(text, base)
    return str(info.value)


def test_console_section_paths_relative_to_the_file(tmp_path: Path) -> None:
    console = _parse(
        SERVER
        + "console:\n"
        + "  pipelines: [ckpt/orders, /abs/other/status.json]\n"
        + "  sample_interval: 2\n"
        + "  refresh_interval: 10\n",
        tmp_path,
    )
    assert console.pipelines == (tmp_path / "ckpt/orders", Path("/abs/other/status.json"))
    assert console.status_files() == (
        tmp_path / "ckpt/orders/status.json",
        Path("/abs/other/status.json"),
    )
    assert console.sample_interval == 2.0
    assert console.refresh_interval == 10.0


def test_console_defaults_without_a_section(tmp_path: Path) -> None:
    console = _parse(SERVER, tmp_path)
    assert console == ConsoleConfig((), 5.0, 5.0)


def test_console_without_server_is_an_error_naming_the_line(tmp_path: Path) -> None:
    message = _error("console: {sample_interval: 2}\n", tmp_path)
    assert "reader.yaml:4" in message
    assert "console" in message and "add a server section" in message


def test_console_unknown_field(tmp_path: Path) -> None:
    message = _error(SERVER + "console:\n  refresh: 3\n", tmp_path)
    assert "reader.yaml:6" in message and "refresh" in message


def test_console_pipelines_must_be_a_list(tmp_path: Path) -> None:
    message = _error(SERVER + "console:\n  pipelines: ckpt/orders\n", tmp_path)
    assert "reader.yaml:6" in message
    assert "console.pipelines: must be a list of paths" in message


def test_console_pipeline_entry_must_be_a_string(tmp_path: Path) -> None:
    message = _error(SERVER + "console:\n  pipelines:\n    - ok\n    - 12\n", tmp_path)
    assert "reader.yaml:8" in message and "console.pipelines[1]" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [("sample_interval", "0"), ("sample_interval", "fast"), ("refresh_interval", "0.5")],
)
def test_console_interval_out_of_range(tmp_path: Path, field: str, value: str) -> None:
    message = _error(SERVER + f"console:\n  {field}: {value}\n", tmp_path)
    assert "reader.yaml:6" in message and f"console.{field}" in message
