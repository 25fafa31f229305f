"""headwater's consumer SDK (no Spark needed): shards, batches, checkpoints, groups.

Ten lines::

    from headwater.client import Consumer, ConsumerOptions, FileStore

    def handle(batch):
        for change in batch.changes:
            print(batch.shard, change.op, change.table_name, change.key)

    options = ConsumerOptions(task="shop", group="audit", readers=("http://127.0.0.1:8484",),
                              tables=("shop.*",), shards=4)
    with Consumer(options, handle, FileStore("checkpoints")) as consumer:
        consumer.wait()  # runs until a consumer thread fails: ConsumerError

See docs/consumer.md for the guarantees and for groups on ZooKeeper.
"""

from __future__ import annotations

from headwater.client.consumer import Batch, Consumer, ConsumerError, ConsumerOptions, Handler
from headwater.coordination import CoordinationError, FencedError
from headwater.coordination.checkpoints import CheckpointStore, FileStore, ZkStore
from headwater.coordination.sqlstore import SqlStore

__all__ = [
    "Batch",
    "CheckpointStore",
    "Consumer",
    "ConsumerError",
    "ConsumerOptions",
    "CoordinationError",
    "FencedError",
    "FileStore",
    "Handler",
    "SqlStore",
    "ZkStore",
]
