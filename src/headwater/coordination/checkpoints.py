"""Per-shard checkpoints of a consumer group, behind one small interface.

A group's state is its shard count, per shard the *next* change sequence to deliver (every
change of that shard with a smaller ``sequence`` has been handled; ``sequence`` is the
change row's ``seq << 24 | row``) and the epoch of the owner allowed to write it, plus the
*previous generations*: the per-shard checkpoints of earlier shard counts. Changing the
shard count (:meth:`CheckpointStore.reshard`) starts every new shard at the smallest old
checkpoint and keeps the old generation, so a change is delivered only when it lies past
its shard's checkpoint in every generation: nothing is lost, nothing handled is repeated
(Ptubes' partition storage, made exact).

Writes are fenced: :meth:`claim` records a new owner's epoch (it must be greater than the
stored one) and :meth:`save` succeeds only for the epoch stored; otherwise
:class:`FencedError`. Epochs come from the group (:mod:`.groups`); a consumer without a
group claims with ``epoch=None`` and gets the stored epoch plus one.

Stores: :class:`FileStore` (one JSON file per group, written by temp file + fsync + rename
under an ``fcntl`` lock), :class:`ZkStore` (``checkpoint`` znodes, fenced by a transaction
that checks the ``epoch`` znode's version) and ``sqlstore.SqlStore``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from headwater.coordination import CoordinationError, FencedError
from headwater.coordination.zk import group_path, shard_path

__all__ = [
    "CheckpointStore",
    "FileStore",
    "Generation",
    "GroupState",
    "ZkStore",
    "claim_all",
    "create_claiming",
    "reshard_state",
]


@dataclass(frozen=True, slots=True)
class Generation:
    """The checkpoints of an earlier shard count: shard ``i`` is at ``next[i]``."""

    count: int
    next: tuple[int, ...]

    def wants(self, shard_hash: int, sequence: int) -> bool:
        return sequence >= self.next[shard_hash % self.count]


@dataclass(slots=True)
class GroupState:
    """A group's checkpoints: ``next[shard]``, ``epochs[shard]``, earlier generations."""

    count: int
    next: dict[int, int]
    epochs: dict[int, int] = field(default_factory=dict)
    previous: tuple[Generation, ...] = ()

    def wants(self, shard_hash: int, sequence: int) -> bool:
        """Whether a change not yet handled in the *previous* generations (the current
        shard's checkpoint is checked by the consumer)."""
        return all(g.wants(shard_hash, sequence) for g in self.previous)

    def meta(self) -> dict[str, Any]:
        return {"count": self.count, "previous": [[g.count, list(g.next)] for g in self.previous]}


def parse_meta(doc: Any, where: str) -> tuple[int, tuple[Generation, ...]]:
    try:
        count = int(doc["count"])
        previous = tuple(Generation(int(c), tuple(int(n) for n in nx)) for c, nx in doc["previous"])
    except (KeyError, TypeError, ValueError) as e:
        raise CoordinationError(f"{where}: unreadable group state ({e})") from None
    return count, previous


def reshard_state(state: GroupState, count: int) -> GroupState:
    """The state after changing the shard count to ``count`` (see the module docstring).

    Generations all of whose checkpoints lie at or below the new start are dropped: they
    can no longer hide a change."""
    if count < 1:
        raise CoordinationError(f"shard count must be >= 1, got {count}")
    old = Generation(state.count, tuple(state.next[s] for s in range(state.count)))
    start = min(old.next)
    previous = tuple(g for g in (old, *state.previous) if max(g.next) > start)
    return GroupState(count, dict.fromkeys(range(count), start), {}, previous)


class CheckpointStore(Protocol):
    """What the consumer needs of a checkpoint store (every method is thread-safe)."""

    def load(self, group: str) -> GroupState | None:
        """The group's state, or None if it has none yet."""

    def create(self, group: str, count: int, start: int) -> GroupState:
        """Create the group with ``count`` shards at ``start`` unless it exists; the state."""

    def claim(self, group: str, shard: int, epoch: int | None) -> tuple[int, int]:
        """Make ``epoch`` the shard's owner epoch; returns (epoch, next). FencedError if a
        newer epoch is stored."""

    def save(self, group: str, shard: int, next_sequence: int, epoch: int) -> None:
        """Store the shard's checkpoint if ``epoch`` is still its owner's, else FencedError."""

    def reshard(self, group: str, count: int) -> GroupState:
        """Change the shard count (no member may be running); the new state."""

    def close(self) -> None: ...


