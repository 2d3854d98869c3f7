"""The fenced decision commit: all or nothing, outcome precedence, first wins, no lost wake-up."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial

import pytest

from kit.conformance._harness import LEASE, THREAD_TIMEOUT_S, AreaChecks, Threads, requires
from kit.contract import (
    Capability,
    CommandStatus,
    Database,
    Decision,
    InvalidDecision,
    NewCommand,
    NewEvent,
    NewTimer,
    Promise,
    RunStatus,
    SignalStatus,
    Snapshot,
    Storage,
    StorageError,
    TimerStatus,
)
from kit.contract.json_exact import assert_json_equal
from kit.contract.outcomes import Outcome
from kit.faults import StatementFaults

__all__ = ["CommitChecks"]


def _first_success_under_faults(
    observe: Callable[[], object], faults: StatementFaults, what: str, min_points: int, act: Callable[[], object]
) -> object:
    """Fail ``act`` at its 1st, 2nd, ... statement until it succeeds; after each failure the store must be
    exactly as before (``observe`` reads it). Returns what the first unfailed attempt answered."""
    before = observe()
    point = 0
    while True:
        point += 1
        faults.fail_at(point)
        try:
            outcome = act()
        except StorageError:
            faults.disarm()
            assert observe() == before, (
                f"{what} failing at statement #{point} ({faults.fired!r}) left a partial write"
            )
            continue
        faults.disarm()
        assert point >= min_points, f"{what} went through only {point - 1} fault points: is it hooked?"
        return outcome


def _killer(database: Database, worker: Storage) -> Callable[[str], None]:
    """A fault action that kills ``worker``'s server session at the statement it fires on."""
    def kill(_statement: str) -> None:
        database.kill_session(worker)
    return kill


