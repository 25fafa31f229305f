"""The demo's shop: its schema, initial data and a live workload of small transactions.

Four tables with the types a shop needs (DECIMAL money, DATETIME(3), VARCHAR, a
composite key). The workload is seeded, runs in its own thread on its own connection and
counts what it changed; keys are never reused, so every target row's history is easy
to follow.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from headwater.sandbox import MariadbSandbox

__all__ = ["SCHEMA", "TABLES", "Workload", "create_shop"]

DATABASE = "shop"
SCHEMA = (
    "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(60) NOT NULL,"
    " email VARCHAR(120) NULL, created DATETIME(3) NOT NULL)",
    "CREATE TABLE products (id INT PRIMARY KEY, sku VARCHAR(20) NOT NULL,"
    " price DECIMAL(10,2) NOT NULL, stock INT UNSIGNED NOT NULL)",
    "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id INT NOT NULL,"
    " status VARCHAR(16) NOT NULL, total DECIMAL(12,2) NOT NULL, placed DATETIME(3) NOT NULL)",
    "CREATE TABLE order_items (order_id BIGINT NOT NULL, line INT NOT NULL,"
    " product_id INT NOT NULL, qty INT NOT NULL, price DECIMAL(10,2) NOT NULL,"
    " PRIMARY KEY (order_id, line))",
)
TABLES = ("customers", "products", "orders", "order_items")


def create_shop(server: MariadbSandbox, rows: int, seed: int = 7) -> int:
    """Create database ``shop`` with about ``rows`` rows over its tables; returns the count."""
    r = random.Random(seed)
    server.execute(f"CREATE DATABASE {DATABASE}")
    server.execute(*SCHEMA, database=DATABASE)
    customers = max(1, rows // 4)
    products = max(1, rows // 10)
    orders = max(1, rows - customers - products)
    conn = server.connect(DATABASE)
    try:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO customers VALUES (%s, %s, %s, NOW(3))",
                [(i, f"customer {i}", f"c{i}@example.com") for i in range(1, customers + 1)],
            )
            cur.executemany(
                "INSERT INTO products VALUES (%s, %s, %s, %s)",
                [
                    (i, f"SKU-{i:05d}", f"{r.randint(100, 99999) / 100:.2f}", r.randint(0, 500))
                    for i in range(1, products + 1)
                ],
            )
            cur.executemany(
                "INSERT INTO orders VALUES (%s, %s, 'new', %s, NOW(3))",
                [
                    (i, r.randint(1, customers), f"{r.randint(100, 500000) / 100:.2f}")
                    for i in range(1, orders + 1)
                ],
            )
    finally:
        conn.close()
    return customers + products + orders


@dataclass
class Workload:
    """Transactions on the shop until :meth:`stop` (or ``seconds`` elapsed): new orders
    with items, status changes, stock updates, cancelled orders deleted, new customers."""

    server: MariadbSandbox
    seconds: float
    seed: int = 11
    rate: float = 100.0  # transactions per second at most (0: as fast as possible)
    transactions: int = 0
    rows: int = 0
    started: float = 0.0
    elapsed: float = 0.0
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="demo-workload", daemon=True)
        self.started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Stop after the running transaction; re-raises what made the workload fail."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        if self.error is not None:
            raise self.error

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # reported by stop()
            self.error = e
        finally:
            self.elapsed = time.monotonic() - self.started

    def _loop(self) -> None:
        r = random.Random(self.seed)
        conn = self.server.connect(DATABASE)
        with conn.cursor() as cur:
            cur.execute("SELECT COALESCE(MAX(id), 0) FROM orders")
            next_order = int(cur.fetchone()[0]) + 1
            cur.execute("SELECT COALESCE(MAX(id), 0) FROM customers")
            next_customer = int(cur.fetchone()[0]) + 1
            cur.execute("SELECT COALESCE(MAX(id), 1) FROM products")
            products = int(cur.fetchone()[0])
            live: list[int] = []
            deadline = self.started + self.seconds
            while not self._stop.is_set() and time.monotonic() < deadline:
                cur.execute("BEGIN")
                kind = r.random()
                if kind < 0.5 or not live:
                    oid, next_order = next_order, next_order + 1
                    lines = r.randint(1, 4)
                    cur.execute(
                        "INSERT INTO orders VALUES (%s, %s, 'new', %s, NOW(3))",
                        (
                            oid,
                            r.randint(1, max(1, next_customer - 1)),
                            f"{r.randint(100, 90000) / 100:.2f}",
                        ),
                    )
                    cur.executemany(
                        "INSERT INTO order_items VALUES (%s, %s, %s, %s, %s)",
                        [
                            (
                                oid,
                                n,
                                r.randint(1, products),
                                r.randint(1, 5),
                                f"{r.randint(100, 9999) / 100:.2f}",
                            )
                            for n in range(1, lines + 1)
                        ],
                    )
                    live.append(oid)
                    self.rows += 1 + lines
                elif kind < 0.75:
                    oid = r.choice(live)
                    cur.execute(
                        "UPDATE orders SET status = %s WHERE id = %s",
                        (r.choice(("paid", "shipped")), oid),
                    )
                    cur.execute(
                        "UPDATE products SET stock = stock + 1 WHERE id = %s",
                        (r.randint(1, products),),
                    )
                    self.rows += 2
                elif kind < 0.85:
                    oid = live.pop(r.randrange(len(live)))
                    cur.execute("DELETE FROM order_items WHERE order_id = %s", (oid,))
                    n = cur.rowcount
                    cur.execute("DELETE FROM orders WHERE id = %s", (oid,))
                    self.rows += n + 1
                else:
                    cid, next_customer = next_customer, next_customer + 1
                    cur.execute(
                        "INSERT INTO customers VALUES (%s, %s, %s, NOW(3))",
                        (
                            cid,
                            f"customer {cid}",
                            None if r.random() < 0.3 else f"c{cid}@example.com",
                        ),
                    )
                    self.rows += 1
                cur.execute("COMMIT")
                self.transactions += 1
                if self.rate > 0:  # pace the workload, a rate limit (not synchronization)
                    ahead = self.started + self.transactions / self.rate - time.monotonic()
                    if ahead > 0:
                        self._stop.wait(ahead)
        conn.close()
