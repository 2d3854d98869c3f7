"""The stress checkers on hand-made histories: one valid world, and one broken world per invariant.

Each broken world changes the valid one in the smallest way that contradicts
one invariant, and the test requires that invariant's checker to say
``invalid`` with a sentence and a witness: proof that every checker can fail.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kit.checkers import (
    CHECKERS,
    Evidence,
    FinalState,
    HistoryIndex,
    Status,
    Verdict,
    check_all,
    merge,
)
from kit.clock import from_micros
from kit.contract import DefinitionRef, RunStatus
from kit.contract.errors import ConnectionLost, TransientError
from kit.faults import LostAcknowledgement
from kit.faults.nemesis import ALL_FAULTS, FaultKind, parse_faults, plan_faults
from kit.faults.points import StressFaults
from kit.workload.history import Recorder, classify, history_digest, read_entries

T0 = 1_900_000_000_000_000
LEASE = 1_000_000
RUN, TENANT = "t0-x-000001", "t0"
DIGEST = "ab" * 32


class World:
    """A history (entries, as the recorder writes them) and a final state, valid unless a test breaks it."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.t = 0.0
        self.store = T0
        self.sampled = T0

    def _entry(self, **entry: Any) -> int:
        entry.update(index=len(self.entries), t=round(self.t, 4), store_us=self.sampled)
        self.entries.append(entry)
        self.t += 0.01
        return int(entry["index"])

    def clock(self, advance_us: int = 1_000) -> None:
        self.store += advance_us
        invoked = self._entry(type="invoke", process="clock", f="now", tenant=TENANT)
        self._entry(type="ok", process="clock", f="now", tenant=TENANT, invoke=invoked, value=self.store)
        self.sampled = self.store

    def op(self, process: str, f: str, args: Any = None, result: Any = None, kind: str = "ok",
           tenant: str = TENANT, **keys: Any) -> None:
        self.clock()
        invoked = self._entry(type="invoke", process=process, f=f, tenant=tenant, value=args, **keys)
        self._entry(type=kind, process=process, f=f, tenant=tenant, invoke=invoked, value=result, **keys)
        self.clock()

    def info(self, process: str, f: str, value: Any = None) -> None:
        self._entry(type="info", process=process, f=f, value=value)

    def grant(self, process: str, gen: int, revision: int, f: str = "claim_runs", **extra: Any) -> int:
        self.clock()
        expires = self.store + LEASE
        item = {"run": RUN, "gen": gen, "revision": revision, "expires_us": expires, **extra}
        invoked = self._entry(type="invoke", process=process, f=f, tenant=TENANT, value={"lease_us": LEASE})
        self._entry(type="ok", process=process, f=f, tenant=TENANT, invoke=invoked, value=[item])
        self.clock()
        return expires

    def index(self) -> HistoryIndex:
        return HistoryIndex.from_entries(copy.deepcopy(self.entries))


def _event(seq: int, kind: str, key: str, revision: int, payload: Any = None) -> dict[str, Any]:
    return {"run_id": RUN, "seq": seq, "kind": kind, "operation_key": key, "payload": payload or {"op": 1},
            "revision": revision, "created_at": from_micros(T0)}


EVENTS = [
    _event(1, "command_scheduled", "op-1/await", 1),
    _event(2, "command_completed", "op-1/resolved", 2, {"op": 1, "result": {"ok": True}}),
    _event(3, "run_completed", "end", 2, {"output": {"ok": True}}),
]


