"""Commands: a durable, fenced work queue with attempts, retries and exactly-once results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial

from kit.conformance._harness import LEASE, AreaChecks, Threads, requires
from kit.contract import (
    Capability,
    CommandClaim,
    CommandStatus,
    Decision,
    NewCommand,
    Promise,
    RunStatus,
    Snapshot,
    Storage,
)
from kit.contract.outcomes import Outcome

__all__ = ["CommandChecks"]

US = timedelta(microseconds=1)


@requires(Promise.COMMANDS)
class CommandChecks(AreaChecks):
    area = "commands"

    def _one(self, store: Storage, worker: str = "worker", lease: timedelta = LEASE) -> CommandClaim:
        claims = store.claim_commands(worker, lease)
        assert len(claims) == 1, f"expected one claimable command, got {claims}"
        return claims[0]

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_claim_bumps_attempt_and_generation(self, store: Storage) -> None:
        """Claiming a command bumps its attempt and generation and sets a store-clock lease."""
        self.blocked_on_command(store, input={"n": 7})
        now = store.now()
        cmd = self._one(store)
        assert (cmd.attempt, cmd.generation, cmd.name, cmd.input, cmd.operation_key) == (1, 1, "do-work", {"n": 7}, "op-1")
        assert cmd.expires_at == now + LEASE
        stored = store.get_command(cmd.command_id)
        assert stored is not None and stored.status is CommandStatus.CLAIMED and stored.claim_owner == "worker"

    @requires(Capability.TEST_CLOCK)
    def test_command_waits_for_its_delay(self, store: Storage) -> None:
        """A command scheduled with a delay is not claimable before not_before, and is at it."""
        self.blocked_on_command(store, delay=timedelta(seconds=5))
        store.advance_test_clock(timedelta(seconds=5) - US)
        assert store.claim_commands("worker", LEASE) == []
        store.advance_test_clock(US)
        assert self._one(store).operation_key == "op-1"

    def test_claim_filters_by_queue(self, store: Storage) -> None:
        """claim_commands(queues=...) only claims commands of those queues."""
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, 0, Decision(self.waiting_status(), commands=(
            NewCommand("a", "x", queue="fast"), NewCommand("b", "y", queue="slow"),
        )))
        assert [c.operation_key for c in store.claim_commands("w", LEASE, limit=5, queues=["slow"])] == ["b"]
        assert store.claim_commands("w", LEASE, limit=5, queues=["slow"]) == []
        assert [c.operation_key for c in store.claim_commands("w", LEASE, limit=5)] == ["a"]

    @requires(Capability.TEST_CLOCK)
    def test_commands_claimed_oldest_first(self, store: Storage) -> None:
        """Commands are claimed in due order, then creation order."""
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, 0, Decision(self.waiting_status(), commands=(
            NewCommand("late", "x", delay=timedelta(seconds=2)), NewCommand("first", "y"), NewCommand("second", "z"),
        )))
        store.advance_test_clock(timedelta(seconds=2))
        assert [c.operation_key for c in store.claim_commands("w", LEASE, limit=5)] == ["first", "second", "late"]

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_live_command_claim_is_exclusive_until_expiry(self, store: Storage) -> None:
        """A claimed command is not reclaimable while live; at expiry it is, with attempt and generation + 1."""
        self.blocked_on_command(store)
        self._one(store, "w1")
        store.advance_test_clock(LEASE - US)
        assert store.claim_commands("w2", LEASE) == []
        store.advance_test_clock(US)
        again = self._one(store, "w2")
        assert (again.attempt, again.generation, again.worker_id) == (2, 2, "w2")

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_heartbeat_extends_lease(self, store: Storage) -> None:
        """A heartbeat from the live claim extends the lease from store now."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        store.advance_test_clock(timedelta(seconds=20))
        now = store.now()
        assert store.heartbeat_command(cmd, timedelta(seconds=60)) is Outcome.RENEWED
        assert store.get_command(cmd.command_id).claim_expires_at == now + timedelta(seconds=60)  # type: ignore[union-attr]

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_heartbeat_writing_unchanged_values_is_renewed(self, store: Storage) -> None:
        """A heartbeat writing the values already stored (same instant, same lease) is renewed, not judged lost."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        assert store.heartbeat_command(cmd, LEASE) is Outcome.RENEWED
        assert store.heartbeat_command(cmd, LEASE) is Outcome.RENEWED
        assert store.get_command(cmd.command_id).claim_expires_at == cmd.expires_at  # type: ignore[union-attr]

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_heartbeat_at_expiry_is_lost(self, store: Storage) -> None:
        """A heartbeat at exactly the expiry instant is refused with claim_lost."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        store.advance_test_clock(LEASE)
        before = self.observed(store)
        assert store.heartbeat_command(cmd, LEASE) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    def test_complete_records_result_and_wakes_run(self, store: Storage) -> None:
        """Completion stores the result and makes the waiting run runnable, atomically."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        assert store.complete_command(cmd, {"charged": 12.5}) is Outcome.COMPLETED
        stored = store.get_command(cmd.command_id)
        assert stored is not None and stored.status is CommandStatus.COMPLETED and stored.result == {"charged": 12.5}
        assert store.get_run("run-1").status is RunStatus.PENDING  # type: ignore[union-attr]

    def test_second_completion_is_terminal_and_keeps_first_result(self, store: Storage) -> None:
        """A duplicate completion returns terminal and never overwrites the first result."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        store.complete_command(cmd, {"first": True})
        before = self.observed(store)
        assert store.complete_command(cmd, {"second": True}) is Outcome.TERMINAL
        assert self.observed(store) == before

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_stale_completion_changes_nothing(self, store: Storage) -> None:
        """A completion from an older generation is refused while the newer claim stays in place."""
        self.blocked_on_command(store)
        old = self._one(store, "w1")
        store.advance_test_clock(LEASE)
        self._one(store, "w2")
        before = self.observed(store)
        assert store.complete_command(old, {"zombie": True}) is Outcome.CLAIM_LOST
        assert store.fail_command(old, {"zombie": True}) is Outcome.CLAIM_LOST
        assert store.heartbeat_command(old, LEASE) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_completion_after_expiry_is_refused(self, store: Storage) -> None:
        """A completion after the lease expired is refused even when nobody reclaimed the command."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        store.advance_test_clock(LEASE + US)
        before = self.observed(store)
        assert store.complete_command(cmd, {"late": True}) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    @requires(Promise.GENERATION_FENCING)
    def test_forged_owner_is_refused(self, store: Storage) -> None:
        """A completion naming another worker is refused."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        before = self.observed(store)
        assert store.complete_command(replace(cmd, worker_id="intruder"), 1) is Outcome.CLAIM_LOST
        assert self.observed(store) == before

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_failure_after_expiry_is_refused(self, store: Storage) -> None:
        """A failure after the lease expired is refused, retryable or not, even when nobody reclaimed the command."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        store.advance_test_clock(LEASE + US)
        before = self.observed(store)
        assert store.fail_command(cmd, {"late": True}) is Outcome.CLAIM_LOST, "an expired claim scheduled a retry"
        assert store.fail_command(cmd, {"late": True}, retryable=False) is Outcome.CLAIM_LOST, (
            "an expired claim failed the command permanently"
        )
        assert self.observed(store) == before, "a refused failure changed the store"

    @requires(Promise.LEASES, Promise.GENERATION_FENCING, Capability.TEST_CLOCK)
    def test_heartbeat_after_expiry_is_refused(self, store: Storage) -> None:
        """A heartbeat after the lease expired is refused and revives nothing: another worker can take the command."""
        self.blocked_on_command(store)
        cmd = self._one(store, "w1")
        store.advance_test_clock(LEASE + US)
        before = self.observed(store)
        assert store.heartbeat_command(cmd, LEASE) is Outcome.CLAIM_LOST, "an expired claim was renewed"
        assert self.observed(store) == before, "a refused heartbeat changed the store"
        again = self._one(store, "w2")
        assert (again.worker_id, again.generation) == ("w2", 2), "the refused heartbeat kept the command from others"

    @requires(Promise.GENERATION_FENCING)
    def test_forged_owner_failure_is_refused(self, store: Storage) -> None:
        """A failure naming another worker, even with the current generation, is refused, retryable or not."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        forged = replace(cmd, worker_id="intruder")
        before = self.observed(store)
        assert store.fail_command(forged, "forged") is Outcome.CLAIM_LOST, "another owner scheduled a retry"
        assert store.fail_command(forged, "forged", retryable=False) is Outcome.CLAIM_LOST, (
            "another owner failed the command permanently"
        )
        assert self.observed(store) == before, "a refused failure changed the store"

    @requires(Promise.GENERATION_FENCING, Promise.LEASES, Capability.TEST_CLOCK)
    def test_forged_owner_heartbeat_is_refused(self, store: Storage) -> None:
        """A heartbeat naming another worker, even with the current generation, is refused."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        store.advance_test_clock(timedelta(seconds=10))
        before = self.observed(store)
        assert store.heartbeat_command(replace(cmd, worker_id="intruder"), LEASE) is Outcome.CLAIM_LOST, (
            "another owner renewed the lease"
        )
        assert self.observed(store) == before, "a refused heartbeat changed the store"

    @requires(Promise.LEASES, Capability.TEST_CLOCK)
    def test_heartbeat_after_completion_is_terminal(self, store: Storage) -> None:
        """A heartbeat on a completed command returns terminal (not claim_lost) and changes nothing."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        assert store.complete_command(cmd, {"done": True}) is Outcome.COMPLETED
        store.advance_test_clock(timedelta(seconds=1))
        before = self.observed(store)
        assert store.heartbeat_command(cmd, LEASE) is Outcome.TERMINAL, "a heartbeat on a completed command was not terminal"
        assert self.observed(store) == before, "a heartbeat on a completed command changed the store"

    def test_unknown_command_is_not_found(self, store: Storage) -> None:
        """Fenced command calls naming an unknown command return not_found."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        ghost = replace(cmd, command_id="999999")
        assert store.complete_command(ghost, 1) is Outcome.NOT_FOUND
        if self.promised(Promise.LEASES):
            assert store.heartbeat_command(ghost, LEASE) is Outcome.NOT_FOUND

    @requires(Capability.TEST_CLOCK)
    def test_failure_schedules_retry_after_delay(self, store: Storage) -> None:
        """A retryable failure with attempts left schedules the next attempt at now + retry_after."""
        self.blocked_on_command(store)
        cmd = self._one(store)
        assert store.fail_command(cmd, {"e": "timeout"}, retry_after=timedelta(seconds=7)) is Outcome.RETRY_SCHEDULED
        stored = store.get_command(cmd.command_id)
        assert stored is not None and stored.status is CommandStatus.PENDING and stored.error == {"e": "timeout"}
        assert store.get_run("run-1").status is self.waiting_status()  # type: ignore[union-attr]
        store.advance_test_clock(timedelta(seconds=7) - US)
        assert store.claim_commands("worker", LEASE) == []
        store.advance_test_clock(US)
        assert self._one(store).attempt == 2

    def test_exhausted_attempts_fail_permanently_and_wake_run(self, store: Storage) -> None:
        """The last attempt's failure fails the command permanently and makes the run runnable."""
        self.blocked_on_command(store, max_attempts=2)
        assert store.fail_command(self._one(store), "e1") is Outcome.RETRY_SCHEDULED
        assert store.fail_command(self._one(store), "e2") is Outcome.FAILED
        stored = store.list_commands("run-1")[0]
        assert stored.status is CommandStatus.FAILED and stored.error == "e2"
        assert store.get_run("run-1").status is RunStatus.PENDING  # type: ignore[union-attr]
        snapshot = store.load_claimed(self.claim_one(store))
        assert isinstance(snapshot, Snapshot) and [c.operation_key for c in snapshot.command_results] == ["op-1"]

    def test_non_retryable_failure_is_permanent(self, store: Storage) -> None:
        """A non-retryable failure fails the command at once, whatever attempts remain."""
        self.blocked_on_command(store, max_attempts=5)
        assert store.fail_command(self._one(store), "fatal", retryable=False) is Outcome.FAILED
        assert store.claim_commands("worker", LEASE) == []

    @requires(Promise.SIGNALS, Promise.WAKE_ON_INPUT)
    def test_permanent_failure_during_decision_is_not_lost(self, store: Storage) -> None:
        """A command failing permanently while a decision is made leaves the run runnable after a blocked commit."""
        self.blocked_on_command(store, max_attempts=1)
        cmd = self._one(store)
        signal = store.send_signal("run-1", "wake", {}, "w-1").signal
        assert signal is not None
        claim = self.claim_one(store)
        store.load_claimed(claim)
        assert store.fail_command(cmd, {"e": "fatal"}) is Outcome.FAILED
        running = store.get_run("run-1")
        assert running is not None and running.status is RunStatus.RUNNING and running.wakeup_pending, (
            f"a permanent failure on a claimed run left no wake-up mark: {running}"
        )
        decision = Decision(RunStatus.BLOCKED, consume_signals=(signal.signal_id,))
        assert store.commit_decision(claim, 1, decision) is Outcome.COMMITTED
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.PENDING, (
            f"a blocked commit lost the failure that landed during its decision: {run}"
        )
        snapshot = store.load_claimed(self.claim_one(store, "w2"))
        assert isinstance(snapshot, Snapshot) and [c.operation_key for c in snapshot.command_results] == ["op-1"]

    def test_result_is_consumed_once(self, store: Storage) -> None:
        """A command result reaches exactly one decision: once consumed it leaves the snapshot."""
        self.blocked_on_command(store)
        store.complete_command(self._one(store), {"r": 1})
        claim = self.claim_one(store)
        snapshot = store.load_claimed(claim)
        assert isinstance(snapshot, Snapshot) and len(snapshot.command_results) == 1
        decision = Decision(RunStatus.PENDING, consume_commands=(snapshot.command_results[0].command_id,))
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        assert store.list_commands("run-1")[0].consumed
        later = store.load_claimed(self.claim_one(store))
        assert isinstance(later, Snapshot) and later.command_results == ()

    @requires(Capability.CONCURRENT_CONNECTIONS)
    def test_concurrent_command_claimers_never_double_claim(self, open_store: Callable[..., Storage]) -> None:
        """Command claimers racing on their own connections never get the same command twice."""
        stores = [open_store() for _ in range(4)]
        claim = self.started_and_claimed(stores[0])
        stores[0].commit_decision(claim, 0, Decision(
            self.waiting_status(), commands=tuple(NewCommand(f"op-{i:02d}", "x") for i in range(30)),
        ))

        def drain(store: Storage, worker: str) -> list[str]:
            got: list[str] = []
            while batch := store.claim_commands(worker, LEASE, limit=2):
                got.extend(c.operation_key for c in batch)
            return got

        results = Threads.run([partial(drain, s, f"w{i}") for i, s in enumerate(stores)])
        claimed = sorted(k for batch in results for k in batch)
        assert claimed == [f"op-{i:02d}" for i in range(30)], "a command was claimed twice or lost"

    @requires(Capability.CONCURRENT_CONNECTIONS)
    def test_concurrent_duplicate_completions_apply_once(self, open_store: Callable[..., Storage]) -> None:
        """The same completion delivered concurrently is applied once; the others get terminal."""
        stores = [open_store() for _ in range(4)]
        self.blocked_on_command(stores[0])
        cmd = self._one(stores[0])
        outcomes = Threads.run([partial(s.complete_command, cmd, {"from": i}) for i, s in enumerate(stores)])
        assert sorted(o.value for o in outcomes) == ["completed", "terminal", "terminal", "terminal"]
        winner = outcomes.index(Outcome.COMPLETED)
        assert stores[0].get_command(cmd.command_id).result == {"from": winner}  # type: ignore[union-attr]

    @requires(Capability.SKIP_LOCKED, Promise.UNIT_OF_WORK, Capability.CONCURRENT_CONNECTIONS)
    def test_command_claimers_skip_rows_locked_by_an_open_claim(self, open_store: Callable[..., Storage]) -> None:
        """While one command claimer holds its claim transaction open, another gets a different command at once."""
        holder, other = open_store(), open_store()
        claim = self.started_and_claimed(holder)
        holder.commit_decision(claim, 0, Decision(
            self.waiting_status(), commands=tuple(NewCommand(key, "x") for key in ("op-a", "op-b", "op-c")),
        ))
        held, got = Threads.beside_open_transaction(
            holder, partial(holder.claim_commands, "holder", LEASE, 1),
            partial(other.claim_commands, "other", LEASE, 1), "the second command claimer",
        )
        assert len(held) == 1 and len(got) == 1, f"expected one command each, got {held} and {got}"
        assert got[0].command_id != held[0].command_id, "two claimers got the same command"
