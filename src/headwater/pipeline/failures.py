"""One line for a failure that comes back from Spark (issue #16, #14).

An error raised on an executor (a sink's :class:`~headwater.errors.SinkError`, a
:class:`~headwater.errors.ConfigError` of a connection) reaches the driver wrapped: as a
``StreamingQueryException`` from ``awaitTermination`` or ``query.exception()``, as a
``PythonException`` from an action such as a snapshot's ``collect()``, or as a
``Py4JJavaError``. Their text is Spark's: a JVM stack trace with the Python worker's
traceback inside it. :func:`spark_failure` finds the headwater error in that text (the
traceback's last ``headwater.errors.<Name>: message`` line, whose message already names
table, key, statement and the sequence to resume from) and gives it as one line; the
whole trace is for ``--log-level debug`` only (the CLI prints it then).

Invariant: the line never grows past one line, and it is built only from the error's own
message (which never holds values of other rows nor credentials: errors.py).
"""

from __future__ import annotations

import re

__all__ = ["is_spark_error", "spark_failure"]

_HEADWATER = re.compile(
    r"(?:headwater\.errors\.)?(?P<name>[A-Z]\w*(?:Error|Exception)): (?P<msg>.*)"
)
_MAX = 2000


def is_spark_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of PySpark's or Py4J's wrappers of a failure in Spark."""
    module = type(exc).__module__ or ""
    return module.startswith(("pyspark", "py4j"))


def spark_failure(exc: BaseException) -> str:
    """The failure as one line: the innermost headwater error's name and message if the
    text holds one, else the last line that names an exception, else the first line."""
    text = str(getattr(exc, "desc", None) or exc)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    chosen = None
    for line in reversed(lines):
        if "headwater.errors." in line:
            match = _HEADWATER.search(line)
            if match:
                chosen = f"{match['name']}: {match['msg']}"
                break
    if chosen is None:
        for line in reversed(lines):
            if line.startswith(("at ", "File ", "...")):
                continue
            if "Error:" in line or "Exception:" in line:
                chosen = line
                break
    if chosen is None:
        chosen = lines[0] if lines else type(exc).__name__
    return chosen[:_MAX]