def valid_world() -> tuple[World, FinalState]:
    """One run: claimed, a command scheduled and completed, a signal and a timer consumed, completed."""
    w = World()
    w.info("kit", "config", {"config": {"seed": 1}})
    w.op("client", "define", {"name": "wf", "version": "1", "digest": DIGEST}, {"digest": DIGEST})
    w.op("client", "start", {"workflow": "wf", "key": "x-1", "input": {"n": 1}},
         {"created": True, "run": RUN, "tenant": TENANT}, run=RUN)
    w.grant("d0.1", 1, 0)
    w.op("d0.1", "load", None, {"revision": 0, "status": "running", "history_len": 0,
                                "history_hash": history_digest([]), "signals": [], "commands": [], "timers": []},
         run=RUN, gen=1)
    w.op("d0.1", "commit", {"expected_revision": 0, "next_status": "blocked", "events": 1,
                            "event_keys": ["op-1/await"], "commands": ["op-1"], "timers": ["op-2"],
                            "consume_signals": [], "consume_commands": [], "consume_timers": []},
         "committed", run=RUN, gen=1)
    w.grant("w0.1", 1, 0, f="claim_commands", command="1", attempt=1)
    w.op("w0.1", "complete", {"result": {"ok": True}}, "completed", command="1", run=RUN, gen=1)
    w.op("client", "signal", {"name": "go", "dedup": "go-1", "payload": None}, {"outcome": "committed", "signal": "1"},
         run=RUN)
    w.op("t0.1", "fire", {"limit": 20}, [{"timer": "1", "run": RUN, "fire_at_us": T0}])
    w.grant("d1.1", 2, 1)
    w.op("d1.1", "load", None, {"revision": 1, "status": "running", "history_len": 1,
                                "history_hash": history_digest(EVENTS[:1]), "signals": ["1"], "commands": ["1"],
                                "timers": ["1"]}, run=RUN, gen=2)
    w.op("d1.1", "commit", {"expected_revision": 1, "next_status": "completed", "events": 2,
                            "event_keys": ["op-1/resolved", "end"], "commands": [], "timers": [],
                            "consume_signals": ["1"], "consume_commands": ["1"], "consume_timers": ["1"],
                            "output": {"ok": True}, "error": None}, "committed", run=RUN, gen=2)
    w.op("client", "probe", {"dedup": "probe-t1-x-000001"}, {"outcome": "not_found", "signal": None}, kind="fail",
         run="t1-x-000001")
    w.info("kit", "drain", {"quiescent": True, "progressing": False, "open": 0, "seconds": 0.1, "quiet_s": 8})
    return w, FinalState(tenants={TENANT: {RUN: _run_state()}}, definitions={(TENANT, "wf", "1"): (DIGEST, DIGEST)},
                         now=from_micros(T0 + 60_000_000))


def _run_state() -> dict[str, Any]:
    at = from_micros(T0)
    run = {"run_id": RUN, "tenant_id": TENANT, "definition": DefinitionRef("wf", "1", DIGEST),
           "status": RunStatus.COMPLETED, "revision": 2, "claim_owner": None, "claim_generation": 2,
           "claim_expires_at": None, "wake_at": None, "wakeup_pending": False, "cancel_requested": False,
           "cancel_reason": None, "input": {"n": 1}, "output": {"ok": True}, "error": None,
           "idempotency_key": "x-1", "created_at": at, "updated_at": at}
    command = {"command_id": "1", "run_id": RUN, "operation_key": "op-1", "name": "do", "queue": "default",
               "input": None, "status": "completed", "attempt": 1, "max_attempts": 3, "not_before": at,
               "claim_owner": "w0.1", "claim_generation": 1, "claim_expires_at": None, "result": {"ok": True},
               "error": None, "consumed": True}
    signal = {"signal_id": "1", "run_id": RUN, "name": "go", "payload": None, "dedup_key": "go-1",
              "status": "consumed", "consumed_revision": 2, "sent_at": at}
    timer = {"timer_id": "1", "run_id": RUN, "operation_key": "op-2", "fire_at": at, "status": "consumed"}
    return {
        "run": run, "history": copy.deepcopy(EVENTS),
        "commands": {"op-1": command}, "signals": {"go-1": signal}, "timers": {"op-2": timer},
        "raw_keys": {"signals": ["go-1"], "commands": ["op-1"], "timers": ["op-2"]},
        "command_rows": [command], "signal_rows": [signal], "timer_rows": [timer],
    }


def verdicts(world: World, state: FinalState) -> dict[int, Verdict]:
    return {v.invariant: v for v in check_all(Evidence(world.index(), state))}


def test_the_valid_world_is_valid_for_every_checker() -> None:
    found = verdicts(*valid_world())
    assert [found[i].status for i in sorted(found)] == [Status.VALID] * len(CHECKERS), {
        i: v.explanation for i, v in found.items() if v.status is not Status.VALID}
    assert all(v.checked > 0 for v in found.values()), {i: v.checked for i, v in found.items()}


# -- one broken world per invariant ---------------------------------------------------------------
def _rewritten_history(w: World, s: FinalState) -> None:
    s.tenants[TENANT][RUN]["history"][0]["payload"] = {"op": 1, "changed": True}


def _revision_written_twice(w: World, s: FinalState) -> None:
    w.op("d9.1", "commit", {"expected_revision": 1, "next_status": "completed", "events": 2},
         "committed", run=RUN, gen=2)


def _commit_after_expiry(w: World, s: FinalState) -> None:
    w.entries = [e for e in w.entries if e.get("process") != "d1.1"]
    w.clock(advance_us=3 * LEASE)  # the store clock is past generation 1's lease...
    w.op("d0.1", "commit", {"expected_revision": 1, "next_status": "completed", "events": 2},
         "committed", run=RUN, gen=1)  # ...and its commit is accepted anyway


def _two_live_claims(w: World, s: FinalState) -> None:
    w.grant("d7.1", 2, 1)  # generation 2 granted a second time, to another worker


