"""The reference engine's whole state, and the copy-on-write that makes each write atomic.

An operation works on a shallow copy (entities are immutable, so copying the
dicts is enough) and the copy replaces the shared state only when the
operation returns normally. There is no undo log to get wrong.

Each table is a :class:`Table`: a dict that remembers the keys written since it
was copied (a unit's changes are found without scanning every row) and keeps
two indexes current on every write, so no operation scans a whole table: the
rows of each run (``of_owner``) and, per tenant, a heap of (due time, tie-break,
key) entries of the rows a claim may take (``take_due``). A heap entry whose row
was rewritten since is stale and dropped when met; every claimable row has a
live entry, so taking from the heap finds exactly what sorting every row by
(due time, tie-break) would. The heap is split into buckets by key hash, like the
rows (:class:`_DueHeap`): a unit of work copies only the buckets it writes, and a
bucket sheds its stale entries when it has doubled since it was last cleaned, so
neither the copy nor the heap grows with the number of rows or of past writes.

Row locks are the rows a unit of work has changed or locked: :meth:`Tables.changes`
names them (a row is a key of one table), so a commit of one store while another
store's unit of work is open on the same thread can be checked against them and
carried into the open unit (:meth:`Tables.absorb`), as row-locking databases do.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from operator import is_not
from typing import Any, Generic, TypeVar, overload

from kit.contract.entities import (
    Command,
    CommandStatus,
    Definition,
    Event,
    Run,
    RunStatus,
    Signal,
    Timer,
    TimerStatus,
)
from kit.migrate import AppliedMigration

__all__ = ["ROW_TABLES", "Row", "Table", "Tables"]

ROW_TABLES = ("definitions", "runs", "history", "commands", "signals", "timers")
"""The tables whose keys are rows (``applied``, the migration record, is one row on its own)."""

Row = tuple[str, Any]
"""(table, key): one row of the reference state."""

_GONE = object()


Owner = Callable[[Any, Any], Any]
"""(key, value) -> what the row is found by (a child row's run, as (tenant, run_id); a run's
(tenant, idempotency key)), fixed for the row's life; None: not indexed."""
Due = Callable[[Any, Any], "tuple[str, datetime, Any] | None"]
"""(key, value) -> (tenant, due time, tie-break) when a claim may take the row at that time, else None."""


K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

_BUCKETS = 64
"""Rows are spread over this many dicts by key hash: a copy shares them all, a write copies one."""


class _CowMap:
    """A dict split into buckets, copied in O(buckets) and copied-on-write one bucket at a time.

    Iteration order is by bucket, not by insertion: every reader of the reference state sorts.
    """

    __slots__ = ("_buckets", "_mine")

    def __init__(self) -> None:
        self._buckets: list[dict[Any, Any]] = [{} for _ in range(_BUCKETS)]
        self._mine: list[bool] = [True] * _BUCKETS

    def copy(self) -> _CowMap:
        twin = _CowMap.__new__(_CowMap)
        twin._buckets = list(self._buckets)
        twin._mine = [False] * _BUCKETS
        self._mine = [False] * _BUCKETS  # the twin now shares every bucket: neither may write in place
        return twin

    def bucket(self, key: Any) -> dict[Any, Any]:
        return self._buckets[hash(key) % _BUCKETS]

    def writable(self, key: Any) -> dict[Any, Any]:
        i = hash(key) % _BUCKETS
        if not self._mine[i]:
            self._buckets[i] = dict(self._buckets[i])
            self._mine[i] = True
        return self._buckets[i]

    def __iter__(self) -> Iterator[Any]:
        for bucket in self._buckets:
            yield from bucket

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets)


Entry = tuple[Any, Any, Any]
"""(due time, tie-break, key): one heap entry of a row a claim may take."""


