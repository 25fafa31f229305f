"""One member of a consumer group on ZooKeeper: membership, shard assignment, fenced owners.

Members register an ephemeral znode under ``members/``. Every member computes the same
assignment from the sorted list of live members (shard ``s`` goes to member
``s % len(members)``), releases the shards it no longer should own (after its consumer has
stopped them: ``on_revoke``) and tries to take the ones it should. Taking a shard is
creating its ephemeral ``owner`` znode, which fails while the previous owner holds it, so
two members never own one shard at once; the new owner then bumps the shard's ``epoch``
znode, whose version is the epoch handed to ``on_assign``.

Fencing: the owner of a paused or partitioned process loses its ZooKeeper session after
the session timeout; its ephemeral znodes vanish and another member takes the shard with a
greater epoch. When the paused process resumes, :meth:`GroupMember.check` (every ack) and
every epoch-conditional checkpoint write refuse it with :class:`FencedError`.

The loop runs in one thread, woken by the membership watch, owner deletions and a poll
interval (so a missed watch only delays a rebalance). Callbacks run in that thread. An
exception other than a ZooKeeper error (retried next round) ends the loop: it is logged
and handed to ``on_error`` (the consumer then fails and stops; see
``headwater.client.consumer``), never lost with the thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from headwater.coordination import CoordinationError, FencedError
from headwater.coordination.zk import group_path, member_path, shard_path

__all__ = ["GroupMember", "assignment", "live_members", "require_no_members"]

log = logging.getLogger(__name__)


def assignment(members: list[str], count: int, me: str) -> set[int]:
    """The shards ``me`` should own when ``members`` are alive (every member computes the
    same: shard ``s`` to the ``s % n``-th member in sorted order)."""
    ordered = sorted(members)
    if me not in ordered:
        return set()
    return {s for s in range(count) if ordered[s % len(ordered)] == me}


def live_members(client: Any, group: str) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        return sorted(client.get_children(f"{group_path(group)}/members"))
    except NoNodeError:
        return []


class GroupMember:
    """This process in ``group`` (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        group: str,
        count: int,
        *,
        on_assign: Callable[[int, int], None],
        on_revoke: Callable[[int], None],
        on_error: Callable[[BaseException], None] | None = None,
        poll: float = 1.0,
        member_id: str | None = None,
    ) -> None:
        self.zk = client
        self.group = group
        self.count = count
        self.me = member_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._on_error = on_error
        self._poll = poll
        self.owned: dict[int, int] = {}  # shard -> epoch
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._fenced: list[tuple[int, int]] = []  # (shard, epoch) the consumer dropped

    # -- lifecycle

    def start(self) -> None:
        self.zk.ensure_path(f"{group_path(self.group)}/members")
        for shard in range(self.count):
            self.zk.ensure_path(f"{shard_path(self.group, shard)}/epoch")
        self.zk.add_listener(self._state_changed)
        self._register()
        self._thread = threading.Thread(target=self._loop, name=f"group-{self.group}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Release every shard (after ``on_revoke``) and leave the group. With a
        ``timeout``, a loop stuck in a callback or on ZooKeeper is abandoned after it (the
        session's close releases the ephemeral owner znodes)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("group %s: loop did not stop in %s s", self.group, timeout)
                return
        for shard in sorted(self.owned):
            self._release(shard)
        from kazoo.exceptions import KazooException

        with contextlib.suppress(KazooException):  # a lost session took the node with it
            self.zk.delete(member_path(self.group, self.me))
        self.zk.remove_listener(self._state_changed)

    # -- ZooKeeper

    def _state_changed(self, state: Any) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            self._lost.set()
        self._wake.set()

    def _register(self) -> None:
        from kazoo.exceptions import NodeExistsError

        info = orjson.dumps({"host": socket.gethostname(), "pid": os.getpid()})
        with contextlib.suppress(NodeExistsError):
            self.zk.create(member_path(self.group, self.me), info, ephemeral=True)

    def _watch(self, *_args: Any) -> None:
        self._wake.set()

    def _loop(self) -> None:
        from kazoo.exceptions import KazooException

        while not self._stop.is_set():
            try:
                self.rebalance()
            except KazooException as e:
                log.warning("group %s: rebalance failed (%r); retrying", self.group, e)
            except BaseException as e:
                if self._on_error is None:
                    log.exception("group %s: rebalance failed; the loop stops", self.group)
                else:
                    self._on_error(e)  # logs it
                return
            self._wake.wait(self._poll)
            self._wake.clear()

    def rebalance(self) -> None:
        """One round: drop what the session lost, then move toward the assignment."""
        if self._lost.is_set():
            self._lost.clear()
            for shard in sorted(self.owned):
                log.warning("group %s: session lost, shard %d revoked", self.group, shard)
                self._on_revoke(shard)
                self.owned.pop(shard, None)
        if not self.zk.connected:
            return
        with self._lock:
            fenced, self._fenced = self._fenced, []
        for shard, epoch in fenced:
            if self.owned.get(shard) == epoch:  # not taken again since
                self._release(shard)
        if self.zk.exists(member_path(self.group, self.me)) is None:
            self._register()
        members = self.zk.get_children(f"{group_path(self.group)}/members", watch=self._watch)
        target = assignment(members, self.count, self.me)
        for shard in sorted(set(self.owned) - target):
            self._release(shard)
        for shard in sorted(target - set(self.owned)):
            if self._stop.is_set():
                return
            self._take(shard)

    def _take(self, shard: int) -> None:
        from kazoo.exceptions import NodeExistsError

        path = shard_path(self.group, shard)
        try:
            self.zk.create(f"{path}/owner", self.me.encode(), ephemeral=True)
        except NodeExistsError:
            if not self._owns_node(path):  # ours: a release whose delete was lost
                self.zk.exists(f"{path}/owner", watch=self._watch)  # wake when released
                return
        epoch = int(self.zk.set(f"{path}/epoch", self.me.encode()).version)
        self.owned[shard] = epoch
        log.info("group %s: %s owns shard %d, epoch %d", self.group, self.me, shard, epoch)
        try:
            self._on_assign(shard, epoch)
        except Exception:
            # e.g. the checkpoint store cannot record the claim: give the shard back so
            # that this member (next round) or another one takes it again.
            log.exception("group %s: shard %d not started; released", self.group, shard)
            self._release(shard)

    def _owns_node(self, path: str) -> bool:
        """Whether ``path``/owner is this member's, in this session."""
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self.zk.get(f"{path}/owner")
        except NoNodeError:
            return False
        return bool(data == self.me.encode() and stat.ephemeralOwner == self.zk.client_id[0])

    def _release(self, shard: int) -> None:
        from kazoo.exceptions import KazooException

        self._on_revoke(shard)
        self.owned.pop(shard, None)
        path = shard_path(self.group, shard)
        try:
            if self._owns_node(path):
                self.zk.delete(f"{path}/owner")
        except KazooException:
            pass  # gone with the session, or deleted by _take's next try (it is ours)
        log.info("group %s: %s released shard %d", self.group, self.me, shard)

    def fenced(self, shard: int, epoch: int) -> None:
        """The consumer dropped ``shard`` at ``epoch``: an ack or a checkpoint was refused,
        or ownership could not be proven (ZooKeeper unreachable for a moment). The loop
        releases it (if it still holds it at that epoch), so that the next round takes it
        again with a new epoch from its stored checkpoint, instead of holding it unserved."""
        with self._lock:
            self._fenced.append((shard, epoch))
        self._wake.set()

    def check(self, shard: int, epoch: int) -> None:
        """Raise :class:`FencedError` unless this session still owns ``shard`` at ``epoch``."""
        from kazoo.exceptions import KazooException

        path = shard_path(self.group, shard)
        try:
            data, stat = self.zk.get(f"{path}/owner")
            current = self.zk.exists(f"{path}/epoch")
        except KazooException as e:
            raise FencedError(
                f"group {self.group} shard {shard}: ownership cannot be proven ({e!r})"
            ) from None
        if (
            data != self.me.encode()
            or stat.ephemeralOwner != self.zk.client_id[0]
            or current is None
            or current.version != epoch
        ):
            raise FencedError(
                f"group {self.group} shard {shard}: epoch {epoch} was deposed "
                f"(current epoch {None if current is None else current.version})"
            )


def require_no_members(client: Any, group: str) -> None:
    """For resharding: refuse while any member is alive."""
    members = live_members(client, group)
    if members:
        raise CoordinationError(
            f"group {group} has live members {members}: stop them before changing the shard count"
        )
