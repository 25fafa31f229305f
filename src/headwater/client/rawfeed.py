"""The consumer's raw feed: one fetch stream decoded and routed to the shards' queues.

With ``decode="client"`` one loop per process fetches raw records from the reader
(``/v1/fetch``, format ``raw``) from the smallest ``fed`` of the shards it serves, decodes
them with the source's FORMAT_DESCRIPTION and schema history, and queues each change on
its shard (the documented hash, ``headwater.server.sharding``; per rows event with
:meth:`~headwater.client.hashing.ShardHasher.block`). Where the time goes, and so the
shape of the loop (``bench/consumer.py``): decoding dominates (about 6 µs per row), so

* the next page is fetched on a second connection while this one decodes
  (:class:`~headwater.client.transport.FetchAhead`): the reader serves it meanwhile; the
  first page after a subscribe is small (:data:`FIRST_BYTES`, doubling up to
  ``fetch_bytes``), so decoding does not wait for a whole page of up to ``fetch_bytes``;
* changes reach the queues every :data:`HANDOFF_ROWS`, not per page: workers start before
  a page of up to ``fetch_bytes`` is decoded (a moved shard's first batch waited for the
  whole page);
* a wait for a page ends as soon as a shard is assigned (or the consumer stops), and the
  page being routed is broken off: the stream re-reads from the new shard's checkpoint
  at once instead of after a long poll and a whole page;
* a rows event that starts at or after every served shard's ``fed`` (the steady state:
  no shard is being re-read, no earlier generation) is split by shard without a position
  check per row, and with one shard not even hashed;
* a change is queued as an index into its rows event's value tuples (a
  :class:`~headwater.client.runs.Run` per shard and event), not as an object, and a page
  is routed with the cyclic garbage collector paused: objects that wait in queues are
  what the collector pays for (:mod:`headwater.client.runs`).

Invariant: after :meth:`Shard.feed` of a shard with ``upto``, every change of that shard
below ``upto`` is queued or was handled; a shard paused by flow control is left out of
the rest of the page, so its ``fed`` never jumps over changes it was not given.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from headwater.changes import block_changes, decode_blocks
from headwater.changes.sequence import ROW_BITS, sequence_of
from headwater.client.rows import RowBlock
from headwater.client.runs import Run
from headwater.client.transport import FetchAhead, Readers, record_of
from headwater.gcpause import gc_paused
from headwater.store import AtSeq

if TYPE_CHECKING:
    from collections.abc import Callable

    from headwater.client.consumer import Consumer, Shard

__all__ = ["FIRST_BYTES", "HANDOFF_ROWS", "PAUSE_AFTER", "RawFeed"]

#: Seconds without progress of a shard with a full queue before the raw feed pauses it.
PAUSE_AFTER = 1.0
#: Changes the raw feed decodes before it hands them to the shards' queues.
HANDOFF_ROWS = 1000
#: ``max_bytes`` of the first fetch after a subscribe; each next one asks for twice as
#: much, up to ``fetch_bytes``: decoding starts before a whole page is served.
FIRST_BYTES = 256 << 10
#: Above every sequence: the ``fed`` of a shard the feed does not serve.
_NOT_OURS = 1 << 64


class RawFeed:
    """The raw feed of ``consumer`` (runs in the consumer's feed thread)."""

    def __init__(self, consumer: Consumer, first: tuple[int, str] | None = None) -> None:
        """``first``: the ``next`` seq and checkpoint token of the consumer's subscription,
        which the feed reads from if its lowest shard starts there (:meth:`prefetch`)."""
        self.c = consumer
        self._first = first
        opts = consumer.options
        self.fetches = FetchAhead(
            lambda: Readers(consumer._urls, opts.task, token=opts.token),
            max_rows=opts.fetch_records,
            timeout_ms=1000,
        )

    def prefetch(self) -> None:
        """Start fetching the subscription's first page now (the consumer then sets up
        its group and claims its shards while the reader serves it)."""
        if self._first is not None:
            self.fetches.ahead(self._first[1], min(FIRST_BYTES, self.c.options.fetch_bytes))

    def run(self) -> None:
        c = self.c
        try:
            c._retrying(lambda: self._loop(self.fetches), "raw feed", c._running.is_set)
        finally:
            self.fetches.close()

    def _loop(self, fetches: FetchAhead) -> None:
        c = self.c
        readers = c.readers
        assert readers is not None  # set by start()
        token: str | None = None
        at = -1
        size = c.options.fetch_bytes
        first, self._first = self._first, None  # the first run of the loop only

        def interrupted() -> bool:  # a new shard to serve, or stop(): stop waiting
            return c._assigned.is_set() or not c._running.is_set()

        while c._running.is_set():
            c._assigned.clear()  # the shards read next include any new one
            with c._lock:
                shards = self._unpaused(dict(c._shards))
            if not shards:
                time.sleep(0.05)
                continue
            low = min(s.fed for s in shards.values()) >> ROW_BITS
            if first is not None:
                if low == first[0]:  # the subscription's stream, its first page fetched ahead
                    at, token = first
                    size = min(FIRST_BYTES, c.options.fetch_bytes)
                first = None
            if token is None or low < at:
                token = readers.subscribe(AtSeq(low), format="raw", **c._filters())["checkpoint"]
                at, size = low, min(FIRST_BYTES, c.options.fetch_bytes)
            answer = fetches.take(token, size, interrupted)
            if answer is None:
                continue
            nxt = answer["next"]
            token, at = answer["checkpoint"], int(nxt["seq"])
            size = min(size * 2, c.options.fetch_bytes)
            fetches.ahead(token, size)  # the reader serves the next page while this one decodes
            end = sequence_of(int(nxt["seq"]), int(nxt["row"]))
            more = bool(answer.get("more", True))
            with gc_paused():  # one young collection per page, not per 700 objects queued
                routed = self._route(answer["records"], shards, end, more)
            if not routed:
                token = None  # broken off for a new shard: read again from the lowest

    def _route(self, docs: list[Any], shards: dict[int, Shard], end: int, more: bool) -> bool:
        """Decode the records of one fetch and queue each change on its shard, handing the
        changes over every ``HANDOFF_ROWS`` (workers start before the page is decoded, and
        a big page never delays a shard's first batch by its whole decoding time). Every
        change of a shard below ``end`` is then queued, unless the shard was paused
        (then it is left out of the rest of the page: its ``fed`` stays where it is).
        ``more``: the fetch was cut (the reader has more at once); after the last handover
        of a page that was not, workers hand partial batches over without waiting to fill
        them. False when broken off because a shard was assigned (the caller
        re-subscribes)."""
        c = self.c
        opts = c.options
        source, fde, schema, want = opts.task, c._fde, c._schema, _table_filter(opts.tables)
        live = dict(shards)
        count, state, hasher = opts.shards, c.state, c._hash
        previous = state is not None and bool(state.previous)
        # the per-row loop is the SDK's hot path: hashes per block, lookups hoisted, and
        # per change only an index appended to its shard's run (runs.py says why)
        lists: list[list[Run]] = [[] for _ in range(count)]
        feds = [_NOT_OURS] * count  # a shard not served here takes no change
        for number, shard in live.items():
            feds[number] = shard.fed
        # a block starting at or after every served shard's fed (in a first generation)
        # is only split by shard: no per-row position check (feds only ever become
        # _NOT_OURS below, so this bound stays valid for the page)
        top = max(feds[n] for n in live) if live else _NOT_OURS
        pending = 0
        for doc in docs:
            record = record_of(doc)
            for block in decode_blocks(record, source=source, fde=fde, schema=schema, want=want):
                first = sequence_of(record.seq, block.first)
                if block.op == "ddl":
                    if not opts.ddl:
                        continue
                    change = block_changes(record, block, source)
                    h = hasher(change[0])
                    number = h % count
                    if first >= feds[number] and (not previous or state.wants(h, first)):  # type: ignore[union-attr]
                        lists[number].append(Run.of(change))
                        pending += 1
                    continue
                shared = RowBlock(record, block, source)
                if not previous and first >= top:
                    groups: list[list[int]]
                    if count == 1:  # one shard takes every row: no hash needed
                        groups = [list(range(len(block.rows)))]
                    else:
                        groups = [[] for _ in range(count)]
                        adds = [g.append for g in groups]
                        for i, h in enumerate(hasher.block(block)):
                            adds[h % count](i)
                    for number, group in enumerate(groups):
                        if group and feds[number] != _NOT_OURS:
                            lists[number].append(Run(shared, first, block.rows, group))
                            pending += len(group)
                    continue
                ats: list[list[int] | None] = [None] * count
                for i, h in enumerate(hasher.block(block)):
                    number = h % count
                    if first + i >= feds[number] and (
                        not previous or state.wants(h, first + i)  # type: ignore[union-attr]
                    ):
                        at = ats[number]
                        if at is None:
                            at = ats[number] = []
                            lists[number].append(Run(shared, first, block.rows, at))
                        at.append(i)
                        pending += 1
            if pending >= HANDOFF_ROWS:
                self._hand(live, lists, feds, sequence_of(record.seq + 1, 0), True)
                if c._assigned.is_set():
                    return False
                pending = 0
        self._hand(live, lists, feds, end, more)
        return True

    def _hand(
        self,
        live: dict[int, Shard],
        lists: list[list[Run]],
        feds: list[int],
        upto: int,
        more: bool,
    ) -> None:
        """Queue ``lists[n]`` on each ``live`` shard ``n``, all of whose changes below
        ``upto`` are in it, and empty the lists; a shard that cannot take them (flow
        control) is paused and leaves ``live`` (its ``feds`` entry then takes no more)."""
        c = self.c
        limit, urgent = c.options.queue_rows, c._assigned.is_set
        for number, shard in list(live.items()):
            runs = lists[number]
            lists[number] = []
            if not shard.feed(runs, upto, limit, PAUSE_AFTER, urgent, more):
                shard.paused = True
                del live[number]
                feds[number] = _NOT_OURS

    def _unpaused(self, shards: dict[int, Shard]) -> dict[int, Shard]:
        """The shards the raw feed serves now. The feed waits for a full queue
        (``queue_rows``) while its worker makes progress; after ``PAUSE_AFTER`` seconds
        without any, it pauses that shard (its ``fed`` stays behind) until its queue is
        half empty: a stuck handler must not hold back the other shards of the process, and
        shards that keep up cost no re-reading. A resumed shard below the stream's
        position makes the feed re-subscribe from it (the other shards skip what they
        already have, and a shard with nothing new in a fetch never makes it wait)."""
        c = self.c
        limit = c.options.queue_rows
        for shard in shards.values():
            if shard.paused and len(shard.queue) <= limit // 2:
                shard.paused = False
        return {n: s for n, s in shards.items() if not s.paused}


def _table_filter(tables: tuple[str, ...] | None) -> Callable[[str, str], bool] | None:
    if tables is None:
        return None
    names = set(tables)
    return lambda db, table: f"{db}.{table}" in names or f"{db}.*" in names