class _DueHeap:
    """One tenant's due entries: a heap per bucket (by key hash), copied in O(buckets), copied-on-write one
    bucket at a time. Popping in order merges the bucket heaps, so it yields exactly the order of one heap."""

    __slots__ = ("_buckets", "_clean", "_mine")

    def __init__(self) -> None:
        self._buckets: list[list[Entry]] = [[] for _ in range(_BUCKETS)]
        self._mine: list[bool] = [True] * _BUCKETS
        self._clean: list[int] = [0] * _BUCKETS
        """Each bucket's length when it last shed its stale entries."""

    def copy(self) -> _DueHeap:
        twin = _DueHeap.__new__(_DueHeap)
        twin._buckets = list(self._buckets)
        twin._clean = list(self._clean)
        twin._mine = [False] * _BUCKETS
        self._mine = [False] * _BUCKETS  # the twin now shares every bucket: neither may write in place
        return twin

    def _writable(self, i: int, live: Callable[[Entry], bool]) -> list[Entry]:
        bucket = self._buckets[i]
        if not self._mine[i]:
            bucket = self._buckets[i] = list(bucket)
            self._mine[i] = True
        if len(bucket) > 2 * self._clean[i] + 16:  # amortised O(1) a write: it doubled since it was cleaned
            bucket[:] = [entry for entry in bucket if live(entry)]
            heapq.heapify(bucket)
            self._clean[i] = len(bucket)
        return bucket

    def push(self, entry: Entry, live: Callable[[Entry], bool]) -> None:
        heapq.heappush(self._writable(hash(entry[2]) % _BUCKETS, live), entry)

    def pop_due(self, now: datetime, live: Callable[[Entry], bool]) -> Iterator[Entry]:
        """Pop entries due at ``now``, earliest first (the caller stops when it has enough)."""
        tops = [(bucket[0], i) for i, bucket in enumerate(self._buckets) if bucket and bucket[0][0] <= now]
        heapq.heapify(tops)
        while tops:
            top, i = heapq.heappop(tops)
            bucket = self._writable(i, live)
            if not bucket or bucket[0] is not top:  # cleaning shed stale entries: file the bucket's new top
                if bucket and bucket[0][0] <= now:
                    heapq.heappush(tops, (bucket[0], i))
                continue
            entry = heapq.heappop(bucket)
            if bucket and bucket[0][0] <= now:
                heapq.heappush(tops, (bucket[0], i))
            yield entry


