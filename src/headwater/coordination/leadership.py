"""Reader high availability: one leader per task, elected in ZooKeeper, fenced by an epoch.

Layout (under ``/headwater/tasks/<task>/``, beside ``servers/`` of zk.py)::

    servers/<member>   ephemeral: the member's URL (what ``discover_readers`` lists)
    members/<member>   ephemeral JSON {"url", "role", "seq", "epoch"}: a live member and how
                       far its change log goes (the election prefers the highest seq)
    leader             ephemeral JSON {"member", "url", "epoch", "lease_s"}: the member
                       capturing, and how long its lease lasts after a round trip
    deposed            persistent JSON {"epoch", "lease_s", "by"}: the last epoch whose
                       leader node another member deleted (see "Deposition" below)
    epoch              persistent; its *version* is the current epoch
    epochs             persistent JSON [[epoch, first_seq], ...]: the seq each epoch's
                       leader began appending at (the divergence point of a deposed leader)
    state              persistent JSON: the leader's last saved ReaderState (its
                       ``change_ids`` and GTID set, which a new leader resumes from)

Invariants. A leader is made in one ZooKeeper transaction that creates ``leader`` and bumps
``epoch`` and appends to ``epochs`` under version checks, so two members can never hold the
same epoch and ``epochs`` only grows. ``leader`` is ephemeral: it goes when its session
expires (SIGKILL, a pause past the session timeout, a partition), and only then can another
member win. A leader appends only while its *lease* holds: the lease is renewed by a
successful round trip to ZooKeeper and lasts a fraction of the session timeout from the
moment the request was sent, so a leader paused (SIGSTOP) or cut off past its session
stops appending before, or at the latest when, a new leader can exist (fencing that needs
no clock agreement between machines, only a steady monotonic clock on each).

Deposition. A leader whose process is gone (its API refuses connections) keeps its node
until its session expires. A follower may delete it at once (:meth:`Leadership.depose`:
ZooKeeper lets any client delete another session's ephemeral node), in one transaction
that checks the epoch is still the deposed leader's and records the epoch in ``deposed``.
The deposed leader may in fact be alive (a firewall that rejects connections looks the
same): its next renewal finds the node gone and revokes its lease, and it cannot append
past the lease it already holds, which ends less than ``lease_s`` after the deletion
(it was earned by a round trip sent before). So the member that wins the next epoch
after a deposition appends nothing before ``lease_s`` has passed since it saw the
``deposed`` record (:attr:`Leadership.not_before`): two leaders never append at once,
and never in one epoch. Which member deposed does not matter; ``try_lead`` checks
``deposed``'s version in its transaction, so a deposition between its read and its
commit makes it fail and stand again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from headwater.coordination import CoordinationError
from headwater.coordination.zk import ROOT, _safe, servers_path, session_timeout_s

__all__ = ["LeaderInfo", "Leadership", "Lease", "cluster_view", "task_root"]

log = logging.getLogger(__name__)

#: The lease lasts this fraction of the negotiated session timeout after a round trip.
LEASE_FRACTION = 0.6


def task_root(task: str) -> str:
    return f"{ROOT}/tasks/{_safe(task, 'task')}"


class Lease:
    """The fence's arithmetic: a grant runs ``fraction`` of the session timeout from when
    the round trip that earned it was *sent* (not answered: the server may have counted
    the session from then), on this process's monotonic clock.

    Why a fraction below 1: ZooKeeper expires a session ``timeout`` after it last heard
    from the client, and only then can another member win; stopping earlier leaves room
    for clock rate differences and for the append already under way.
    """

    __slots__ = ("fraction", "until")

    def __init__(self, fraction: float = LEASE_FRACTION) -> None:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"lease fraction {fraction} is not between 0 and 1")
        self.fraction = fraction
        self.until = 0.0

    def grant(self, sent: float, session_timeout_s: float) -> None:
        """A round trip sent at ``sent`` (monotonic seconds) confirmed the leadership."""
        self.until = max(self.until, sent + session_timeout_s * self.fraction)

    def revoke(self) -> None:
        self.until = 0.0

    def valid(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) < self.until


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """Who leads a task: the member's name, its URL and its epoch."""

    member: str
    url: str
    epoch: int


