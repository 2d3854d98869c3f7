"""CONTRACT.md section 6 judged from one store's answers and observable state alone, with no model.

The model-free machine knows no expected state. What it knows is what a client
knows: the state it could read before a step, the claims it holds, the answers
the store gave (and which of them were lost to a fault), and the state it reads
afterwards. From those alone each function here names every contradiction of a
promise, as a sentence; an empty list means the promises held:

- no stale effect (invariant 3): a fenced write (commit, renewal, release, load,
  heartbeat, completion, failure) is accepted only from the claim that was the
  current, live one when the step began, and a commit only at the revision it
  expected;
- at most one live claim per run and per command, generations only grow (invariant 4);
- duplicates applied once (invariants 5 and 6): a completion or a signal retried or
  delivered twice lands once (with the fence, and with unique keys in the state);
- nothing acknowledged lost, nothing rejected present (invariant 7): acknowledged
  starts, signals, commits and completions stay visible, and a refused write
  changes nothing;
- each revision written by one accepted decision (invariant 2), counted from the
  answers, with a lost acknowledgement or a killed session allowed either way;
- terminal runs and finished commands never change (invariant 8), and everything
  :func:`kit.machines.invariants.state_violations` checks on the state itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kit.contract import (
    CommandClaim,
    ConnectionLost,
    KitError,
    Outcome,
    RunClaim,
    SignalReceipt,
    Snapshot,
    StartResult,
    TransientError,
)
from kit.machines.invariants import state_violations

__all__ = ["ACCEPTED", "Call", "Ledger", "World", "judge"]

#: Answers that mean "the write happened" (CONTRACT.md section 3); anything else changed nothing.
ACCEPTED = frozenset({Outcome.COMMITTED, Outcome.RENEWED, Outcome.COMPLETED, Outcome.RETRY_SCHEDULED, Outcome.FAILED})

_RUN_FENCED = ("commit", "renew", "release", "load")
_COMMAND_FENCED = ("heartbeat", "complete", "fail")
#: Writes whose refusal must leave the whole state as it was.
_REFUSABLE = (*_RUN_FENCED, *_COMMAND_FENCED, "signal", "cancel", "start")


@dataclass(frozen=True)
class World:
    """What a client could read at one instant: every tenant's observable state and the store clock."""

    state: dict[str, dict[str, Any]]
    now: datetime

    def run(self, tenant: str, run_id: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.state.get(tenant, {}).get(run_id)
        return found

    def command(self, tenant: str, run_id: str, key: str) -> dict[str, Any] | None:
        run = self.run(tenant, run_id)
        found: dict[str, Any] | None = None if run is None else run["commands"].get(key)
        return found


@dataclass(frozen=True)
class Call:
    """One store call a step made: the single-operation step, its tenant, the claim it used, its answer.

    ``lost`` marks an answer the client never saw (the session died or the acknowledgement was
    lost): the write may or may not have landed, so it counts neither as accepted nor as refused.
    """

    step: dict[str, Any]
    tenant: str
    claim: RunClaim | CommandClaim | None
    raw: Any
    lost: bool = False

    @property
    def op(self) -> str:
        return str(self.step["op"])

    @property
    def unsure(self) -> bool:
        """The client cannot know whether the write landed: a fault ate the answer, or the connection did."""
        return self.lost or isinstance(self.raw, ConnectionLost | TransientError)

    @property
    def accepted(self) -> bool:
        if self.lost or isinstance(self.raw, BaseException):
            return False
        if isinstance(self.raw, Snapshot):
            return True
        if isinstance(self.raw, SignalReceipt):
            return self.raw.outcome is Outcome.COMMITTED
        if isinstance(self.raw, StartResult):
            return self.raw.created
        return isinstance(self.raw, Outcome) and self.raw in ACCEPTED

    @property
    def refused(self) -> bool:
        """The client was told the write did not happen (an outcome, or a KitError it raised)."""
        if self.unsure or self.accepted:
            return False
        return isinstance(self.raw, Outcome | SignalReceipt | StartResult | KitError)


@dataclass
class Ledger:
    """What the store acknowledged so far: it must stay visible (invariant 7)."""

    runs: set[tuple[str, str]] = field(default_factory=set)
    signals: set[tuple[str, str, str]] = field(default_factory=set)
    commits: Counter[tuple[str, str]] = field(default_factory=Counter)
    completions: dict[tuple[str, str, str], Any] = field(default_factory=dict)

    def record(self, calls: list[Call]) -> None:
        for call in calls:
            if not call.accepted:
                continue
            run = call.step.get("run", "")
            if call.op == "start":
                self.runs.add((call.tenant, run))
            elif call.op == "signal":
                self.signals.add((call.tenant, run, call.step["key"]))
            elif call.op == "commit":
                self.commits[(call.tenant, run)] += 1
            elif call.op == "complete":
                self.completions[(call.tenant, run, call.step["key"])] = call.step.get("result")

    def violations(self, after: World) -> list[str]:
        found: list[str] = []
        for tenant, run in sorted(self.runs):
            if after.run(tenant, run) is None:
                found.append(f"acknowledged start of run {run!r} (tenant {tenant}) is missing (invariant 7)")
        for tenant, run, key in sorted(self.signals):
            state = after.run(tenant, run)
            if state is None or key not in state["signals"]:
                found.append(f"acknowledged signal {key!r} to run {run!r} (tenant {tenant}) is missing (invariant 7)")
        for (tenant, run), count in sorted(self.commits.items()):
            state = after.run(tenant, run)
            if state is None or state["run"]["revision"] < count:
                revision = None if state is None else state["run"]["revision"]
                found.append(f"run {run!r} (tenant {tenant}): {count} decisions were acknowledged but its revision is "
                             f"{revision} (invariant 7)")
        for (tenant, run, key), result in sorted(self.completions.items(), key=lambda item: item[0]):
            command = after.command(tenant, run, key)
            if command is None or command["status"] != "completed" or command["result"] != result:
                seen = None if command is None else (command["status"], command["result"])
                found.append(f"command {key!r} of run {run!r} (tenant {tenant}): its acknowledged completion "
                             f"with {result!r} shows as {seen!r} (invariant 7)")
        return found


def judge(calls: list[Call], before: World, after: World, ledger: Ledger) -> list[str]:
    """Every promise the step's answers and the state after it contradict (see the module docstring)."""
    found = state_violations(before.state, after.state, after.now)
    found += _finished_commands_unchanged(before, after)
    found += _claims(calls, before, after)
    for call in calls:
        if call.accepted and call.op in _RUN_FENCED:
            found += _run_fence(call, before)
        if call.accepted and call.op in _COMMAND_FENCED:
            found += _command_fence(call, before)
        if call.op == "complete" and call.accepted and (call.tenant, call.step["run"], call.step["key"]) in ledger.completions:
            found.append(f"command {call.step['key']!r} of run {call.step['run']!r}: a second completion was accepted "
                         "(a completion is applied once; invariant 5)")
    found += _revisions(calls, before, after)
    if len(calls) == 1 and calls[0].refused and calls[0].op in _REFUSABLE and before.state != after.state:
        found.append(f"the store refused the {calls[0].op} ({_answer(calls[0].raw)}) but the state changed "
                     "(nothing rejected is present; invariant 7)")
    ledger.record(calls)
    return found + ledger.violations(after)


def _answer(raw: Any) -> str:
    if isinstance(raw, SignalReceipt):
        return raw.outcome.value
    if isinstance(raw, Outcome):
        return raw.value
    if isinstance(raw, StartResult):
        return "existing run"
    return type(raw).__name__


def _live(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is None or expires_at > now


def _run_fence(call: Call, before: World) -> list[str]:
    """An accepted fenced run call came from the current, live claim (and, for a commit, the expected revision)."""
    claim = call.claim
    assert isinstance(claim, RunClaim)
    run = before.run(call.tenant, claim.run_id)
    what = f"{call.step['worker']}'s {call.op} of run {claim.run_id!r} with generation {claim.generation}"
    if run is None:
        return [f"{what} was accepted for a run that did not exist (invariant 3)"]
    r = run["run"]
    if r["status"] != "running" or r["claim_owner"] != claim.worker_id or r["claim_generation"] != claim.generation:
        return [f"{what} was accepted although the run was {r['status']} with claim {r['claim_owner']!r} generation "
                f"{r['claim_generation']}: a superseded claim had an effect (no stale effect; invariant 3)"]
    if r["claim_expires_at"] is not None and r["claim_expires_at"] <= before.now:
        return [f"{what} was accepted although its lease expired at {r['claim_expires_at'].isoformat()} "
                f"(store clock {before.now.isoformat()}; no stale effect; invariant 3)"]
    if call.op == "commit":
        expected = claim.revision + {"claim": 0, "stale": -1, "ahead": 1}[call.step.get("revision", "claim")]
        if expected != r["revision"]:
            return [f"{what} was accepted at expected revision {expected} while the run was at revision "
                    f"{r['revision']} (a decision on another revision; invariant 3)"]
    return []


def _command_fence(call: Call, before: World) -> list[str]:
    """An accepted heartbeat, completion or failure came from the command's current, live claim."""
    claim = call.claim
    assert isinstance(claim, CommandClaim)
    command = before.command(call.tenant, claim.run_id, claim.operation_key)
    what = (f"{call.step['worker']}'s {call.op} of command {claim.operation_key!r} of run {claim.run_id!r} "
            f"with generation {claim.generation}")
    if command is None:
        return [f"{what} was accepted for a command that did not exist (invariant 3)"]
    if (command["status"] != "claimed" or command["claim_owner"] != claim.worker_id
            or command["claim_generation"] != claim.generation):
        return [f"{what} was accepted although the command was {command['status']} with claim "
                f"{command['claim_owner']!r} generation {command['claim_generation']} (no stale effect; duplicates "
                "applied once; invariant 3)"]
    if not _live(command["claim_expires_at"], before.now):
        return [f"{what} was accepted although its lease expired at {command['claim_expires_at'].isoformat()} "
                f"(store clock {before.now.isoformat()}; no stale effect; invariant 3)"]
    return []


def _claims(calls: list[Call], before: World, after: World) -> list[str]:
    """No claim is granted while another is live, and every new claim has a higher generation (invariant 4)."""
    found: list[str] = []
    granted: Counter[tuple[str, str, str]] = Counter()
    for call in calls:
        if call.op not in ("claim_runs", "claim_commands") or not isinstance(call.raw, list):
            continue
        for claim in call.raw:
            if isinstance(claim, RunClaim):
                old = before.run(call.tenant, claim.run_id)
                held = None if old is None else old["run"]
                key, what = (call.tenant, claim.run_id, ""), f"run {claim.run_id!r}"
                live = held is not None and held["status"] == "running"
            else:
                assert isinstance(claim, CommandClaim)
                held = before.command(call.tenant, claim.run_id, claim.operation_key)
                key = (call.tenant, claim.run_id, claim.operation_key)
                what = f"command {claim.operation_key!r} of run {claim.run_id!r}"
                live = held is not None and held["status"] == "claimed"
            granted[key] += 1
            if held is None:
                found.append(f"{call.step['worker']} was granted a claim on {what}, which did not exist (invariant 4)")
                continue
            if live and _live(held["claim_expires_at"], after.now):
                found.append(f"{call.step['worker']} was granted {what} (generation {claim.generation}) while "
                             f"{held['claim_owner']!r}'s claim (generation {held['claim_generation']}) was live until "
                             f"{held['claim_expires_at'].isoformat()}: two live claims (invariant 4)")
            if claim.generation <= held["claim_generation"]:
                found.append(f"{call.step['worker']}'s new claim on {what} has generation {claim.generation}, not above "
                             f"the previous {held['claim_generation']}: generations only grow (invariant 4)")
    for (tenant, run, key), count in sorted(granted.items()):
        if count > 1:
            what = f"command {key!r} of run {run!r}" if key else f"run {run!r}"
            found.append(f"{what} (tenant {tenant}) was granted {count} times in one step: two live claims (invariant 4)")
    return found


def _revisions(calls: list[Call], before: World, after: World) -> list[str]:
    """Each new revision was written by one accepted decision (lost answers may count either way)."""
    accepted: Counter[tuple[str, str]] = Counter()
    unsure: Counter[tuple[str, str]] = Counter()
    for call in calls:
        if call.op == "commit":
            (accepted if call.accepted else unsure if call.unsure else Counter())[(call.tenant, call.step["run"])] += 1
    found: list[str] = []
    for tenant, runs in after.state.items():
        for run_id, state in runs.items():
            if state is None:
                continue
            old = before.run(tenant, run_id)
            grew = state["run"]["revision"] - (0 if old is None else old["run"]["revision"])
            low, high = accepted[(tenant, run_id)], accepted[(tenant, run_id)] + unsure[(tenant, run_id)]
            if not low <= grew <= high:
                bound = str(low) if low == high else f"{low} to {high}"
                found.append(f"run {run_id!r} (tenant {tenant}): revision moved by {grew} in a step with {bound} "
                             "accepted decisions (each revision is one committed decision; invariant 2)")
    return found


def _finished_commands_unchanged(before: World, after: World) -> list[str]:
    """A completed, failed or cancelled command keeps its status, result and error (only ``consumed`` may change)."""
    found: list[str] = []
    for tenant, runs in before.state.items():
        for run_id, state in runs.items():
            for key, old in (state or {}).get("commands", {}).items():
                if old["status"] not in ("completed", "failed", "cancelled"):
                    continue
                new = after.command(tenant, run_id, key)
                if new is None or {**new, "consumed": None} != {**old, "consumed": None}:
                    seen = None if new is None else (new["status"], new["result"], new["error"])
                    found.append(f"command {key!r} of run {run_id!r} (tenant {tenant}) was {old['status']} and then "
                                 f"changed to {seen!r} (a finished command never changes; invariant 8)")
    return found