class Table(Generic[K, V]):
    """One table of the reference state (see the module docstring): a copy-on-write map of rows with
    write tracking and indexes. Copying it costs the same whatever its size; a write copies 1/64 of it."""

    __slots__ = ("_due", "_heaps", "_heaps_mine", "_owner", "_owners", "_rows", "written")

    def __init__(self, owner: Owner | None = None, due: Due | None = None) -> None:
        self._owner, self._due = owner, due
        self._rows = _CowMap()
        self._owners = _CowMap()
        self._heaps: dict[str, _DueHeap] = {}
        self._heaps_mine: set[str] = set()
        self.written: set[Any] = set()

    def copy(self) -> Table[K, V]:
        """A copy that shares the (immutable) rows, with nothing written yet."""
        twin: Table[K, V] = Table.__new__(Table)
        twin._owner, twin._due = self._owner, self._due
        twin._rows = self._rows.copy()
        twin._owners = self._owners.copy()
        twin._heaps = dict(self._heaps)
        twin._heaps_mine = set()
        self._heaps_mine = set()
        twin.written = set()
        return twin

    # -- reading ------------------------------------------------------------
    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: V | T) -> V | T: ...

    def get(self, key: Any, default: Any = None) -> Any:
        return self._rows.bucket(key).get(key, default)

    def __getitem__(self, key: Any) -> V:
        return self._rows.bucket(key)[key]  # type: ignore[no-any-return]

    def __contains__(self, key: Any) -> bool:
        return key in self._rows.bucket(key)

    def __iter__(self) -> Iterator[K]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def keys(self) -> list[K]:
        return list(self._rows)

    def values(self) -> list[V]:
        return [v for bucket in self._rows._buckets for v in bucket.values()]

    def items(self) -> list[tuple[K, V]]:
        return [kv for bucket in self._rows._buckets for kv in bucket.items()]

    # -- writing ------------------------------------------------------------
    def _heap(self, tenant: str) -> _DueHeap:
        if tenant not in self._heaps_mine:
            shared = self._heaps.get(tenant)
            self._heaps[tenant] = _DueHeap() if shared is None else shared.copy()
            self._heaps_mine.add(tenant)
        return self._heaps[tenant]

    def _live(self, tenant: str) -> Callable[[Entry], bool]:
        """Whether a heap entry of ``tenant`` still names its row's current due time (else it is stale)."""
        due = self._due
        assert due is not None

        def live(entry: Entry) -> bool:
            value = self.get(entry[2], _GONE)
            return value is not _GONE and due(entry[2], value) == (tenant, entry[0], entry[1])

        return live

    def __setitem__(self, key: Any, value: Any) -> None:
        rows = self._rows.writable(key)
        if self._owner is not None and key not in rows:
            owner = self._owner(key, value)
            if owner is not None:
                owners = self._owners.writable(owner)
                owners[owner] = (*owners.get(owner, ()), key)
        rows[key] = value
        self.written.add(key)
        if self._due is not None:
            due = self._due(key, value)
            if due is not None:
                self._heap(due[0]).push((due[1], due[2], key), self._live(due[0]))

    def __delitem__(self, key: Any) -> None:
        rows = self._rows.writable(key)
        value = rows.pop(key)
        self.written.add(key)
        owner = None if self._owner is None else self._owner(key, value)
        if owner is not None:
            owners = self._owners.writable(owner)
            owners[owner] = tuple(k for k in owners.get(owner, ()) if k != key)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            value = self[key]
            del self[key]
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def differences(self, base: Table[K, V]) -> Iterator[tuple[Any, Any, Any]]:
        """(key, value in ``base``, value here) for every row whose value here is not the very object
        ``base`` holds (``_GONE`` for a missing row), where this table descends from ``base`` by copies and
        writes (or is it). Buckets still shared are skipped unread, so the cost is that of the buckets written
        since ``base``, not of the table: rows are immutable and writers replace them, so no row can differ in
        a bucket both still share."""
        if self is base:
            return
        ours, bases = self._rows._buckets, base._rows._buckets
        for i in compress(range(_BUCKETS), map(is_not, ours, bases)):
            mine, theirs = ours[i], bases[i]
            for key in mine.keys() | theirs.keys():
                old, new = theirs.get(key, _GONE), mine.get(key, _GONE)
                if old is not new:
                    yield key, old, new

    def of_owner(self, owner: Any) -> list[Any]:
        """The keys of ``owner``'s rows (a run's, as (tenant, run_id)), in key order."""
        return sorted(self._owners.bucket(owner).get(owner, ()))

    def take_due(
        self, tenant: str, now: datetime, limit: int, takes: Callable[[Any, Any], bool] = lambda key, value: True
    ) -> list[Any]:
        """Up to ``limit`` keys of ``tenant``'s rows due at ``now`` that ``takes`` accepts, earliest first
        (ties by tie-break). The caller rewrites each row it takes (which files its next entry)."""
        if tenant not in self._heaps or limit <= 0:
            return []
        heap, live = self._heap(tenant), self._live(tenant)
        taken: list[Any] = []
        passed: list[Entry] = []
        seen: set[Any] = set()
        for entry in heap.pop_due(now, live):
            key = entry[2]
            if key in seen or not live(entry):
                continue  # stale: the row was rewritten (or removed) since this entry was filed
            seen.add(key)
            if takes(key, self[key]):
                taken.append(key)
            passed.append(entry)
            if len(taken) >= limit:
                break
        for entry in passed:  # rows left as they were keep their entries; taken rows get new ones
            heap.push(entry, live)
        return taken