def _timer_fired_twice(w: World, s: FinalState) -> None:
    w.op("t1.1", "fire", {"limit": 20}, [{"timer": "1", "run": RUN, "fire_at_us": T0}])


def _two_created_starts(w: World, s: FinalState) -> None:
    w.op("client~dup", "start", {"workflow": "wf", "key": "x-1", "input": {"n": 1}},
         {"created": True, "run": RUN, "tenant": TENANT}, run=RUN)


def _acknowledged_signal_lost(w: World, s: FinalState) -> None:
    w.op("client", "signal", {"name": "go", "dedup": "go-2", "payload": None},
         {"outcome": "committed", "signal": "2"}, run=RUN)


def _terminal_run_changed(w: World, s: FinalState) -> None:
    s.tenants[TENANT][RUN]["run"]["output"] = {"ok": False}


def _claim_held_by_the_dead(w: World, s: FinalState) -> None:
    w.info("w0.1", "crash", {"how": "vanished"})
    row = s.tenants[TENANT][RUN]["command_rows"][0]
    row.update(status="claimed")


def _foreign_run_seen(w: World, s: FinalState) -> None:
    w.op("client", "probe", {"dedup": "probe-t1-x-000002"}, {"outcome": "committed", "signal": "9"},
         run="t1-x-000002")


BROKEN: dict[int, Callable[[World, FinalState], None]] = {
    1: _rewritten_history, 2: _revision_written_twice, 3: _commit_after_expiry, 4: _two_live_claims,
    5: _timer_fired_twice, 6: _two_created_starts, 7: _acknowledged_signal_lost, 8: _terminal_run_changed,
    9: _claim_held_by_the_dead, 10: _foreign_run_seen,
}


def _key_held_by_two_runs(w: World, s: FinalState) -> None:
    other = _run_state()
    other["run"].update(run_id="t0-x-000009")  # idempotency key x-1, as RUN's
    s.tenants[TENANT]["t0-x-000009"] = other


def _signal_committed_twice(w: World, s: FinalState) -> None:
    w.op("client~dup", "signal", {"name": "go", "dedup": "go-1", "payload": None},
         {"outcome": "committed", "signal": "7"}, run=RUN)


def _refused_signal_stored(w: World, s: FinalState) -> None:
    for _ in range(2):
        w.op("client", "signal", {"name": "go", "dedup": "go-9", "payload": None}, "run_terminal", kind="fail", run=RUN)
    stored = dict(s.tenants[TENANT][RUN]["signals"]["go-1"], signal_id="9", dedup_key="go-9", status="pending")
    s.tenants[TENANT][RUN]["signals"]["go-9"] = stored


CROSS_RUN: dict[str, tuple[int, Callable[[World, FinalState], None], str]] = {
    "key held by two runs": (6, _key_held_by_two_runs, ("holds 2 runs (t0-x-000001, t0-x-000009) for the one "
                                                        "idempotency key 'x-1'")),
    "two starts created": (6, _two_created_starts, "two starts with idempotency key 'x-1'"),
    "signal committed twice": (6, _signal_committed_twice, ("two sends of signal 'go-1' to run t0-x-000001 were "
                                                           "both answered committed")),
    "refused signal stored": (7, _refused_signal_stored, ("signal 'go-9' to run t0-x-000001 was refused every time "
                                                         "(Counter({'run_terminal': 2})) yet it is stored")),
    "timer fired twice": (5, _timer_fired_twice, "timer 1 (tenant t0) fired twice"),
    "foreign run seen": (10, _foreign_run_seen, "exists only in another tenant"),
}
"""Broken worlds whose contradiction spans runs or operations far apart (the checkers' cross-run groups):
name -> (invariant, how to break the valid world, what the verdict must say)."""


@pytest.mark.parametrize("name", sorted(CROSS_RUN))
def test_each_cross_run_contradiction_is_named(name: str) -> None:
    invariant, breaking, sentence = CROSS_RUN[name]
    world, state = valid_world()
    breaking(world, state)
    verdict = verdicts(world, state)[invariant]
    assert verdict.status is Status.INVALID and sentence in verdict.explanation, verdict.explanation


@pytest.mark.parametrize("invariant", sorted(BROKEN))
def test_each_checker_catches_its_broken_world(invariant: int) -> None:
    world, state = valid_world()
    BROKEN[invariant](world, state)
    verdict = verdicts(world, state)[invariant]
    assert verdict.status is Status.INVALID, verdict.explanation
    assert verdict.explanation and "\n" not in verdict.explanation
    assert verdict.witness, "an invalid verdict names its witness"


def test_sentences_name_the_contradiction() -> None:
    world, state = valid_world()
    _revision_written_twice(world, state)
    text = verdicts(world, state)[2].explanation
    assert f"run {RUN} revision 2 was committed twice" in text and "generation 2" in text
    world, state = valid_world()
    _commit_after_expiry(world, state)
    text = verdicts(world, state)[3].explanation
    assert "generation 1's commit" in text and "after its lease had expired" in text


