"""Idle connections of this process, reused across the transactions of SQL sinks.

Reuse saves a connect handshake per shard transaction (:class:`ConnectionPool` says why
that matters). :data:`POOL` is the one pool of the process (under Spark, of each Python
worker), keyed by sink class, connection options and session settings
(``SqlSink._pool_key``); the ``*_quietly`` helpers end a connection that may already be
dead without raising.

Invariants: a pooled connection holds no open transaction and has the session its key
says; whoever took one owns it until it gives it back or closes it; at interpreter exit the
idle connections are closed, not just dropped.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any

__all__ = ["POOL", "ConnectionPool", "close_quietly", "rollback_quietly"]

log = logging.getLogger(__name__)


class ConnectionPool:
    """Idle connections of this process, per target and session settings.

    Connecting costs a TCP and often a TLS handshake (PyMySQL tries TLS by default and
    builds a new SSL context each time): hundreds of milliseconds that every batch of every
    shard used to pay. A connection goes back only after a successful commit (so it holds
    no transaction) and never after DDL; when one fails with a retryable error, the idle
    ones of its target are closed too (a restarted target leaves them all stale) and the
    retry connects anew.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.idle: dict[tuple[Any, ...], list[Any]] = {}
        self.lock = threading.Lock()

    def take(self, key: tuple[Any, ...]) -> Any:
        with self.lock:
            conns = self.idle.get(key)
            return conns.pop() if conns else None

    def clear(self, key: tuple[Any, ...]) -> None:
        with self.lock:
            conns = self.idle.pop(key, [])
        for conn in conns:
            close_quietly(conn)

    def close_all(self) -> None:
        """Close every idle connection (at interpreter exit: drivers warn about, and
        servers log, connections that are only dropped)."""
        with self.lock:
            idle, self.idle = self.idle, {}
        for conns in idle.values():
            for conn in conns:
                close_quietly(conn)

    def give(self, key: tuple[Any, ...], conn: Any) -> None:
        with self.lock:
            conns = self.idle.setdefault(key, [])
            if len(conns) < self.size:
                conns.append(conn)
                return
        close_quietly(conn)


POOL = ConnectionPool()
atexit.register(POOL.close_all)


def rollback_quietly(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # a lost connection cannot roll back; the server already did
        log.debug("rollback failed", exc_info=True)


def close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        log.debug("close failed", exc_info=True)
