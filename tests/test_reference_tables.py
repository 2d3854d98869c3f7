"""The reference engine's due index: claims take what sorting every row would, and past writes are not kept."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from kit.reference._tables import Table

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _due(key: Any, value: Any) -> tuple[str, datetime, Any] | None:
    tenant, at = value
    return None if at is None else (tenant, at, key)


def _expected(table: Table[int, Any], tenant: str, now: datetime, limit: int) -> list[int]:
    due = sorted((at, key) for key, (t, at) in table.items() if t == tenant and at is not None and at <= now)
    return [key for _, key in due[:limit]]


def test_take_due_takes_what_sorting_every_row_would_across_copies_and_dropped_copies() -> None:
    rng = random.Random(16)
    table: Table[int, Any] = Table(due=_due)
    for step in range(3000):
        work = table.copy()  # a unit of work; about one in five is rolled back (dropped)
        for _ in range(rng.randint(1, 4)):
            key = rng.randrange(300)
            tenant = rng.choice(("a", "b"))
            at = None if rng.random() < 0.2 else T0 + timedelta(seconds=rng.randrange(-50, 400))
            work[key] = (tenant, at)
        now = T0 + timedelta(seconds=rng.randrange(0, 100))
        tenant, limit = rng.choice(("a", "b")), rng.randint(1, 5)
        expected = _expected(work, tenant, now, limit)
        assert work.take_due(tenant, now, limit) == expected, step
        for key in expected:  # a claim rewrites what it took (here: due later)
            work[key] = (tenant, now + timedelta(seconds=1000))
        if rng.random() >= 0.2:
            table = work
    for tenant in ("a", "b"):
        far = T0 + timedelta(days=1)
        assert table.take_due(tenant, far, 10_000) == _expected(table, tenant, far, 10_000)


def test_rewrites_of_rows_due_later_do_not_pile_up_in_the_index() -> None:
    table: Table[int, Any] = Table(due=_due)
    for i in range(20_000):  # each rewrite files a new entry and makes the last one stale
        work = table.copy()
        work[i % 10] = ("a", T0 + timedelta(days=1, seconds=i))
        table = work
    filed = sum(len(bucket) for bucket in table._heaps["a"]._buckets)
    assert filed <= 64 * 16 + 2 * 10  # bounded by the live rows, not by the 20,000 writes
    assert table.take_due("a", T0 + timedelta(days=2), 100) == sorted(range(10), key=lambda k: table[k][1])
