"""The durable runtime, piece by piece, on the reference engine with the test clock.

Loading and the ABI, pure replay, fuel, digests, fencing (zombie deciders),
signals, timers, heartbeats and the determinism check. Whole workloads on every
backend are in ``test_runtime_backends.py``.
"""

from __future__ import annotations

import gc
import time
import types
from collections.abc import Iterator
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest

from kit.contract import ClockMode, NewCommand, Outcome, RunStatus, Storage, digest_of
from kit.reference import MemoryBackend
from kit.runtime import (
    HANDLERS,
    CommandWorker,
    Decider,
    DigestMismatch,
    Registry,
    TimerLoop,
    WorkflowLoadError,
    WorkflowModule,
    check_replay,
    execute,
    load_workflows,
)
from kit.runtime.replay import CommandResult, Inputs

LEASE = timedelta(seconds=10)
REGISTRY = load_workflows()


@pytest.fixture
def store() -> Iterator[Storage]:
    db = MemoryBackend().provision()
    s = db.open(clock=ClockMode.TEST)
    s.migrate()
    REGISTRY.register(s)
    yield s
    db.drop()


class Counting:
    """A store proxy counting calls by name."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)

        return call


def drive(store: Storage, decider: Decider, worker: CommandWorker | None = None, rounds: int = 500) -> None:
    """Alternate decider / worker / timer polls until nothing moves (bounded)."""
    timers = TimerLoop(store)
    for _ in range(rounds):
        moved = decider.poll() + (worker.poll() if worker else 0) + timers.poll()
        if not moved:
            return
    raise AssertionError(f"still moving after {rounds} rounds")


def wat(body: str, imports: str = "") -> WorkflowModule:
    return WorkflowModule.from_wat(
        "inline",
        f"""(module {imports}
        (memory (export "memory") 1) {body})""",
    )


# -- loading and the ABI ------------------------------------------------------------------
def test_shipped_workflows_load_with_digest_of_their_wasm() -> None:
    assert set(REGISTRY.names()) >= {"order", "approval", "sleep", "saga", "loop", "cancel", "runaway"}
    for module in REGISTRY:
        assert module.digest == digest_of(module.wasm) and module.version == "1"


def test_an_import_outside_the_abi_is_refused_at_load() -> None:
    with pytest.raises(WorkflowLoadError, match="not part of the ABI"):
        wat(
            '(func (export "run"))',
            '(import "wasi" "clock_time_get" (func (param i32 i64 i32) (result i32)))',
        )
    with pytest.raises(WorkflowLoadError, match="ABI says"):
        wat('(func (export "run"))', '(import "durable" "sleep" (func (param i32) (result i32)))')
    with pytest.raises(WorkflowLoadError, match="must export a function 'run'"):
        wat('(func (export "go"))')


# -- pure replay --------------------------------------------------------------------------
def test_first_decision_schedules_the_first_await_only() -> None:
    plan = execute(REGISTRY["order"], {"order": 1}, [])
    assert plan.status is RunStatus.BLOCKED
    assert [(e.kind, e.operation_key) for e in plan.events] == [("command_scheduled", "op-1/await")]
    assert plan.commands == [NewCommand("op-1", "reserve", {"order": 1}, max_attempts=3)]


def test_an_answer_is_recorded_and_execution_continues_in_the_same_decision() -> None:
    first = execute(REGISTRY["order"], {"order": 1}, [])
    history = _as_events([first.events])
    inputs = Inputs(command_results={"op-1": CommandResult(True, {"order": 1, "reserved": True}, "7")})
    plan = execute(REGISTRY["order"], {"order": 1}, history, inputs)
    assert [e.kind for e in plan.events] == ["command_completed", "command_scheduled"]
    assert plan.consume_commands == ["7"]
    assert plan.commands[0].input == {"order": 1, "reserved": True}


def test_runaway_module_fails_on_fuel_not_time() -> None:
    plan = execute(
        REGISTRY["runaway"],
        {"order": 1},
        _as_events([execute(REGISTRY["runaway"], {"order": 1}, []).events]),
        Inputs(command_results={"op-1": CommandResult(True, {}, "1")}),
        fuel=200_000,
    )
    assert plan.status is RunStatus.FAILED and plan.error["kind"] == "fuel_exhausted"
    assert plan.fuel_used == 200_000


@pytest.mark.parametrize(
    "body, kind",
    [
        ('(func (export "run") unreachable)', "trap"),
        (
            '(func (export "run") (drop (call $sleep (i32.const 1) (i64.const 1))) (drop (call $sleep (i32.const 1) (i64.const 1))))',
            "abi",
        ),
        ('(func (export "run") (call $complete (i32.const 65530) (i32.const 100)))', "abi"),
        (
            '(data (i32.const 0) "{not json") (func (export "run") (call $complete (i32.const 0) (i32.const 9)))',
            "abi",
        ),
    ],
)
def test_a_misbehaving_module_fails_its_run_with_the_cause(body: str, kind: str) -> None:
    imports = (
        '(import "durable" "sleep" (func $sleep (param i32 i64) (result i32)))'
        '(import "durable" "complete" (func $complete (param i32 i32)))'
    )
    module = wat(body, imports)
    plan = execute(module, None, [])
    if plan.status is RunStatus.BLOCKED:  # the op-reuse case: answer the first sleep
        plan = execute(module, None, _as_events([plan.events]), Inputs(fired_timers={"op-1": "1"}))
    assert plan.status is RunStatus.FAILED and plan.error["kind"] == kind, plan.error


def _cyclic_garbage(make: Any) -> list[object]:
    """What ``make()`` left for the cyclic collector (objects only it could free)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        make()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        if enabled:
            gc.enable()


