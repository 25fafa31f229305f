"""Shared fixtures: a throwaway MariaDB server per test session, a clean database per test.

The server is started once (binlog on, ROW format, FULL row image and metadata, CRC32
checksums); tests that need another setting use ``mariadb.binlog_settings(...)`` (dynamic
variables) or start their own server with ``sandbox_factory``. Any test that uses a server
fixture is marked ``integration`` automatically.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

from headwater.sandbox import MariadbSandbox, SandboxOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = SHARED / "fixtures" / "binlog"

# Hypothesis's default deadline (200 ms per example) is a wall-clock limit: on a loaded
# 2-core machine it fails property tests that are correct. Speed is checked in bench/.
settings.register_profile("headwater", deadline=None)
settings.load_profile("headwater")

_SERVER_FIXTURES = {"mariadb", "db", "sandbox_factory", "spark", "postgres", "mariadb_target"}


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


@pytest.fixture(scope="session")
def mariadb_target() -> Iterator[MariadbSandbox]:
    """A second server, for pipelines that sync into MariaDB (binlog off: a plain target)."""
    server = MariadbSandbox(SandboxOptions(server_id=2, log_bin=False)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session for the whole test run (starting one takes seconds)."""
    from headwater.spark.session import build_session

    session = build_session("local[2]", "headwater-tests")
    try:
        yield session
    finally:
        session.stop()


POSTGRES_DSN = os.environ.get("HEADWATER_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres")


@pytest.fixture
def postgres(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A fresh database on the machine's PostgreSQL (a target only; dropped afterwards).

    Yields connection keywords for psycopg (``host``, ``port``, ``user``, ``dbname``).
    """
    import psycopg

    name = "hw_" + re.sub(r"\W", "_", request.node.name)[:40].lower()
    admin = psycopg.connect(POSTGRES_DSN + " dbname=postgres", autocommit=True)
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
        params = dict(p.split("=", 1) for p in POSTGRES_DSN.split())
        yield {**params, "dbname": name}
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()
