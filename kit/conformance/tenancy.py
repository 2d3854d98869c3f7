"""Tenancy: a store sees, claims and changes only its own tenant's data."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from kit.conformance._harness import LEASE, AreaChecks, requires
from kit.contract import (
    Capability,
    Decision,
    NewCommand,
    NewEvent,
    NewTimer,
    Promise,
    RunClaim,
    RunStatus,
    Snapshot,
    Storage,
)
from kit.contract.outcomes import Outcome

__all__ = ["TenancyChecks"]


@requires(Promise.TENANCY)
class TenancyChecks(AreaChecks):
    area = "tenancy"

    @pytest.fixture
    def other(self, open_store: Callable[..., Storage]) -> Storage:
        """A store for another tenant on the same database."""
        return open_store("tenant-b")

    def test_other_tenants_runs_are_invisible(self, store: Storage, other: Storage) -> None:
        """Another tenant's runs are not found and not listed."""
        self.start(store, "run-1")
        assert other.get_run("run-1") is None
        assert other.list_runs() == []
        assert other.get_history("run-1") == []

    def test_other_tenants_runs_are_unclaimable(self, store: Storage, other: Storage) -> None:
        """Another tenant's runnable runs are never claimed."""
        self.start(store, "run-1")
        assert other.claim_runs("w-b", LEASE, limit=10) == []
        assert self.claim_one(store).run_id == "run-1"

    @requires(Promise.SIGNALS, Promise.CANCEL_REQUESTS)
    def test_other_tenants_runs_are_unsignalable(self, store: Storage, other: Storage) -> None:
        """A signal or cancel aimed at another tenant's run is not_found and changes nothing."""
        self.waiting(store)
        assert other.send_signal("run-1", "go", {}, "s").outcome is Outcome.NOT_FOUND
        assert other.request_cancel("run-1") is Outcome.NOT_FOUND
        assert store.list_signals("run-1") == []
        assert store.get_run("run-1").status is self.waiting_status()  # type: ignore[union-attr]

    def test_other_tenants_claim_cannot_commit(self, store: Storage, other: Storage) -> None:
        """A claim from one tenant is not_found when used through another tenant's store."""
        claim = self.started_and_claimed(store)
        assert other.commit_decision(claim, 0, Decision(RunStatus.COMPLETED)) is Outcome.NOT_FOUND
        assert store.get_run("run-1").status is RunStatus.RUNNING  # type: ignore[union-attr]

    def test_same_run_id_in_two_tenants(self, store: Storage, other: Storage) -> None:
        """Two tenants may use the same run id and idempotency key independently."""
        a = store.start_run("run-1", self.define(store), {"t": "a"}, idempotency_key="k").run
        b_result = other.start_run("run-1", self.define(other), {"t": "b"}, idempotency_key="k")
        assert b_result.created and b_result.run.input == {"t": "b"}
        assert store.get_run("run-1") == a

    @requires(Promise.DEFINITIONS)
    def test_definitions_are_per_tenant(self, store: Storage, other: Storage) -> None:
        """Definitions of one tenant are invisible to another."""
        self.define(store, "wf", b"tenant a body")
        assert other.get_definition("wf", "1") is None

    @requires(Promise.COMMANDS, Promise.TIMERS, Capability.TEST_CLOCK)
    def test_other_tenants_commands_and_timers_are_untouched(self, store: Storage, other: Storage) -> None:
        """Another tenant's commands are never claimed and its timers never fired."""
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, 0, Decision(
            self.waiting_status(), commands=(NewCommand("op", "x"),), timers=(NewTimer("t", delay=timedelta(seconds=1)),)
        ))
        store.advance_test_clock(timedelta(seconds=2))
        assert other.claim_commands("w-b", LEASE, limit=10) == []
        assert other.fire_due_timers() == []
        assert other.list_commands("run-1") == [] and other.list_timers("run-1") == []
        assert len(store.claim_commands("w-a", LEASE)) == 1

    # -- one run id in two tenants -------------------------------------------
    def _run_1_claimed_in_both(self, store: Storage, other: Storage) -> tuple[RunClaim, RunClaim]:
        """run-1 started in both tenants and claimed by worker w1: two claims alike but for the tenant."""
        a = self.started_and_claimed(store)
        b = self.started_and_claimed(other)
        assert (a.generation, b.generation) == (1, 1), f"expected generation 1 in both tenants, got {a} and {b}"
        return a, b

    def _keyed_decision(self, tenant: str, timers: bool = True) -> Decision:
        """Waits on command ``op`` and timer ``t`` (unless ``timers`` is false), recording event ``op``;
        payloads name the tenant."""
        return Decision(
            self.waiting_status(),
            events=(NewEvent("command-scheduled", {"tenant": tenant}, operation_key="op"),),
            commands=(NewCommand("op", "do-work", {"tenant": tenant}),),
            timers=(NewTimer("t", delay=timedelta(seconds=10)),) if timers else (),
        )

    @requires(Promise.GENERATION_FENCING, Promise.COMMANDS, Promise.SIGNALS, Promise.TIMERS, Capability.TEST_CLOCK)
    def test_colliding_run_id_is_untouched_by_other_tenant(self, store: Storage, other: Storage) -> None:
        """Another tenant's commit, signal, timer and command on the same run id leave this tenant's run untouched."""
        a, b = self._run_1_claimed_in_both(store, other)
        b_run = other.get_run("run-1")
        assert store.commit_decision(a, a.revision, self._keyed_decision("a")) is Outcome.COMMITTED
        assert store.send_signal("run-1", "go", {"tenant": "a"}, "s").created
        store.advance_test_clock(timedelta(seconds=10))
        assert [t.operation_key for t in store.fire_due_timers()] == ["t"]
        claims = store.claim_commands("w1", LEASE)
        assert len(claims) == 1 and store.complete_command(claims[0], {"tenant": "a"}) is Outcome.COMPLETED
        assert other.get_run("run-1") == b_run, "another tenant's writes to its run-1 changed this tenant's run-1"
        assert other.get_history("run-1") == [], "another tenant's events show in this tenant's history"
        leaked = (other.list_commands("run-1"), other.list_signals("run-1"), other.list_timers("run-1"))
        assert leaked == ([], [], []), f"another tenant's commands, signals or timers show here: {leaked}"
        snapshot = other.load_claimed(b)
        assert isinstance(snapshot, Snapshot), f"this tenant's live claim could not load its run: {snapshot}"
        loaded = (snapshot.history, snapshot.command_results, snapshot.signals, snapshot.timers)
        assert snapshot.run == b_run and loaded == ((), (), (), ()), f"the snapshot holds another tenant's data: {snapshot}"

    @requires(Promise.GENERATION_FENCING, Promise.EXPECTED_REVISION, Promise.COMMANDS, Promise.SIGNALS, Promise.TIMERS)
    def test_colliding_run_id_keeps_keys_per_tenant(self, store: Storage, other: Storage) -> None:
        """On a run id another tenant also uses, history starts at seq 1 and no key is deduplicated across tenants."""
        a, b = self._run_1_claimed_in_both(store, other)
        assert store.commit_decision(a, a.revision, self._keyed_decision("a")) is Outcome.COMMITTED
        assert store.send_signal("run-1", "go", {"tenant": "a"}, "s").created
        a_state = self.observed(store)
        assert other.commit_decision(b, b.revision, self._keyed_decision("b")) is Outcome.COMMITTED
        receipt = other.send_signal("run-1", "go", {"tenant": "b"}, "s")
        assert receipt.outcome is Outcome.COMMITTED and receipt.created, f"signal deduplicated across tenants: {receipt}"
        history = [(e.seq, e.operation_key, e.payload, e.revision) for e in other.get_history("run-1")]
        assert history == [(1, "op", {"tenant": "b"}, 1)], f"history not started fresh at seq 1: {history}"
        commands = [(c.operation_key, c.input) for c in other.list_commands("run-1")]
        assert commands == [("op", {"tenant": "b"})], f"command not created fresh in this tenant: {commands}"
        timers = [t.operation_key for t in other.list_timers("run-1")]
        assert timers == ["t"], f"timer not created fresh in this tenant: {timers}"
        signals = [(s.dedup_key, s.payload) for s in other.list_signals("run-1")]
        assert signals == [("s", {"tenant": "b"})], f"signal not created fresh in this tenant: {signals}"
        b_run = other.get_run("run-1")
        assert b_run is not None and b_run.revision == 1, f"expected revision 1 after one commit, got {b_run}"
        assert self.observed(store) == a_state, "a tenant's writes changed another tenant's run of the same id"

    @requires(Promise.GENERATION_FENCING, Promise.COMMANDS, Promise.LEASES)
    def test_other_tenants_command_claim_is_not_found(self, store: Storage, other: Storage) -> None:
        """A command claim used through another tenant's store is not_found there, even on a shared run id, and changes nothing."""
        a, _ = self._run_1_claimed_in_both(store, other)
        assert store.commit_decision(a, a.revision, self._keyed_decision("a", timers=False)) is Outcome.COMMITTED
        claims = store.claim_commands("w1", LEASE)
        assert len(claims) == 1, f"expected one claimable command, got {claims}"
        cmd = claims[0]
        assert other.get_command(cmd.command_id) is None, "another tenant's command is readable here"
        before = (self.observed(store), self.observed(other))
        outcomes = (
            other.heartbeat_command(cmd, LEASE),
            other.complete_command(cmd, {"tenant": "b"}),
            other.fail_command(cmd, {"tenant": "b"}, retryable=False),
        )
        assert outcomes == (Outcome.NOT_FOUND,) * 3, f"heartbeat, complete, fail through another tenant: {outcomes}"
        assert (self.observed(store), self.observed(other)) == before, "another tenant's claim changed something"
        assert store.complete_command(cmd, {"tenant": "a"}) is Outcome.COMPLETED
