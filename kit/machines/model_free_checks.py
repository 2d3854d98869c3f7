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

A rule about a promise family is applied only to a store that makes it: the claim's
identity with ``generation_fencing``, the lease with ``leases``, the revision with
``expected_revision``, a decision landing whole with ``atomic_decision``, a blocked
run waking on input that arrived during its decision with ``wake_on_input``.
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
    definitions: dict[str, dict[str, str | None]] = field(default_factory=dict)
    """tenant -> definition name -> digest (None: absent), for the names the steps defined."""

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
    arrivals: set[tuple[str, str, int]] = field(default_factory=set)
    """(tenant, run, generation): input landed while that claim generation was running the run."""

    def record(self, calls: list[Call], before: World) -> None:
        for call in calls:
            for run_id in _inputs(call):
                run = before.run(call.tenant, run_id)
                if run is not None and run["run"]["status"] == "running":
                    self.arrivals.add((call.tenant, run_id, run["run"]["claim_generation"]))
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
                found.append(f"acknowledged start of run {_name(run)} (tenant {tenant}) is missing (invariant 7)")
        for tenant, run, key in sorted(self.signals):
            state = after.run(tenant, run)
            if state is None or key not in state["signals"]:
                found.append(f"acknowledged signal {key!r} to run {_name(run)} (tenant {tenant}) is missing (invariant 7)")
        for (tenant, run), count in sorted(self.commits.items()):
            state = after.run(tenant, run)
            if state is None or state["run"]["revision"] < count:
                revision = None if state is None else state["run"]["revision"]
                found.append(f"run {_name(run)} (tenant {tenant}): {count} decisions were acknowledged but its revision is "
                             f"{revision} (invariant 7)")
        for (tenant, run, key), result in sorted(self.completions.items(), key=lambda item: item[0]):
            command = after.command(tenant, run, key)
            if command is None or command["status"] != "completed" or command["result"] != result:
                seen = None if command is None else (_plain(command["status"]), command["result"])
                found.append(f"command {key!r} of run {_name(run)} (tenant {tenant}): its acknowledged completion "
                             f"with {result!r} shows as {seen!r} (invariant 7)")
        return found


def judge(calls: list[Call], before: World, after: World, ledger: Ledger, promised: frozenset[str]) -> list[str]:
    """Every promise in ``promised`` the step's answers and the state after it contradict (see the module
    docstring); the wake-up and all-or-nothing decision rules apply only to a store that makes those promises
    (``wake_on_input``, ``atomic_decision``)."""
    found = state_violations(before.state, after.state, after.now)
    found += _state_alone(before, after, "atomic_decision" in promised)
    found += _claims(calls, before, after, "generation_fencing" in promised)
    for call in calls:
        found += _answer_matches_request(call)
        if call.accepted and call.op in _RUN_FENCED:
            found += _run_fence(call, before, promised)
        if call.accepted and call.op in _COMMAND_FENCED:
            found += _command_fence(call, before, promised)
        if call.accepted and call.op == "load":
            found += _snapshot_is_the_waiting_input(call, before)
        if "wake_on_input" in promised and call.accepted and call.op == "commit":
            found += _no_lost_wakeup(call, after, ledger)
        if call.op == "complete" and call.accepted and (call.tenant, call.step["run"], call.step["key"]) in ledger.completions:
            found.append(f"command {call.step['key']!r} of run {call.step['run']!r}: a second completion was accepted "
                         "(a completion is applied once; invariant 5)")
    found += _revisions(calls, before, after)
    if any(call.op == "uow_inner_failure" for call in calls) and before.state != after.state:
        found.append("a unit of work whose inner block failed changed the state: the whole unit rolls back "
                     "(unit of work)")
    if len(calls) == 1 and calls[0].refused and calls[0].op in _REFUSABLE and before.state != after.state:
        found.append(f"the store refused the {calls[0].op} ({_answer(calls[0].raw)}) but the state changed "
                     "(nothing rejected is present; invariant 7)")
    ledger.record(calls, before)
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


