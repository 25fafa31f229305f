"""The target fixtures: a local Spark session, PostgreSQL and a second MariaDB."""

from __future__ import annotations

from typing import Any

import psycopg
from pyspark.sql import SparkSession

from headwater.sandbox import MariadbSandbox


def test_spark_session_runs_with_utc_and_the_jdbc_jar(spark: SparkSession) -> None:
    assert spark.range(10).selectExpr("sum(id)").collect()[0][0] == 45
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert "mariadb-java-client" in spark.conf.get("spark.jars", "")


def test_postgres_database_is_fresh(postgres: dict[str, Any]) -> None:
    with psycopg.connect(**postgres) as conn:
        rows = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert rows == [(0,)]


def test_mariadb_target_has_no_binlog(mariadb_target: MariadbSandbox) -> None:
    assert mariadb_target.query("SELECT @@log_bin, @@server_id") == [(0, 2)]