def _overlap(first: Callable[[], object], second: Callable[[], object], first_faults: StatementFaults,
             second_faults: StatementFaults, at: str = "first_lock") -> tuple[list[object], list[BaseException | None]]:
    """Run ``first`` up to its COMMIT and hold it there while ``second`` runs up to point ``at`` (its first
    statement, or its first locking one); then both finish. Statements are counted, never timed: ``second``
    has done every plain read it does before locking while ``first``'s writes were uncommitted.

    Returns both results and both errors (a raw error is the check's business, not the thread's)."""
    reached, parked = threading.Event(), threading.Event()
    first_faults.park_commit(reached, THREAD_TIMEOUT_S, parked)
    second_faults.notify_at(at, reached)
    results: list[object] = [None, None]
    errors: list[BaseException | None] = [None, None]

    def run(i: int, fn: Callable[[], object]) -> None:
        try:
            if i == 1:
                parked.wait(THREAD_TIMEOUT_S)
            results[i] = fn()
        except BaseException as exc:  # noqa: BLE001 - returned to the check
            errors[i] = exc
        finally:
            if i == 0:
                parked.set()
            else:  # ``second`` ended without reaching ``at`` (e.g. refused before any statement): ``first`` goes on
                reached.set()

    threads = [threading.Thread(target=run, args=(i, fn), daemon=True) for i, fn in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(THREAD_TIMEOUT_S)
    first_faults.disarm()
    second_faults.disarm()
    if any(t.is_alive() for t in threads):
        pytest.fail("two overlapping operations never finished: a store deadlocked or waited for a parked commit")
    return results, errors


def _hooked_pair(open_store: Callable[..., Storage], tenant: str) -> tuple[Storage, StatementFaults, Storage,
                                                                          StatementFaults]:
    """Two stores on one tenant, on two connections, each with a statement hook of its own (the second
    does not migrate again)."""
    first_faults, second_faults = StatementFaults(), StatementFaults()
    first = open_store(tenant, statement_hook=first_faults)
    second = open_store(tenant, migrate=False, statement_hook=second_faults)
    return first, first_faults, second, second_faults


class CommitChecks(AreaChecks):
    area = "commit"

    def test_commit_appends_contiguous_history(self, store: Storage) -> None:
        """Each commit appends its events with the next contiguous seq values, starting at 1."""
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, claim.revision, Decision(RunStatus.PENDING, events=(NewEvent("a"), NewEvent("b"))))
        claim = self.claim_one(store)
        store.commit_decision(claim, claim.revision, Decision(RunStatus.PENDING, events=(NewEvent("c"),)))
        history = store.get_history("run-1")
        assert [(e.seq, e.kind) for e in history] == [(1, "a"), (2, "b"), (3, "c")]
        if self.promised(Promise.EXPECTED_REVISION):
            assert [e.revision for e in history] == [1, 1, 2]

    @requires(Promise.EXPECTED_REVISION, Promise.GENERATION_FENCING)
    def test_commit_bumps_revision_and_clears_claim(self, store: Storage) -> None:
        """A commit bumps the revision by exactly one and clears the claim."""
        claim = self.started_and_claimed(store)
        assert store.commit_decision(claim, 0, Decision(self.waiting_status())) is Outcome.COMMITTED
        run = store.get_run("run-1")
        assert run is not None and run.revision == 1 and run.status is self.waiting_status()
        assert run.claim_owner is None and run.claim_expires_at is None and run.claim_generation == 1

    @requires(Promise.EXPECTED_REVISION)
    def test_revision_mismatch_changes_nothing(self, store: Storage) -> None:
        """A live claim with a wrong expected revision gets revision_mismatch and changes nothing."""
        claim = self.started_and_claimed(store)
        before = self.observed(store)
        decision = Decision(RunStatus.COMPLETED, events=(NewEvent("x"),), output=1)
        assert store.commit_decision(claim, 5, decision) is Outcome.REVISION_MISMATCH
        assert self.observed(store) == before

    @requires(Promise.GENERATION_FENCING, Promise.EXPECTED_REVISION)
    def test_outcome_precedence(self, store: Storage) -> None:
        """Refusals follow not_found > terminal > claim_lost > revision_mismatch."""
        bad = Decision(RunStatus.COMPLETED)
        done = self.completed(store, "closed")
        assert store.commit_decision(replace(done, run_id="ghost"), 99, bad) is Outcome.NOT_FOUND
        assert store.commit_decision(replace(done, generation=99), 99, bad) is Outcome.TERMINAL
        live = self.started_and_claimed(store, "open")
        assert store.commit_decision(replace(live, generation=live.generation + 1), 99, bad) is Outcome.CLAIM_LOST
        assert store.commit_decision(live, 99, bad) is Outcome.REVISION_MISMATCH
        assert store.commit_decision(live, 0, bad) is Outcome.COMMITTED

    def test_retried_commit_changes_nothing(self, store: Storage) -> None:
        """Sending the same commit again after it landed (a lost acknowledgement) changes nothing."""
        claim = self.started_and_claimed(store)
        commands = (NewCommand("op", "do"),) if self.promised(Promise.COMMANDS) else ()
        decision = Decision(self.waiting_status(), events=(NewEvent("once"),), commands=commands)
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        before = self.observed(store)
        assert store.commit_decision(claim, claim.revision, decision) is not Outcome.COMMITTED
        assert self.observed(store) == before

    @requires(Capability.STATEMENT_FAULTS, Promise.ATOMIC_DECISION, Promise.WAKE_ON_INPUT, Promise.COMMANDS, Promise.SIGNALS, Promise.TIMERS)
    def test_commit_is_all_or_nothing(self, open_store: Callable[..., Storage], faults: StatementFaults) -> None:
        """A commit failing at any one of its statements leaves nothing partial behind."""
        store = open_store(statement_hook=faults)
        claim = self.blocked_on_command(store)
        command = self._complete_only_command(store)
        store.send_signal("run-1", "go", {"s": 1}, "sig-1")
        claim = self.claim_one(store)
        snapshot = store.load_claimed(claim)
        assert isinstance(snapshot, Snapshot)
        decision = Decision(
            RunStatus.BLOCKED,
            events=(NewEvent("e1", {"a": 1}), NewEvent("e2", None, "key-2")),
            commands=(NewCommand("op-2", "next"), NewCommand("op-3", "more")),
            timers=(NewTimer("t-1", delay=timedelta(seconds=5)),),
            consume_signals=tuple(s.signal_id for s in snapshot.signals),
            consume_commands=(command,),
        )
        before = self.observed(store)
        outcome = _first_success_under_faults(partial(self.observed, store), faults, "a commit", 4,
                                              partial(store.commit_decision, claim, claim.revision, decision))
        assert outcome is Outcome.COMMITTED
        assert self.observed(store) != before

    @pytest.mark.parametrize("operation", ["complete", "fail_for_good", "fire_timers", "signal", "cancel"])
    @requires(Capability.STATEMENT_FAULTS, Promise.ATOMIC_DECISION, Promise.WAKE_ON_INPUT, Promise.COMMANDS, Promise.SIGNALS, Promise.TIMERS, Promise.CANCEL_REQUESTS, Capability.TEST_CLOCK)
    def test_waking_writes_are_all_or_nothing(
        self, open_store: Callable[..., Storage], faults: StatementFaults, operation: str
    ) -> None:
        """Completing or failing a command, firing a timer, a signal and a cancel request each land whole
        (their own change and the run made runnable) or, failing at any statement, not at all."""
        store = open_store(statement_hook=faults)
        claim = self.started_and_claimed(store)
        decision = Decision(RunStatus.BLOCKED, commands=(NewCommand("op-1", "do", max_attempts=1),),
                            timers=(NewTimer("t-1", delay=timedelta(seconds=10)),))
        assert store.commit_decision(claim, 0, decision) is Outcome.COMMITTED
        command = store.claim_commands("worker", LEASE)[0]
        if operation == "fire_timers":
            store.advance_test_clock(timedelta(seconds=10))
        act: Callable[[], object] = {
            "complete": lambda: store.complete_command(command, {"done": True}),
            "fail_for_good": lambda: store.fail_command(command, {"e": 1}, retryable=False),
            "fire_timers": lambda: [t.operation_key for t in store.fire_due_timers()],
            "signal": lambda: store.send_signal("run-1", "go", {}, "sig-1").created,
            "cancel": lambda: store.request_cancel("run-1", "stop"),
        }[operation]
        expected = {"complete": Outcome.COMPLETED, "fail_for_good": Outcome.FAILED, "fire_timers": ["t-1"],
                    "signal": True, "cancel": Outcome.COMMITTED}[operation]
        outcome = _first_success_under_faults(partial(self.observed, store), faults, operation, 3, act)
        assert outcome == expected, f"{operation} answered {outcome!r} once no fault struck"
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.PENDING, f"{operation} did not make the run runnable: {run}"

    @requires(Capability.KILL_SESSION, Capability.STATEMENT_FAULTS, Promise.ATOMIC_DECISION, Promise.WAKE_ON_INPUT, Promise.COMMANDS, Promise.TIMERS)
    def test_session_killed_mid_commit_leaves_nothing(
        self, database: Database, open_store: Callable[..., Storage]
    ) -> None:
        """A worker whose server session is killed at any point of a commit leaves nothing partial."""
        observer = open_store()
        claim = self.started_and_claimed(observer)
        decision = Decision(
            RunStatus.BLOCKED,
            events=(NewEvent("e1"), NewEvent("e2")),
            commands=(NewCommand("op-1", "x"),),
            timers=(NewTimer("t-1", delay=timedelta(seconds=5)),),
        )
        before = self.observed(observer)
        point = 0
        while True:
            point += 1
            faults = StatementFaults()
            worker = open_store(migrate=False, statement_hook=faults)
            faults.fail_at(point, action=_killer(database, worker))
            try:
                outcome = worker.commit_decision(claim, 0, decision)
            except StorageError:
                assert faults.fired is not None
                assert self.observed(observer) == before, (
                    f"a session killed before statement #{point} ({faults.fired!r}) left a partial write"
                )
                continue
            finally:
                worker.close()
            if faults.fired is not None:
                pytest.fail(f"the commit succeeded although its session was killed before {faults.fired!r}")
            break
        assert outcome is Outcome.COMMITTED and point >= 4
        assert self.observed(observer) != before

    def _complete_only_command(self, store: Storage) -> str:
        cmd = store.claim_commands("worker", LEASE)[0]
        assert store.complete_command(cmd, {"done": True}) is Outcome.COMPLETED
        return cmd.command_id

    @requires(Promise.COMMANDS)
    def test_command_operation_keys_first_wins(self, store: Storage) -> None:
        """A command whose operation key already exists for the run is not scheduled again: the first wins."""
        claim = self.started_and_claimed(store)
        first = Decision(RunStatus.PENDING, commands=(NewCommand("op-1", "original", {"v": 1}),))
        assert store.commit_decision(claim, claim.revision, first) is Outcome.COMMITTED
        claim = self.claim_one(store)
        decision = Decision(RunStatus.PENDING, commands=(NewCommand("op-1", "replaced", {"v": 2}), NewCommand("op-2", "new")))
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        commands = {c.operation_key: c for c in store.list_commands("run-1")}
        assert sorted(commands) == ["op-1", "op-2"]
        assert_json_equal((commands["op-1"].name, commands["op-1"].input), ("original", {"v": 1}), "(name, input) of op-1")

    @requires(Promise.COMMANDS, Promise.TIMERS, Capability.TEST_CLOCK)
    def test_first_wins_within_one_decision(self, store: Storage) -> None:
        """Two commands (or timers) with one operation key in one decision: the first is kept."""
        claim = self.started_and_claimed(store)
        decision = Decision(
            RunStatus.PENDING,
            commands=(NewCommand("k", "first"), NewCommand("k", "second")),
            timers=(NewTimer("t", delay=timedelta(seconds=1)), NewTimer("t", delay=timedelta(seconds=9))),
        )
        assert store.commit_decision(claim, 0, decision) is Outcome.COMMITTED
        assert [c.name for c in store.list_commands("run-1")] == ["first"]
        timers = store.list_timers("run-1")
        assert len(timers) == 1 and timers[0].fire_at == store.now() + timedelta(seconds=1)

    @requires(Promise.TIMERS)
    def test_timer_operation_keys_first_wins(self, store: Storage) -> None:
        """A timer whose operation key already exists for the run keeps its original fire time."""
        claim = self.started_and_claimed(store)
        first = Decision(RunStatus.PENDING, timers=(NewTimer("sleep", delay=timedelta(seconds=10)),))
        assert store.commit_decision(claim, claim.revision, first) is Outcome.COMMITTED
        original = store.list_timers("run-1")[0]
        claim = self.claim_one(store)
        decision = Decision(RunStatus.PENDING, timers=(NewTimer("sleep", delay=timedelta(hours=5)),))
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        assert store.list_timers("run-1") == [original]

    def test_terminal_commit_records_output_and_error(self, store: Storage) -> None:
        """A terminal commit stores its output and error as given."""
        claim = self.started_and_claimed(store)
        decision = Decision(RunStatus.FAILED, output={"partial": [1, 2]}, error={"kind": "boom", "retry": False})
        assert store.commit_decision(claim, 0, decision) is Outcome.COMMITTED
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.FAILED
        assert_json_equal((run.output, run.error), ({"partial": [1, 2]}, {"kind": "boom", "retry": False}), "(output, error)")

    def test_terminal_run_never_changes(self, store: Storage) -> None:
        """Once terminal, nothing changes a run: commits, claims, signals, cancels are all refused."""
        claim = self.completed(store)
        if self.promised(Capability.TEST_CLOCK):
            store.advance_test_clock(LEASE * 3)
        before = self.observed(store)
        assert store.commit_decision(claim, 1, Decision(RunStatus.PENDING)) is Outcome.TERMINAL
        assert store.claim_runs("w9", LEASE, limit=5) == []
        if self.promised(Promise.SIGNALS):
            assert store.send_signal("run-1", "late", {}, "late-1").outcome is Outcome.TERMINAL
        if self.promised(Promise.CANCEL_REQUESTS):
            assert store.request_cancel("run-1") is Outcome.TERMINAL
        if self.promised(Promise.TIMERS):
            assert store.fire_due_timers() == []
        assert self.observed(store) == before

    @requires(Promise.COMMANDS, Promise.TIMERS, Capability.TEST_CLOCK)
    def test_terminal_commit_closes_outstanding_work(self, store: Storage) -> None:
        """A run going terminal cancels its unfinished commands and unfired timers."""
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, 0, Decision(
            RunStatus.PENDING,
            commands=(NewCommand("a", "x"), NewCommand("b", "y")),
            timers=(NewTimer("t", delay=timedelta(seconds=10)),),
        ))
        claimed = store.claim_commands("worker", LEASE)[0]
        claim = self.claim_one(store)
        assert store.commit_decision(claim, 1, Decision(RunStatus.CANCELLED)) is Outcome.COMMITTED
        assert {c.status for c in store.list_commands("run-1")} == {CommandStatus.CANCELLED}
        assert [t.status for t in store.list_timers("run-1")] == [TimerStatus.CANCELLED]
        assert store.complete_command(claimed, {"late": True}) is Outcome.TERMINAL
        store.advance_test_clock(timedelta(minutes=1))
        assert store.fire_due_timers() == [] and store.claim_commands("w", LEASE) == []

    @requires(Promise.SIGNALS, Promise.WAKE_ON_INPUT)
    def test_signal_during_decision_is_not_lost(self, store: Storage) -> None:
        """A signal landing while a decision is made turns that decision's 'blocked' into 'pending'."""
        claim = self.started_and_claimed(store)
        store.load_claimed(claim)
        store.send_signal("run-1", "go", {}, "sig-1")
        assert store.commit_decision(claim, 0, Decision(RunStatus.BLOCKED)) is Outcome.COMMITTED
        assert store.get_run("run-1").status is RunStatus.PENDING  # type: ignore[union-attr]
        assert self.claim_one(store, "w2").run_id == "run-1"

    @requires(Promise.COMMANDS, Promise.SIGNALS, Promise.WAKE_ON_INPUT)
    def test_completion_during_decision_is_not_lost(self, store: Storage) -> None:
        """A command completing while a decision is made leaves the run runnable after a blocked commit."""
        self.blocked_on_command(store)
        cmd = store.claim_commands("worker", LEASE)[0]
        store.send_signal("run-1", "wake", {}, "w-1")
        claim = self.claim_one(store)
        store.load_claimed(claim)
        assert store.complete_command(cmd, {"r": 1}) is Outcome.COMPLETED
        assert store.commit_decision(claim, 1, Decision(RunStatus.BLOCKED)) is Outcome.COMMITTED
        assert store.get_run("run-1").status is RunStatus.PENDING  # type: ignore[union-attr]

    @requires(Promise.TIMERS, Promise.SIGNALS, Promise.WAKE_ON_INPUT, Capability.TEST_CLOCK)
    def test_timer_fired_during_decision_is_not_lost(self, store: Storage) -> None:
        """A timer firing while a decision is made leaves the run runnable after a blocked commit."""
        self.blocked_on_timer(store, delay=timedelta(seconds=10))
        store.send_signal("run-1", "wake", {}, "w-1")
        claim = self.claim_one(store)
        store.advance_test_clock(timedelta(seconds=10))
        assert len(store.fire_due_timers()) == 1
        assert store.commit_decision(claim, 1, Decision(RunStatus.BLOCKED)) is Outcome.COMMITTED
        assert store.get_run("run-1").status is RunStatus.PENDING  # type: ignore[union-attr]

    @requires(Promise.WAKE_ON_INPUT)
    def test_blocked_without_new_input_stays_blocked(self, store: Storage) -> None:
        """A blocked commit with no input arriving meanwhile leaves the run blocked."""
        self.blocked(store)
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.BLOCKED and not run.wakeup_pending

    @requires(Promise.SIGNALS)
    def test_consumed_signal_records_revision_and_leaves_inbox(self, store: Storage) -> None:
        """Consuming a signal marks it consumed by the committing revision; later snapshots omit it."""
        self.waiting(store)
        store.send_signal("run-1", "go", {"n": 1}, "sig-1")
        claim = self.claim_one(store)
        snapshot = store.load_claimed(claim)
        assert isinstance(snapshot, Snapshot) and len(snapshot.signals) == 1
        decision = Decision(RunStatus.PENDING, consume_signals=(snapshot.signals[0].signal_id,))
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        signal = store.list_signals("run-1")[0]
        assert (signal.status, signal.consumed_revision) == (SignalStatus.CONSUMED, claim.revision + 1)
        later = store.load_claimed(self.claim_one(store))
        assert isinstance(later, Snapshot) and later.signals == ()

    @requires(Promise.SIGNALS)
    def test_consuming_twice_is_refused(self, store: Storage) -> None:
        """A signal consumed by one decision cannot be consumed by another: InvalidDecision, nothing written."""
        self.waiting(store)
        signal = store.send_signal("run-1", "go", {}, "sig-1").signal
        assert signal is not None
        claim = self.claim_one(store)
        store.commit_decision(claim, claim.revision, Decision(RunStatus.PENDING, consume_signals=(signal.signal_id,)))
        claim = self.claim_one(store)
        before = self.observed(store)
        with pytest.raises(InvalidDecision):
            store.commit_decision(claim, claim.revision, Decision(RunStatus.PENDING, events=(NewEvent("x"),), consume_signals=(signal.signal_id,)))
        assert self.observed(store) == before

    @requires(Promise.SIGNALS)
    def test_consuming_another_runs_input_is_refused(self, store: Storage) -> None:
        """A decision cannot consume a signal that belongs to another run."""
        claim = self.started_and_claimed(store, "run-1")
        self.waiting(store, "other")
        foreign = store.send_signal("other", "go", {}, "sig-1").signal
        assert foreign is not None
        before = self.observed(store)
        with pytest.raises(InvalidDecision):
            store.commit_decision(claim, 0, Decision(RunStatus.PENDING, consume_signals=(foreign.signal_id,)))
        assert self.observed(store) == before

    @requires(Promise.COMMANDS, Promise.TIMERS, Promise.SIGNALS, Promise.WAKE_ON_INPUT, Capability.TEST_CLOCK)
    def test_consuming_unfinished_or_foreign_work_is_refused(self, store: Storage) -> None:
        """A decision can consume only its own run's finished, unconsumed command results and fired timers:
        a claimed command, a scheduled timer, another run's result or an already consumed one is refused
        (InvalidDecision, nothing written), and the refused timer still fires later."""
        claim = self.started_and_claimed(store, "run-1")
        decision = Decision(RunStatus.BLOCKED, commands=(NewCommand("op-1", "do"), NewCommand("op-2", "do")),
                            timers=(NewTimer("sleep", delay=timedelta(seconds=10)),))
        assert store.commit_decision(claim, 0, decision) is Outcome.COMMITTED
        self.blocked_on_command(store, "other", key="op-x")
        held = {(c.run_id, c.operation_key): c for c in store.claim_commands("worker", LEASE, limit=3)}
        foreign = held[("other", "op-x")]
        assert store.complete_command(foreign, {"r": "other"}) is Outcome.COMPLETED
        assert store.complete_command(held[("run-1", "op-2")], {"r": 2}) is Outcome.COMPLETED  # wakes run-1
        claims = {c.run_id: c for c in store.claim_runs("w1", LEASE, limit=2)}  # "other" woke too
        claim = claims["run-1"]
        ids = {c.operation_key: c.command_id for c in store.list_commands("run-1")}
        timer = store.list_timers("run-1")[0].timer_id
        refused = {
            "a claimed, unfinished command": Decision(RunStatus.PENDING, consume_commands=(ids["op-1"],)),
            "a scheduled, unfired timer": Decision(RunStatus.PENDING, consume_timers=(timer,)),
            "another run's command result": Decision(RunStatus.PENDING, consume_commands=(foreign.command_id,)),
            "another run's timer as a command": Decision(RunStatus.PENDING, consume_commands=(timer,)),
        }
        for what, bad in refused.items():
            before = self.observed(store)
            with pytest.raises(InvalidDecision):
                store.commit_decision(claim, 1, replace(bad, events=(NewEvent("x"),)))
                pytest.fail(f"a decision consuming {what} was committed")
            assert self.observed(store) == before, f"a refused decision consuming {what} wrote something"
        own = Decision(RunStatus.BLOCKED, consume_commands=(ids["op-2"],))
        assert store.commit_decision(claim, 1, own) is Outcome.COMMITTED
        store.send_signal("run-1", "wake", {}, "w-1")
        claim = self.claim_one(store)
        before = self.observed(store)
        with pytest.raises(InvalidDecision):
            store.commit_decision(claim, 2, Decision(RunStatus.PENDING, consume_commands=(ids["op-2"],)))
            pytest.fail("a command result consumed by an earlier decision was consumed again")
        assert self.observed(store) == before
        store.advance_test_clock(timedelta(seconds=10))
        assert [t.timer_id for t in store.fire_due_timers()] == [timer], "the refused timer no longer fires"

    def test_event_operation_key_is_unique_per_run(self, store: Storage) -> None:
        """An event repeating an operation key already in the history is refused and nothing is written."""
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, 0, Decision(RunStatus.PENDING, events=(NewEvent("step", {}, "op-1"),)))
        claim = self.claim_one(store)
        before = self.observed(store)
        with pytest.raises(InvalidDecision):
            store.commit_decision(claim, 1, Decision(RunStatus.PENDING, events=(NewEvent("x"), NewEvent("step", {}, "op-1"))))
        assert self.observed(store) == before

    def test_malformed_decisions_are_refused(self, store: Storage) -> None:
        """Decisions that are not well-formed (running status, terminal with new work) are refused."""
        claim = self.started_and_claimed(store)
        before = self.observed(store)
        malformed = [Decision(RunStatus.RUNNING)]
        if self.promised(Promise.COMMANDS):
            malformed.append(Decision(RunStatus.COMPLETED, commands=(NewCommand("k", "n"),)))
        if self.promised(Promise.TIMERS):
            malformed.append(Decision(RunStatus.PENDING, timers=(NewTimer("t"),)))
        for bad in malformed:
            with pytest.raises(InvalidDecision):
                store.commit_decision(claim, 0, bad)
        assert self.observed(store) == before

    @requires(Capability.CONCURRENT_CONNECTIONS, Promise.LEASES, Promise.SIGNALS)
    def test_parallel_commits_keep_histories_contiguous(self, open_store: Callable[..., Storage]) -> None:
        """Workers committing to different runs while signals land keep every history contiguous."""
        workers = [open_store() for _ in range(10)]
        ref = self.define(workers[0])
        for i in range(len(workers)):
            workers[0].start_run(f"run-{i}", ref)

        def work(i: int, store: Storage) -> None:
            run_id = f"run-{i}"
            for step in range(5):
                claims = store.claim_runs(f"w{i}", LEASE, limit=10)
                mine = [c for c in claims if c.run_id == run_id]
                for other in claims:
                    if other.run_id != run_id:
                        store.release_run_claim(other)
                if not mine:
                    store.send_signal(run_id, "nudge", {"step": step}, f"{run_id}-{step}")
                    continue
                claim = mine[0]
                store.commit_decision(claim, claim.revision, Decision(
                    RunStatus.PENDING, events=(NewEvent("step", {"step": step}), NewEvent("step2")),
                ))
                store.send_signal(run_id, "nudge", {"step": step}, f"{run_id}-{step}")

        Threads.run([partial(work, i, s) for i, s in enumerate(workers)])
        for i in range(len(workers)):
            history = workers[0].get_history(f"run-{i}")
            assert [e.seq for e in history] == list(range(1, len(history) + 1))
            run = workers[0].get_run(f"run-{i}")
            assert run is not None and run.revision == len({e.revision for e in history})

    # -- overlapping transactions on a real server (statements counted, never timed) --------
    @requires(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED)
    def test_overlapping_duplicate_deliveries_commit_once(self, open_store: Callable[..., Storage]) -> None:
        """One decision delivered twice on two connections, the first copy held at its COMMIT while the second
        runs up to its first lock (so every unlocked read it makes sees the run before the first copy's
        writes): exactly one copy commits, the other gets a protocol outcome, never a raw error, and the
        history holds the decision's events once."""
        for events in (2, 0):
            tenant = f"dup-{events}"
            a, fa, b, fb = _hooked_pair(open_store, tenant)
            claim = self.started_and_claimed(a)
            a.load_claimed(claim)
            decision = Decision(self.waiting_status(), events=tuple(NewEvent("step", {"i": i}) for i in range(events)))
            results, errors = _overlap(partial(a.commit_decision, claim, claim.revision, decision),
                                       partial(b.commit_decision, claim, claim.revision, decision), fa, fb)
            raw = [e for e in errors if e is not None]
            assert not raw, (
                f"a duplicate delivery ({events} events) raised {raw[0]!r} instead of answering with an outcome: "
                "take the run's row lock before reading anything the commit decides on (the fence, the "
                "revision, the next history number)"
            )
            assert sorted(str(r) for r in results).count(str(Outcome.COMMITTED)) == 1, (
                f"overlapping duplicates answered {results}: exactly one copy must commit"
            )
            assert all(isinstance(r, Outcome) for r in results), f"a copy answered {results}"
            assert len(a.get_history("run-1")) == events, "the duplicate's events landed twice (or not at all)"

    @requires(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED,
              Capability.TEST_CLOCK, Promise.UNIT_OF_WORK, Promise.LEASES)
    def test_a_fenced_write_judges_its_lease_on_the_clock_after_its_lock_wait(
        self, open_store: Callable[..., Storage],
    ) -> None:
        """A fenced write that waits for the run's row lock judges its lease on the store clock read after the
        wait. A unit holds lock_run() on the run, moves the test clock past every lease and is held at its
        COMMIT until the write, on another connection, reaches its first lock; then the unit commits. The
        write (a decision commit, a lease renewal, a command completion: each the store promises) must answer
        claim_lost and change nothing: its lease had expired by the time it held the run. Statements are
        counted, never timed."""
        kinds = {"commit": True, "renew": True, "complete": self.promised(Promise.COMMANDS)}
        for kind in (k for k, promised in kinds.items() if promised):
            tenant = f"late-{kind}"
            holder, fh, writer, fw = _hooked_pair(open_store, tenant)
            claim = self.started_and_claimed(writer)
            write: Callable[[], object]
            if kind == "complete":
                assert writer.commit_decision(claim, claim.revision, Decision(
                    self.waiting_status(), commands=(NewCommand("op-1", "do"),))) is Outcome.COMMITTED
                (command,) = writer.claim_commands("worker", LEASE)
                write = partial(writer.complete_command, command, {"late": True})
            elif kind == "renew":
                write = partial(writer.renew_run_claim, claim, LEASE)
            else:
                writer.load_claimed(claim)
                write = partial(writer.commit_decision, claim, claim.revision,
                                Decision(RunStatus.PENDING, events=(NewEvent("late"),)))
            def observe(store: Storage = holder, commands: bool = kinds["complete"]) -> object:
                return (store.get_run("run-1"), store.get_history("run-1"),
                        store.list_commands("run-1") if commands else None)

            before = observe()

            def hold(holder: Storage = holder) -> None:
                with holder.transaction():
                    holder.lock_run("run-1")
                    holder.advance_test_clock(LEASE)  # every lease taken so far has expired

            (_, answered), errors = _overlap(hold, write, fh, fw)
            assert errors == [None, None], f"a {kind} behind a held run lock raised {errors}"
            assert answered is Outcome.CLAIM_LOST, (
                f"a {kind} that waited for the run's lock while its lease expired answered {answered}: judge "
                "the lease on the store clock read after taking the locks, not before them"
            )
            assert observe() == before, f"a refused late {kind} changed the run, its history or its commands"

    @requires(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED,
              Promise.WAKE_ON_INPUT)
    def test_waking_write_beside_a_blocking_commit_is_not_lost(self, open_store: Callable[..., Storage]) -> None:
        """A signal, a completion, a timer firing or a cancel committed on another connection while a decision
        that blocks the run commits leaves the run runnable, whichever of the two holds the run first: the
        decision held at its COMMIT while the waking write runs up to its first lock, or the waking write
        held at its COMMIT while the decision does. Each waking write the store promises (timers need the
        test clock)."""
        kinds = {"signal": self.promised(Promise.SIGNALS), "complete": self.promised(Promise.COMMANDS),
                 "fire": self.promised(Promise.TIMERS) and self.promised(Capability.TEST_CLOCK),
                 "cancel": self.promised(Promise.CANCEL_REQUESTS)}
        self.need_any(Promise.SIGNALS, Promise.COMMANDS, Promise.TIMERS, Promise.CANCEL_REQUESTS)
        if not any(kinds.values()):
            pytest.skip("unsupported: the store's only waking write, a timer firing, needs test_clock")
        for kind in (k for k, promised in kinds.items() if promised):
            for decision_first in (True, False):
                tenant = f"wake-{kind}-{'decision' if decision_first else 'input'}-first"
                decider, fd, waker, fw = _hooked_pair(open_store, tenant)
                claim = self.started_and_claimed(decider)
                wake: Callable[[], object]
                if kind == "complete":
                    assert decider.commit_decision(claim, claim.revision, Decision(
                        RunStatus.PENDING, commands=(NewCommand("op-1", "do"),))) is Outcome.COMMITTED
                    command = waker.claim_commands("worker", LEASE)[0]
                    wake = partial(waker.complete_command, command, {"r": 1})
                    claim = self.claim_one(decider)
                elif kind == "fire":
                    assert decider.commit_decision(claim, claim.revision, Decision(
                        RunStatus.PENDING, timers=(NewTimer("t-1", delay=timedelta(seconds=1)),))) is Outcome.COMMITTED
                    decider.advance_test_clock(timedelta(seconds=1))
                    wake = partial(waker.fire_due_timers, 10)
                    claim = self.claim_one(decider)
                elif kind == "signal":
                    wake = partial(waker.send_signal, "run-1", "go", {}, "sig-1")
                else:
                    wake = partial(waker.request_cancel, "run-1", "stop")
                decider.load_claimed(claim)
                commit = partial(decider.commit_decision, claim, claim.revision, Decision(RunStatus.BLOCKED))
                if decision_first:
                    (committed, woke), errors = _overlap(commit, wake, fd, fw)
                else:
                    (woke, committed), errors = _overlap(wake, commit, fw, fd)
                assert errors == [None, None], f"{kind} beside a blocking commit raised {errors}"
                assert committed is Outcome.COMMITTED, f"the blocking commit answered {committed}"
                assert woke, f"the {kind} answered {woke!r}"
                run = decider.get_run("run-1")
                assert run is not None and run.status is RunStatus.PENDING, (
                    f"a {kind} committed beside a blocking decision ({'decision' if decision_first else kind} "
                    f"first) left the run {run.status.value if run else None}: the wake-up was lost; read the "
                    "wake-up mark and the run's status only under the run's row lock"
                )
                assert [c.run_id for c in decider.claim_runs("w2", LEASE, 1)] == ["run-1"]