def _idempotency(key: Any, run: Run) -> Any:
    return None if run.idempotency_key is None else (key[0], run.idempotency_key)


def _child_owner(key: Any, value: Any) -> Any:
    tenant, row = value
    return (tenant, row.run_id)


@dataclass
class Tables:
    applied: dict[int, AppliedMigration] | None = None
    """``None`` until the first migration: the schema is absent."""
    definitions: Table[tuple[str, str, str], Definition] = field(default_factory=Table)
    runs: Table[tuple[str, str], Run] = field(default_factory=lambda: Table(owner=_idempotency, due=_run_due))
    history: Table[tuple[str, str], tuple[Event, ...]] = field(default_factory=Table)
    commands: Table[int, tuple[str, Command]] = field(
        default_factory=lambda: Table(owner=_child_owner, due=_command_due))
    signals: Table[int, tuple[str, Signal]] = field(default_factory=lambda: Table(owner=_child_owner))
    timers: Table[int, tuple[str, Timer]] = field(default_factory=lambda: Table(owner=_child_owner, due=_timer_due))
    counters: dict[str, int] = field(default_factory=dict)
    """The last id issued per table: ids count up from 1 in each table, as SQL identities do.

    Shared by every copy (never rolled back), like a SQL sequence: two units of work open
    at once never issue the same id."""

    def copy(self) -> Tables:
        return Tables(
            applied=None if self.applied is None else dict(self.applied),
            definitions=self.definitions.copy(),
            runs=self.runs.copy(),
            history=self.history.copy(),
            commands=self.commands.copy(),
            signals=self.signals.copy(),
            timers=self.timers.copy(),
            counters=self.counters,
        )

    def new_id(self, table: str) -> int:
        self.counters[table] = self.counters.get(table, 0) + 1
        return self.counters[table]

    def changes(self, base: Tables) -> dict[Row, Any]:
        """Every row this copy changed since ``base`` (the state it was copied from), with its new value.

        Entities are immutable and writers replace them, so a changed row is one whose
        value is no longer the very object ``base`` holds.
        """
        changed: dict[Row, Any] = {}
        if self.applied != base.applied:
            changed[("applied", None)] = self.applied
        for table in ROW_TABLES:
            mine, theirs = getattr(self, table), getattr(base, table)
            for key in mine.written:  # only written keys can differ from the state this copy was made from
                value = mine.get(key, _GONE)
                if theirs.get(key, _GONE) is not value:
                    changed[(table, key)] = value
        return changed

    def absorb(self, committed: dict[Row, Any]) -> None:
        """Carry rows another unit committed into this open copy (rows this copy changed are never among
        them: the committer would have waited for this unit's locks)."""
        for (table, key), value in committed.items():
            if table == "applied":
                self.applied = None if value is None else dict(value)
                continue
            rows = getattr(self, table)
            if value is _GONE:
                rows.pop(key, None)
            else:
                rows[key] = value


def _run_due(key: Any, run: Run) -> tuple[str, datetime, Any] | None:
    """A claimable run's due time: its lease expiry while running, else its wake time."""
    if run.status.terminal:
        return None
    at = run.claim_expires_at if run.status is RunStatus.RUNNING else run.wake_at
    return None if at is None else (key[0], at, run.run_id)


def _command_due(key: Any, value: tuple[str, Command]) -> tuple[str, datetime, Any] | None:
    tenant, cmd = value
    at: datetime | None
    if cmd.status is CommandStatus.PENDING:
        at = cmd.not_before
    elif cmd.status is CommandStatus.CLAIMED:
        at = cmd.claim_expires_at
    else:
        return None
    return None if at is None else (tenant, at, key)


def _timer_due(key: Any, value: tuple[str, Timer]) -> tuple[str, datetime, Any] | None:
    tenant, timer = value
    return (tenant, timer.fire_at, key) if timer.status is TimerStatus.SCHEDULED else None
