"""The reference engine: CONTRACT.md section 3, executed as plainly as possible.

Every operation takes the one shared lock, works on a copy of the state, and
publishes the copy only if it returns normally, so it is atomic and
serialisable by construction. Read this file as the specification in code: the
SQL adapters are compared with it, step by step, by the fault machines.

The lock is re-entrant, so a second store used on the thread that holds another
store's open ``transaction()`` runs at once, as it would on a row-locking
database: its commit publishes only the rows it changed, carries them into the
open unit of work (which commits later without overwriting them), and is
refused with :class:`~kit.contract.errors.LockTimeout` when it touches a row the
open unit changed or locked (the real database's lock wait could never end on
that thread). Claims skip such rows, as ``SKIP LOCKED`` does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kit.clock import ManualClock, ensure_utc, from_micros, system_now, to_micros
from kit.connections import COMMIT_POINT, COMMITTED_POINT
from kit.contract import validation as v
from kit.contract.entities import (
    JSON,
    ClockMode,
    Command,
    CommandClaim,
    CommandStatus,
    Decision,
    Definition,
    DefinitionRef,
    Event,
    Run,
    RunClaim,
    RunStatus,
    Signal,
    SignalReceipt,
    SignalStatus,
    Snapshot,
    StartResult,
    Timer,
    TimerStatus,
)
from kit.contract.errors import (
    ClockModeError,
    DefinitionMismatch,
    DefinitionNotFound,
    InvalidArgument,
    InvalidDecision,
    LockTimeout,
    NotInTransaction,
    RunAlreadyExists,
    TransactionRolledBack,
)
from kit.contract.outcomes import Outcome
from kit.contract.protocol import MigrationSpec, StatementHook
from kit.migrate import AppliedMigration, pending, verify
from kit.reference._tables import Row, Table, Tables
from kit.reference._values import detached, detached_all

__all__ = ["LOCK_WAIT_SECONDS", "MemoryStore", "SharedState"]


LOCK_WAIT_SECONDS = 10.0
"""How long a unit of work waits for another thread's open unit before LockTimeout (a real database's
lock wait timeout; without it a second connection waiting on a unit its own caller must end first, as
through the wire bridge, would wait for ever)."""


@dataclass(eq=False)  # units are told apart by identity: two units with equal tables are still two units
class _Unit:
    """One store's open unit of work: the state it started from, its working copy, its row locks."""

    base: Tables
    work: Tables
    locks: set[Row] = field(default_factory=set)

    def held(self) -> set[Row]:
        """The rows this unit holds locks on: those it changed and those it locked."""
        return set(self.work.changes(self.base)) | self.locks


@dataclass
class SharedState:
    """What all stores opened on one in-memory database share."""

    tables: Tables = field(default_factory=Tables)
    clock: ManualClock = field(default_factory=ManualClock)
    lock: threading.RLock = field(default_factory=threading.RLock)
    open_units: list[_Unit] = field(default_factory=list)
    """Units of work open right now (more than one only on one thread: the lock admits no other)."""
    lock_wait_s: float = LOCK_WAIT_SECONDS
    """How long a unit of work waits for another thread's before it fails with ``LockTimeout``."""


class _Tx:
    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []
        self.rollback_only = False

    def on_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)