def _load(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, ValueError):
        return None


class Leadership:
    """One member's view of its task's election (see the module docstring).

    ``join`` registers the member; ``try_lead`` makes it leader if nobody is; ``lease_valid``
    is the fence a leader checks before appending; ``lost`` is set when the session expired.
    """

    def __init__(self, client: Any, task: str, member: str, url: str) -> None:
        self.client = client
        self.task = task
        self.member = _safe(member, "member")
        self.url = url
        self.root = task_root(task)
        self.epoch = 0
        #: monotonic time before which a new leader must not append (after a deposition)
        self.not_before = 0.0
        #: monotonic send time of the last round trip that confirmed the leadership
        self.confirmed = 0.0
        self.lost = threading.Event()
        self.lease = Lease()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        client.add_listener(self._on_state)

    # -- paths -----------------------------------------------------------------------------

    @property
    def leader_path(self) -> str:
        return f"{self.root}/leader"

    def _member_path(self, name: str | None = None) -> str:
        return f"{self.root}/members/{name or self.member}"

    # -- membership ------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        if state == "LOST":  # the session expired: our ephemeral nodes are gone
            self.lost.set()
            self.lease.revoke()

    def join(self, seq: int) -> None:
        """Register as a live member (``servers/`` and ``members/``), replacing nodes a
        previous process of the same member left behind (its session may not have expired
        yet after a SIGKILL: it is ours to remove)."""
        from kazoo.exceptions import NodeExistsError

        c = self.client
        for path in (f"{self.root}/members", servers_path(self.task)):
            c.ensure_path(path)
        c.ensure_path(f"{self.root}/epoch")
        for name, empty in (("epochs", b"[]"), ("deposed", b"{}")):
            if not c.exists(f"{self.root}/{name}"):
                with contextlib.suppress(NodeExistsError):
                    c.create(f"{self.root}/{name}", empty)
        self.lost.clear()
        self._put_ephemeral(f"{servers_path(self.task)}/{self.member}", self.url.encode())
        self.publish(seq, "follower")
        held = self.leader()
        if held is not None and held.member == self.member:
            # A member joins only when it does not lead (at start, or after its task
            # stopped): a leader node in its name is stale, whether a previous process
            # left it or this session's resign could not remove it.
            log.info("%s: removing a stale leader node of this member", self.task)
            self._delete(self.leader_path)

    def _put_ephemeral(self, path: str, data: bytes) -> None:
        from kazoo.exceptions import NodeExistsError

        c = self.client
        try:
            c.create(path, data, ephemeral=True)
        except NodeExistsError:
            stat = c.exists(path)
            if stat is not None and stat.ephemeralOwner == c.client_id[0]:
                c.set(path, data)
                return
            self._delete(path)
            c.create(path, data, ephemeral=True)

    def _delete(self, path: str) -> None:
        from kazoo.exceptions import NoNodeError

        with contextlib.suppress(NoNodeError):
            self.client.delete(path)

    def publish(self, seq: int, role: str, lag: int | None = None) -> None:
        """Say how far this member's log goes (the election reads it)."""
        doc = {"url": self.url, "role": role, "seq": seq, "epoch": self.epoch, "lag": lag}
        self._put_ephemeral(self._member_path(), json.dumps(doc).encode())

    def members(self) -> dict[str, dict[str, Any]]:
        """Every live member's published document, by name."""
        from kazoo.exceptions import NoNodeError

        out: dict[str, dict[str, Any]] = {}
        try:
            names = self.client.get_children(f"{self.root}/members")
        except NoNodeError:
            return out
        for name in sorted(names):
            try:
                data, _ = self.client.get(self._member_path(name))
            except NoNodeError:
                continue
            doc = _load(data)
            if isinstance(doc, dict):
                out[name] = doc
        return out

    def best_candidate(self) -> str | None:
        """The member that should lead next: the highest published seq, then the name."""
        members = self.members()
        if not members:
            return None
        return min(members, key=lambda n: (-int(members[n].get("seq") or 0), n))

    # -- leadership ------------------------------------------------------------------------

    def leader(self) -> LeaderInfo | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.client.get(self.leader_path)
        except NoNodeError:
            return None
        doc = _load(data)
        if not isinstance(doc, dict):
            return None
        return LeaderInfo(str(doc["member"]), str(doc["url"]), int(doc["epoch"]))

    def lease_s(self) -> float:
        """How long this member's lease lasts after a round trip."""
        return self.lease.fraction * session_timeout_s(self.client)

    def depose(self, leader: LeaderInfo) -> bool:
        """Delete the node of ``leader`` (whose process is gone) without waiting for its
        session to expire, if it still leads at its epoch; also its ``members/`` and
        ``servers/`` nodes, so the election does not wait for it. True if deposed. Safe
        even if it is alive (module docstring, "Deposition")."""
        from kazoo.exceptions import NoNodeError

        c = self.client
        try:
            data, lstat = c.get(self.leader_path)
        except NoNodeError:
            return False
        doc = _load(data)
        if not isinstance(doc, dict) or int(doc.get("epoch", -1)) != leader.epoch:
            return False
        # A leader that did not say its lease is assumed to hold a whole session's worth.
        lease_s = float(doc.get("lease_s") or session_timeout_s(c))
        record = {"epoch": leader.epoch, "lease_s": lease_s, "by": self.member}
        tx = c.transaction()
        tx.check(f"{self.root}/epoch", leader.epoch)
        tx.delete(self.leader_path, version=lstat.version)
        tx.set_data(f"{self.root}/deposed", json.dumps(record).encode())
        if any(isinstance(r, Exception) for r in tx.commit()):
            return False
        owner = lstat.ephemeralOwner
        server = f"{servers_path(self.task)}/{leader.member}"
        for path in (self._member_path(leader.member), server):
            with contextlib.suppress(NoNodeError):
                stat = c.exists(path)
                if stat is not None and stat.ephemeralOwner == owner:
                    c.delete(path)
        log.warning(
            "%s: deposed leader %s (epoch %d): its API refuses connections",
            self.task,
            leader.member,
            leader.epoch,
        )
        return True

    def epochs(self) -> list[tuple[int, int]]:
        """``[(epoch, first_seq), ...]`` oldest first."""
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.client.get(f"{self.root}/epochs")
        except NoNodeError:
            return []
        doc = _load(data) or []
        return [(int(e), int(s)) for e, s in doc]

    def try_lead(self, first_seq: int) -> int | None:
        """Become leader if nobody is: create ``leader`` and bump the epoch in one
        transaction; returns the new epoch, or None when another member leads."""
        from kazoo.exceptions import NoNodeError

        c = self.client
        _d, estat = c.get(f"{self.root}/epoch")
        hist_data, hstat = c.get(f"{self.root}/epochs")
        dep_data, dstat = c.get(f"{self.root}/deposed")
        seen = time.monotonic()  # after the deposition below, if any, took effect
        deposed = _load(dep_data) or {}
        epoch = int(estat.version) + 1
        history = (_load(hist_data) or []) + [[epoch, first_seq]]
        doc = {"member": self.member, "url": self.url, "epoch": epoch, "lease_s": self.lease_s()}
        tx = c.transaction()
        tx.create(self.leader_path, json.dumps(doc).encode(), ephemeral=True)
        tx.set_data(f"{self.root}/epoch", b"", version=estat.version)
        tx.set_data(f"{self.root}/epochs", json.dumps(history).encode(), version=hstat.version)
        tx.check(f"{self.root}/deposed", dstat.version)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            if isinstance(results[0], NoNodeError):
                raise CoordinationError(f"task {self.task}: its ZooKeeper nodes vanished")
            return None
        self.not_before = 0.0
        if deposed.get("epoch") == estat.version:
            # The previous leader was deposed, not expired: its lease may still run.
            self.not_before = seen + float(deposed.get("lease_s") or 0.0)
        self.epoch = int(epoch)
        self.confirmed = 0.0
        self.lease.revoke()  # granted by the round trip below
        self.renew()
        self._start_renewer()
        return self.epoch

    def save_state(self, state: dict[str, Any]) -> None:
        """Store the leader's resume state (only while this member holds the epoch)."""
        c = self.client
        path = f"{self.root}/state"
        data = json.dumps(state, sort_keys=True).encode()
        _d, estat = c.get(f"{self.root}/epoch")
        if estat.version != self.epoch:
            return  # deposed: a new leader owns the state
        if not c.exists(path):
            c.ensure_path(path)
        tx = c.transaction()
        tx.check(f"{self.root}/epoch", self.epoch)
        tx.set_data(path, data)
        tx.commit()

    def load_state(self) -> dict[str, Any] | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.client.get(f"{self.root}/state")
        except NoNodeError:
            return None
        doc = _load(data)
        return doc if isinstance(doc, dict) else None

    def resign(self) -> None:
        """Stop leading: no more lease, the leader node goes."""
        self._stop.set()
        self.lease.revoke()
        if self._renewer is not None:
            self._renewer.join(5.0)
            self._renewer = None
        try:
            stat = self.client.exists(self.leader_path)
            if stat is not None and stat.ephemeralOwner == self.client.client_id[0]:
                self._delete(self.leader_path)
        except Exception as e:
            # The session expired or ZooKeeper is away (a leader paused past its session
            # comes back here): the ephemeral node went, or goes, with the session, and
            # the member must go on to follow, not die on this cleanup.
            log.info("%s: resigning without ZooKeeper: %s", self.task, e)

    # -- the lease (fencing) ---------------------------------------------------------------

    def lease_valid(self) -> bool:
        """Whether this leader may append now (cheap: called before every append)."""
        return self.lease.valid()

    def renew(self) -> bool:
        """One round trip: the lease runs from when it was sent, while we still own the
        leader node and the epoch is ours."""
        sent = time.monotonic()
        try:
            stat = self.client.exists(self.leader_path)
            _d, estat = self.client.get(f"{self.root}/epoch")
        except Exception as e:  # connection loss: the lease runs out on its own
            log.debug("%s: lease renewal failed: %s", self.task, e)
            return False
        mine = stat is not None and stat.ephemeralOwner == self.client.client_id[0]
        if not mine or estat.version != self.epoch:
            self.lease.revoke()
            return False
        self.lease.grant(sent, session_timeout_s(self.client))
        self.confirmed = max(self.confirmed, sent)
        return True

    def may_recover(self) -> bool:
        """Whether a leader whose lease ran out may still be confirmed again in its
        epoch: its session can still be alive (less than a session timeout since the
        last confirmed round trip was sent) and was not reported lost."""
        if self.lost.is_set() or self.epoch == 0:
            return False
        return time.monotonic() < self.confirmed + session_timeout_s(self.client)

    def _start_renewer(self) -> None:
        self._stop.clear()
        timeout = session_timeout_s(self.client)

        def loop() -> None:
            while not self._stop.wait(timeout / 8):
                self.renew()

        self._renewer = threading.Thread(target=loop, name=f"lease-{self.task}", daemon=True)
        self._renewer.start()


def cluster_view(client: Any, task: str) -> dict[str, Any]:
    """What ``headwater reader status --zookeeper`` prints for ``task``: the leader, the
    epoch, the epochs' first seqs and every live member's role, seq and lag."""
    view = Leadership.__new__(Leadership)
    view.client, view.task, view.root = client, task, task_root(task)
    leader = view.leader()
    return {
        "task": task,
        "leader": None if leader is None else leader.member,
        "leader_url": None if leader is None else leader.url,
        "epoch": None if leader is None else leader.epoch,
        "epochs": view.epochs(),
        "members": view.members(),
    }
