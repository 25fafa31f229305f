"""``claim_many`` of the SQL (MariaDB, PostgreSQL) and ZooKeeper checkpoint stores against
``claim`` one shard at a time: the same epochs and checkpoints, and the same fencing of
the epoch it replaced (real servers: the session's MariaDB, the machine's PostgreSQL, a
ZooKeeper started on a free port)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from headwater.client import CheckpointStore, FencedError, SqlStore, ZkStore
from headwater.coordination.zk import connect
from headwater.sandbox import MariadbSandbox
from tests.integration.zk_support import zookeeper  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration


@pytest.fixture(params=["mariadb", "postgresql", "zookeeper"])
def store(request: pytest.FixtureRequest) -> Iterator[CheckpointStore]:
    if request.param == "mariadb":
        mariadb: MariadbSandbox = request.getfixturevalue("mariadb")
        db: str = request.getfixturevalue("db")
        sql = SqlStore(lambda: mariadb.connect(db))
        yield sql
        sql.close()
    elif request.param == "postgresql":
        import psycopg

        params: dict[str, Any] = request.getfixturevalue("postgres")
        dsn = " ".join(f"{k}={v}" for k, v in params.items())
        sql = SqlStore(lambda: psycopg.connect(dsn))
        yield sql
        sql.close()
    else:
        client = connect(request.getfixturevalue("zookeeper"))
        try:
            yield ZkStore(client)
        finally:
            client.delete("/headwater", recursive=True)
            client.stop()
            client.close()


def test_claim_many_equals_claim_of_each_shard_and_fences_the_old_epoch(
    store: CheckpointStore,
) -> None:
    for group in ("many", "each"):
        store.create(group, 4, 100)
        epoch, _next = store.claim(group, 2, None)
        store.save(group, 2, 500, epoch)
    many = store.claim_many("many", range(4))  # type: ignore[attr-defined]
    each = {shard: store.claim("each", shard, None) for shard in range(4)}
    assert many == each == {0: (1, 100), 1: (1, 100), 2: (2, 500), 3: (1, 100)}
    with pytest.raises(FencedError):
        store.save("many", 2, 600, 1)  # the epoch claim_many replaced
    store.save("many", 2, 600, 2)
    assert store.claim_many("many", [3, 1]) == {1: (2, 100), 3: (2, 100)}  # type: ignore[attr-defined]
    state = store.load("many")
    assert state is not None
    assert state.next == {0: 100, 1: 100, 2: 600, 3: 100}
    assert state.epochs == {0: 1, 1: 2, 2: 2, 3: 2}
