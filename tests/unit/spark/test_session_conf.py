"""Session settings per master (issue #16): local-only settings only on local masters;
a cluster keeps its UI unless the configuration turns it off."""

from __future__ import annotations

import pytest

from headwater.errors import ConfigError
from headwater.spark.session import is_local, session_conf, spark_log_level


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,2]"])
def test_local_masters_get_the_local_settings(master: str) -> None:
    conf = session_conf(master)
    assert is_local(master)
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.shuffle.compress"] == "false"
    assert conf["spark.sql.session.timeZone"] == "UTC"


@pytest.mark.parametrize(
    "master", ["spark://10.0.0.1:7077", "yarn", "k8s://https://k:443", "localhost-cluster"]
)
def test_cluster_masters_keep_ui_and_shuffle_compression(master: str) -> None:
    conf = session_conf(master)
    assert not is_local(master)
    assert "spark.ui.enabled" not in conf
    assert "spark.shuffle.compress" not in conf and "spark.shuffle.spill.compress" not in conf
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert session_conf(master, conf={"spark.ui.enabled": "false"})["spark.ui.enabled"] == "false"


def test_configuration_overrides_defaults() -> None:
    conf = session_conf("local[2]", shuffle_partitions=8, conf={"spark.ui.enabled": "true"})
    assert conf["spark.ui.enabled"] == "true" and conf["spark.sql.shuffle.partitions"] == "8"


def test_spark_logs_only_at_debug() -> None:
    assert spark_log_level("debug") == "WARN"
    assert {spark_log_level(x) for x in ("info", "warning", "error")} == {"OFF"}


def test_default_parallelism_is_the_clusters_own() -> None:
    assert session_conf("local[2]", shuffle_partitions=3)["spark.default.parallelism"] == "3"
    assert "spark.default.parallelism" not in session_conf("spark://m:7077")


@pytest.mark.parametrize(
    ("chunks", "cores", "tasks"),
    [(4, 2, 2), (4, 4, 4), (4, 16, 4), (1, 8, 1), (40, 2, 5), (40, 8, 8), (0, 4, 1)],
)
def test_bulk_waves_spread_over_all_cores(chunks: int, cores: int, tasks: int) -> None:
    from headwater.snapshot.runner import BULK_PER_TASK, bulk_slices

    assert bulk_slices(chunks, cores) == tasks
    if chunks:
        assert -(-chunks // tasks) <= BULK_PER_TASK  # no task holds more than it may


def test_c1_only_adds_the_option_to_both_jvms_and_never_reaches_spark() -> None:
    plain = session_conf("local[2]")
    assert "TieredStopAtLevel" not in plain["spark.driver.extraJavaOptions"]
    conf = session_conf("local[2]", conf={"headwater.jvm.c1Only": "True"})
    assert "headwater.jvm.c1Only" not in conf
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        assert conf[key] == plain[key] + " -XX:TieredStopAtLevel=1"
    own = session_conf(
        "yarn", conf={"spark.driver.extraJavaOptions": "-Xss4m", "headwater.jvm.c1Only": "true"}
    )
    assert own["spark.driver.extraJavaOptions"] == "-Xss4m -XX:TieredStopAtLevel=1"
    assert session_conf("local[2]", conf={"headwater.jvm.c1Only": "false"}) == plain
    with pytest.raises(ConfigError, match="c1Only"):
        session_conf("local[2]", conf={"headwater.jvm.c1Only": "yes"})