@pytest.mark.parametrize("ending", ["suspends", "completes", "fails"])
def test_an_execution_leaves_no_frames_for_the_cyclic_collector(ending: str) -> None:
    # Every ending is an exception whose traceback holds the frames it passed (one holding the
    # session, the plan and wasmtime's values); kept in a cycle, they wait for a full collection,
    # which a long stress run's checking (thousands of replays) made megabytes wait for.
    module = {"suspends": REGISTRY["order"],
              "completes": wat('(data (i32.const 0) "null") (func (export "run") (call $complete (i32.const 0) '
                               '(i32.const 4)))', '(import "durable" "complete" (func $complete (param i32 i32)))'),
              "fails": wat('(func (export "run") unreachable)')}[ending]

    def run() -> None:
        for _ in range(5):
            execute(module, {"order": 1}, [])

    left = _cyclic_garbage(run)
    held = [o for o in left if isinstance(o, (types.FrameType, types.TracebackType, BaseException))
            or type(o).__name__ in ("_Session", "Plan")]
    assert not held, f"{len(held)} frames, tracebacks, endings or sessions left in cycles: {held[:5]}"


def test_replay_against_a_history_the_module_did_not_write_is_nondeterminism() -> None:
    plan = execute(REGISTRY["order"], {"order": 1}, [])
    history = _as_events([plan.events])
    changed = execute(REGISTRY["order"], {"order": 2}, history)  # same module, other input: other request
    assert changed.status is RunStatus.FAILED and changed.error["kind"] == "nondeterminism"


def _as_events(batches: list[list[Any]]) -> list[Any]:
    from datetime import datetime

    from kit.contract import Event

    out: list[Any] = []
    for revision, batch in enumerate(batches, 1):
        for e in batch:
            out.append(
                Event("r", len(out) + 1, e.kind, e.operation_key, e.payload, revision, datetime.now(UTC))
            )
    return out


# -- through a store ------------------------------------------------------------------------
def test_fuel_exhaustion_fails_only_that_run(store: Storage) -> None:
    store.start_run("bad", REGISTRY["runaway"].ref, {"order": 1})
    store.start_run("good", REGISTRY["order"].ref, {"order": 2})
    drive(store, Decider(store, REGISTRY, lease=LEASE), CommandWorker(store, HANDLERS))
    bad, good = store.get_run("bad"), store.get_run("good")
    assert bad.status is RunStatus.FAILED and bad.error["kind"] == "fuel_exhausted"
    assert good.status is RunStatus.COMPLETED and good.output["shipped"] is True


