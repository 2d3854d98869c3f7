"""Checking a stress run in bounded memory: the spilled path gives the in-memory path's verdicts, exactly.

:func:`kit.checkers.check_stress` indexes the history into a scratch file and keeps
the final state there, reading both back one run at a time. These tests prove,
without timing anything, that

* every broken world of ``test_stress_checkers`` gets the same verdicts, sentences
  and witnesses on both paths;
* in a long synthetic history (hundreds of closed runs, four open at a time),
  violations deep in the history, some of them pairing an operation from the start
  with one near the end, are found with the same witnesses on both paths;
* while the spilled path checks that history, the operations and run states alive
  in memory stay bounded by a few runs' worth, whatever the number of runs (the
  in-memory path holds every one of them).
"""

from __future__ import annotations

import copy
import gc
import json
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kit.checkers import (
    Evidence,
    FinalState,
    HistoryIndex,
    Op,
    Status,
    Verdict,
    check_all,
    check_stress,
    spill,
)
from kit.checkers.spill import SpilledRuns
from kit.clock import from_micros
from kit.workload.history import history_digest
from tests.test_stress_checkers import (
    BROKEN,
    CROSS_RUN,
    DIGEST,
    EVENTS,
    LEASE,
    T0,
    TENANT,
    World,
    _run_state,
    valid_world,
)

OPEN = 4
"""Runs open at once in the long synthetic history."""


