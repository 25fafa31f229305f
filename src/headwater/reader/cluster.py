"""One task run by a member of a reader cluster: follow the leader, or lead and capture.

The loop of :class:`ClusterMember` (one per task and process, instead of ``task.run``):

* a leader exists and is another member: *follow* it (reader/follow.py): cut our tail if
  it differs from the leader's log (a deposed leader), then copy its records as they come,
  keep its schema history, and save the leader's resume state (from ZooKeeper) as ours
  whenever our log covers it, so a promotion resumes where the log ends;
* the leader's API refuses connections for ``REFUSED_S`` (its process is gone, its
  session not yet expired): depose it (coordination/leadership.py, "Deposition"), so the
  election need not wait for the session timeout;
* nobody leads: publish our log's end, let the other members publish theirs, and only the
  most up-to-date member (coordination/leadership.py ``best_candidate``) stands: it first
  copies from the old leader whatever it still serves, then wins the epoch and runs the
  task (capture from the source at the position after its last record), fenced by the
  lease; when the lease or the session is lost the task stops and the member follows.
  After a deposition the new leader appends nothing before the deposed leader's lease
  has surely run out (``Leadership.not_before``; the fence waits for it).

Invariant: seqs mean the same on every member. A follower appends only the leader's
records at the leader's seqs; a new leader appends only after its log holds every record
it could get, and the task's reconcile (reader/start.py) makes the resume state agree with
the log, re-reading a missing range from the source under the same seqs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from headwater.coordination.leadership import LeaderInfo, Leadership
from headwater.reader.follow import FollowError, LeaderLink, copy_some, cut_log, divergence
from headwater.reader.status import STATE_FILE
from headwater.reader.task import ReaderTask
from headwater.store import ReaderState

__all__ = ["ClusterMember"]

log = logging.getLogger(__name__)

#: How long members publish their log ends before the best one stands.
SETTLE_S = 0.3
#: How long the leader's API must refuse connections (nothing listens: the process is
#: gone) before a follower deposes it. Short: a wrong deposition costs an election, not
#: safety (the new leader waits out the old lease before appending).
REFUSED_S = 0.5
#: Between two attempts to reach a leader that refuses.
RETRY_S = 0.1


class ClusterMember:
    """Runs ``task`` as a member of its cluster (see the module docstring)."""

    def __init__(
        self, task: ReaderTask, zk: Any, member: str, url: str, *, token: str | None = None
    ) -> None:
        self.task = task
        self.lead = Leadership(zk, task.name, member, url)
        self.member = member
        self.token = token
        self._stop = threading.Event()
        self._last_leader_url: str | None = None
        # (leader, when its API first refused in a row of refusals)
        self._refused: tuple[LeaderInfo, float] | None = None

    def stop(self) -> None:
        self._stop.set()
        self.task.request_stop()

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        task = self.task
        task.store = task._open_store()
        self.lead.join(task.store.acked_seq)
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as e:
                # ZooKeeper away or the session expired mid-step (a SIGSTOPped leader
                # resumes here): a member never leaves its cluster on such an error,
                # it rejoins and decides again (it was the cause of a member that
                # vanished from members/ and never caught up).
                log.warning("%s: cluster step failed: %r", task.name, e)
                self._stop.wait(1.0)
        task.cluster["role"] = "stopped"

    def _step(self) -> None:
        if self.lead.lost.is_set():
            self._rejoin()
        leader = self.lead.leader()
        if leader is not None and leader.member != self.member:
            self._last_leader_url = leader.url
            if not self._follow(leader.url, leader.epoch):
                self._refusing(leader)
        elif leader is None:
            self._stand()
        else:  # our own node of a previous session: join() removes it
            self._rejoin()

    def _rejoin(self) -> None:
        try:
            self.lead.join(self._store_end())
        except Exception as e:
            log.warning("%s: cannot rejoin the cluster: %r", self.task.name, e)
            self._stop.wait(1.0)

    def _store_end(self) -> int:
        store = self.task.store
        return 0 if store is None or store.closed else store.acked_seq

    # -- following -------------------------------------------------------------------------

    def _refusing(self, leader: LeaderInfo) -> None:
        """The leader's API refused a connection: depose it once it has refused for
        ``REFUSED_S`` in a row."""
        now = time.monotonic()
        if self._refused is None or self._refused[0] != leader:
            self._refused = (leader, now)
        elif now - self._refused[1] >= REFUSED_S:
            self._refused = None
            self.lead.depose(leader)
            return
        self._stop.wait(RETRY_S)

    def _follow(self, url: str, epoch: int) -> bool:
        """Follow the leader at ``url`` until it changes; False if its API refused."""
        task = self.task
        assert task.store is not None
        task.cluster.update(role="follower", epoch=epoch, leader=url)
        link = LeaderLink(url, task.name, token=self.token, timeout=5.0)
        try:
            cut = divergence(link, task.store)
            if cut is not None:
                self._cut(cut - 1)
            task.follow_fde = link.decoding(task.dir)
            next_meta = time.monotonic() + 1.0
            while not self._stop.is_set() and not self.lead.lost.is_set():
                copy_some(link, task.store, wait_ms=300)
                self._refused = None
                end = task.store.acked_seq
                lag = max(0, link.latest_seq - end)
                task.cluster["lag_records"] = lag
                task.seq = end
                if time.monotonic() >= next_meta:
                    next_meta = time.monotonic() + 1.0
                    task.follow_fde = link.decoding(task.dir)
                    self._keep_state(end)
                    self.lead.publish(end, "follower", lag)
                    current = self.lead.leader()
                    if current is None or current.url != url:
                        return True  # the leader changed: decide again
        except FollowError as e:
            if e.refused:
                log.debug("%s: the leader %s refuses: %s", task.name, url, e)
                return False
            self._refused = None
            log.info("%s: following %s stopped: %s", task.name, url, e)
            self._stop.wait(0.2)
        except Exception as e:
            log.warning("%s: following %s: %s", task.name, url, e)
            self._stop.wait(0.5)
        finally:
            link.close()
        return True

    def _keep_state(self, end: int) -> None:
        """Save the leader's resume state as ours when our log covers it."""
        doc = self.lead.load_state()
        if doc is None:
            return
        state = ReaderState.from_json(doc)
        if state.seq <= end:
            state.save(str(self.task.dir / STATE_FILE))

    def _cut(self, keep_to: int) -> None:
        task = self.task
        assert task.store is not None
        options = task.store._opts
        task.store.close()
        try:
            cut_log(task.dir / "changes", keep_to, options)
        finally:
            task.store = task._open_store()
        saved = ReaderState.load(str(task.dir / STATE_FILE))
        if saved is not None and saved.seq > keep_to:
            (task.dir / STATE_FILE).unlink()

    # -- standing for leader ---------------------------------------------------------------

    def _stand(self) -> None:
        task = self.task
        self.lead.publish(self._store_end(), "candidate")
        self._stop.wait(SETTLE_S)
        best = self.lead.best_candidate()
        if best != self.member:
            # Another member is further ahead: give it time to win, then look again
            # (it may have died meanwhile: then the next best stands).
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline and not self._stop.is_set():
                if self.lead.leader() is not None:
                    return
                self._stop.wait(0.2)
            if self.lead.best_candidate() != self.member:
                self.lead.publish(self._store_end(), "candidate")
                return
        if self._last_leader_url is not None:
            self._drain(self._last_leader_url)
        assert task.store is not None
        epoch = self.lead.try_lead(task.store.acked_seq + 1)
        if epoch is None:
            return
        log.info("%s: leader at epoch %d from seq %d", task.name, epoch, task.store.acked_seq + 1)
        self._lead(epoch)

    def _drain(self, url: str) -> None:
        """Copy what the old leader still serves (it may be alive but cut off from
        ZooKeeper, or its process gone: then this fails fast)."""
        link = LeaderLink(url, self.task.name, token=self.token, timeout=1.0)
        try:
            assert self.task.store is not None
            while copy_some(link, self.task.store, wait_ms=0):
                pass
        except (FollowError, OSError) as e:
            log.info("%s: the old leader %s: %s", self.task.name, url, e)
        finally:
            link.close()

    def _lead(self, epoch: int) -> None:
        task = self.task
        doc = self.lead.load_state()
        if doc is not None:
            ReaderState.from_json(doc).save(str(task.dir / STATE_FILE))
        assert task.store is not None
        task.store.close()
        task.store = None
        task.cluster = {"role": "leader", "epoch": epoch, "leader": self.lead.url, "lag_records": 0}
        task.fence = self._fence
        task.on_save = self._save_state
        task.follow_fde = None
        task._stop = self._stop.is_set()
        self.lead.publish(0, "leader")
        try:
            task.run()
        finally:
            task.fence = None
            task.on_save = None
            self.lead.resign()
            task.close()
            if task.schema is not None:
                task.schema = None
            task.store = task._open_store()
            with contextlib.suppress(AttributeError):
                del task._grouper
            self.lead.epoch = 0
            if not self._stop.is_set():
                task.state = "following"
                log.warning("%s: no longer leader (epoch %d)", task.name, epoch)

    def _fence(self) -> bool:
        """Whether the task may append now (it stops when not).

        After a deposition the first appends wait until the deposed leader's lease has
        run out (the task starts meanwhile). When the lease runs out (ZooKeeper silent
        for 0.6 x the session timeout), appends pause while the session may still be
        alive: a renewal in that time (the node still ours, the epoch unchanged) resumes
        them in the same epoch; else the leader steps down."""
        lead = self.lead
        wait = lead.not_before - time.monotonic()
        if wait > 0:
            log.info("%s: waiting %.2f s for the deposed leader's lease", self.task.name, wait)
            self._stop.wait(wait)
        if lead.lease_valid():
            return True
        if not lead.may_recover():
            return False
        log.warning("%s: lease ran out (no word from ZooKeeper): appends paused", self.task.name)
        while lead.may_recover() and not self._stop.wait(0.05):
            if lead.lease_valid():
                log.warning("%s: leadership confirmed again: appends resume", self.task.name)
                return True
        return False

    def _save_state(self, state: ReaderState) -> None:
        try:
            self.lead.save_state(state.to_json())
            self.lead.publish(state.seq, "leader", 0)
        except Exception as e:  # ZooKeeper away: the lease decides, not this write
            log.debug("%s: cannot save the state in ZooKeeper: %s", self.task.name, e)
