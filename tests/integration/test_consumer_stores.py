"""``claim_many`` of the SQL (MariaDB, PostgreSQL) and ZooKeeper checkpoint stores against
``claim`` one shard at a time: the same epochs and checkpoints, and the same fencing of
the epoch it replaced (real servers: the session's MariaDB, the machine's PostgreSQL, a
ZooKeeper started on a free port); a group member whose loop fails; the SQL store's cap
on idle connections."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from headwater.client import CheckpointStore, FencedError, SqlStore, ZkStore
from headwater.coordination.sqlstore import MAX_IDLE
from headwater.coordination.zk import connect
from headwater.sandbox import MariadbSandbox
from tests.integration.test_reader_capture import wait_for
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


@pytest.mark.parametrize("server", ["mariadb", "postgresql"])
def test_sql_checkpoint_never_moves_back(request: pytest.FixtureRequest, server: str) -> None:
    """A save of an older ack after a handler committed a newer checkpoint (the
    consumer's flusher racing the handler's transaction) leaves the newer one."""
    if server == "mariadb":
        mariadb: MariadbSandbox = request.getfixturevalue("mariadb")
        db: str = request.getfixturevalue("db")
        connect = lambda: mariadb.connect(db)  # noqa: E731
    else:
        import psycopg

        params: dict[str, Any] = request.getfixturevalue("postgres")
        dsn = " ".join(f"{k}={v}" for k, v in params.items())
        connect = lambda: psycopg.connect(dsn)  # noqa: E731
    sql = SqlStore(connect)
    try:
        sql.create("back", 2, 100)
        epoch, _next = sql.claim("back", 1, None)
        conn = connect()
        try:  # the handler's transaction
            with conn.cursor() as cur:
                SqlStore.save_in(cur, "back", 1, 900, epoch)
            conn.commit()
        finally:
            conn.close()
        sql.save("back", 1, 400, epoch)  # the flusher's older ack, written after it
        sql.save("back", 0, 300, sql.claim("back", 0, None)[0])
        state = sql.load("back")
        assert state is not None and state.next == {0: 300, 1: 900}
        sql.save("back", 1, 950, epoch)
        assert sql.claim("back", 1, None) == (epoch + 1, 950)
        with pytest.raises(FencedError):
            sql.save("back", 1, 960, epoch)
    finally:
        sql.close()


def test_a_group_loop_that_fails_hands_the_error_to_on_error_and_ends(
    zookeeper: str,  # noqa: F811
) -> None:
    """A member's ``on_revoke`` raises when a second member joins and the first must give
    a shard up: the loop does not die silently, ``on_error`` gets the exception (the
    consumer's ``_fail``) and the loop ends."""
    import threading

    from headwater.coordination.groups import GroupMember

    client = connect(zookeeper)
    other = connect(zookeeper)
    errors: list[BaseException] = []
    failed = threading.Event()

    def on_error(error: BaseException) -> None:
        errors.append(error)
        failed.set()

    def on_revoke(shard: int) -> None:
        raise ValueError(f"crafted: revoke of shard {shard} failed")

    first = GroupMember(
        client, "loopfail", 2, on_assign=lambda s, e: None, on_revoke=on_revoke,
        on_error=on_error, poll=0.1, member_id="a",
    )  # fmt: skip
    second = GroupMember(
        other, "loopfail", 2, on_assign=lambda s, e: None, on_revoke=lambda s: None,
        poll=0.1, member_id="b",
    )  # fmt: skip
    try:
        first.start()
        wait_for(lambda: first.owned.keys() == {0, 1}, 10, "the first member to own both")
        second.start()
        assert failed.wait(10), "on_error was not called"
        assert isinstance(errors[0], ValueError) and len(errors) == 1
        assert first._thread is not None
        first._thread.join(5)
        assert not first._thread.is_alive()
    finally:
        second.stop(timeout=5)
        other.delete("/headwater", recursive=True)
        for c in (client, other):
            c.stop()
            c.close()


def test_sql_store_keeps_at_most_max_idle_connections(mariadb: MariadbSandbox, db: str) -> None:
    opened: list[Any] = []

    def connect_counted() -> Any:
        conn = mariadb.connect(db)
        opened.append(conn)
        return conn

    store = SqlStore(connect_counted)
    burst = MAX_IDLE + 3
    barrier = threading.Barrier(burst)

    def operation() -> None:
        with store._tx() as cur:
            barrier.wait(30)  # all at once: each needs a connection of its own
            cur.execute("SELECT 1")

    threads = [threading.Thread(target=operation) for _ in range(burst)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(opened) == burst
    assert len(store._idle) == MAX_IDLE
    assert sum(1 for c in opened if c.open) == MAX_IDLE  # the others were closed
    store.load("nothing")  # reuses an idle connection
    assert len(opened) == burst
    store.close()
    assert not any(c.open for c in opened)