def _write(path: Path, entries: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(json.dumps(entry, separators=(",", ":")) + "\n" for entry in entries)


def _spill_state(path: Path, runs: Iterator[tuple[str, str, dict[str, Any]]], like: FinalState) -> FinalState:
    """``like`` with its runs on disk, put one at a time (what ``read_final_state(spill=...)`` does)."""
    store = SpilledRuns(path)
    tenant_now: str | None = None
    for tenant, run_id, state in runs:
        if tenant != tenant_now:
            if tenant_now is not None:
                store.done(tenant_now)
            store.tenant(tenant)
            tenant_now = tenant
        store.put(tenant, run_id, state)
    if tenant_now is not None:
        store.done(tenant_now)
    return FinalState(store, dict(like.definitions), like.now, like.error)


def _spilled(history: Path, runs: Callable[[], Iterator[tuple[str, str, dict[str, Any]]]],
             like: FinalState) -> list[Verdict]:
    return check_stress(history, lambda where: _spill_state(where, runs(), like))


def _in_memory(history: Path, state: FinalState) -> list[Verdict]:
    return check_all(Evidence(HistoryIndex.from_file(history), state))


def _json(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    return [v.to_json() for v in verdicts]


# -- the hand-made worlds ------------------------------------------------------------------------
@pytest.mark.parametrize("invariant", [0, *sorted(BROKEN)])
def test_every_broken_world_gets_the_same_verdicts_on_both_paths(invariant: int, tmp_path: Path) -> None:
    world, state = valid_world()
    if invariant:
        BROKEN[invariant](world, state)
    history = tmp_path / "history.jsonl"
    _write(history, copy.deepcopy(world.entries))
    old = _in_memory(history, state)
    new = _spilled(history, state.runs, state)
    assert _json(new) == _json(old)
    if invariant:
        assert {v.invariant: v for v in new}[invariant].status is Status.INVALID
    assert not list(tmp_path.glob(".check-*")), "the scratch folder is removed"


@pytest.mark.parametrize("name", sorted(CROSS_RUN))
def test_every_cross_run_contradiction_gets_the_same_verdicts_on_both_paths(name: str, tmp_path: Path) -> None:
    invariant, breaking, sentence = CROSS_RUN[name]
    world, state = valid_world()
    breaking(world, state)
    history = tmp_path / "history.jsonl"
    _write(history, copy.deepcopy(world.entries))
    old = _in_memory(history, state)
    new = _spilled(history, state.runs, state)
    assert _json(new) == _json(old)
    assert sentence in {v.invariant: v for v in new}[invariant].explanation


# -- a long synthetic history: many runs, a few open at a time -------------------------------------------
class LongWorld(World):
    """Runs like the valid world's one, ``OPEN`` interleaved at a time, written to a file as they go."""

    def __init__(self, out: Any) -> None:
        super().__init__()
        self.out = out
        self.count = 0

    def _entry(self, **entry: Any) -> int:
        entry.update(index=self.count, t=round(self.t, 4), store_us=self.sampled)
        self.out.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self.count += 1
        self.t += 0.01
        return int(entry["index"])

    def claim(self, process: str, run: str, gen: int, revision: int, f: str = "claim_runs",
              **extra: Any) -> None:
        self.clock()
        item = {"run": run, "gen": gen, "revision": revision, "expires_us": self.store + LEASE, **extra}
        invoked = self._entry(type="invoke", process=process, f=f, tenant=TENANT, value={"lease_us": LEASE})
        self._entry(type="ok", process=process, f=f, tenant=TENANT, invoke=invoked, value=[item])
        self.clock()


def _run_id(i: int) -> str:
    return f"t0-x-{i:06d}"


def _steps(w: LongWorld, i: int) -> list[Callable[[], None]]:
    """The valid world's run, as steps: run ``i`` with command, signal and timer ids ``i``."""
    run, n = _run_id(i), str(i)
    return [
        lambda: w.op("client", "start", {"workflow": "wf", "key": f"x-{i}", "input": {"n": 1}},
                     {"created": True, "run": run, "tenant": TENANT}, run=run),
        lambda: w.claim(f"d{i % OPEN}.1", run, 1, 0),
        lambda: w.op(f"d{i % OPEN}.1", "load", None, {"revision": 0, "status": "running", "history_len": 0,
                                                      "history_hash": history_digest([])}, run=run, gen=1),
        lambda: w.op(f"d{i % OPEN}.1", "commit", {"expected_revision": 0, "next_status": "blocked", "events": 1,
                                                  "consume_signals": [], "consume_commands": [],
                                                  "consume_timers": []}, "committed", run=run, gen=1),
        lambda: w.claim(f"w{i % OPEN}.1", run, 1, 0, f="claim_commands", command=n, attempt=1),
        lambda: w.op(f"w{i % OPEN}.1", "complete", {"result": {"ok": True}}, "completed", command=n, run=run, gen=1),
        lambda: w.op("client", "signal", {"name": "go", "dedup": f"go-{i}", "payload": None},
                     {"outcome": "committed", "signal": n}, run=run),
        lambda: w.op("t0.1", "fire", {"limit": 20}, [{"timer": n, "run": run, "fire_at_us": T0}]),
        lambda: w.claim(f"d{(i + 1) % OPEN}.1", run, 2, 1),
        lambda: w.op(f"d{(i + 1) % OPEN}.1", "load", None,
                     {"revision": 1, "status": "running", "history_len": 1,
                      "history_hash": history_digest(EVENTS[:1])}, run=run, gen=2),
        lambda: w.op(f"d{(i + 1) % OPEN}.1", "commit",
                     {"expected_revision": 1, "next_status": "completed", "events": 2,
                      "consume_signals": [n], "consume_commands": [n], "consume_timers": [n],
                      "output": {"ok": True}, "error": None}, "committed", run=run, gen=2),
    ]


def _state(i: int) -> dict[str, Any]:
    state = _run_state()
    run, n = _run_id(i), str(i)
    state["run"].update(run_id=run, idempotency_key=f"x-{i}")
    for row in (*state["command_rows"], *state["signal_rows"], *state["timer_rows"]):
        row["run_id"] = run
    state["command_rows"][0]["command_id"] = state["signal_rows"][0]["signal_id"] = n
    state["timer_rows"][0]["timer_id"] = n
    state["signals"]["go-1"]["dedup_key"] = f"go-{i}"
    state["signals"] = {f"go-{i}": state["signals"].pop("go-1")}
    state["raw_keys"]["signals"] = [f"go-{i}"]
    return state


def _states(runs: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for i in range(runs):
        yield TENANT, _run_id(i), _state(i)


def long_history(path: Path, runs: int, deep: Callable[[LongWorld, int], None] | None = None) -> FinalState:
    """``runs`` valid runs, ``OPEN`` at a time; ``deep(world, first)`` is called after each wave of runs."""
    with open(path, "w", encoding="utf-8") as out:
        w = LongWorld(out)
        w.info("kit", "config", {"config": {"seed": 1}})
        w.op("client", "define", {"name": "wf", "version": "1", "digest": DIGEST}, {"digest": DIGEST})
        for first in range(0, runs, OPEN):
            waves = [_steps(w, i) for i in range(first, min(first + OPEN, runs))]
            for step in range(len(waves[0])):
                for steps in waves:
                    steps[step]()
            if deep is not None:
                deep(w, first)
        w.info("kit", "drain", {"quiescent": True, "progressing": False, "open": 0, "seconds": 0.1, "quiet_s": 8})
    return FinalState(definitions={(TENANT, "wf", "1"): (DIGEST, DIGEST)}, now=from_micros(T0 + 60_000_000))


def test_the_long_synthetic_history_is_valid(tmp_path: Path) -> None:
    like = long_history(tmp_path / "h.jsonl", 40)
    verdicts = _spilled(tmp_path / "h.jsonl", lambda: _states(40), like)
    assert [v.status for v in verdicts] == [Status.VALID] * len(verdicts), [
        (v.invariant, v.explanation) for v in verdicts if v.status is not Status.VALID]


RUNS, DEEP = 300, 280


def _deep_violations(w: LongWorld, first: int) -> None:
    """Near the end: run DEEP's revision 2 committed twice, run 1's timer fired again, run 2's key created again."""
    if first != DEEP:
        return
    w.op("d9.1", "commit", {"expected_revision": 1, "next_status": "completed", "events": 2}, "committed",
         run=_run_id(DEEP), gen=2)
    w.op("t1.1", "fire", {"limit": 20}, [{"timer": "1", "run": _run_id(1), "fire_at_us": T0}])
    w.op("client~dup", "start", {"workflow": "wf", "key": "x-2", "input": {"n": 1}},
         {"created": True, "run": _run_id(2), "tenant": TENANT}, run=_run_id(2))


def test_a_violation_deep_in_a_long_history_has_the_in_memory_witness(tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    like = long_history(history, RUNS, _deep_violations)
    new = _spilled(history, lambda: _states(RUNS), like)
    old = _in_memory(history, FinalState(dict(_group(_states(RUNS))), like.definitions, like.now))
    assert _json(new) == _json(old)
    found = {v.invariant: v for v in new}
    assert {i for i, v in found.items() if v.status is Status.INVALID} == {2, 5, 6}
    assert f"run {_run_id(DEEP)} revision 2 was committed twice" in found[2].explanation
    early, late = found[5].witness  # the first firing, from the start of the history, fetched back by index
    assert early["history"][0] < 200 and late["history"][0] > DEEP * 60, (early, late)
    assert found[6].witness[0]["run"] == _run_id(2) and found[6].witness[0]["history"][0] < 200


def _group(runs: Iterator[tuple[str, str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for tenant, run_id, state in runs:
        out.setdefault(tenant, {})[run_id] = state
    return out


def _cursor_registry(o: Any) -> bool:
    """sqlite3's list of weak references to a connection's cursors (CPython prunes it every 200 cursors)."""
    return type(o) is list and bool(o) and isinstance(o[0], weakref.ref)


class _Live:
    """The most operations and run states alive at once, sampled every ``every`` operations decoded or kept,
    beyond those alive when sampling began (what earlier tests in this process still hold is not the check's)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, every: int = 150) -> None:
        self.ops = self.states = self.seen = self.largest = 0
        self.every = every
        self._before = (0, 0)
        self._existing: list[Any] = []
        self.count()
        self._before, self.ops, self.states, self.largest = (self.ops, self.states), 0, 0, 0
        self._existing = gc.get_objects()  # held, so no container made later can reuse one's id
        self._existing_ids = {id(o) for o in self._existing} | {id(self._existing)}
        self._existing_ids.add(id(self._existing_ids))
        decode, grant, keep, run = spill._op, spill._grant, spill.SpilledIndex._keep, SpilledRuns.run

        def counting_decode(data: bytes) -> Op:
            self.sample()
            return decode(data)

        def counting_grant(data: bytes) -> Any:
            self.sample()
            return grant(data)

        def counting_keep(index: spill.SpilledIndex, op: Op, grants: Any) -> None:
            self.sample()
            keep(index, op, grants)

        def counting_run(runs: SpilledRuns, tenant: str, run_id: str) -> dict[str, Any]:
            self.sample()
            return run(runs, tenant, run_id)

        monkeypatch.setattr(spill, "_op", counting_decode)
        monkeypatch.setattr(spill, "_grant", counting_grant)
        monkeypatch.setattr(spill.SpilledIndex, "_keep", counting_keep)
        monkeypatch.setattr(SpilledRuns, "run", counting_run)

    def sample(self) -> None:
        self.seen += 1
        if self.seen % self.every:
            return
        self.count()

    def count(self) -> None:
        gc.collect()  # count what is still reachable, not cycles the collector has not got round to yet
        objects = gc.get_objects()
        self.ops = max(self.ops, sum(1 for o in objects if type(o) is Op) - self._before[0])
        self.states = max(self.states, sum(1 for o in objects if type(o) is dict and "raw_keys" in o) - self._before[1])
        if self._existing:  # the largest list, set or dict made since sampling began (what a cross-run index is)
            known = self._existing_ids
            self.largest = max(self.largest, max((len(o) for o in objects if type(o) in (list, set, dict)
                                                  and o is not objects and id(o) not in known
                                                  and not _cursor_registry(o)), default=0))
        del objects


def test_checking_keeps_a_bounded_number_of_operations_and_run_states_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps = len(_steps(LongWorld(None), 0))
    per_run = 2 * steps  # operations and grants of one run, generously
    peaks = {}
    for runs in (40, 400):
        history = tmp_path / f"h{runs}.jsonl"
        like = long_history(history, runs)
        live = _Live(monkeypatch)
        verdicts = _spilled(history, lambda runs=runs: _states(runs), like)
        assert {v.status for v in verdicts} == {Status.VALID}
        assert live.seen > 10 * runs  # the sampler ran all along the check
        peaks[runs] = (live.ops, live.states)
        monkeypatch.undo()
    ops, states = peaks[400]
    assert ops <= OPEN * per_run, peaks  # the open runs' operations, not the 400 runs'
    assert ops <= peaks[40][0] + per_run, peaks  # ten times the runs, no more kept
    assert states <= SpilledRuns.CACHED + 2, peaks
    # the in-memory path, for contrast, holds every operation at once
    held = _Live(monkeypatch)
    index = HistoryIndex.from_file(tmp_path / "h400.jsonl")
    held.count()
    assert held.ops >= 400 * steps > ops, (held.ops, peaks)
    del index


def test_no_cross_run_question_keeps_an_entry_per_run_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Which runs were started, which keys were created, which timers fired, every send of each signal:
    # questions across the whole history, answered from groups kept in the scratch file. Writes are
    # batched (as the index's are); small batches here, so a batch is not mistaken for an index.
    from kit.checkers import groups

    monkeypatch.setattr(groups, "_BATCH", 16)
    monkeypatch.setattr(spill, "_BATCH", 16)
    largest = {}
    for runs in (40, 400):
        history = tmp_path / f"h{runs}.jsonl"
        like = long_history(history, runs)
        with pytest.MonkeyPatch.context() as sampling:  # the sampler's hooks, for this check only
            live = _Live(sampling, every=100)
            verdicts = _spilled(history, lambda runs=runs: _states(runs), like)
        assert {v.status for v in verdicts} == {Status.VALID}
        largest[runs] = live.largest
    assert largest[400] < 100 and largest[400] <= largest[40] + 20, largest  # not one entry per run of 400


def test_the_garbage_of_one_checking_phase_is_gone_before_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Garbage only the cyclic collector frees (and CPython's free lists, emptied by the same full
    # collection) would otherwise carry one phase's memory into the next one's peak: the collector
    # runs rarely once a long workload made the heap large.
    from kit.checkers import spill

    history = tmp_path / "h.jsonl"
    like = long_history(history, 4)

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    left: list[weakref.ref[Cycle]] = []
    alive_at_index: list[bool] = []
    real = spill.SpilledIndex.from_history.__func__  # type: ignore[attr-defined]

    def reading(where: Path) -> FinalState:
        left.append(weakref.ref(Cycle()))  # what reading the state left behind, in a cycle
        return _spill_state(where, _states(4), like)

    def indexing(cls: type[spill.SpilledIndex], path: Path, db_path: Path) -> spill.SpilledIndex:
        alive_at_index.append(left[0]() is not None)
        return real(cls, path, db_path)

    monkeypatch.setattr(spill.SpilledIndex, "from_history", classmethod(indexing))
    enabled = gc.isenabled()
    gc.disable()  # as if the collector's thresholds were far away, as they are after a long workload
    try:
        verdicts = check_stress(history, reading)
    finally:
        if enabled:
            gc.enable()
    assert {v.status for v in verdicts} == {Status.VALID}
    assert alive_at_index == [False], "the state read's garbage was still alive when indexing began"


# -- the final state, read to disk ---------------------------------------------------------------------
class _Breaking:
    """A store whose second history read fails (a connection lost halfway through a tenant)."""

    def __init__(self, store: Any) -> None:
        self.store, self.reads = store, 0

    def get_history(self, run_id: str) -> Any:
        self.reads += 1
        if self.reads == 2:
            raise RuntimeError("connection lost")
        return self.store.get_history(run_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class _Flaky:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def open(self, tenant: str, **kwargs: Any) -> Any:
        store = self.inner.open(tenant, **kwargs)
        return _Breaking(store) if tenant == "t1" else store


def test_the_final_state_read_to_disk_is_the_final_state_read_in_memory(tmp_path: Path) -> None:
    from kit.backends import resolve
    from kit.checkers import read_final_state
    from kit.contract import ClockMode
    from kit.runtime.module import load_workflows
    from kit.runtime.scenarios import SCENARIOS

    backend, registry = resolve("memory"), load_workflows()
    database = backend.provision()
    try:
        for tenant in ("t0", "t1"):
            store = database.open(tenant, clock=ClockMode.DATABASE)
            store.migrate()
            registry.register(store)
            for n in range(3):
                scenario = SCENARIOS["order"]
                store.start_run(f"{tenant}-order-{n:06d}", registry[scenario.workflow].ref, scenario.make_input(n),
                                idempotency_key=f"order-{n:06d}")
            store.close()
        definitions = [(m.name, m.version) for m in registry]
        memory = read_final_state(database, ["t0", "t1"], definitions)
        disk = read_final_state(database, ["t0", "t1"], definitions, spill=tmp_path / "state.sqlite")
        assert memory.error is None and disk.error is None
        assert list(disk.runs()) == list(memory.runs()) and len(list(memory.runs())) == 6
        assert disk.definitions == memory.definitions and disk.run_count == 6
        assert disk.run("t1", "t1-order-000002") == memory.run("t1", "t1-order-000002")
        assert disk.run("t1", "t0-order-000002") is None and "t0-order-000001" in disk.tenants["t0"]
        # a tenant whose reading failed halfway has no runs, on disk as in memory
        memory = read_final_state(_Flaky(database), ["t0", "t1"], definitions)  # type: ignore[arg-type]
        disk = read_final_state(_Flaky(database), ["t0", "t1"], definitions,  # type: ignore[arg-type]
                                spill=tmp_path / "broken.sqlite")
        assert disk.error == memory.error and "connection lost" in str(disk.error)
        assert list(disk.tenants) == list(memory.tenants) == ["t0"]
        assert list(disk.runs()) == list(memory.runs())
        assert isinstance(disk.tenants, SpilledRuns) and not disk.tenants.has("t1", "t1-order-000000")
    finally:
        database.drop()
        backend.close()


def test_a_run_state_is_its_entities_as_dicts_sharing_only_the_values_that_cannot_change() -> None:
    # ``dataclasses.asdict`` deep-copied every leaf of every run read (datetimes, text, enums): the
    # state read's time and, through CPython's free lists, most of a long run's checking peak.
    from dataclasses import asdict

    from kit.backends import resolve
    from kit.checkers.state import read_run
    from kit.contract import ClockMode
    from kit.runtime.module import load_workflows
    from kit.runtime.scenarios import SCENARIOS

    backend, registry = resolve("memory"), load_workflows()
    database = backend.provision()
    try:
        store = database.open("t0", clock=ClockMode.DATABASE)
        store.migrate()
        registry.register(store)
        scenario = SCENARIOS["approval"]
        data = scenario.make_input(1)
        store.start_run("t0-approval-000001", registry[scenario.workflow].ref, data, idempotency_key="k")
        for name, payload in scenario.signals(data):
            store.send_signal("t0-approval-000001", name, payload, f"{name}-1")
        run = store.get_run("t0-approval-000001")
        assert run is not None and isinstance(run.input, dict)
        state = read_run(store, run)
        signals = store.list_signals(run.run_id)
        assert signals, "the scenario sends a signal"
        assert state["run"] == asdict(run)
        assert state["history"] == [asdict(e) for e in store.get_history(run.run_id)]
        assert state["signal_rows"] == [asdict(s) for s in signals]
        assert state["signals"] == {s.dedup_key: {k: v for k, v in asdict(s).items() if k != "signal_id"}
                                    for s in signals}
        assert state["run"]["created_at"] is run.created_at  # a datetime cannot change: shared, not copied
        assert state["run"]["run_id"] is run.run_id
        assert state["run"]["input"] == run.input and state["run"]["input"] is not run.input  # JSON can: detached
        assert state["run"]["definition"] == asdict(run.definition)
        store.close()
    finally:
        database.drop()
        backend.close()
