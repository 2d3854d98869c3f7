"""Decision claims: generations, store-clock leases lost exactly at expiry, fencing, skipping."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial

from kit.conformance._harness import LEASE, AreaChecks, Threads, requires
from kit.contract import (
    Capability,
    Decision,
    NewCommand,
    NewTimer,
    Promise,
    RunClaim,
    RunStatus,
    Snapshot,
    Storage,
)
from kit.contract.outcomes import Outcome

__all__ = ["ClaimChecks"]

US = timedelta(microseconds=1)


class ClaimChecks(AreaChecks):
    area = "claims"

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_claim_sets_owner_generation_and_lease(self, store: Storage) -> None:
        """A claim sets the owner, bumps the generation by exactly one, and expires at store now + lease."""
        self.start(store)
        now = store.now()
        claim = self.claim_one(store, "w1", timedelta(seconds=30, microseconds=7))
        assert (claim.run_id, claim.worker_id, claim.generation, claim.revision) == ("run-1", "w1", 1, 0)
        assert claim.expires_at == now + timedelta(seconds=30, microseconds=7)
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.RUNNING
        assert (run.claim_owner, run.claim_generation, run.claim_expires_at) == ("w1", 1, claim.expires_at)

    def test_claim_respects_limit(self, store: Storage) -> None:
        """claim_runs() claims at most `limit` runs."""
        ref = self.define(store)
        for i in range(5):
            store.start_run(f"run-{i}", ref)
        assert len(store.claim_runs("w1", LEASE, limit=3)) == 3
        assert len(store.claim_runs("w2", LEASE, limit=3)) == 2

    @requires(Capability.TEST_CLOCK)
    def test_claim_takes_oldest_due_first(self, store: Storage) -> None:
        """Claims go oldest due first, ties broken by run id."""
        ref = self.define(store)
        for run_id in ("c", "a"):
            store.start_run(run_id, ref)
        store.advance_test_clock(timedelta(seconds=1))
        store.start_run("0-late", ref)
        assert [c.run_id for c in store.claim_runs("w1", LEASE, limit=3)] == ["a", "c", "0-late"]

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_live_claim_blocks_other_claimers(self, store: Storage) -> None:
        """A run under a live claim is not claimable by anyone."""
        self.started_and_claimed(store)
        store.advance_test_clock(LEASE - US)
        assert store.claim_runs("w2", LEASE) == []

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_lease_is_live_one_microsecond_before_expiry(self, store: Storage) -> None:
        """One microsecond before expiry the lease is live: renewal succeeds."""
        claim = self.started_and_claimed(store)
        store.advance_test_clock(LEASE - US)
        assert store.renew_run_claim(claim, LEASE) is Outcome.RENEWED

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_lease_is_lost_exactly_at_expiry(self, store: Storage) -> None:
        """At exactly the expiry instant the lease is lost: renew and commit are refused, others may claim."""
        claim = self.started_and_claimed(store)
        store.advance_test_clock(LEASE)
        before = self.observed(store)
        assert store.renew_run_claim(claim, LEASE) is Outcome.CLAIM_LOST
        assert store.commit_decision(claim, 0, Decision(RunStatus.COMPLETED)) is Outcome.CLAIM_LOST
        assert self.observed(store) == before
        taken = self.claim_one(store, "w2")
        assert (taken.run_id, taken.generation) == ("run-1", 2)

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_expired_claim_is_reclaimed_with_next_generation(self, store: Storage) -> None:
        """An expired claim is taken over with generation + 1 and a fresh lease."""
        self.started_and_claimed(store)
        store.advance_test_clock(timedelta(hours=1))
        now = store.now()
        taken = self.claim_one(store, "w2")
        assert (taken.worker_id, taken.generation, taken.expires_at) == ("w2", 2, now + LEASE)

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_generations_only_grow(self, store: Storage) -> None:
        """Every claim bumps the generation by one: release, expiry and commits never lower it."""
        self.start(store)
        seen = []
        claim = self.claim_one(store)
        seen.append(claim.generation)
        store.release_run_claim(claim)
        claim = self.claim_one(store)
        seen.append(claim.generation)
        store.advance_test_clock(LEASE)
        claim = self.claim_one(store, "w2")
        seen.append(claim.generation)
        store.commit_decision(claim, 0, Decision(RunStatus.PENDING))
        claim = self.claim_one(store, "w3")
        seen.append(claim.generation)
        assert seen == [1, 2, 3, 4]
        assert store.get_run("run-1").claim_generation == 4  # type: ignore[union-attr]

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_stale_generation_commit_changes_nothing(self, store: Storage) -> None:
        """A commit from an older generation is refused with claim_lost and changes nothing at all."""
        old = self.started_and_claimed(store)
        store.advance_test_clock(LEASE)
        self.claim_one(store, "w2")
        before = self.observed(store)
        decision = Decision(RunStatus.COMPLETED, output={"zombie": True})
        assert store.commit_decision(old, 0, decision) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_stale_generation_with_same_owner_is_refused(self, store: Storage) -> None:
        """A worker re-claiming a run cannot commit with its own earlier generation."""
        old = self.started_and_claimed(store, worker="w1")
        store.advance_test_clock(LEASE)
        self.claim_one(store, "w1")
        before = self.observed(store)
        assert store.commit_decision(old, 0, Decision(self.waiting_status())) is Outcome.CLAIM_LOST
        assert store.renew_run_claim(old, LEASE) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_stale_renewal_changes_nothing(self, store: Storage) -> None:
        """A renewal from an older generation is refused and leaves the new lease as it was."""
        old = self.started_and_claimed(store)
        store.advance_test_clock(LEASE)
        self.claim_one(store, "w2")
        before = self.observed(store)
        assert store.renew_run_claim(old, timedelta(hours=1)) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_expired_commit_refused_without_newer_claim(self, store: Storage) -> None:
        """A commit after expiry is refused even when nobody has claimed the run since."""
        claim = self.started_and_claimed(store)
        store.advance_test_clock(LEASE + US)
        before = self.observed(store)
        assert store.commit_decision(claim, 0, Decision(RunStatus.COMPLETED)) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    @requires(Promise.GENERATION_FENCING, Promise.LEASES)
    def test_other_owner_is_refused(self, store: Storage) -> None:
        """A claim naming another worker, even with the current generation, is refused."""
        claim = self.started_and_claimed(store)
        forged = replace(claim, worker_id="intruder")
        before = self.observed(store)
        assert store.commit_decision(forged, 0, Decision(RunStatus.COMPLETED)) is Outcome.CLAIM_LOST
        assert store.renew_run_claim(forged, LEASE) is Outcome.CLAIM_LOST
        assert store.release_run_claim(forged) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_renewal_extends_from_store_now(self, store: Storage) -> None:
        """Renewal sets expiry to store now + the new lease."""
        claim = self.started_and_claimed(store)
        store.advance_test_clock(timedelta(seconds=10))
        now = store.now()
        assert store.renew_run_claim(claim, timedelta(seconds=45)) is Outcome.RENEWED
        assert store.get_run("run-1").claim_expires_at == now + timedelta(seconds=45)  # type: ignore[union-attr]
        store.advance_test_clock(timedelta(seconds=44))
        assert store.claim_runs("w2", LEASE) == []

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_renewal_writing_unchanged_values_is_renewed(self, store: Storage) -> None:
        """A renewal writing the values already stored (same instant, same lease) is renewed, not judged lost."""
        claim = self.started_and_claimed(store)
        assert store.renew_run_claim(claim, LEASE) is Outcome.RENEWED
        assert store.renew_run_claim(claim, LEASE) is Outcome.RENEWED
        assert store.get_run("run-1").claim_expires_at == claim.expires_at  # type: ignore[union-attr]

    @requires(Promise.LEASES, Promise.GENERATION_FENCING)
    def test_release_makes_run_claimable_at_once(self, store: Storage) -> None:
        """release_run_claim() gives the run back: pending, unowned, claimable immediately."""
        claim = self.started_and_claimed(store)
        assert store.release_run_claim(claim) is Outcome.COMMITTED
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.PENDING and run.claim_owner is None
        assert self.claim_one(store, "w2").generation == 2

    @requires(Promise.LEASES)
    def test_release_makes_no_decision(self, store: Storage) -> None:
        """A release writes no decision: revision and history stay, and the next claim commits at that revision."""
        claim = self.started_and_claimed(store)
        assert store.release_run_claim(claim) is Outcome.COMMITTED
        run = store.get_run("run-1")
        assert run is not None and run.revision == 0, "release bumped the revision: it made a decision"
        assert store.get_history("run-1") == [], "release appended to the history"
        again = self.claim_one(store, "w2")
        assert again.revision == 0
        assert store.commit_decision(again, 0, Decision(RunStatus.COMPLETED)) is Outcome.COMMITTED

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_stale_release_changes_nothing(self, store: Storage) -> None:
        """A release from an older generation is refused and leaves the new claim in place."""
        old = self.started_and_claimed(store)
        store.advance_test_clock(LEASE)
        self.claim_one(store, "w2")
        before = self.observed(store)
        assert store.release_run_claim(old) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    def test_load_claimed_returns_one_snapshot(self, store: Storage) -> None:
        """load_claimed() returns the run, its history and the input waiting for it."""
        claim = self.started_and_claimed(store)
        snapshot = store.load_claimed(claim)
        assert isinstance(snapshot, Snapshot)
        assert snapshot.run == store.get_run("run-1")
        assert snapshot.history == () and snapshot.signals == () and snapshot.command_results == ()

    @requires(Promise.COMMANDS, Promise.SIGNALS, Promise.TIMERS, Promise.WAKE_ON_INPUT, Capability.TEST_CLOCK)
    def test_load_claimed_returns_exactly_the_waiting_input(self, store: Storage) -> None:
        """A snapshot holds the run's completed and failed unconsumed commands, pending signals and fired
        timers: nothing pending, claimed, scheduled or consumed, and nothing of another run."""
        for run_id in ("run-1", "run-2"):
            claim = self.started_and_claimed(store, run_id)
            commands = (NewCommand(f"{run_id}-ok", "do"), NewCommand(f"{run_id}-bad", "do", max_attempts=1),
                        NewCommand(f"{run_id}-retry", "do"), NewCommand(f"{run_id}-held", "do"))
            timers = (NewTimer(f"{run_id}-soon", delay=timedelta(seconds=10)),
                      NewTimer(f"{run_id}-late", delay=timedelta(hours=1)))
            decision = Decision(RunStatus.BLOCKED, commands=commands, timers=timers)
            assert store.commit_decision(claim, 0, decision) is Outcome.COMMITTED
        held = {c.operation_key: c for c in store.claim_commands("worker", LEASE, limit=8)}
        assert len(held) == 8, f"expected the 8 commands to be claimable, got {sorted(held)}"
        for run_id in ("run-1", "run-2"):
            assert store.complete_command(held[f"{run_id}-ok"], {"r": run_id}) is Outcome.COMPLETED
            assert store.fail_command(held[f"{run_id}-bad"], {"e": 1}, retryable=False) is Outcome.FAILED
            retry = store.fail_command(held[f"{run_id}-retry"], {"e": 2}, retry_after=timedelta(hours=1))
            assert retry is Outcome.RETRY_SCHEDULED
            store.send_signal(run_id, "go", {}, f"{run_id}-a")
            store.send_signal(run_id, "go", {}, f"{run_id}-b")
        store.advance_test_clock(timedelta(seconds=10))
        assert len(store.fire_due_timers()) == 2

        def waiting(snapshot: Snapshot | Outcome) -> tuple[list[str], list[str], list[str]]:
            assert isinstance(snapshot, Snapshot), f"load_claimed() refused a live claim: {snapshot}"
            return (sorted(c.operation_key for c in snapshot.command_results),
                    sorted(s.dedup_key for s in snapshot.signals), sorted(t.operation_key for t in snapshot.timers))

        claims = {c.run_id: c for c in store.claim_runs("w1", LEASE, limit=2)}
        assert sorted(claims) == ["run-1", "run-2"], "input arrived for both runs: both must be claimable"
        assert waiting(store.load_claimed(claims["run-2"])) == (["run-2-bad", "run-2-ok"], ["run-2-a", "run-2-b"],
                                                              ["run-2-soon"])
        claim = claims["run-1"]
        snapshot = store.load_claimed(claim)
        assert waiting(snapshot) == (["run-1-bad", "run-1-ok"], ["run-1-a", "run-1-b"], ["run-1-soon"])
        assert isinstance(snapshot, Snapshot)
        ok = next(c.command_id for c in snapshot.command_results if c.operation_key == "run-1-ok")
        signal = next(s.signal_id for s in snapshot.signals if s.dedup_key == "run-1-a")
        consume = Decision(RunStatus.PENDING, consume_commands=(ok,), consume_signals=(signal,),
                           consume_timers=tuple(t.timer_id for t in snapshot.timers))
        assert store.commit_decision(claim, 1, consume) is Outcome.COMMITTED
        later = store.load_claimed(self.claim_one(store))  # run-2 is still claimed: this is run-1 again
        assert waiting(later) == (["run-1-bad"], ["run-1-b"], []), "consumed input came back in a snapshot"

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_load_claimed_refuses_stale_claim(self, store: Storage) -> None:
        """load_claimed() with a lost claim returns claim_lost instead of a snapshot."""
        claim = self.started_and_claimed(store)
        store.advance_test_clock(LEASE)
        assert store.load_claimed(claim) is Outcome.CLAIM_LOST

    def test_fenced_calls_on_absent_run_are_not_found(self, store: Storage) -> None:
        """Fenced calls naming an unknown run return not_found."""
        ghost = RunClaim("ghost", "w1", 1, store.now() + LEASE, 0)
        assert store.commit_decision(ghost, 0, Decision(RunStatus.COMPLETED)) is Outcome.NOT_FOUND
        assert store.load_claimed(ghost) is Outcome.NOT_FOUND
        if self.promised(Promise.LEASES):
            assert store.renew_run_claim(ghost, LEASE) is Outcome.NOT_FOUND
            assert store.release_run_claim(ghost) is Outcome.NOT_FOUND

    def test_fenced_calls_on_terminal_run_are_terminal(self, store: Storage) -> None:
        """Fenced calls on a closed run return terminal and change nothing."""
        claim = self.completed(store)
        before = self.observed(store)
        assert store.load_claimed(claim) is Outcome.TERMINAL
        if self.promised(Promise.LEASES):
            assert store.renew_run_claim(claim, LEASE) is Outcome.TERMINAL
            assert store.release_run_claim(claim) is Outcome.TERMINAL
        assert self.observed(store) == before

    @requires(Capability.TEST_CLOCK)
    def test_terminal_runs_are_never_claimed(self, store: Storage) -> None:
        """A completed run is never claimable again, however late it gets."""
        self.completed(store)
        store.advance_test_clock(timedelta(days=365))
        assert store.claim_runs("w2", LEASE, limit=10) == []

    @requires(Promise.WAKE_ON_INPUT, Capability.TEST_CLOCK)
    def test_blocked_run_is_not_claimable(self, store: Storage) -> None:
        """A blocked run without a deadline is never claimable by time alone."""
        self.blocked(store)
        store.advance_test_clock(timedelta(days=30))
        assert store.claim_runs("w2", LEASE) == []

    @requires(Promise.TIMERS, Capability.TEST_CLOCK)
    def test_pending_run_wakes_exactly_at_wake_time(self, store: Storage) -> None:
        """A run committed pending with wake_after is claimable at exactly that instant, not before."""
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, 0, Decision(RunStatus.PENDING, wake_after=timedelta(seconds=10)))
        store.advance_test_clock(timedelta(seconds=10) - US)
        assert store.claim_runs("w2", LEASE) == []
        store.advance_test_clock(US)
        assert self.claim_one(store, "w2").run_id == "run-1"

    @requires(Promise.WAKE_ON_INPUT, Promise.TIMERS, Capability.TEST_CLOCK)
    def test_blocked_run_wakes_at_its_deadline(self, store: Storage) -> None:
        """A blocked run with a wake_at deadline becomes claimable exactly at the deadline."""
        claim = self.started_and_claimed(store)
        deadline = store.now() + timedelta(minutes=5, microseconds=3)
        store.commit_decision(claim, 0, Decision(RunStatus.BLOCKED, wake_at=deadline))
        store.set_test_clock(deadline - US)
        assert store.claim_runs("w2", LEASE) == []
        store.set_test_clock(deadline)
        assert self.claim_one(store, "w2").run_id == "run-1"

    @requires(Capability.CONCURRENT_CONNECTIONS)
    def test_concurrent_claimers_never_double_claim(self, open_store: Callable[..., Storage]) -> None:
        """Claimers racing on their own connections never get the same run twice."""
        stores = [open_store() for _ in range(4)]
        ref = self.define(stores[0])
        for i in range(40):
            stores[0].start_run(f"run-{i:02d}", ref)

        def drain(store: Storage, worker: str) -> list[str]:
            got: list[str] = []
            while batch := store.claim_runs(worker, LEASE, limit=3):
                got.extend(c.run_id for c in batch)
            return got

        results = Threads.run([partial(drain, s, f"w{i}") for i, s in enumerate(stores)])
        claimed = [run_id for batch in results for run_id in batch]
        assert sorted(claimed) == [f"run-{i:02d}" for i in range(40)], "a run was claimed twice or lost"

    @requires(Capability.SKIP_LOCKED, Promise.UNIT_OF_WORK, Capability.CONCURRENT_CONNECTIONS)
    def test_claimers_skip_rows_locked_by_an_open_claim(self, open_store: Callable[..., Storage]) -> None:
        """While one claimer holds its claim transaction open, another gets a different run at once."""
        holder, other = open_store(), open_store()
        ref = self.define(holder)
        for run_id in ("run-a", "run-b", "run-c"):
            holder.start_run(run_id, ref)
        held, got = Threads.beside_open_transaction(
            holder, partial(holder.claim_runs, "holder", LEASE, 1), partial(other.claim_runs, "other", LEASE, 1),
            "the second claimer",
        )
        assert len(held) == 1 and len(got) == 1, f"expected one run each, got {held} and {got}"
        assert got[0].run_id != held[0].run_id, "two claimers got the same run"
