"""Tenancy: a store sees, claims and changes only its own tenant's data."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from kit.conformance._harness import LEASE, AreaChecks
from kit.contract import Capability, Decision, NewCommand, NewTimer, RunStatus, Storage
from kit.contract.outcomes import Outcome

__all__ = ["TenancyChecks"]


class TenancyChecks(AreaChecks):
    area = "tenancy"

    @pytest.fixture
    def other(self, open_store: Callable[..., Storage], kit_backend: object) -> Storage:
        """A store for another tenant on the same database."""
        if Capability.TENANCY not in kit_backend.capabilities:  # type: ignore[attr-defined]
            pytest.skip(f"unsupported: backend {kit_backend.name!r} does not declare tenancy")  # type: ignore[attr-defined]
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

    def test_other_tenants_runs_are_unsignalable(self, store: Storage, other: Storage) -> None:
        """A signal or cancel aimed at another tenant's run is not_found and changes nothing."""
        self.blocked(store)
        assert other.send_signal("run-1", "go", {}, "s").outcome is Outcome.NOT_FOUND
        assert other.request_cancel("run-1") is Outcome.NOT_FOUND
        assert store.list_signals("run-1") == []
        assert store.get_run("run-1").status is RunStatus.BLOCKED  # type: ignore[union-attr]

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

    def test_definitions_are_per_tenant(self, store: Storage, other: Storage) -> None:
        """Definitions of one tenant are invisible to another."""
        self.define(store, "wf", b"tenant a body")
        assert other.get_definition("wf", "1") is None

    def test_other_tenants_commands_and_timers_are_untouched(self, store: Storage, other: Storage) -> None:
        """Another tenant's commands are never claimed and its timers never fired."""
        claim = self.started_and_claimed(store)
        store.commit_decision(claim, 0, Decision(
            RunStatus.BLOCKED, commands=(NewCommand("op", "x"),), timers=(NewTimer("t", delay=timedelta(seconds=1)),)
        ))
        store.advance_test_clock(timedelta(seconds=2))
        assert other.claim_commands("w-b", LEASE, limit=10) == []
        assert other.fire_due_timers() == []
        assert other.list_commands("run-1") == [] and other.list_timers("run-1") == []
        assert len(store.claim_commands("w-a", LEASE)) == 1
