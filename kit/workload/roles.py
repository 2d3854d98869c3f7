"""The three stress loops: deciders, command workers and timer loops, on the real runtime.

Each decides, works and fires exactly as :mod:`kit.runtime` does (the
decision is :meth:`kit.runtime.Decider.plan` of the snapshot, the commands run
the scenario handlers, timers fire through ``fire_due_timers``), but through
:meth:`~kit.workload.actor.Actor.call`, so every operation is recorded and the
nemesis can strike it. Protocol outcomes are never retried; a lost
acknowledgement is retried once (that retry is the duplicate after a lost ack).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kit.clock import to_micros
from kit.contract import JSON, Outcome, RunClaim, Snapshot, Storage, StorageError
from kit.contract import CommandClaim as _CommandClaim
from kit.faults.nemesis import FaultKind
from kit.runtime.decider import Decider
from kit.runtime.module import DigestMismatch, UnknownWorkflow
from kit.runtime.scenarios import HANDLERS
from kit.runtime.worker import CommandContext, CommandError
from kit.workload.actor import Actor, Crashed, outcome_judge
from kit.workload.history import FAIL, OK, history_digest

__all__ = ["DeciderActor", "TimerActor", "WorkerActor", "decision_value", "snapshot_value"]

FIRE_LIMIT = 20


def _us(lease: timedelta) -> int:
    return int(lease.total_seconds() * 1_000_000)


def _claims_value(claims: list[RunClaim]) -> tuple[str, Any]:
    return OK, [{"run": c.run_id, "gen": c.generation, "revision": c.revision,
                 "expires_us": to_micros(c.expires_at)} for c in claims]


def _command_claims_value(claims: list[_CommandClaim]) -> tuple[str, Any]:
    return OK, [{"command": c.command_id, "run": c.run_id, "gen": c.generation, "attempt": c.attempt,
                 "name": c.name, "expires_us": to_micros(c.expires_at)} for c in claims]


def snapshot_value(result: Snapshot | Outcome) -> tuple[str, Any]:
    """How a ``load_claimed`` result is written in the history."""
    if isinstance(result, Outcome):
        return FAIL, result.value
    return OK, {
        "revision": result.run.revision, "status": result.run.status.value,
        "history_len": len(result.history), "history_hash": history_digest(result.history),
        "signals": [s.signal_id for s in result.signals],
        "commands": [c.command_id for c in result.command_results],
        "timers": [t.timer_id for t in result.timers],
    }


def decision_value(expected_revision: int, decision: Any) -> dict[str, JSON]:
    """What a commit's invocation records of its decision (enough for every checker)."""
    value: dict[str, JSON] = {
        "expected_revision": expected_revision, "next_status": decision.next_status.value,
        "events": len(decision.events), "event_keys": [e.operation_key for e in decision.events],
        "commands": [c.operation_key for c in decision.commands], "timers": [t.operation_key for t in decision.timers],
        "consume_signals": list(decision.consume_signals), "consume_commands": list(decision.consume_commands),
        "consume_timers": list(decision.consume_timers), "cancel_timers": list(decision.cancel_timers),
    }
    if decision.next_status.terminal:
        value["output"], value["error"] = decision.output, decision.error
    return value


def _fired_value(timers: list[Any]) -> tuple[str, Any]:
    return OK, [{"timer": t.timer_id, "run": t.run_id, "fire_at_us": to_micros(t.fire_at)} for t in timers]


def _claim_one_then(actor: Actor, tenant: str, op: str, claim: Callable[[Storage], list[Any]],
                    judge: Callable[[Any], tuple[str, Any]], holding: str, then: Callable[[Any], None]) -> int:
    """Claim at most one item through ``actor.call`` and hand it to ``then``.

    A nemesis crash aimed at the claim strikes right after it succeeded: the actor vanishes holding
    the claim (the lease must then expire); any other fault is applied to the claim call itself.
    """
    lease = actor.ctx.config.lease
    fault = actor.take("claim")
    crash = fault if fault is not None and fault.kind is FaultKind.CRASH else None
    _, claims = actor.call(tenant, op, claim, judge, value={"lease_us": _us(lease), "limit": 1},
                           fault=None if crash else fault)
    if not claims:
        return 0
    if crash is not None:
        actor._applied(crash, "after claiming", True)
        raise Crashed(f"vanished holding {holding}", crash)
    for item in claims:
        then(item)
    return len(claims)


