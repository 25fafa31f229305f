"""Coordination: ZooKeeper primitives, consumer groups and checkpoint stores.

This package sits beside ``store``/``schema``/``changes`` in the layering and imports only
``errors``: the SDK (``headwater.client``) and, later, reader leadership build on it.

* :mod:`.zk` connects to ZooKeeper (kazoo) and names the paths headwater uses.
* :mod:`.checkpoints` is the checkpoint store interface with file and ZooKeeper stores;
  :mod:`.sqlstore` is the SQL one (MySQL/MariaDB, PostgreSQL).
* :mod:`.groups` runs one member of a consumer group: membership, shard assignment and a
  fenced owner per shard (an epoch that grows at every change of owner).

Errors::

    HeadwaterError
     +-- CoordinationError          ZooKeeper unreachable, a group's state unreadable
          +-- FencedError           a write of a shard's owner that is no longer the owner
"""

from __future__ import annotations

from headwater.errors import HeadwaterError

__all__ = ["CoordinationError", "FencedError"]


class CoordinationError(HeadwaterError):
    """ZooKeeper or a checkpoint store refused or failed; the message names the group."""


class FencedError(CoordinationError):
    """A shard's owner tried to ack or checkpoint with an epoch that is no longer current:
    another member owns the shard now (the write was refused, nothing was changed)."""
