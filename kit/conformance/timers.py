"""Timers: due by the store clock, never early, fired at most once, safe with concurrent firers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial

from kit.conformance._harness import LEASE, AreaChecks, Threads, requires
from kit.contract import (
    Capability,
    Decision,
    NewTimer,
    Promise,
    RunStatus,
    Snapshot,
    Storage,
    TimerStatus,
)
from kit.contract.outcomes import Outcome

__all__ = ["TimerChecks"]

US = timedelta(microseconds=1)


@requires(Promise.TIMERS)
class TimerChecks(AreaChecks):
    area = "timers"

    def _pending_with_timer(self, store: Storage) -> None:
        """run-1 committed once, scheduling timer 'sleep' in 5 s, and is claimable again at once."""
        claim = self.started_and_claimed(store)
        decision = Decision(RunStatus.PENDING, timers=(NewTimer("sleep", delay=timedelta(seconds=5)),))
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED

    @requires(Capability.TEST_CLOCK)
    def test_timer_never_fires_early(self, store: Storage) -> None:
        """One microsecond before fire_at the timer does not fire."""
        self.blocked_on_timer(store, delay=timedelta(seconds=10))
        store.advance_test_clock(timedelta(seconds=10) - US)
        assert store.fire_due_timers() == []
        assert store.list_timers("run-1")[0].status is TimerStatus.SCHEDULED

    @requires(Capability.TEST_CLOCK)
    def test_timer_fires_exactly_at_fire_at(self, store: Storage) -> None:
        """At exactly fire_at the timer fires and its blocked run becomes runnable."""
        self.blocked_on_timer(store, delay=timedelta(seconds=10))
        store.advance_test_clock(timedelta(seconds=10))
        fired = store.fire_due_timers()
        assert [(t.operation_key, t.status) for t in fired] == [("sleep", TimerStatus.FIRED)]
        assert store.get_run("run-1").status is RunStatus.PENDING  # type: ignore[union-attr]

    @requires(Capability.TEST_CLOCK)
    def test_timer_fires_once(self, store: Storage) -> None:
        """A fired timer never fires again."""
        self.blocked_on_timer(store, delay=timedelta(seconds=1))
        store.advance_test_clock(timedelta(seconds=1))
        assert len(store.fire_due_timers()) == 1
        store.advance_test_clock(timedelta(days=1))
        assert store.fire_due_timers() == []

    @requires(Capability.TEST_CLOCK)
    def test_fire_respects_limit_and_due_order(self, store: Storage) -> None:
        """fire_due_timers(limit) fires at most `limit` timers, earliest fire_at first."""
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, 0, Decision(self.waiting_status(), timers=(
            NewTimer("c", delay=timedelta(seconds=3)), NewTimer("a", delay=timedelta(seconds=1)),
            NewTimer("b", delay=timedelta(seconds=2)),
        )))
        store.advance_test_clock(timedelta(seconds=5))
        assert [t.operation_key for t in store.fire_due_timers(limit=2)] == ["a", "b"]
        assert [t.operation_key for t in store.fire_due_timers(limit=2)] == ["c"]

    def test_absolute_fire_at_round_trips(self, store: Storage) -> None:
        """A timer given an absolute fire_at keeps it to the microsecond."""
        claim = self.started_and_claimed(store)
        at = store.now() + timedelta(days=2, microseconds=654321)
        store.commit_decision(claim, 0, Decision(self.waiting_status(), timers=(NewTimer("t", fire_at=at),)))
        assert store.list_timers("run-1")[0].fire_at == at

    @requires(Capability.TEST_CLOCK)
    def test_fired_timer_is_consumed_once(self, store: Storage) -> None:
        """A fired timer reaches exactly one decision."""
        self.blocked_on_timer(store, delay=timedelta(seconds=1))
        store.advance_test_clock(timedelta(seconds=1))
        store.fire_due_timers()
        claim = self.claim_one(store)
        snapshot = store.load_claimed(claim)
        assert isinstance(snapshot, Snapshot) and len(snapshot.timers) == 1
        decision = Decision(RunStatus.PENDING, consume_timers=(snapshot.timers[0].timer_id,))
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        assert store.list_timers("run-1")[0].status is TimerStatus.CONSUMED
        later = store.load_claimed(self.claim_one(store))
        assert isinstance(later, Snapshot) and later.timers == ()

    @requires(Capability.TEST_CLOCK)
    def test_cancelled_timer_never_fires(self, store: Storage) -> None:
        """A timer cancelled by a decision never fires."""
        self._pending_with_timer(store)
        timer = store.list_timers("run-1")[0]
        claim = self.claim_one(store)
        cancel = Decision(self.waiting_status(), cancel_timers=(timer.timer_id,))
        assert store.commit_decision(claim, claim.revision, cancel) is Outcome.COMMITTED
        store.advance_test_clock(timedelta(minutes=1))
        assert store.fire_due_timers() == []
        assert store.list_timers("run-1")[0].status is TimerStatus.CANCELLED

    @requires(Promise.WAKE_ON_INPUT, Capability.TEST_CLOCK)
    def test_timer_on_running_run_marks_it(self, store: Storage) -> None:
        """A timer firing while its run is claimed leaves the wake-up mark, not a second claim."""
        self._pending_with_timer(store)
        self.claim_one(store)
        store.advance_test_clock(timedelta(seconds=5))
        assert len(store.fire_due_timers()) == 1
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.RUNNING and run.wakeup_pending

    @requires(Capability.CONCURRENT_CONNECTIONS, Capability.TEST_CLOCK)
    def test_concurrent_firers_fire_each_timer_once(self, open_store: Callable[..., Storage]) -> None:
        """Firers racing on their own connections fire every due timer exactly once between them."""
        stores = [open_store() for _ in range(4)]
        ref = self.define(stores[0])
        for r in range(6):
            stores[0].start_run(f"run-{r}", ref)
        for claim in stores[0].claim_runs("w", LEASE, limit=6):
            stores[0].commit_decision(claim, 0, Decision(self.waiting_status(), timers=tuple(
                NewTimer(f"t{i}", delay=timedelta(seconds=1)) for i in range(4)
            )))
        stores[0].advance_test_clock(timedelta(seconds=1))

        def fire(store: Storage) -> list[tuple[str, str]]:
            got: list[tuple[str, str]] = []
            while batch := store.fire_due_timers(limit=3):
                got.extend((t.run_id, t.operation_key) for t in batch)
            return got

        results = Threads.run([partial(fire, s) for s in stores])
        fired = sorted(k for batch in results for k in batch)
        assert fired == sorted((f"run-{r}", f"t{i}") for r in range(6) for i in range(4)), "a timer fired twice or never"
