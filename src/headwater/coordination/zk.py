"""ZooKeeper connection helper and the paths headwater uses (kazoo).

Layout (every path under ``ROOT``)::

    /headwater/groups/<group>/members/<member>        ephemeral: a live member (JSON: host, pid)
    /headwater/groups/<group>/state                   JSON: shard count and previous generations
    /headwater/groups/<group>/shards/<n>/epoch        persistent; its *version* is the epoch
    /headwater/groups/<group>/shards/<n>/owner        ephemeral: the member owning shard n
    /headwater/groups/<group>/shards/<n>/checkpoint   JSON {"next", "epoch"} (ZooKeeper store)
    /headwater/tasks/<task>/servers/<name>            a reader serving <task> (data: its URL)

The epoch of a shard is the version of its ``epoch`` znode: a new owner bumps it with a
write, so it only grows, and a conditional write (``check(epoch, version)`` in a
transaction) of a deposed owner fails. Ephemeral znodes vanish when their session expires
(the ZooKeeper session timeout), which is how a dead or paused member loses its shards.
"""

from __future__ import annotations

import logging
from typing import Any

from headwater.coordination import CoordinationError

__all__ = [
    "ROOT",
    "connect",
    "discover_readers",
    "group_path",
    "member_path",
    "servers_path",
    "session_timeout_s",
    "shard_path",
]

log = logging.getLogger(__name__)

ROOT = "/headwater"
#: kazoo's default is 10 s. 4 s is the least a ZooKeeper server with the default
#: ``tickTime=2000`` grants (it bounds a session to 2..20 ticks: ``minSessionTimeout``,
#: https://zookeeper.apache.org/doc/r3.8.4/zookeeperAdmin.html#sc_advancedConfiguration),
#: so a dead member's shards and a dead reader leader's node go after about 4 s anywhere.
DEFAULT_SESSION_TIMEOUT = 4.0


def _safe(name: str, what: str) -> str:
    if not name or "/" in name or name in (".", ".."):
        raise CoordinationError(f"{what} {name!r} cannot be a ZooKeeper node name")
    return name


def group_path(group: str) -> str:
    return f"{ROOT}/groups/{_safe(group, 'consumer group')}"


def member_path(group: str, member: str) -> str:
    return f"{group_path(group)}/members/{_safe(member, 'member')}"


def shard_path(group: str, shard: int) -> str:
    return f"{group_path(group)}/shards/{int(shard)}"


def servers_path(task: str) -> str:
    return f"{ROOT}/tasks/{_safe(task, 'task')}/servers"


def connect(
    hosts: str, *, session_timeout: float = DEFAULT_SESSION_TIMEOUT, timeout: float = 15.0
) -> Any:
    """A started ``KazooClient`` for ``hosts`` (``host:port,host:port``).

    Raises :class:`CoordinationError` naming the hosts when no server answers in
    ``timeout`` seconds."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=hosts, timeout=session_timeout)
    _note_negotiated(client)
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise CoordinationError(f"no ZooKeeper server answered at {hosts} in {timeout} s") from None
    return client


def _note_negotiated(client: Any) -> None:
    """Keep the session timeout the server granted on ``client.negotiated_timeout_ms``.

    The server may grant another timeout than asked (bounded by its tickTime); kazoo
    uses it but keeps only the one asked for (``_session_timeout``). Its connection's
    ``_connect`` returns the read timeout, two thirds of the granted session timeout
    (kazoo/protocol/connection.py, ``read_timeout = negotiated_session_timeout * 2.0 / 3.0``).
    """
    conn = client._connection
    connect_once = conn._connect

    def _connect(*args: Any) -> Any:
        read_timeout, connect_timeout = connect_once(*args)
        client.negotiated_timeout_ms = read_timeout * 1.5
        return read_timeout, connect_timeout

    conn._connect = _connect


def session_timeout_s(client: Any) -> float:
    """The session timeout (seconds) a lease may count on: the lesser of the one asked
    for and the one the server granted (a session never outlives it)."""
    asked = float(getattr(client, "_session_timeout", DEFAULT_SESSION_TIMEOUT * 1000))
    granted = float(getattr(client, "negotiated_timeout_ms", asked))
    return min(asked, granted) / 1000.0


def discover_readers(client: Any, task: str) -> list[str]:
    """The URLs of the readers that registered as serving ``task`` (sorted by name)."""
    from kazoo.exceptions import NoNodeError

    path = servers_path(task)
    try:
        names = sorted(client.get_children(path))
    except NoNodeError:
        return []
    urls = []
    for name in names:
        try:
            data, _stat = client.get(f"{path}/{name}")
        except NoNodeError:
            continue  # went away while we listed
        urls.append(data.decode("utf-8"))
    return urls
