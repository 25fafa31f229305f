"""Shared fixtures: a throwaway MariaDB server per test session, a clean database per test.

The server is started once (binlog on, ROW format, FULL row image and metadata, CRC32
checksums); tests that need another setting use ``mariadb.binlog_settings(...)`` (dynamic
variables) or start their own server with ``sandbox_factory``. Any test that uses a server
fixture is marked ``integration`` automatically.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from headwater.sandbox import MariadbSandbox, SandboxOptions

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = SHARED / "fixtures" / "binlog"

_SERVER_FIXTURES = {"mariadb", "db", "sandbox_factory"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def binlog_fixtures() -> Path:
    """``../shared/fixtures/binlog``: real binlog files written by MySQL and MariaDB."""
    assert FIXTURES.is_dir(), f"{FIXTURES} is missing: clone with ../shared beside the repo"
    return FIXTURES


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariadbSandbox]:
    server = MariadbSandbox(SandboxOptions()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def db(mariadb: MariadbSandbox, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database named after the test; dropped afterwards."""
    name = "t_" + re.sub(r"\W", "_", request.node.name)[:50].lower()
    mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
    try:
        yield name
    finally:
        mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def sandbox_factory() -> Iterator[Callable[..., MariadbSandbox]]:
    """Start extra servers with their own options; all are stopped after the test."""
    started: list[MariadbSandbox] = []

    def make(**options: object) -> MariadbSandbox:
        server = MariadbSandbox(SandboxOptions(**options)).start()  # type: ignore[arg-type]
        started.append(server)
        return server

    try:
        yield make
    finally:
        for server in started:
            server.stop()