def claim_all(
    store: CheckpointStore, group: str, shards: Iterable[int]
) -> dict[int, tuple[int, int]]:
    """``store.claim(group, shard, None)`` of each shard: ``{shard: (epoch, next)}``, in
    one write where the store has a ``claim_many`` (an optional method)."""
    many = getattr(store, "claim_many", None)
    if many is not None:
        return dict(many(group, shards))
    return {shard: store.claim(group, shard, None) for shard in shards}


def create_claiming(
    store: CheckpointStore, group: str, count: int, start: int
) -> tuple[GroupState, dict[int, tuple[int, int]] | None]:
    """``store.create(group, count, start)`` and, if the group has ``count`` shards,
    :func:`claim_all` of them (None otherwise: nothing claimed); in one write where the
    store has a ``create_claiming`` (an optional method)."""
    both = getattr(store, "create_claiming", None)
    if both is not None:
        return both(group, count, start)  # type: ignore[no-any-return]
    state = store.create(group, count, start)
    if state.count != count:
        return state, None
    return state, claim_all(store, group, range(count))


class FileStore:
    """Checkpoints in ``DIR/<group>.json`` (one machine; processes share it by lock)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, group: str) -> Path:
        group_path(group)  # validates the name
        return self.directory / f"{group}.json"

    @contextlib.contextmanager
    def _locked(self, group: str) -> Iterator[Path]:
        path = self._path(group)
        with open(path.with_suffix(".lock"), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield path

    def _read(self, path: Path) -> GroupState | None:
        try:
            doc = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except orjson.JSONDecodeError as e:
            raise CoordinationError(f"{path}: not a checkpoint file ({e})") from None
        count, previous = parse_meta(doc, str(path))
        nxt = {int(k): int(v) for k, v in doc["next"].items()}
        epochs = {int(k): int(v) for k, v in doc["epochs"].items()}
        return GroupState(count, nxt, epochs, previous)

    def _write(self, path: Path, state: GroupState) -> None:
        doc = state.meta()
        doc["next"] = {str(k): v for k, v in state.next.items()}
        doc["epochs"] = {str(k): v for k, v in state.epochs.items()}
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(orjson.dumps(doc))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def load(self, group: str) -> GroupState | None:
        with self._locked(group) as path:
            return self._read(path)

    def create(self, group: str, count: int, start: int) -> GroupState:
        with self._locked(group) as path:
            state = self._read(path)
            if state is None:
                state = GroupState(count, dict.fromkeys(range(count), start))
                self._write(path, state)
            return state

    def claim(self, group: str, shard: int, epoch: int | None) -> tuple[int, int]:
        with self._locked(group) as path:
            state = self._need(path, group)
            stored = state.epochs.get(shard, 0)
            new = stored + 1 if epoch is None else epoch
            if new <= stored:
                raise FencedError(f"group {group} shard {shard}: epoch {new} <= stored {stored}")
            state.epochs[shard] = new
            self._write(path, state)
            return new, state.next[shard]

    def claim_many(self, group: str, shards: Iterable[int]) -> dict[int, tuple[int, int]]:
        """``claim(group, shard, None)`` of every shard, in one write (two fsyncs, not two
        per shard: a consumer without a group claims all its shards when it starts)."""
        with self._locked(group) as path:
            state = self._need(path, group)
            out = {}
            for shard in shards:
                new = state.epochs.get(shard, 0) + 1
                state.epochs[shard] = new
                out[shard] = (new, state.next[shard])
            self._write(path, state)
            return out

    def create_claiming(
        self, group: str, count: int, start: int
    ) -> tuple[GroupState, dict[int, tuple[int, int]] | None]:
        """:func:`create_claiming` in one write (two fsyncs, not four: a consumer without
        a group creates its group and claims every shard when it starts)."""
        with self._locked(group) as path:
            state = self._read(path)
            if state is None:
                state = GroupState(count, dict.fromkeys(range(count), start))
            elif state.count != count:
                return state, None
            claims = {}
            for shard in range(count):
                new = state.epochs.get(shard, 0) + 1
                state.epochs[shard] = new
                claims[shard] = (new, state.next[shard])
            self._write(path, state)
            return state, claims

    def save(self, group: str, shard: int, next_sequence: int, epoch: int) -> None:
        with self._locked(group) as path:
            state = self._need(path, group)
            if state.epochs.get(shard, 0) != epoch:
                raise FencedError(
                    f"group {group} shard {shard}: checkpoint of epoch {epoch} refused "
                    f"(owner epoch is {state.epochs.get(shard, 0)})"
                )
            state.next[shard] = next_sequence
            self._write(path, state)

    def reshard(self, group: str, count: int) -> GroupState:
        with self._locked(group) as path:
            state = reshard_state(self._need(path, group), count)
            self._write(path, state)
            return state

    def _need(self, path: Path, group: str) -> GroupState:
        state = self._read(path)
        if state is None:
            raise CoordinationError(f"group {group} has no checkpoints in {path}")
        return state

    def close(self) -> None:
        pass


class ZkStore:
    """Checkpoints in ZooKeeper beside the group (see :mod:`.zk` for the layout)."""

    def __init__(self, client: Any) -> None:
        self.zk = client

    def load(self, group: str) -> GroupState | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _stat = self.zk.get(f"{group_path(group)}/state")
        except NoNodeError:
            return None
        count, previous = parse_meta(orjson.loads(data), f"ZooKeeper group {group}")
        state = GroupState(count, {}, {}, previous)
        for shard in range(count):
            doc = orjson.loads(self.zk.get(f"{shard_path(group, shard)}/checkpoint")[0])
            state.next[shard] = int(doc["next"])
            state.epochs[shard] = self.zk.exists(f"{shard_path(group, shard)}/epoch").version
        return state

    def _write_state(self, group: str, state: GroupState, *, create: bool) -> None:
        from kazoo.exceptions import NodeExistsError

        t = self.zk.transaction()
        meta = orjson.dumps(state.meta())
        if create:
            t.create(f"{group_path(group)}/state", meta)
        else:
            t.set_data(f"{group_path(group)}/state", meta)
        for shard in range(state.count):
            path = shard_path(group, shard)
            self.zk.ensure_path(path)
            if not self.zk.exists(f"{path}/epoch"):
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(f"{path}/epoch", b"")
            doc = orjson.dumps({"next": state.next[shard]})
            if self.zk.exists(f"{path}/checkpoint"):
                t.set_data(f"{path}/checkpoint", doc)
            else:
                t.create(f"{path}/checkpoint", doc)
        results = t.commit()
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]

    def create(self, group: str, count: int, start: int) -> GroupState:
        from kazoo.exceptions import NodeExistsError

        self.zk.ensure_path(group_path(group))
        state = self.load(group)
        if state is not None:
            return state
        with contextlib.suppress(NodeExistsError):  # another member created it first
            self._write_state(
                group, GroupState(count, dict.fromkeys(range(count), start)), create=True
            )
        state = self.load(group)
        assert state is not None
        return state

    def claim(self, group: str, shard: int, epoch: int | None) -> tuple[int, int]:
        path = shard_path(group, shard)
        stat = self.zk.exists(f"{path}/epoch")
        if epoch is None:
            epoch = self.zk.set(f"{path}/epoch", b"").version
        elif stat is None or stat.version != epoch:
            raise FencedError(f"group {group} shard {shard}: epoch {epoch} is not current")
        doc = orjson.loads(self.zk.get(f"{path}/checkpoint")[0])
        return int(epoch), int(doc["next"])

    def claim_many(self, group: str, shards: Iterable[int]) -> dict[int, tuple[int, int]]:
        """``claim(group, shard, None)`` of every shard: the epochs bumped in one ZooKeeper
        transaction, the checkpoints read with the requests pipelined (one round trip
        each way instead of three per shard)."""
        wanted = sorted(set(shards))
        if not wanted:
            return {}
        t = self.zk.transaction()
        for shard in wanted:
            t.set_data(f"{shard_path(group, shard)}/epoch", b"")
        results = t.commit()
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise CoordinationError(f"group {group}: shards not claimed: {failed[0]!r}")
        reads = [self.zk.get_async(f"{shard_path(group, s)}/checkpoint") for s in wanted]
        return {
            shard: (int(stat.version), int(orjson.loads(read.get()[0])["next"]))
            for shard, stat, read in zip(wanted, results, reads, strict=True)
        }

    def save(self, group: str, shard: int, next_sequence: int, epoch: int) -> None:
        from kazoo.exceptions import BadVersionError, KazooException

        path = shard_path(group, shard)
        t = self.zk.transaction()
        t.check(f"{path}/epoch", version=epoch)
        t.set_data(f"{path}/checkpoint", orjson.dumps({"next": next_sequence, "epoch": epoch}))
        try:
            results = t.commit()
        except KazooException as e:  # session expired or lost: ownership cannot be proven
            raise FencedError(f"group {group} shard {shard}: checkpoint refused ({e!r})") from None
        if any(isinstance(r, BadVersionError) for r in results):
            raise FencedError(f"group {group} shard {shard}: checkpoint of epoch {epoch} refused")
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise CoordinationError(
                f"group {group} shard {shard}: checkpoint failed: {failed[0]!r}"
            )

    def reshard(self, group: str, count: int) -> GroupState:
        state = self.load(group)
        if state is None:
            raise CoordinationError(f"group {group} has no checkpoints in ZooKeeper")
        new = reshard_state(state, count)
        self._write_state(group, new, create=False)
        return new

    def close(self) -> None:
        pass
