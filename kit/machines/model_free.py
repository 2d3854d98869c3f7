"""The model-free fault machine's interpreter: steps drive one store, only the contract's invariants judge it.

The reference-comparing :class:`~kit.machines.interpreter.Interpreter` needs a
store that keeps every promise the reference engine keeps: a store with other
promises (no timers, no leases) differs at the first step. This interpreter runs
the same JSON steps on the store alone and, after every step, judges what a
client could observe (its answers, the claims it holds, every tenant's state and
the store clock) with :mod:`kit.machines.model_free_checks`: no stale effect, at
most one live claim, duplicates applied once, nothing acknowledged lost, history
contiguous and append-only, terminal stays terminal. Which steps a store is
given follows the promise families it declares (:func:`step_families`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kit.contract import (
    Backend,
    Capability,
    ClockMode,
    KitError,
    Promise,
    StorageError,
)
from kit.inspect import observable_state
from kit.machines import progress
from kit.machines.choice import (
    MACHINES,
    MODEL_FREE,
    REFERENCE,
    WORKFLOW_PROMISES,
    choose_machine,
    declared_promises,
    step_families,
)
from kit.machines.interpreter import (
    RACE_TIMEOUT_S,
    Divergence,
    StepRecord,
    deadlines,
    inner_failure_unit,
    operation,
    verify_schema,
)
from kit.machines.model_free_checks import Call, Ledger, World, judge
from kit.machines.normalize import normalize
from kit.machines.side import CLOCK_WORKER, Side

__all__ = [
    "MACHINES",
    "MODEL_FREE",
    "REFERENCE",
    "WORKFLOW_PROMISES",
    "ModelFreeInterpreter",
    "choose_machine",
    "declared_promises",
    "step_families",
]

_SINGLE = ("define", "start", "signal", "cancel", "claim_runs", "renew", "release", "load", "commit",
           "claim_commands", "heartbeat", "complete", "fail", "fire_timers", "list_page")
_RUN_CLAIMED = ("renew", "release", "load", "commit")
_COMMAND_CLAIMED = ("heartbeat", "complete", "fail")


@dataclass
class ModelFreeInterpreter:
    """Steps on ``backend`` alone (in ``database`` if given: the caller then owns and drops it).

    After every step (and inside a step, after an attempt whose answer was lost, so a retry
    is judged against the state it met) :func:`~kit.machines.model_free_checks.judge` must
    find nothing; else :class:`~kit.machines.interpreter.Divergence` of kind ``invariant``.
    """

    backend: Backend
    narrate: Callable[[str], None] | None = None
    database: Any = None
    families: frozenset[str] | None = None
    """The promise families judged (default: all the store declares; see :func:`step_families`)."""
    records: list[StepRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.capabilities = self.backend.capabilities
        self.promised = self.families if self.families is not None else step_families(self.backend)
        self._promises = frozenset(p for p in Promise if p.value in self.promised)
        self._definitions: set[str] = set()
        self._owns_database = self.database is None
        self.test_clock = Capability.TEST_CLOCK in self.capabilities
        clock = ClockMode.TEST if self.test_clock else ClockMode.DATABASE
        self.adapter = Side("adapter", self.database if self.database is not None else self.backend.provision(),
                            clock=clock)
        self.ledger = Ledger()
        self._world = self._read()
        self._calls: list[Call] = []
        self._found: list[str] = []
        progress.example_started()

    @property
    def steps(self) -> list[dict[str, Any]]:
        return [r.step for r in self.records]

    def finish(self) -> None:
        """The end of an example or a replay: nothing more to check (every step checked the whole state)."""

    def close(self) -> None:
        self.adapter.close()
        if self._owns_database:
            self.adapter.database.drop()

    def now(self) -> datetime:
        return self.adapter.observer(self.adapter.workers[CLOCK_WORKER].tenant).now()

    # -- applying a step ------------------------------------------------------
    def apply(self, step: dict[str, Any]) -> StepRecord:
        index = len(self.records)
        record = StepRecord(index, step, None)
        self.records.append(record)
        progress.step_applied()
        op = step["op"]
        handler = self._single if op in _SINGLE else getattr(self, f"_do_{op}", None)
        if handler is None:
            raise ValueError(f"step op {op!r} has no model-free meaning: see kit.machines.steps")
        self._calls, self._found = [], []
        record.outcome = handler(index, step)
        if self.narrate is not None:
            self.narrate(record.narration())
        self._checkpoint(index, step)
        if self._found:
            raise Divergence(index, step, "invariant", "; ".join(self._found), record.outcome, None)
        return record

    def _checkpoint(self, index: int, step: dict[str, Any]) -> None:
        """Judge the calls made since the last checkpoint against the world they met; read the new world."""
        try:
            after = self._read()
        except KitError as exc:
            raise Divergence(index, step, "state", f"reading the store's state failed: {exc!r}") from exc
        self._found += judge(self._calls, self._world, after, self.ledger, self.promised)
        self._world, self._calls = after, []

    def _read(self) -> World:
        now = self.now()
        state, definitions = {}, {}
        home = self.adapter.workers[CLOCK_WORKER].tenant
        for tenant in self.adapter.tenants():
            if tenant != home and "tenancy" not in self.promised:
                continue  # a store without tenancy shows every tenant the same rows: read them once
            store = self.adapter.observer(tenant)
            state[tenant] = observable_state(store, self._promises)
            found = {name: store.get_definition(name, "1") for name in sorted(self._definitions)}
            definitions[tenant] = {name: None if d is None else d.digest for name, d in found.items()}
        return World(state, now, definitions)

    def _call(self, fn: Callable[[Side], Any], index: int, step: dict[str, Any]) -> Any:
        try:
            return fn(self.adapter)
        except KitError as exc:
            return exc
        except Exception as exc:
            raise Divergence(index, step, "error", f"the store raised {type(exc).__name__}: {exc}") from exc

    def _claim(self, step: dict[str, Any]) -> Any:
        """The claim a fenced step uses (before it runs: what the worker holds then)."""
        source, which = step.get("claim_of", step.get("worker", CLOCK_WORKER)), step.get("claim", "latest")
        if step["op"] in _RUN_CLAIMED:
            return self.adapter.run_claim(source, step["run"], which)
        if step["op"] in _COMMAND_CLAIMED:
            return self.adapter.command_claim(source, step["run"], step["key"], which)
        return None

    def _tenant(self, step: dict[str, Any]) -> str:
        """The tenant whose state a step's call is judged in (one for a store without tenancy)."""
        if "tenancy" not in self.promised:
            return self.adapter.workers[CLOCK_WORKER].tenant
        return self.adapter.workers[step.get("worker", CLOCK_WORKER)].tenant

    def _run_one(self, index: int, step: dict[str, Any], inner: dict[str, Any], lost: bool = False) -> Any:
        """Run ``inner`` (a single-operation step) once, remember what it grants, log the call."""
        fn, remember = operation(inner)
        claim = self._claim(inner)
        raw = self._call(fn, index, step)
        if remember is not None and not isinstance(raw, BaseException):
            remember(self.adapter, raw)
        self._calls.append(Call(inner, self._tenant(inner), claim, raw, lost))
        return raw

    def _single(self, index: int, step: dict[str, Any]) -> Any:
        if step["op"] == "define":
            self._definitions.add(step["name"])
        return normalize(self._run_one(index, step, step))

    def _do_verify_schema(self, index: int, step: dict[str, Any]) -> Any:
        raw = self._call(lambda side: verify_schema(side, bool(step.get("tamper"))), index, step)
        self._calls.append(Call(step, self._tenant(step), None, raw))
        return normalize(raw)

    def _do_uow_inner_failure(self, index: int, step: dict[str, Any]) -> Any:
        """A unit of work whose inner block fails while the outer swallows it: it must leave nothing."""
        if Capability.UNIT_OF_WORK not in self.capabilities:
            return "skipped: no unit_of_work"
        raw = self._call(lambda side: inner_failure_unit(side, step["worker"], step["run"], step.get("input")), index, step)
        self._calls.append(Call(step, self._tenant(step), None, raw))
        return normalize(raw)

    # -- time ---------------------------------------------------------------
    def _do_advance(self, index: int, step: dict[str, Any]) -> Any:
        if not self.test_clock:
            return "skipped: no test_clock"
        return self.adapter.store(CLOCK_WORKER).advance_test_clock(timedelta(microseconds=int(step["us"]))).isoformat()

    def _do_advance_to(self, index: int, step: dict[str, Any]) -> Any:
        """Land exactly on (or one microsecond around) a lease expiry, timer or wake time the store shows."""
        if not self.test_clock:
            return "skipped: no test_clock"
        offset = timedelta(microseconds=step.get("offset_us", 0))
        now = self.now()
        targets = sorted(t for t in deadlines(self.adapter, step["target"], step.get("run")) if t + offset > now)
        if not targets:
            return "no such deadline ahead"
        at = targets[step.get("which", 0) % len(targets)] + offset
        self.adapter.store(CLOCK_WORKER).set_test_clock(at)
        return at.isoformat()

    # -- faults -------------------------------------------------------------
    def _do_crash(self, index: int, step: dict[str, Any]) -> Any:
        self.adapter.crash(step["worker"])
        return "crashed"

    def _do_skew(self, index: int, step: dict[str, Any]) -> Any:
        # The store never sees a worker's clock: a skewed worker shows only in what it does next.
        return f"{step['worker']} clock off by {step['hours']} h"

    def _do_crash_during(self, index: int, step: dict[str, Any]) -> Any:
        """The worker's session dies before statement #at of the inner operation: its fate is unknown."""
        inner, w = step["inner"], step["inner"]["worker"]
        kill = Capability.KILL_SESSION in self.capabilities
        if not kill and Capability.STATEMENT_FAULTS not in self.capabilities:
            return "skipped: no statement_faults"
        worker, store = self.adapter.workers[w], self.adapter.store(w)
        action = (lambda _statement: self.adapter.database.kill_session(store)) if kill else None
        fn, remember = operation(inner)
        claim = self._claim(inner)
        worker.faults.fail_at(int(step["at"]), action=action)
        try:
            raw = self._call(fn, index, step)
        finally:
            fired = worker.faults.fired
            worker.faults.disarm()
        if fired is None:  # the operation finished before the fault point: it simply ran
            if remember is not None and not isinstance(raw, BaseException):
                remember(self.adapter, raw)
            self._calls.append(Call(inner, self._tenant(inner), claim, raw))
            return normalize(raw)
        if not isinstance(raw, StorageError):
            raise Divergence(index, step, "fault", f"the operation returned {normalize(raw)!r} although its session "
                                                   f"died before {fired[:60]!r}", normalize(raw), "crashed")
        self._calls.append(Call(inner, self._tenant(inner), claim, raw, lost=True))
        self.adapter.crash(w)
        return "crashed"

    def _do_lost_ack(self, index: int, step: dict[str, Any]) -> Any:
        """The inner operation commits, the client sees an error and retries once; the retry is judged
        against the state the first attempt left."""
        inner, w = step["inner"], step["inner"]["worker"]
        if Capability.STATEMENT_FAULTS not in self.capabilities:
            return "skipped: no statement_faults"
        worker = self.adapter.workers[w]
        self.adapter.store(w)  # (re)open first: opening commits too, and must not take the fault
        worker.faults.lose_ack()
        fn, remember = operation(inner)
        claim = self._claim(inner)
        try:
            first = self._call(fn, index, step)
        finally:
            lost = worker.faults.fired is not None
            worker.faults.disarm()
        if not lost:  # refused before committing: an ordinary answer
            if remember is not None and not isinstance(first, BaseException):
                remember(self.adapter, first)
            self._calls.append(Call(inner, self._tenant(inner), claim, first))
            return normalize(first)
        self._calls.append(Call(inner, self._tenant(inner), claim, first, lost=True))
        self._checkpoint(index, step)
        return {"ack": "lost", "retry": normalize(self._run_one(index, step, inner))}

    # -- duplicate delivery at once ---------------------------------------------
    def _do_race(self, index: int, step: dict[str, Any]) -> Any:
        """Operations from different workers at once on threads; every answer is judged against the state
        they all met. With ``release_claims`` the claims they took are given back afterwards."""
        if Capability.CONCURRENT_CONNECTIONS not in self.capabilities:
            return "skipped: no concurrent_connections"
        ops = step["ops"]
        calls = [operation(op) for op in ops]
        claims = [self._claim(op) for op in ops]
        for op in ops:
            self.adapter.store(op["worker"])
        barrier = threading.Barrier(len(ops))
        raws: list[Any] = [None] * len(ops)

        def run(i: int) -> None:
            barrier.wait(RACE_TIMEOUT_S)
            try:
                raws[i] = self._call(calls[i][0], index, step)
            except Divergence as exc:
                raws[i] = exc

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(ops))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(RACE_TIMEOUT_S)
        if any(t.is_alive() for t in threads):
            raise Divergence(index, step, "blocked", "a racing operation never finished (deadlock or lock wait)")
        for raw in raws:
            if isinstance(raw, Divergence):
                raise raw
        for op, (_, remember), claim, raw in zip(ops, calls, claims, raws):
            self._calls.append(Call(op, self._tenant(op), claim, raw))
            if remember is not None and not isinstance(raw, BaseException) and not step.get("release_claims"):
                remember(self.adapter, raw)
        if step.get("release_claims"):
            self._checkpoint(index, step)
            for op, raw in zip(ops, raws):
                for claim in raw if isinstance(raw, list) else ():
                    self.adapter.store(op["worker"]).release_run_claim(claim)
        return [normalize(r) for r in raws]