def _run_fence(call: Call, before: World, promised: frozenset[str]) -> list[str]:
    """An accepted fenced run call came from the current claim (``generation_fencing``), whose lease was live
    (``leases``), and a commit from the expected revision (``expected_revision``); a running run in any case."""
    claim = call.claim
    assert isinstance(claim, RunClaim)
    run = before.run(call.tenant, claim.run_id)
    what = f"{call.step['worker']}'s {call.op} of run {_name(claim.run_id)} with generation {claim.generation}"
    if run is None:
        return [f"{what} was accepted for a run that did not exist (invariant 3)"]
    r = run["run"]
    stale = r["claim_owner"] != claim.worker_id or r["claim_generation"] != claim.generation
    if r["status"] != "running" or stale and "generation_fencing" in promised:
        return [(f"{what} was accepted although the run was {_plain(r['status'])} with claim {r['claim_owner']!r} generation "
                f"{r['claim_generation']}: a superseded claim had an effect (no stale effect; invariant 3)")]
    if "leases" in promised and r["claim_expires_at"] is not None and r["claim_expires_at"] <= before.now:
        return [(f"{what} was accepted although its lease expired at {r['claim_expires_at'].isoformat()} "
                f"(store clock {before.now.isoformat()}; no stale effect; invariant 3)")]
    if call.op == "commit" and "expected_revision" in promised:
        expected = claim.revision + {"claim": 0, "stale": -1, "ahead": 1}[call.step.get("revision", "claim")]
        if expected != r["revision"]:
            return [(f"{what} was accepted at expected revision {expected} while the run was at revision "
                    f"{r['revision']} (a decision on another revision; invariant 3)")]
    return []


def _command_fence(call: Call, before: World, promised: frozenset[str]) -> list[str]:
    """An accepted heartbeat, completion or failure came from a claimed command's current claim
    (``generation_fencing``), whose lease was live (``leases``)."""
    claim = call.claim
    assert isinstance(claim, CommandClaim)
    command = before.command(call.tenant, claim.run_id, claim.operation_key)
    what = (f"{call.step['worker']}'s {call.op} of command {claim.operation_key!r} of run {_name(claim.run_id)} "
            f"with generation {claim.generation}")
    if command is None:
        return [f"{what} was accepted for a command that did not exist (invariant 3)"]
    stale = command["claim_owner"] != claim.worker_id or command["claim_generation"] != claim.generation
    if command["status"] != "claimed" or stale and "generation_fencing" in promised:
        return [(f"{what} was accepted although the command was {_plain(command['status'])} with claim "
                f"{command['claim_owner']!r} generation {command['claim_generation']} (no stale effect; duplicates "
                "applied once; invariant 3)")]
    if "leases" in promised and not _live(command["claim_expires_at"], before.now):
        return [(f"{what} was accepted although its lease expired at {command['claim_expires_at'].isoformat()} "
                f"(store clock {before.now.isoformat()}; no stale effect; invariant 3)")]
    return []