def test_unknown_outcomes_are_never_counted_as_success_or_failure() -> None:
    world, state = valid_world()  # a lost acknowledgement: the commit may have written revision 3
    world.op("d2.1", "commit", {"expected_revision": 2, "next_status": "completed", "events": 0}, None, kind="info",
             run=RUN, gen=3)
    state.tenants[TENANT][RUN]["run"]["revision"] = 3
    found = verdicts(world, state)
    assert found[2].status is Status.VALID  # revision 3 is explained by the unknown commit
    assert found[8].status is Status.INVALID  # ...which changed a terminal run


def test_a_drain_that_ran_out_while_progressing_is_unknown_not_invalid() -> None:
    world, state = valid_world()
    world.entries = [e for e in world.entries if e.get("f") != "drain"]
    world.info("kit", "drain", {"quiescent": False, "progressing": True, "open": 1, "seconds": 60})
    state.tenants[TENANT][RUN]["run"]["status"] = RunStatus.BLOCKED
    assert verdicts(world, state)[9].status is Status.UNKNOWN
    world.entries[-1]["value"] = {"quiescent": True, "progressing": False, "open": 1, "seconds": 9, "quiet_s": 8}
    assert verdicts(world, state)[9].status is Status.INVALID


def test_an_unreadable_state_makes_every_verdict_unknown() -> None:
    world, state = valid_world()
    state.error = "reading the final state failed: ConnectionLost"
    assert {v.status for v in check_all(Evidence(world.index(), state))} == {Status.UNKNOWN}


def test_verdicts_merge_invalid_over_unknown_over_valid() -> None:
    assert merge([]) is Status.VALID
    assert merge([Status.VALID, Status.UNKNOWN]) is Status.UNKNOWN
    assert merge([Status.UNKNOWN, Status.INVALID, Status.VALID]) is Status.INVALID


# -- the pieces the workload is built from ----------------------------------------------------------
def test_lost_acknowledgements_and_lost_sessions_are_info_refusals_fail() -> None:
    assert classify(LostAcknowledgement("x")) == "info"
    assert classify(ConnectionLost("x")) == "info"
    assert classify(TransientError("x")) == "fail"
    assert classify(RuntimeError("x")) == "info"


def test_the_recorder_writes_pairs_stamped_with_the_latest_store_sample(tmp_path: Any) -> None:
    recorder = Recorder(tmp_path / "h.jsonl")
    pending = recorder.invoke("d0.1", "commit", "t0", {"expected_revision": 0}, run="r", gen=1)
    recorder.sampled(T0)
    recorder.complete(pending, "info", error="LostAcknowledgement: injected")
    recorder.close()
    first, second = list(read_entries(tmp_path / "h.jsonl"))
    assert first["type"] == "invoke" and first["store_us"] is None and first["gen"] == 1
    assert second["type"] == "info" and second["invoke"] == first["index"] and second["store_us"] == T0
    index = HistoryIndex.from_file(tmp_path / "h.jsonl")
    assert index.ops[0].unknown and index.ops[0].f == "commit"


def test_the_nemesis_plan_is_a_function_of_the_seed() -> None:
    slots = {"decider": ["decider-0", "decider-1"], "worker": ["worker-0"], "timers": ["timers-0"],
             "client": ["client-0"]}
    one = plan_faults(7, 30.0, ALL_FAULTS, slots, 1.0)
    assert one == plan_faults(7, 30.0, ALL_FAULTS, slots, 1.0)
    assert one != plan_faults(8, 30.0, ALL_FAULTS, slots, 1.0)
    assert {f.kind for f in one} == set(ALL_FAULTS)
    assert all(0 < f.at_s < 30.0 for f in one) and [f.at_s for f in one] == sorted(f.at_s for f in one)
    assert not any(f.kind in (FaultKind.CRASH, FaultKind.KILL) and f.target == "client-0" for f in one)
    assert parse_faults("pause, drop") == (FaultKind.PAUSE, FaultKind.DROP) and parse_faults("none") == ()
    with pytest.raises(Exception, match="unknown fault kind 'nap'"):
        parse_faults("nap")


def test_a_pause_can_land_right_after_a_commit() -> None:
    slept: list[float] = []
    hook = StressFaults(sleep=slept.append)
    hook.pause_at(1, 1.5, point="COMMITTED")
    for statement in ("BEGIN", "SELECT 1", "COMMIT"):
        hook(statement)
    assert slept == []
    hook("COMMITTED")
    assert slept == [1.5] and hook.paused_at == "COMMITTED" and hook.committed == 1
    hook.disarm()
    assert hook.paused_at is None
