"""An error raised on an executor comes back from Spark as one line naming what the
headwater error names (table, key, statement, resume sequence), not Spark's trace."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.errors import SinkError
from headwater.pipeline.failures import is_spark_error, spark_failure


def test_executor_sink_error_becomes_one_line(spark: Any) -> None:
    # defined here so that cloudpickle ships it by value (workers cannot import tests)
    def fail(_: Any) -> Any:
        raise SinkError(
            "Duplicate entry '5' for key 'v'",
            table="shop.uq",
            key=(2,),
            statement="INSERT INTO `shop`.`uq` (`id`, `v`)\nVALUES (%s, %s)",
            resume_sequence=41,
        )

    with pytest.raises(Exception) as info:
        spark.sparkContext.parallelize([1, 2], 2).map(fail).collect()
    exc = info.value
    assert is_spark_error(exc)
    assert len(str(exc).splitlines()) > 5  # Spark's own text: a trace
    line = spark_failure(exc)
    assert "\n" not in line
    assert line.startswith("SinkError: Duplicate entry '5' for key 'v'; table shop.uq; key (2,)")
    assert "resume from sequence 41" in line
    assert "statement: INSERT INTO `shop`.`uq`" in line


def test_not_spark_errors_are_left_alone() -> None:
    assert not is_spark_error(ValueError("x"))
    assert not is_spark_error(SinkError("x"))


def test_text_without_a_headwater_error_gives_the_last_exception_line() -> None:
    class Wrapped(Exception):
        pass

    Wrapped.__module__ = "pyspark.errors.exceptions.captured"
    text = "Job aborted.\n  at org.x.Y(Y.java:1)\njava.io.IOException: disk full\n  at z"
    assert spark_failure(Wrapped(text)) == "java.io.IOException: disk full"
    assert spark_failure(Wrapped("")) == "Wrapped"
