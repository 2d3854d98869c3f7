"""Seeded bugs in the PostgreSQL adapter: the plausible PostgreSQL mistakes the suite must catch.

Each bug is a small subclass of the real adapter (its dialect or its store).
``make_backend`` discovers the server like the adapter does and raises
:class:`~kit.contract.errors.BackendUnavailable` when none answers, so the
seeded-bug tests skip (or fail, under ``KIT_REQUIRE_BACKENDS``) cleanly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

from adapters._sql.pipeline import Pending, Sent
from adapters.postgres import PostgresBackend, PostgresDialect, PostgresStore, discover
from kit.clock import from_micros, to_micros
from kit.contract import Backend, Decision, Definition, Outcome, Run, RunClaim
from kit.contract import validation as v
from tests.seeded_bugs._base import SeededBug, rewrite_sql

__all__ = ["POSTGRES_BUGS"]


def _backend(
    store_cls: type[PostgresStore] = PostgresStore, dialect: PostgresDialect | None = None
) -> Callable[[], Backend]:
    def make() -> Backend:
        class Variant(PostgresBackend):
            store_class = store_cls

        if dialect is not None:
            Variant.dialect = dialect
        return cast(Backend, discover(backend_class=Variant))

    return make


# -- claims -----------------------------------------------------------------
class NoSkipLocked(PostgresDialect):
    """Claims lock their candidates FOR UPDATE without SKIP LOCKED: claimers queue."""

    skip_locked = " FOR UPDATE"


class ClaimSubqueryRescanned(PostgresStore):
    """The textbook claim ``UPDATE ... WHERE run_id IN (SELECT ... LIMIT n FOR UPDATE
    SKIP LOCKED)``: planned as the inner side of a nested loop, the subquery re-runs
    per outer row, skips the rows this UPDATE already changed and claims past the limit."""

    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        lease_us = v.check_lease(lease)

        def claim(cur: Any) -> list[RunClaim]:
            now = self._now_us(cur)
            expires = now + lease_us
            picked = self._candidates("kit_runs", "run_id", "tenant_id = ? AND due_at <= ?", "due_at, run_id", limit)
            rows = self._exec(
                cur,
                "UPDATE kit_runs SET status = 'running', claim_owner = ?, claim_generation = claim_generation + 1, "
                "claim_expires_at = ?, due_at = ?, wake_at = NULL, wakeup_pending = 0, updated_at = ? "
                f"WHERE tenant_id = ? AND run_id IN ({picked}) "
                "RETURNING run_id, claim_generation, revision",
                (worker_id, expires, expires, now, self.tenant_id, self.tenant_id, now),
            ).fetchall()
            at = from_micros(expires)
            return [RunClaim(r[0], worker_id, int(r[1]), at, int(r[2])) for r in sorted(rows)]

        return self._write(claim)


# -- clock ------------------------------------------------------------------
class NowNotClockTimestamp(PostgresDialect):
    """The store clock is now(): frozen at the start of the transaction."""

    database_now = "(EXTRACT(EPOCH FROM now()) * 1000000)::bigint"


# -- fences -----------------------------------------------------------------
class _FenceWithoutGeneration(PostgresStore):
    """The fence checks owner and live lease but forgets the claim generation."""

    def run_fenced(self, run: Run, claim: RunClaim, now: int) -> bool:
        return (
            run.claim_owner == claim.worker_id
            and run.claim_expires_at is not None
            and now < to_micros(run.claim_expires_at)
        )


# ... in the Python fence and in the final UPDATE's WHERE clause alike.
FenceWithoutGeneration: type[PostgresStore] = rewrite_sql(
    _FenceWithoutGeneration, {"AND claim_generation = ?": "AND ? IS NOT NULL"}, "FenceWithoutGeneration"
)


# -- insert-if-absent -------------------------------------------------------
class NoReselectAfterOnConflict(PostgresStore):
    """ensure_definition() trusts ``ON CONFLICT DO NOTHING RETURNING``: on a conflict
    nothing is returned, and instead of re-selecting it answers with what it tried to
    insert."""

    def ensure_definition(self, name: str, version: str, digest: str, body: bytes) -> Definition:
        v.check_digest(digest, body)

        def ensure(cur: Any) -> Definition:
            now = self._now_us(cur)
            self._exec(
                cur,
                "INSERT INTO kit_definitions (tenant_id, name, version, digest, body, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING created_at",
                (self.tenant_id, name, version, digest, bytes(body), now),
            ).fetchone()  # None on a conflict: the bug is not re-selecting the stored row
            return Definition(name, version, digest, bytes(body), from_micros(now))

        return self._write(ensure)


# -- only interleavings show these ---------------------------------------------
TimerFiredTwice = rewrite_sql(
    PostgresStore,
    {"SET status = 'fired' WHERE tenant_id = ? AND timer_id = ? AND status = 'scheduled' AND fire_at <= ?":
     "SET status = 'fired' WHERE tenant_id = ? AND timer_id = ? AND fire_at <= ?"},
    "TimerFiredTwice",
)
"""The firing UPDATE forgets ``status = 'scheduled'``: two concurrent firers both fire one timer."""


class CommitDecidesOnUnlockedRead(PostgresStore):
    """commit_decision() reads the run with a plain SELECT (no FOR UPDATE) and checks the fence on that read:
    two deliveries of one decision both pass the fence before either writes, and the second one then hits
    the first one's history rows (a unique violation) or a fenced UPDATE that matches nothing."""

    _in_commit = False

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        self._in_commit = True
        try:
            return super().commit_decision(claim, expected_revision, decision)
        finally:
            self._in_commit = False

    def _lock_run(self, cur: Any, run_id: str) -> Callable[[], Run | None]:
        if not self._in_commit:
            return super()._lock_run(cur, run_id)
        run = self._run(cur, run_id)
        return lambda: run