def test_a_run_whose_digest_changed_is_refused_never_replayed(store: Storage) -> None:
    store.start_run("r1", REGISTRY["order"].ref, {"order": 1})
    text = Path(REGISTRY["order"].source).read_text(encoding="utf-8")
    changed = WorkflowModule.from_wat("order", text.replace('"ship"', '"SHIP"'), source="changed order.wat")
    assert changed.digest != REGISTRY["order"].digest
    counting = Counting(store)
    stale = Decider(counting, Registry([changed]), lease=LEASE)  # type: ignore[arg-type]
    assert stale.poll() == 1
    assert stale.stats.attempts == {"refused": 1}
    assert "refused, never replayed" in stale.stats.notes[0] and "new version" in stale.stats.notes[0]
    assert "commit_decision" not in counting.calls and "release_run_claim" not in counting.calls
    run = store.get_run("r1")
    assert run.revision == 0 and store.get_history("r1") == []
    # The claim just expires; a replica with the original module takes over.
    store.advance_test_clock(LEASE)
    good = Decider(store, REGISTRY, lease=LEASE)
    assert good.poll() == 1 and store.get_run("r1").revision == 1
    with pytest.raises(DigestMismatch):
        check_replay(changed, store.get_run("r1"), store.get_history("r1"))
    with pytest.raises(DigestMismatch, match="bump the ';; version:' line"):
        Registry([changed]).register(store)  # registering changed logic under the old version


def test_a_zombie_decider_gets_claim_lost_once_and_writes_nothing(store: Storage) -> None:
    store.start_run("r1", REGISTRY["order"].ref, {"order": 1})
    counting = Counting(store)
    zombie = Decider(counting, REGISTRY, worker_id="zombie", lease=LEASE)  # type: ignore[arg-type]
    [claim] = store.claim_runs("zombie", LEASE, 1)
    snapshot = store.load_claimed(claim)
    store.advance_test_clock(LEASE)  # the zombie paused; its lease expired
    live = Decider(store, REGISTRY, worker_id="live", lease=LEASE)
    assert live.poll() == 1 and store.get_run("r1").revision == 1
    history = store.get_history("r1")
    assert zombie.decide(claim, snapshot) == "claim_lost"  # type: ignore[arg-type]
    assert counting.calls["commit_decision"] == 1
    assert store.get_history("r1") == history and store.get_run("r1").revision == 1


def test_a_stale_snapshot_under_a_fresh_claim_gets_revision_mismatch_once(store: Storage) -> None:
    store.start_run("r1", REGISTRY["approval"].ref, {"order": 1})
    counting = Counting(store)
    decider = Decider(counting, REGISTRY, worker_id="d", lease=LEASE)  # type: ignore[arg-type]
    [old_claim] = store.claim_runs("d", LEASE, 1)
    old_snapshot = store.load_claimed(old_claim)
    assert decider.decide(old_claim, old_snapshot) == "committed"  # type: ignore[arg-type]
    store.send_signal("r1", "approve", {"order": 1, "approved_by": "kit"}, "s1")  # makes it runnable again
    [new_claim] = store.claim_runs("d", LEASE, 1)
    assert decider.decide(new_claim, old_snapshot) == "revision_mismatch"  # type: ignore[arg-type]
    assert counting.calls["commit_decision"] == 2
    assert store.get_run("r1").revision == 1


def test_a_decision_for_a_run_that_ended_gets_terminal(store: Storage) -> None:
    store.start_run("r1", REGISTRY["runaway"].ref, {"order": 1})
    zombie_claim = store.claim_runs("zombie", LEASE, 1)[0]
    snapshot = store.load_claimed(zombie_claim)
    store.advance_test_clock(LEASE)
    drive(store, Decider(store, REGISTRY, lease=LEASE), CommandWorker(store, HANDLERS))
    assert store.get_run("r1").status is RunStatus.FAILED
    assert Decider(store, REGISTRY).decide(zombie_claim, snapshot) == "terminal"  # type: ignore[arg-type]


def test_a_signal_wakes_a_blocked_run_and_is_consumed_once(store: Storage) -> None:
    store.start_run("r1", REGISTRY["approval"].ref, {"order": 1})
    decider, worker = Decider(store, REGISTRY, lease=LEASE), CommandWorker(store, HANDLERS)
    drive(store, decider, worker)
    run = store.get_run("r1")
    assert run.status is RunStatus.BLOCKED and store.get_history("r1")[-1].kind == "signal_awaited"
    assert (
        store.send_signal("r1", "approve", {"order": 1, "approved_by": "kit"}, "a").outcome
        is Outcome.COMMITTED
    )
    assert (
        store.send_signal("r1", "approve", {"order": 1, "approved_by": "x"}, "a").outcome is Outcome.DUPLICATE
    )
    drive(store, decider, worker)
    run = store.get_run("r1")
    assert run.status is RunStatus.COMPLETED and run.output["approved_by"] == "kit"
    assert [s.status.value for s in store.list_signals("r1")] == ["consumed"]
    assert check_replay(REGISTRY["approval"], run, store.get_history("r1")).ok