def _claims(calls: list[Call], before: World, after: World, fencing: bool) -> list[str]:
    """No claim is granted while another is live, the store shows the claim it granted, and (``fencing``)
    every new claim has a higher generation (invariant 4)."""
    found: list[str] = []
    granted: Counter[tuple[str, str, str]] = Counter()
    for call in calls:
        if call.op not in ("claim_runs", "claim_commands") or not isinstance(call.raw, list):
            continue
        for claim in call.raw:
            if isinstance(claim, RunClaim):
                old = before.run(call.tenant, claim.run_id)
                held = None if old is None else old["run"]
                key, what = (call.tenant, claim.run_id, ""), f"run {_name(claim.run_id)}"
                live = held is not None and held["status"] == "running"
            else:
                assert isinstance(claim, CommandClaim)
                held = before.command(call.tenant, claim.run_id, claim.operation_key)
                key = (call.tenant, claim.run_id, claim.operation_key)
                what = f"command {claim.operation_key!r} of run {_name(claim.run_id)}"
                live = held is not None and held["status"] == "claimed"
            granted[key] += 1
            if held is None:
                found.append(f"{call.step['worker']} was granted a claim on {what}, which did not exist (invariant 4)")
                continue
            if live and _live(held["claim_expires_at"], after.now):
                found.append(f"{call.step['worker']} was granted {what} (generation {claim.generation}) while "
                             f"{held['claim_owner']!r}'s claim (generation {held['claim_generation']}) was live until "
                             f"{held['claim_expires_at'].isoformat()}: two live claims (invariant 4)")
            shown = after.run(call.tenant, claim.run_id) if isinstance(claim, RunClaim) else after.command(
                call.tenant, claim.run_id, claim.operation_key)
            now_held = None if shown is None else shown.get("run", shown)
            if now_held is not None and (now_held["claim_owner"], now_held["claim_generation"]) != (
                    claim.worker_id, claim.generation):
                found.append(f"{call.step['worker']} was granted {what} with generation {claim.generation}, but the "
                             f"store then shows claim {now_held['claim_owner']!r} generation "
                             f"{now_held['claim_generation']}: the answer is not the claim it holds (invariant 4)")
            if fencing and claim.generation <= held["claim_generation"]:
                found.append(f"{call.step['worker']}'s new claim on {what} has generation {claim.generation}, not above "
                             f"the previous {held['claim_generation']}: generations only grow (invariant 4)")
    for (tenant, run, operation_key), count in sorted(granted.items()):
        if count > 1:
            item = f"command {operation_key!r} of run {_name(run)}" if operation_key else f"run {_name(run)}"
            found.append(f"{item} (tenant {tenant}) was granted {count} times in one step: two live claims (invariant 4)")
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
                found.append(f"run {_name(run_id)} (tenant {tenant}): revision moved by {grew} in a step with {bound} "
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
                    seen = None if new is None else (_plain(new["status"]), new["result"], new["error"])
                    found.append(f"command {key!r} of run {_name(run_id)} (tenant {tenant}) was {_plain(old['status'])} and then "
                                 f"changed to {seen!r} (a finished command never changes; invariant 8)")
    return found


def _inputs(call: Call) -> list[str]:
    """The runs to which ``call`` delivered input (a signal, a command outcome, a fired timer)."""
    if call.op == "signal" and call.accepted:
        return [call.step["run"]]
    if call.op in ("complete", "fail") and call.accepted:
        return [call.step["run"]]
    if call.op == "fire_timers" and isinstance(call.raw, list):
        return [t.run_id for t in call.raw]
    return []


def _no_lost_wakeup(call: Call, after: World, ledger: Ledger) -> list[str]:
    """Input that landed while a claim ran the run wakes it: that claim's decision to block leaves it runnable."""
    claim = call.claim
    assert isinstance(claim, RunClaim)
    state = after.run(call.tenant, claim.run_id)
    if (call.step["decision"].get("status") == "blocked" and state is not None and state["run"]["status"] == "blocked"
            and (call.tenant, claim.run_id, claim.generation) in ledger.arrivals):
        return [(f"run {_name(claim.run_id)}: input arrived while generation {claim.generation} ran it, and that "
                "claim's decision to block left it blocked: a lost wake-up (blocked state wakes on input)")]
    return []


def _answer_matches_request(call: Call) -> list[str]:
    """An answer names what was asked for, byte for byte: the run started, the signal's dedup key, the page
    after the cursor, and a tampered migration fails verification."""
    raw, step = call.raw, call.step
    if isinstance(raw, StartResult) and raw.run.run_id != step["run"] and (
            raw.created or step.get("idem") is None or raw.run.idempotency_key != step["idem"]):
        return [(f"starting run {_name(step['run'])} (idempotency key {step.get('idem')!r}) answered run "
                f"{_name(raw.run.run_id)} with key {raw.run.idempotency_key!r} (keys are byte-exact; invariant 6)")]
    if isinstance(raw, SignalReceipt) and raw.signal is not None and raw.signal.dedup_key != step["key"]:
        return [(f"signal {step['key']!r} to run {_name(step['run'])} answered the signal with key "
                f"{raw.signal.dedup_key!r} (dedup keys are byte-exact; invariant 6)")]
    if call.op == "verify_schema" and (raw == "schema verified") == bool(step.get("tamper")):
        return ["verify_schema() passed a migration changed after it was applied" if step.get("tamper") else
                f"verify_schema() failed on the migrations it applied itself ({_answer(raw)})"]
    if call.op == "list_page" and isinstance(raw, list):
        ids = [str(r) for r in raw]
        if step.get("after") is not None and step["after"] in ids or len(ids) != len(set(ids)):
            return [(f"listing runs after {_name(step.get('after'))} answered {[_name(i) for i in ids]}: a page "
                    "holds each run once and only runs after the cursor")]
    return []


def _snapshot_is_the_waiting_input(call: Call, before: World) -> list[str]:
    """A loaded snapshot holds exactly the unconsumed input the store shows: pending signals, finished
    unconsumed command results, fired timers (nothing acknowledged is hidden from the decider)."""
    raw = call.raw
    assert isinstance(raw, Snapshot)
    state = before.run(call.tenant, raw.run.run_id)
    if state is None:
        return []
    want = (
        sorted(k for k, s in state["signals"].items() if s["status"] == "pending"),
        sorted(k for k, c in state["commands"].items() if c["status"] in ("completed", "failed") and not c["consumed"]),
        sorted(k for k, t in state["timers"].items() if t["status"] == "fired"),
    )
    got = (sorted(s.dedup_key for s in raw.signals), sorted(c.operation_key for c in raw.command_results),
           sorted(t.operation_key for t in raw.timers))
    if got != want:
        return [(f"the snapshot of run {_name(raw.run.run_id)} holds signals/results/timers {got}, but the store "
                f"shows {want} waiting (invariant 7)")]
    return []


def _state_alone(before: World, after: World, atomic: bool) -> list[str]:
    """What the state contradicts on its own beyond :func:`state_violations`: one run per idempotency key, a
    consumed command had a result, no history entry newer than its run's revision (``atomic``: a decision lands
    whole), finished commands and definitions never change."""
    found = _finished_commands_unchanged(before, after)
    for tenant, runs in after.state.items():
        keys = Counter(s["run"]["idempotency_key"] for s in runs.values() if s and s["run"]["idempotency_key"])
        found += [f"idempotency key {k!r} (tenant {tenant}) started {n} runs (invariant 6)" for k, n in keys.items() if n > 1]
        for run_id, state in runs.items():
            if state is None:
                continue
            for key, command in state["commands"].items():
                if command["consumed"] and command["status"] not in ("completed", "failed"):
                    found.append(f"command {key!r} of run {_name(run_id)} was consumed while {_plain(command['status'])}: "
                                 "only a result is consumed (invariant 5)")
            newer = [e["seq"] for e in state["history"] if e["revision"] > state["run"]["revision"]]
            if newer and atomic:
                found.append(f"run {_name(run_id)} (tenant {tenant}) is at revision {state['run']['revision']} but history "
                             f"entries {newer} were written by a later one: a decision landed in part (atomic decision)")
    for tenant, names in before.definitions.items():
        for name, digest in names.items():
            now = after.definitions.get(tenant, {}).get(name)
            if digest is not None and now != digest:
                found.append(f"definition {name!r} (tenant {tenant}) changed from digest {digest[:12]} to "
                             f"{(now or 'absent')[:12]} (definitions never change; invariant 8)")
    return found


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)


def _name(run_id: Any) -> str:
    """A key as narrated: long keys shortened to their ends and length."""
    if isinstance(run_id, str) and len(run_id) > 24:
        return repr(f"{run_id[:4]}...{run_id[-3:]}") + f"[{len(run_id)} chars]"
    return repr(run_id)