class DeciderActor(Actor):
    """Claims runs, replays each through its WASM module, commits one fenced decision."""

    role, letter = "decider", "d"

    def step(self, tenant: str) -> int:
        lease = self.ctx.config.lease
        return _claim_one_then(self, tenant, "claim_runs", lambda s: s.claim_runs(self.process, lease, 1),
                               _claims_value, "its claim", lambda claim: self.decide(tenant, claim, lease))

    def decide(self, tenant: str, claim: RunClaim, lease: timedelta) -> None:
        keys = {"run": claim.run_id, "gen": claim.generation}
        kind, snapshot = self.call(tenant, "load", lambda s: s.load_claimed(claim), snapshot_value, keys=keys)
        if kind != OK or not isinstance(snapshot, Snapshot):
            return
        store, _ = self.store(tenant)
        try:
            plan = Decider(store, self.ctx.registry, worker_id=self.process, lease=lease).plan(snapshot)
        except (DigestMismatch, UnknownWorkflow) as exc:
            self.ctx.note(f"refused: {exc}")
            return
        fault = self.take("commit")
        if fault is not None and fault.kind is FaultKind.CRASH:
            self._applied(fault, "before committing", True)
            raise Crashed("vanished before committing, holding its claim", fault)
        if fault is not None and fault.kind is FaultKind.PAUSE and fault.point == "plan":
            self._applied(fault, "while deciding", True)
            self._sleep(fault.seconds)
            fault = None
        if not self.believes_live(claim.expires_at, lease):
            renewed, _ = self.call(tenant, "renew", lambda s: s.renew_run_claim(claim, lease),
                                   outcome_judge("renewed"), value={"lease_us": _us(lease)}, keys=keys)
            if renewed != OK:
                return
        decision = plan.decision()
        revision = snapshot.run.revision
        self.deliver_once_or_twice(
            tenant, "commit", lambda s: s.commit_decision(claim, revision, decision), outcome_judge("committed"),
            fault, value=decision_value(revision, decision), keys=keys,
        )


class _HandlerStore:
    """What a handler's ``ctx.store`` is: the worker's store, with ``request_cancel`` recorded."""

    def __init__(self, actor: Actor, tenant: str) -> None:
        self._actor, self._tenant = actor, tenant

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome:
        kind, outcome = self._actor.call(
            self._tenant, "cancel", lambda s: s.request_cancel(run_id, reason),
            outcome_judge("committed", "duplicate"), value={"reason": reason}, keys={"run": run_id},
        )
        if outcome is None:  # the handler fails and is retried, as with a real store fault
            raise StorageError(f"request_cancel({run_id!r}) did not complete ({kind})")
        return outcome

    def __getattr__(self, name: str) -> Any:
        return getattr(self._actor.store(self._tenant)[0], name)


class WorkerActor(Actor):
    """Claims commands, runs the scenario handlers, completes or fails each attempt once."""

    role, letter = "worker", "w"

    def step(self, tenant: str) -> int:
        lease = self.ctx.config.lease
        return _claim_one_then(self, tenant, "claim_commands", lambda s: s.claim_commands(self.process, lease, 1),
                               _command_claims_value, "its command claim",
                               lambda claim: self.work(tenant, claim, lease))

    def work(self, tenant: str, claim: _CommandClaim, lease: timedelta) -> None:
        keys = {"command": claim.command_id, "run": claim.run_id, "gen": claim.generation}
        handler = HANDLERS.get(claim.name)
        ctx = CommandContext(claim, _HandlerStore(self, tenant), lease)
        report: tuple[str, JSON, bool]
        try:
            if handler is None:
                raise CommandError({"type": "UnknownCommand", "message": f"no handler for {claim.name!r}"})
            report = ("complete", handler(ctx, claim.input), True)
        except CommandError as exc:
            report = ("fail", exc.error, exc.retryable)
        except Exception as exc:  # noqa: BLE001 - a handler bug is a retryable failure, as in the runtime
            report = ("fail", {"type": type(exc).__name__, "message": str(exc)}, True)
        fault = self.take("complete")
        if fault is not None and fault.kind is FaultKind.CRASH:
            self._applied(fault, "before reporting", True)
            raise Crashed("vanished before reporting its command, holding the claim", fault)
        if not self.believes_live(claim.expires_at, lease):
            beat, _ = self.call(tenant, "heartbeat", lambda s: s.heartbeat_command(claim, lease),
                                outcome_judge("renewed"), value={"lease_us": _us(lease)}, keys=keys)
            if beat != OK:
                return
        what, data, retryable = report
        retry_after = timedelta(milliseconds=10)
        if what == "complete":
            self.deliver_once_or_twice(
                tenant, "complete", lambda s: s.complete_command(claim, data), outcome_judge("completed"),
                fault, value={"result": data}, keys=keys,
            )
        else:
            self.deliver_once_or_twice(
                tenant, "fail", lambda s: s.fail_command(claim, data, retry_after=retry_after, retryable=retryable),
                outcome_judge("retry_scheduled", "failed"), fault,
                value={"error": data, "retryable": retryable}, keys=keys,
            )


class TimerActor(Actor):
    """Fires due timers (the store decides what is due, by its own clock)."""

    role, letter = "timers", "t"
    idle_max_s = 0.01

    def step(self, tenant: str) -> int:
        fault = self.take("fire")
        crash = fault if fault is not None and fault.kind is FaultKind.CRASH else None
        _, fired = self.deliver_once_or_twice(
            tenant, "fire", lambda s: s.fire_due_timers(FIRE_LIMIT), _fired_value,
            None if crash else fault, value={"limit": FIRE_LIMIT},
        )
        if crash is not None:
            self._applied(crash, "after firing", True)
            raise Crashed("vanished after firing timers", crash)
        return len(fired or [])
