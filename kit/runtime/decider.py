"""The decider: claim runs, replay each through its module, commit one fenced decision.

Guarantees:

* A decision is committed only through ``commit_decision`` with the claim and
  the snapshot's revision; every outcome but ``committed`` (``claim_lost``,
  ``revision_mismatch``, ``terminal``, ``not_found``) ends the attempt at once.
  Nothing is retried in a loop: whoever holds the run now decides it.
* A run whose stored definition digest differs from the loaded module is
  refused: not replayed, not committed, not released. Its claim simply
  expires, so a replica that has the right module can take it.
* Decisions are pure functions of the snapshot (see :mod:`kit.runtime.replay`),
  so it never matters which replica made one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from kit.contract import Outcome, RunClaim, Snapshot, Storage, TimerStatus
from kit.contract.errors import ConnectionLost, KitError
from kit.runtime import abi
from kit.runtime.module import DigestMismatch, Registry, UnknownWorkflow
from kit.runtime.replay import Inputs, Plan, execute
from kit.runtime.stats import RuntimeStats

__all__ = ["DEFAULT_DECISION_LEASE", "ERROR", "REFUSED", "Decider"]

DEFAULT_DECISION_LEASE = timedelta(seconds=30)
REFUSED = "refused"
ERROR = "error"


class Decider:
    """Decides runs on one store (not thread-safe, like the store: one per thread)."""

    def __init__(
        self,
        store: Storage,
        registry: Registry,
        *,
        worker_id: str | None = None,
        lease: timedelta = DEFAULT_DECISION_LEASE,
        batch: int = 1,
        fuel: int = abi.DEFAULT_FUEL,
        stats: RuntimeStats | None = None,
        on_commit: Callable[[Plan], None] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.worker_id = worker_id or f"decider-{uuid.uuid4().hex[:10]}"
        self.lease = lease
        self.batch = batch
        self.fuel = fuel
        self.stats = stats if stats is not None else RuntimeStats()
        self.on_commit = on_commit

    def poll(self) -> int:
        """Claim up to ``batch`` runs and make one attempt on each; return how many were claimed."""
        claims = self.store.claim_runs(self.worker_id, self.lease, self.batch)
        for claim in claims:
            self.attempt(claim)
        return len(claims)

    def attempt(self, claim: RunClaim) -> str:
        """Load, decide and commit ``claim`` once; return how the attempt ended."""
        started = time.perf_counter()
        try:
            snapshot = self.store.load_claimed(claim)
        except ConnectionLost:
            raise
        except KitError as exc:
            self.stats.fault("load_claimed", str(exc))
            self.stats.attempt(ERROR)
            return ERROR
        if isinstance(snapshot, Outcome):
            self.stats.attempt(snapshot.value)
            return snapshot.value
        return self.decide(claim, snapshot, started)

    def plan(self, snapshot: Snapshot) -> Plan:
        """The decision for ``snapshot``; raises DigestMismatch / UnknownWorkflow to refuse."""
        run = snapshot.run
        module = self.registry.for_run(run)
        open_timers: dict[str, str] = {}
        if run.cancel_requested and not any(e.kind == "cancel_delivered" for e in snapshot.history):
            open_timers = {
                t.operation_key: t.timer_id
                for t in self.store.list_timers(run.run_id)
                if t.status is TimerStatus.SCHEDULED
            }
        return execute(
            module, run.input, snapshot.history, Inputs.from_snapshot(snapshot, open_timers), self.fuel
        )

    def decide(self, claim: RunClaim, snapshot: Snapshot, started: float | None = None) -> str:
        """Commit the decision for ``snapshot`` under ``claim``, exactly once; return the outcome."""
        started = time.perf_counter() if started is None else started
        try:
            plan = self.plan(snapshot)
        except (DigestMismatch, UnknownWorkflow) as exc:
            self.stats.note(str(exc))
            self.stats.attempt(REFUSED)
            return REFUSED
        try:
            outcome = self.store.commit_decision(claim, snapshot.run.revision, plan.decision())
        except ConnectionLost:
            raise
        except KitError as exc:
            self.stats.fault("commit_decision", str(exc))
            self.stats.attempt(ERROR)
            return ERROR
        if outcome is Outcome.COMMITTED:
            ended = plan.status.value if plan.status.terminal else None
            self.stats.attempt(outcome.value, time.perf_counter() - started, ended)
            if self.on_commit is not None:
                self.on_commit(plan)
        else:
            self.stats.attempt(outcome.value)
        return outcome.value