class WakeupMarkReadBeforeLock(PostgresStore):
    """commit_decision() reads the run's wake-up mark before it locks the run, then decides blocked or
    pending on that early read: a signal committed in between is lost."""

    _in_commit = False

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        self._in_commit = True
        try:
            return super().commit_decision(claim, expected_revision, decision)
        finally:
            self._in_commit = False

    def _lock_run(self, cur: Any, run_id: str) -> Callable[[], Run | None]:
        if not self._in_commit:
            return super()._lock_run(cur, run_id)
        early = self._run(cur, run_id)
        locked = super()._lock_run(cur, run_id)

        def read() -> Run | None:
            run = locked()
            return run if early is None or run is None else replace(run, wakeup_pending=early.wakeup_pending)

        return read


class ClockReadBeforeLock(PostgresStore):
    """Fenced writes read the store clock first and lock the run after: a write that waited for the lock
    judges its lease on an instant from before the wait, and a lease that expired meanwhile still passes."""

    _early: Any = None

    def _lock_run(self, cur: Any, run_id: str) -> Callable[[], Run | None]:
        self._early = self._query(cur, f"SELECT {self._now_sql}").fetchone()  # sent before the lock
        return super()._lock_run(cur, run_id)

    def _clock(self, cur: Any) -> Any:
        early, self._early = self._early, None
        return super()._clock(cur) if early is None else Pending.of(Sent([early], 1))


POSTGRES_BUGS: tuple[SeededBug, ...] = (
    SeededBug("no_skip_locked", "claims lock FOR UPDATE without SKIP LOCKED, so claimers wait for each other",
              _backend(dialect=NoSkipLocked()),
              ("claims.claimers_skip_rows_locked_by_an_open_claim",), "claims", backend="postgres"),
    SeededBug("claim_subquery_rescanned", "claim as UPDATE ... WHERE run_id IN (SELECT ... LIMIT n SKIP LOCKED)",
              _backend(ClaimSubqueryRescanned),
              ("claims.claim_respects_limit",), "claims", backend="postgres"),
    SeededBug("now_not_clock_timestamp", "the store clock is now(), frozen at transaction start",
              _backend(dialect=NowNotClockTimestamp()),
              ("clock.database_clock_moves_inside_a_transaction",), "clock", backend="postgres"),
    SeededBug("fence_without_generation", "the fence forgets the claim generation", _backend(FenceWithoutGeneration),
              ("claims.stale_generation_with_same_owner_is_refused",), "claims", backend="postgres"),
    SeededBug("no_reselect_after_on_conflict", "ON CONFLICT DO NOTHING without the re-select: the caller's row is returned",
              _backend(NoReselectAfterOnConflict),
              ("definitions.racing_first_calls_store_one_row", "definitions.ensure_never_overwrites"),
              "definitions", backend="postgres"),
    SeededBug("commit_decides_on_unlocked_read", "the commit checks its fence on a plain read: duplicate deliveries "
              "both pass it", _backend(CommitDecidesOnUnlockedRead),
              ("commit.overlapping_duplicate_deliveries_commit_once",), "overlapping_duplicate", backend="postgres"),
    SeededBug("wakeup_mark_read_before_lock", "the commit reads the wake-up mark before locking the run",
              _backend(WakeupMarkReadBeforeLock),
              ("commit.waking_write_beside_a_blocking_commit_is_not_lost",), "waking_write_beside", backend="postgres"),
    SeededBug("clock_read_before_lock", "fenced writes read the store clock before they lock the run",
              _backend(ClockReadBeforeLock),
              ("commit.a_fenced_write_judges_its_lease_on_the_clock_after_its_lock_wait",), "lock_wait",
              backend="postgres"),
    SeededBug("timer_fired_twice", "two concurrent firers both fire the same timer", _backend(TimerFiredTwice),
              ("timers.concurrent_firers_fire_each_timer_once",), "timers", backend="postgres"),
)