def test_timers_fire_by_the_store_clock_only(store: Storage) -> None:
    store.start_run("r1", REGISTRY["sleep"].ref, {"order": 1})
    decider, worker, timers = (
        Decider(store, REGISTRY, lease=LEASE),
        CommandWorker(store, HANDLERS),
        TimerLoop(store),
    )
    drive(store, decider, worker)
    assert store.get_run("r1").status is RunStatus.BLOCKED
    assert timers.poll() == 0  # 2 ms have not passed on the store clock, whatever the wall clock says
    for step in (timedelta(milliseconds=2), timedelta(milliseconds=5), timedelta(0)):
        store.advance_test_clock(step)
        drive(store, decider, worker)
    run = store.get_run("r1")
    assert run.status is RunStatus.COMPLETED and run.output == {"order": 1, "awake": True}
    assert check_replay(REGISTRY["sleep"], run, store.get_history("r1")).ok


def test_cancellation_is_delivered_once_and_compensated(store: Storage) -> None:
    store.start_run("r1", REGISTRY["cancel"].ref, {"order": 3})
    drive(store, Decider(store, REGISTRY, lease=LEASE), CommandWorker(store, HANDLERS))
    run = store.get_run("r1")
    assert run.status is RunStatus.CANCELLED and run.error == {"order": 3, "seat": "4A", "released": True}
    kinds = [e.kind for e in store.get_history("r1")]
    assert kinds.count("cancel_delivered") == 1 and kinds[-1] == "run_cancelled"
    assert all(t.status.value == "cancelled" for t in store.list_timers("r1"))
    assert check_replay(REGISTRY["cancel"], run, store.get_history("r1")).ok


def test_replay_check_catches_a_history_that_differs(store: Storage) -> None:
    store.start_run("r1", REGISTRY["order"].ref, {"order": 1})
    drive(store, Decider(store, REGISTRY, lease=LEASE), CommandWorker(store, HANDLERS))
    run, history = store.get_run("r1"), store.get_history("r1")
    assert check_replay(REGISTRY["order"], run, history).ok
    from dataclasses import replace

    tampered = [
        replace(e, payload={**e.payload, "input": {"order": 9}}) if e.operation_key == "op-2/await" else e
        for e in history
    ]
    verdict = check_replay(REGISTRY["order"], run, tampered)
    assert not verdict.ok and "revision 2" in verdict.problems[0]


def test_long_handlers_are_kept_alive_by_heartbeats() -> None:
    from kit.runtime.stats import RuntimeStats
    from kit.runtime.worker import Heartbeats

    db = MemoryBackend().provision()
    store = db.open(clock=ClockMode.DATABASE)
    store.migrate()
    REGISTRY.register(store)
    lease = timedelta(milliseconds=300)

    def slow(ctx: Any, data: Any) -> Any:
        deadline = time.monotonic() + 10
        while ctx.beats < 4 and time.monotonic() < deadline:  # outlive the lease: 4 beats ~ 400 ms
            ctx.lost.wait(0.01)
        return {"beats": ctx.beats}

    stats = RuntimeStats()
    heartbeats = Heartbeats(lambda: db.open(clock=ClockMode.DATABASE), lease, stats)
    worker = CommandWorker(
        store, {**HANDLERS, "reserve": slow}, lease=lease, heartbeats=heartbeats, stats=stats
    )
    store.start_run("r1", REGISTRY["order"].ref, {"order": 1})
    Decider(store, REGISTRY, lease=LEASE).poll()
    [claim] = store.claim_commands(worker.worker_id, lease, 1)
    try:
        assert worker.run(claim) == "completed"  # still ours after more than one lease
    finally:
        heartbeats.stop()
    assert store.list_commands("r1")[0].result["beats"] >= 4
    db.drop()
