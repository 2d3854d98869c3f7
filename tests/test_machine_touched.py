"""The reference machine compares what each step touched, and the whole state at the end of each example.

A store that changes a run no step touches or names (here: moving the clock cancels a run) passes every
step's comparison, and is caught by the end-of-example comparison: in the machine (which shrinks the
failure and saves a bundle), in a bundle's replay, and in its pruning.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kit.contract import Backend
from kit.machines.bundle import make_bundle, prune_steps, replay
from kit.machines.interpreter import Divergence, Interpreter
from kit.machines.machine import Profile, run_machine
from kit.machines.touched import named_runs, touched
from kit.pytest_plugin import use_backend
from kit.reference import MemoryBackend

SEED = 20261129

#: r0 is started, then never named again: only the end-of-example comparison reads it.
STEPS: list[dict[str, Any]] = [
    {"op": "define", "worker": "w0", "name": "wf", "body": "v1"},
    {"op": "start", "worker": "w0", "run": "r0"},
    {"op": "start", "worker": "w1", "run": "r1"},
    {"op": "advance", "us": 1_000},
    {"op": "signal", "worker": "w1", "run": "r1", "key": "s0", "payload": 1},
]


class _ClockCancels:
    """A store whose clock moves also request the cancel of the tenant's first run (a write to a run the
    step neither touches nor names)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def advance_test_clock(self, by: Any) -> Any:
        moved = self._inner.advance_test_clock(by)
        first = self._inner.list_runs(limit=1)
        if first:
            self._inner.request_cancel(first[0].run_id, "moved the clock")
        return moved


class _Database:
    def __init__(self) -> None:
        self.inner = MemoryBackend().provision()

    def open(self, tenant_id: str = "default", **kwargs: Any) -> Any:
        return _ClockCancels(self.inner.open(tenant_id, **kwargs))

    def reset(self) -> None:
        self.inner.reset()

    def drop(self) -> None:
        self.inner.drop()


class ClockCancelsBackend(MemoryBackend):
    name = "memory-clock-cancels"

    def provision(self) -> Any:  # type: ignore[override]
        return _Database()


@pytest.fixture
def sqlite() -> Iterator[Backend]:
    yield from use_backend("sqlite")


def _applied(backend: Backend, full_compare: bool = False) -> Interpreter:
    interpreter = Interpreter(backend, full_compare=full_compare)
    try:
        for step in STEPS:
            interpreter.apply(step)
    except BaseException:
        interpreter.close()
        raise
    return interpreter


def test_an_untouched_run_changed_is_caught_at_the_end_of_the_example() -> None:
    """Every step's comparison passes (none touches r0); finish() compares the whole state and names r0."""
    interpreter = _applied(ClockCancelsBackend())
    try:
        with pytest.raises(Divergence) as caught:
            interpreter.finish()
    finally:
        interpreter.close()
    assert caught.value.kind == "state"
    assert caught.value.index == len(STEPS) - 1
    assert "at the end of the example" in caught.value.message and "'r0'" in caught.value.message


def test_full_compare_catches_it_at_the_step() -> None:
    """With the whole state compared after every step, the same change shows at the clock move."""
    with pytest.raises(Divergence) as caught:
        _applied(ClockCancelsBackend(), full_compare=True)
    assert caught.value.index == 3 and caught.value.kind == "state"


def test_a_correct_store_passes_the_end_of_the_example(sqlite: Backend) -> None:
    interpreter = _applied(sqlite)
    try:
        interpreter.finish()
    finally:
        interpreter.close()


def test_the_bundle_replays_and_prunes_to_the_same_divergence(sqlite: Backend) -> None:
    """A bundle whose divergence shows only at the end reproduces on replay (the replay ends with the whole
    comparison too), prunes to the steps it needs, and does not reproduce on a correct store."""
    broken = ClockCancelsBackend()
    bundle = make_bundle("memory-clock-cancels", broken, "quick", SEED, STEPS,
                         {"step": len(STEPS) - 1, "kind": "state"})
    again = replay(bundle, ClockCancelsBackend())
    assert again.reproduced and again.divergence is not None
    assert again.divergence["kind"] == "state" and "at the end of the example" in again.message
    pruned, _ = prune_steps(bundle, ClockCancelsBackend())
    assert replay(pruned, ClockCancelsBackend()).reproduced
    assert len(pruned["steps"]) <= len(STEPS)
    assert not replay(bundle, sqlite).reproduced


def test_the_machine_finds_it_shrinks_it_and_the_bundle_replays() -> None:
    """The machine (with shrinking) reports the change within an example; its saved steps replay to a
    divergence on the broken store and to none on the reference engine, and prune (as ``kit check`` saves
    them) to a story that still shows it."""
    outcome = run_machine(ClockCancelsBackend(), Profile("touched", 15, 20), SEED)
    assert outcome.error is None and outcome.failure is not None
    steps = outcome.failure["steps"]
    assert any(step["op"] in ("advance", "advance_to") for step in steps)
    bundle = make_bundle("memory-clock-cancels", ClockCancelsBackend(), "touched", SEED, steps,
                         outcome.failure["divergence"])
    assert replay(bundle, ClockCancelsBackend()).reproduced
    assert not replay(bundle, MemoryBackend()).reproduced
    pruned, _ = prune_steps(bundle, ClockCancelsBackend())
    assert len(pruned["steps"]) <= len(steps)
    assert replay(pruned, ClockCancelsBackend()).reproduced


def test_what_a_step_touched() -> None:
    """The reference rows a step changed name their runs; a step names its runs in its workers' tenants."""
    from kit.reference._tables import Tables

    interpreter = _applied(MemoryBackend())
    try:
        tables: Tables = interpreter._ref_db.state.tables
        interpreter.apply({"op": "claim_runs", "worker": "w0", "limit": 1})
        changed = touched(tables, interpreter._ref_db.state.tables)
        assert changed.runs == {("tenant-a", "r0")} and not changed.definitions and not changed.schema
        same = interpreter._ref_db.state.tables
        interpreter.apply({"op": "list_page", "worker": "w0", "limit": 2})
        assert not touched(same, interpreter._ref_db.state.tables).runs
    finally:
        interpreter.close()
    tenants = {"w0": "tenant-a", "w3": "tenant-b"}
    assert named_runs({"op": "race", "ops": [{"op": "signal", "worker": "w0", "run": "r1"},
                                             {"op": "start", "worker": "w3", "run": "r2"}]}, tenants) == {
        ("tenant-a", "r1"), ("tenant-b", "r2")}
    assert named_runs({"op": "unit", "mode": "commit", "run": "u0"}, tenants) == {("tenant-a", "u0"), ("tenant-b", "u0")}
    assert named_runs({"op": "load", "worker": "w0", "run": "r1"}, tenants) == set()


def test_the_collector_is_given_back_after_a_machine_run() -> None:
    """A machine run collects less while it runs, and leaves the collector as it found it (nested blocks too)."""
    import gc

    from kit.machines.collector import THRESHOLDS, collecting_less

    before = gc.get_threshold()
    with collecting_less():
        with collecting_less():
            assert gc.get_threshold() == THRESHOLDS
        assert gc.get_threshold() == THRESHOLDS and gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    run_machine(MemoryBackend(), Profile("gc", 2, 5), SEED)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