class MemoryStore:
    """One open store on the in-memory reference database."""

    def __init__(
        self,
        shared: SharedState,
        tenant_id: str,
        clock: ClockMode,
        migrations: Sequence[MigrationSpec],
        statement_hook: StatementHook | None,
    ) -> None:
        self.tenant_id = v.check_text("tenant_id", tenant_id, v.MAX_TENANT_ID)
        self.clock_mode = ClockMode(clock)
        self._shared = shared
        self.migrations = list(migrations)
        self._hook = statement_hook
        self._work: Tables | None = None
        self._open: _Unit | None = None
        self._tx: _Tx | None = None
        self._depth = 0
        self._closed = False

    # -- plumbing ---------------------------------------------------------
    @contextmanager
    def _unit(self) -> Iterator[Tables]:
        """The working copy of the state: the open transaction's, or a fresh one committed on exit."""
        with self.transaction():
            assert self._work is not None
            yield self._work

    @contextmanager
    def _read(self) -> Iterator[Tables]:
        """The state to read: the open transaction's copy, or the last committed state."""
        if self._depth:
            assert self._work is not None
            yield self._work
            return
        if self._closed:
            raise InvalidArgument("this store is closed: open a new one from its Database")
        # A published state is never mutated (writers work on copies and swap the
        # reference), so reading it needs no lock and never waits for a writer.
        yield self._shared.tables

    def _write(self, label: str) -> None:
        """A named write step: the fault layer's seam (it may raise here)."""
        if self._hook is not None:
            self._hook(label)

    def _now(self) -> datetime:
        if self.clock_mode is ClockMode.TEST:
            return self._shared.clock.now()
        return system_now()

    def close(self) -> None:
        self._closed = True

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        if self._closed:
            raise InvalidArgument("this store is closed: open a new one from its Database")
        if self._depth:
            assert self._tx is not None
            self._depth += 1
            try:
                yield self._tx
            except BaseException:
                self._tx.rollback_only = True
                raise
            finally:
                self._depth -= 1
            return
        if not self._shared.lock.acquire(timeout=self._shared.lock_wait_s):
            raise LockTimeout(
                f"another thread's transaction() held this database for {self._shared.lock_wait_s:g} s (the reference "
                "engine runs one unit of work at a time): commit or roll back that unit first"
            )
        try:
            base = self._shared.tables
            unit = _Unit(base, base.copy())
            self._shared.open_units.append(unit)
            self._open, self._work = unit, unit.work
            self._tx = _Tx()
            self._depth = 1
            tx = self._tx
            try:
                yield tx
                if tx.rollback_only:
                    raise TransactionRolledBack(
                        "an inner transaction() block failed, so the whole unit of work was "
                        "rolled back: let the exception propagate or handle it outside the unit"
                    )
                changes = self._refuse_locked_rows(unit)
                self._write(COMMIT_POINT)
                self._publish(unit, changes)
            finally:
                self._shared.open_units.remove(unit)
                self._open = self._work = None
                self._tx = None
                self._depth = 0
            self._write(COMMITTED_POINT)
        finally:
            self._shared.lock.release()
        for callback in tx.callbacks:
            callback()

    def _others(self) -> list[_Unit]:
        return [u for u in self._shared.open_units if u is not self._open]

    def _held_by_others(self) -> set[Row]:
        """Rows another store's open unit of work (on this thread) has changed or locked."""
        held: set[Row] = set()
        for other in self._others():
            held |= other.held()
        return held

    def _refuse_locked_rows(self, unit: _Unit) -> dict[Row, Any]:
        """The rows ``unit`` changed; LockTimeout if another open unit holds one of them."""
        changes = unit.work.changes(unit.base)
        held = self._held_by_others() if self._others() else set()
        clash = next((row for row in changes if row in held), None)
        if clash is not None:
            raise LockTimeout(
                f"{clash[0]} row {clash[1]!r} is locked by another store's open transaction() on this "
                "thread, which cannot finish while this call waits: commit or roll back that unit of "
                "work first, or make this call through its store"
            )
        return changes

    def _publish(self, unit: _Unit, changes: dict[Row, Any]) -> None:
        """Make ``unit``'s rows the committed state and carry them into every other open unit."""
        shared = self._shared
        if shared.tables is unit.base:
            shared.tables = unit.work
        else:
            merged = shared.tables.copy()
            merged.absorb(changes)
            shared.tables = merged
        for other in self._others():
            other.work.absorb(changes)
            other.base = shared.tables

    def lock_run(self, run_id: str) -> Run | None:
        if not self._depth:
            raise NotInTransaction("lock_run() needs an open transaction(): call it inside one")
        assert self._open is not None
        self._open.locks.add(("runs", (self.tenant_id, run_id)))
        with self._read() as t:
            return detached(t.runs.get((self.tenant_id, run_id)))

    # -- schema -----------------------------------------------------------
    def migrate(self) -> list[str]:
        names: list[str] = []
        with self._unit() as t:
            applied = list((t.applied or {}).values())
            for m in pending(applied, self.migrations):
                self._write(f"MIGRATE {m.version:03d}_{m.name}")
                t.applied = dict(t.applied or {})
                t.applied[m.version] = AppliedMigration(m.version, m.name, m.checksum)
                names.append(f"{m.version:03d}_{m.name}")
        return names

    def verify_schema(self) -> None:
        with self._read() as t:
            verify(None if t.applied is None else list(t.applied.values()), self.migrations)

    # -- clock ------------------------------------------------------------
    def now(self) -> datetime:
        return self._now()

    def _test_clock(self) -> ManualClock:
        if self.clock_mode is not ClockMode.TEST:
            raise ClockModeError("this store runs on the database clock: open it with clock=TEST")
        return self._shared.clock

    def set_test_clock(self, at: datetime) -> None:
        self._test_clock().set(at)

    def advance_test_clock(self, by: timedelta) -> datetime:
        return self._test_clock().advance(by)

    # -- definitions ------------------------------------------------------
    def ensure_definition(self, name: str, version: str, digest: str, body: bytes) -> Definition:
        v.check_text("name", name, v.MAX_NAME)
        v.check_text("version", version, v.MAX_NAME)
        v.check_digest(digest, body)
        with self._unit() as t:
            key = (self.tenant_id, name, version)
            if key not in t.definitions:
                self._write("INSERT definition")
                t.definitions[key] = Definition(name, version, digest, bytes(body), self._now())
            return t.definitions[key]

    def get_definition(self, name: str, version: str) -> Definition | None:
        with self._read() as t:
            return t.definitions.get((self.tenant_id, name, version))

    def list_definition_versions(self, name: str) -> list[Definition]:
        v.check_text("name", name, v.MAX_NAME)
        with self._read() as t:
            found = [d for (tenant, n, _), d in t.definitions.items() if tenant == self.tenant_id and n == name]
        return sorted(found, key=lambda d: d.version)

    # -- runs -------------------------------------------------------------
    def start_run(
        self,
        run_id: str,
        definition: DefinitionRef,
        input: JSON = None,
        idempotency_key: str | None = None,
    ) -> StartResult:
        v.check_text("run_id", run_id, v.MAX_RUN_ID)
        v.check_text("definition.name", definition.name, v.MAX_NAME)
        v.check_text("definition.version", definition.version, v.MAX_NAME)
        v.check_json("input", input)
        if idempotency_key is not None:
            v.check_text("idempotency_key", idempotency_key, v.MAX_KEY)
        with self._unit() as t:
            if idempotency_key is not None:
                for key in t.runs.of_owner((self.tenant_id, idempotency_key)):
                    return detached(StartResult(t.runs[key], created=False))
            if (self.tenant_id, run_id) in t.runs:
                raise RunAlreadyExists(
                    f"run {run_id!r} already exists: use a new run id, or repeat the original "
                    "idempotency key to get the existing run back"
                )
            stored = t.definitions.get((self.tenant_id, definition.name, definition.version))
            if stored is None:
                raise DefinitionNotFound(
                    f"definition {definition.name!r} version {definition.version!r} is unknown: "
                    "call ensure_definition() first"
                )
            if stored.digest != definition.digest:
                raise DefinitionMismatch(
                    f"definition {definition.name!r} version {definition.version!r} is stored with "
                    f"digest {stored.digest[:12]}..., not {definition.digest[:12]}...: register the "
                    "changed body under a new version"
                )
            now = self._now()
            run = Run(
                run_id=run_id,
                tenant_id=self.tenant_id,
                definition=stored.ref,
                status=RunStatus.PENDING,
                revision=0,
                claim_owner=None,
                claim_generation=0,
                claim_expires_at=None,
                wake_at=now,
                wakeup_pending=False,
                cancel_requested=False,
                cancel_reason=None,
                input=v.copy_json(input),
                output=None,
                error=None,
                idempotency_key=idempotency_key,
                created_at=now,
                updated_at=now,
            )
            self._write("INSERT run")
            t.runs[(self.tenant_id, run_id)] = run
            return detached(StartResult(run, created=True))

    def get_run(self, run_id: str) -> Run | None:
        with self._read() as t:
            return detached(t.runs.get((self.tenant_id, run_id)))

    def list_runs(
        self, status: RunStatus | None = None, after: str | None = None, limit: int = 100
    ) -> list[Run]:
        v.check_limit(limit)
        with self._read() as t:
            runs = [
                r
                for r in t.runs.values()
                if r.tenant_id == self.tenant_id
                and (status is None or r.status == status)
                and (after is None or r.run_id > after)
            ]
        return detached_all(sorted(runs, key=lambda r: r.run_id)[:limit])

    def get_history(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        with self._read() as t:
            events = [e for e in t.history.get((self.tenant_id, run_id), ()) if e.seq > after_seq]
        return detached_all(events if limit is None else events[: v.check_limit(limit)])

    def export_state(self, run_ids: Collection[str] | None = None) -> dict[str, Any]:
        """The tenant's whole observable state (see kit.inspect), from one consistent state; with ``run_ids``,
        only those runs (the ones that exist), found by key."""
        from kit.inspect import assemble

        with self._read() as t:
            if run_ids is None:
                runs = sorted((r for r in t.runs.values() if r.tenant_id == self.tenant_id), key=lambda r: r.run_id)
            else:
                found = (t.runs.get((self.tenant_id, run_id)) for run_id in sorted(set(run_ids)))
                runs = [r for r in found if r is not None]
            return {
                r.run_id: assemble(
                    r, list(t.history.get((self.tenant_id, r.run_id), ())), self._commands_of(t, r.run_id),
                    self._signals_of(t, r.run_id), self._timers_of(t, r.run_id),
                )
                for r in runs
            }

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome:
        v.check_text("run_id", run_id, v.MAX_RUN_ID)
        v.check_optional_text("reason", reason, v.MAX_REASON)
        with self._unit() as t:
            run = t.runs.get((self.tenant_id, run_id))
            if run is None:
                return Outcome.NOT_FOUND
            if run.status.terminal:
                return Outcome.TERMINAL
            if run.cancel_requested:
                return Outcome.DUPLICATE
            now = self._now()
            self._write("UPDATE run cancel")
            run = replace(run, cancel_requested=True, cancel_reason=reason)
            t.runs[(self.tenant_id, run_id)] = _made_runnable(run, now)
            return Outcome.COMMITTED

    # -- decision claims --------------------------------------------------
    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        lease_us, limit = v.check_claim(worker_id, lease, limit)
        with self._unit() as t:
            now = self._now()
            held = self._held_by_others()  # skipped, as SKIP LOCKED skips them
            due = [
                t.runs[key]
                for key in t.runs.take_due(self.tenant_id, now, limit, lambda key, _run: ("runs", key) not in held)
            ]
            claims = []
            expires = from_micros(to_micros(now) + lease_us)
            for run in due[:limit]:
                self._write("UPDATE run claim")
                claimed = replace(
                    run,
                    status=RunStatus.RUNNING,
                    claim_owner=worker_id,
                    claim_generation=run.claim_generation + 1,
                    claim_expires_at=expires,
                    wake_at=None,
                    wakeup_pending=False,
                    updated_at=now,
                )
                t.runs[(self.tenant_id, run.run_id)] = claimed
                claims.append(
                    RunClaim(run.run_id, worker_id, claimed.claim_generation, expires, run.revision)
                )
            return claims

    def _run_fence(self, t: Tables, claim: RunClaim, now: datetime) -> tuple[Run | None, Outcome | None]:
        """The claimed run and ``None``, or the outcome that refuses the fenced call."""
        run = t.runs.get((self.tenant_id, claim.run_id))
        if run is None:
            return None, Outcome.NOT_FOUND
        if run.status.terminal:
            return run, Outcome.TERMINAL
        if not _lease_live(run.claim_owner, run.claim_generation, run.claim_expires_at, claim, now):
            return run, Outcome.CLAIM_LOST
        return run, None

    def renew_run_claim(self, claim: RunClaim, lease: timedelta) -> Outcome:
        lease_us = v.check_lease(lease)
        with self._unit() as t:
            now = self._now()
            run, refused = self._run_fence(t, claim, now)
            if refused:
                return refused
            assert run is not None
            self._write("UPDATE run renew")
            t.runs[(self.tenant_id, run.run_id)] = replace(
                run, claim_expires_at=from_micros(to_micros(now) + lease_us), updated_at=now
            )
            return Outcome.RENEWED

    def release_run_claim(self, claim: RunClaim) -> Outcome:
        with self._unit() as t:
            now = self._now()
            run, refused = self._run_fence(t, claim, now)
            if refused:
                return refused
            assert run is not None
            self._write("UPDATE run release")
            t.runs[(self.tenant_id, run.run_id)] = replace(
                run,
                status=RunStatus.PENDING,
                claim_owner=None,
                claim_expires_at=None,
                wake_at=now,
                wakeup_pending=False,
                updated_at=now,
            )
            return Outcome.COMMITTED

    def load_claimed(self, claim: RunClaim) -> Snapshot | Outcome:
        with self._read() as t:
            run, refused = self._run_fence(t, claim, self._now())
            if refused:
                return refused
            assert run is not None
            return detached(Snapshot(
                run=run,
                history=t.history.get((self.tenant_id, run.run_id), ()),
                command_results=tuple(
                    c for c in self._commands_of(t, run.run_id)
                    if c.status in (CommandStatus.COMPLETED, CommandStatus.FAILED) and not c.consumed
                ),
                signals=tuple(
                    s for s in self._signals_of(t, run.run_id) if s.status is SignalStatus.PENDING
                ),
                timers=tuple(
                    x for x in self._timers_of(t, run.run_id) if x.status is TimerStatus.FIRED
                ),
            ))

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        v.check_decision(decision)
        with self._unit() as t:
            now = self._now()
            run, refused = self._run_fence(t, claim, now)
            if refused:
                return refused
            assert run is not None
            if run.revision != expected_revision:
                return Outcome.REVISION_MISMATCH
            self._check_consumable(t, run.run_id, decision)
            revision = run.revision + 1
            key = (self.tenant_id, run.run_id)
            history = t.history.get(key, ())
            for new in decision.events:
                self._write("INSERT event")
                history += (
                    Event(run.run_id, len(history) + 1, new.kind, new.operation_key,
                          v.copy_json(new.payload), revision, now),
                )
            t.history[key] = history
            taken = {c.operation_key for c in self._commands_of(t, run.run_id)}
            for nc in decision.commands:
                if nc.operation_key in taken:
                    continue  # first wins
                taken.add(nc.operation_key)
                self._write("INSERT command")
                cid = t.new_id("commands")
                t.commands[cid] = (self.tenant_id, Command(
                    command_id=str(cid), run_id=run.run_id, operation_key=nc.operation_key,
                    name=nc.name, queue=nc.queue, input=v.copy_json(nc.input), status=CommandStatus.PENDING,
                    attempt=0, max_attempts=nc.max_attempts, not_before=now + nc.delay,
                    claim_owner=None, claim_generation=0, claim_expires_at=None, result=None,
                    error=None, consumed=False,
                ))
            taken = {x.operation_key for x in self._timers_of(t, run.run_id)}
            for nt in decision.timers:
                if nt.operation_key in taken:
                    continue  # first wins
                taken.add(nt.operation_key)
                self._write("INSERT timer")
                tid = t.new_id("timers")
                fire_at = ensure_utc(nt.fire_at) if nt.fire_at is not None else now + nt.delay  # type: ignore[operator]
                t.timers[tid] = (self.tenant_id, Timer(
                    str(tid), run.run_id, nt.operation_key, fire_at, TimerStatus.SCHEDULED))
            for sid in decision.consume_signals:
                self._write("UPDATE signal consumed")
                tenant, sig = t.signals[int(sid)]
                t.signals[int(sid)] = (tenant, replace(
                    sig, status=SignalStatus.CONSUMED, consumed_revision=revision))
            for cid_text in decision.consume_commands:
                self._write("UPDATE command consumed")
                tenant, cmd = t.commands[int(cid_text)]
                t.commands[int(cid_text)] = (tenant, replace(cmd, consumed=True))
            for tid_text in decision.consume_timers:
                self._write("UPDATE timer consumed")
                tenant, tmr = t.timers[int(tid_text)]
                t.timers[int(tid_text)] = (tenant, replace(tmr, status=TimerStatus.CONSUMED))
            for tid_text in decision.cancel_timers:
                self._write("UPDATE timer cancelled")
                tenant, tmr = t.timers[int(tid_text)]
                t.timers[int(tid_text)] = (tenant, replace(tmr, status=TimerStatus.CANCELLED))
            status = decision.next_status
            wake_at = _resolve_wake(decision, now)
            if status is RunStatus.PENDING and wake_at is None:
                wake_at = now
            if status is RunStatus.BLOCKED and run.wakeup_pending:
                status, wake_at = RunStatus.PENDING, now  # no lost wake-up
            if status.terminal:
                wake_at = None
                self._close_outstanding(t, run.run_id)
            self._write("UPDATE run commit")
            t.runs[key] = replace(
                run,
                status=status,
                revision=revision,
                claim_owner=None,
                claim_expires_at=None,
                wake_at=wake_at,
                wakeup_pending=False,
                output=v.copy_json(decision.output),
                error=v.copy_json(decision.error),
                updated_at=now,
            )
            return Outcome.COMMITTED

    def _check_consumable(self, t: Tables, run_id: str, d: Decision) -> None:
        def owned(table: Table[int, tuple[str, Any]], ident: str) -> Any:
            if not ident.isdigit():
                return None
            row = table.get(int(ident))
            if row is None or row[0] != self.tenant_id or row[1].run_id != run_id:
                return None
            return row[1]

        for sid in d.consume_signals:
            sig = owned(t.signals, sid)
            if not isinstance(sig, Signal) or sig.status is not SignalStatus.PENDING:
                raise InvalidDecision(f"signal {sid!r} is not a pending signal of run {run_id!r}")
        for cid in d.consume_commands:
            cmd = owned(t.commands, cid)
            if (
                not isinstance(cmd, Command)
                or cmd.status not in (CommandStatus.COMPLETED, CommandStatus.FAILED)
                or cmd.consumed
            ):
                raise InvalidDecision(
                    f"command {cid!r} has no unconsumed result for run {run_id!r}"
                )
        for tid in d.consume_timers:
            tmr = owned(t.timers, tid)
            if not isinstance(tmr, Timer) or tmr.status is not TimerStatus.FIRED:
                raise InvalidDecision(f"timer {tid!r} is not a fired timer of run {run_id!r}")
        for tid in d.cancel_timers:
            tmr = owned(t.timers, tid)
            if not isinstance(tmr, Timer) or tmr.status not in (
                TimerStatus.SCHEDULED, TimerStatus.FIRED
            ):
                raise InvalidDecision(f"timer {tid!r} is not an open timer of run {run_id!r}")
        existing = {e.operation_key for e in t.history.get((self.tenant_id, run_id), ())}
        for e in d.events:
            if e.operation_key is not None and e.operation_key in existing:
                raise InvalidDecision(
                    f"an event with operation key {e.operation_key!r} is already in the history"
                )

    def _close_outstanding(self, t: Tables, run_id: str) -> None:
        """A run going terminal cancels its unfinished commands and unfired timers."""
        owner = (self.tenant_id, run_id)
        for cid in t.commands.of_owner(owner):
            tenant, cmd = t.commands[cid]
            if cmd.status in (
                CommandStatus.PENDING, CommandStatus.CLAIMED
            ):
                self._write("UPDATE command cancelled")
                t.commands[cid] = (tenant, replace(
                    cmd, status=CommandStatus.CANCELLED, claim_expires_at=None))
        for tid in t.timers.of_owner(owner):
            tenant, tmr = t.timers[tid]
            if tmr.status is TimerStatus.SCHEDULED:
                self._write("UPDATE timer cancelled")
                t.timers[tid] = (tenant, replace(tmr, status=TimerStatus.CANCELLED))

    # -- commands ---------------------------------------------------------
    def claim_commands(
        self,
        worker_id: str,
        lease: timedelta,
        limit: int = 1,
        queues: Sequence[str] | None = None,
    ) -> list[CommandClaim]:
        lease_us, limit = v.check_claim(worker_id, lease, limit)
        queues = v.check_queues(queues)
        with self._unit() as t:
            now = self._now()
            held = self._held_by_others()  # skipped, as SKIP LOCKED skips them
            due = [
                (None, cid, t.commands[cid][1])
                for cid in t.commands.take_due(
                    self.tenant_id, now, limit,
                    lambda cid, row: (queues is None or row[1].queue in queues) and ("commands", cid) not in held,
                )
            ]
            expires = from_micros(to_micros(now) + lease_us)
            claims = []
            for _, cid, cmd in due[:limit]:
                self._write("UPDATE command claim")
                cmd = replace(
                    cmd,
                    status=CommandStatus.CLAIMED,
                    attempt=cmd.attempt + 1,
                    claim_owner=worker_id,
                    claim_generation=cmd.claim_generation + 1,
                    claim_expires_at=expires,
                )
                t.commands[cid] = (self.tenant_id, cmd)
                claims.append(detached(CommandClaim(
                    cmd.command_id, cmd.run_id, worker_id, cmd.claim_generation, expires,
                    cmd.attempt, cmd.name, cmd.queue, cmd.input, cmd.operation_key,
                )))
            return claims

    def _command_fence(
        self, t: Tables, claim: CommandClaim, now: datetime
    ) -> tuple[Command | None, Outcome | None]:
        row = t.commands.get(int(claim.command_id)) if claim.command_id.isdigit() else None
        if row is None or row[0] != self.tenant_id:
            return None, Outcome.NOT_FOUND
        cmd = row[1]
        if cmd.status.terminal:
            return cmd, Outcome.TERMINAL
        if cmd.status is not CommandStatus.CLAIMED or not _lease_live(
            cmd.claim_owner, cmd.claim_generation, cmd.claim_expires_at, claim, now
        ):
            return cmd, Outcome.CLAIM_LOST
        return cmd, None

    def heartbeat_command(self, claim: CommandClaim, lease: timedelta) -> Outcome:
        lease_us = v.check_lease(lease)
        with self._unit() as t:
            now = self._now()
            cmd, refused = self._command_fence(t, claim, now)
            if refused:
                return refused
            assert cmd is not None
            self._write("UPDATE command heartbeat")
            t.commands[int(cmd.command_id)] = (self.tenant_id, replace(
                cmd, claim_expires_at=from_micros(to_micros(now) + lease_us)))
            return Outcome.RENEWED

    def complete_command(self, claim: CommandClaim, result: JSON = None) -> Outcome:
        v.check_json("result", result)
        with self._unit() as t:
            now = self._now()
            cmd, refused = self._command_fence(t, claim, now)
            if refused:
                return refused
            assert cmd is not None
            self._write("UPDATE command completed")
            t.commands[int(cmd.command_id)] = (self.tenant_id, replace(
                cmd, status=CommandStatus.COMPLETED, result=v.copy_json(result), claim_expires_at=None))
            self._wake_run(t, cmd.run_id, now)
            return Outcome.COMPLETED

    def fail_command(
        self,
        claim: CommandClaim,
        error: JSON = None,
        retry_after: timedelta | None = None,
        retryable: bool = True,
    ) -> Outcome:
        v.check_json("error", error)
        delay_us = 0 if retry_after is None else v.check_nonnegative("retry_after", retry_after)
        with self._unit() as t:
            now = self._now()
            cmd, refused = self._command_fence(t, claim, now)
            if refused:
                return refused
            assert cmd is not None
            if retryable and cmd.attempt < cmd.max_attempts:
                self._write("UPDATE command retry")
                t.commands[int(cmd.command_id)] = (self.tenant_id, replace(
                    cmd, status=CommandStatus.PENDING, error=v.copy_json(error), claim_owner=None,
                    claim_expires_at=None, not_before=from_micros(to_micros(now) + delay_us)))
                return Outcome.RETRY_SCHEDULED
            self._write("UPDATE command failed")
            t.commands[int(cmd.command_id)] = (self.tenant_id, replace(
                cmd, status=CommandStatus.FAILED, error=v.copy_json(error), claim_expires_at=None))
            self._wake_run(t, cmd.run_id, now)
            return Outcome.FAILED

    def get_command(self, command_id: str) -> Command | None:
        with self._read() as t:
            row = t.commands.get(int(command_id)) if command_id.isdigit() else None
            return detached(row[1]) if row is not None and row[0] == self.tenant_id else None

    def list_commands(self, run_id: str) -> list[Command]:
        with self._read() as t:
            return detached_all(self._commands_of(t, run_id))

    # -- signals ----------------------------------------------------------
    def send_signal(self, run_id: str, name: str, payload: JSON, dedup_key: str) -> SignalReceipt:
        v.check_text("run_id", run_id, v.MAX_RUN_ID)
        v.check_text("name", name, v.MAX_NAME)
        v.check_json("payload", payload)
        v.check_text("dedup_key", dedup_key, v.MAX_KEY)
        with self._unit() as t:
            run = t.runs.get((self.tenant_id, run_id))
            if run is None:
                return SignalReceipt(Outcome.NOT_FOUND)
            for existing in self._signals_of(t, run_id):
                if existing.dedup_key == dedup_key:
                    return detached(SignalReceipt(Outcome.DUPLICATE, existing))
            if run.status.terminal:
                return SignalReceipt(Outcome.TERMINAL)
            now = self._now()
            self._write("INSERT signal")
            sid = t.new_id("signals")
            signal = Signal(str(sid), run_id, name, v.copy_json(payload), dedup_key, SignalStatus.PENDING, None, now)
            t.signals[sid] = (self.tenant_id, signal)
            self._wake_run(t, run_id, now)
            return detached(SignalReceipt(Outcome.COMMITTED, signal))

    def list_signals(self, run_id: str) -> list[Signal]:
        with self._read() as t:
            return detached_all(self._signals_of(t, run_id))

    # -- timers -----------------------------------------------------------
    def fire_due_timers(self, limit: int = 100) -> list[Timer]:
        v.check_limit(limit)
        with self._unit() as t:
            now = self._now()
            due = [(None, tid, t.timers[tid][1]) for tid in t.timers.take_due(self.tenant_id, now, limit)]
            fired = []
            for _, tid, tmr in due[:limit]:
                self._write("UPDATE timer fired")
                tmr = replace(tmr, status=TimerStatus.FIRED)
                t.timers[tid] = (self.tenant_id, tmr)
                self._wake_run(t, tmr.run_id, now)
                fired.append(tmr)
            return fired

    def list_timers(self, run_id: str) -> list[Timer]:
        with self._read() as t:
            return self._timers_of(t, run_id)

    # -- helpers ----------------------------------------------------------
    def _wake_run(self, t: Tables, run_id: str, now: datetime) -> None:
        key = (self.tenant_id, run_id)
        run = t.runs[key]
        if not run.status.terminal:
            self._write("UPDATE run runnable")
            t.runs[key] = _made_runnable(run, now)

    def _commands_of(self, t: Tables, run_id: str) -> list[Command]:
        return [t.commands[cid][1] for cid in t.commands.of_owner((self.tenant_id, run_id))]

    def _signals_of(self, t: Tables, run_id: str) -> list[Signal]:
        return [t.signals[sid][1] for sid in t.signals.of_owner((self.tenant_id, run_id))]

    def _timers_of(self, t: Tables, run_id: str) -> list[Timer]:
        return [t.timers[tid][1] for tid in t.timers.of_owner((self.tenant_id, run_id))]


def _lease_live(
    owner: str | None,
    generation: int,
    expires_at: datetime | None,
    claim: RunClaim | CommandClaim,
    now: datetime,
) -> bool:
    """The fence: same owner, same generation, and ``now`` strictly before expiry."""
    return (
        owner == claim.worker_id
        and generation == claim.generation
        and expires_at is not None
        and now < expires_at
    )


def _run_due_at(run: Run) -> datetime | None:
    """When a run becomes claimable: its lease expiry while running, else its wake time."""
    if run.status.terminal:
        return None
    if run.status is RunStatus.RUNNING:
        return run.claim_expires_at
    return run.wake_at


def _command_due_at(cmd: Command) -> datetime | None:
    if cmd.status is CommandStatus.PENDING:
        return cmd.not_before
    if cmd.status is CommandStatus.CLAIMED:
        return cmd.claim_expires_at
    return None


def _made_runnable(run: Run, now: datetime) -> Run:
    """Input arrived: a blocked run (or a pending one waiting for later) runs now; a running one is marked."""
    if run.status is RunStatus.RUNNING:
        return replace(run, wakeup_pending=True, updated_at=now)
    wake_at = now if run.wake_at is None or run.wake_at > now else run.wake_at
    return replace(run, status=RunStatus.PENDING, wake_at=wake_at, updated_at=now)


def _resolve_wake(decision: Decision, now: datetime) -> datetime | None:
    if decision.wake_at is not None:
        return ensure_utc(decision.wake_at)
    if decision.wake_after is not None:
        return now + decision.wake_after
    return None
