"""Interpreter steps for guarantees the ordinary steps never touch (mixed into the interpreter).

Each step runs on both sides, like every other, and is judged the same way: the
answers must agree, then each tenant's whole observable state must agree.

- ``poke``: ``inner`` (a write or a read) runs with the side's own copy of its
  arguments; afterwards the caller scribbles over every object it handed in and
  every object it got back. A store that keeps the caller's live objects now
  holds the scribbles, and the state comparison that follows shows it.
- ``deep_payload``: a payload nested exactly to the contract's depth limit is
  written and read back through every read, from a shallow and from a deep call
  stack, in a tenant of its own (so the state comparison never walks it).
- ``beside_unit``: a write through a second store on the thread that holds
  another store's open unit of work, before and after the unit's own write; each
  is refused with a TransientError or acknowledged, and an acknowledged one must
  survive the unit's commit (the reference applies exactly the writes the
  adapter acknowledged, so the state comparison judges them).
- ``fresh_schema``: in a database provisioned for the step (never migrated):
  verify fails closed as ``absent``; several first migrations race and apply
  each file once; a migration that fails half-way is not recorded and reruns.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from kit.contract import (
    Backend,
    Capability,
    ClockMode,
    Decision,
    DefinitionRef,
    NewEvent,
    RunStatus,
    SchemaError,
    Snapshot,
    StorageError,
    TransientError,
)
from kit.contract import validation as v
from kit.contract.deep_json import from_deep_stack, nested, nesting_of
from kit.faults import InjectedFault
from kit.inspect import run_state
from kit.machines.normalize import normalize
from kit.machines.side import Side, body_of
from kit.migrate import Migration
from kit.reference import MemoryBackend

__all__ = ["DEEP_TENANT", "ReachSteps", "scribble"]

#: The tenant deep payloads live in: no worker reads it, so the state comparison never walks 512 levels.
DEEP_TENANT = "kit-machine-deep"
#: One more migration than the adapter ships (every SQL dialect accepts it).
_PROBE = Migration(900, "kit_probe", "CREATE TABLE kit_probe_900 (id INTEGER NOT NULL PRIMARY KEY);\n")
_MIGRATE_TIMEOUT_S = 60.0
_LEASE = timedelta(seconds=30)


def scribble(value: Any, seen: set[int] | None = None) -> None:
    """Mutate, in place, every dict and list reachable from ``value`` (inside dataclasses and tuples too)."""
    seen = set() if seen is None else seen
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            stack.extend(list(item.values()))
            item["scribbled"] = True
        elif isinstance(item, list):
            stack.extend(item)
            item.append("scribbled")
        elif isinstance(item, tuple):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))


class ReachSteps:
    """The ``poke``, ``deep_payload``, ``beside_unit`` and ``fresh_schema`` steps (see the module docstring)."""

    backend: Backend
    adapter: Side
    reference: Side
    capabilities: Any
    _call: Callable[..., Any]
    _count: Callable[[dict[str, Any], Any], None]
    _operation: Callable[[dict[str, Any]], tuple[Callable[[Side], Any], Callable[[Side, Any], None] | None]]

    # -- stored values are values -------------------------------------------------
    def _do_poke(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        inner = step["inner"]
        results = []
        for side in (self.adapter, self.reference):
            mine = copy.deepcopy(inner)
            if mine["op"] == "read_back":
                w, run = mine["worker"], mine["run"]

                fn: Callable[[Side], Any] = partial(_read_all, worker=w, run=run)
                remember = None
            else:
                fn, remember = self._operation(mine)
            raw = self._call(side, fn, index, step)
            if remember is not None and not isinstance(raw, BaseException):
                remember(side, raw)
            out = raw.summary() if isinstance(raw, _Reads) else normalize(raw)
            if isinstance(raw, Snapshot):  # the worker keeps its snapshot: scribble a copy's shared payloads only
                scribble([raw.run, list(raw.history), list(raw.signals), list(raw.command_results)])
            elif not isinstance(raw, BaseException):
                scribble(raw)
            scribble(mine)
            # read the run back through the individual reads (export_state may not share what they share)
            reader = side.observer(side.workers[mine["worker"]].tenant)
            results.append({"answer": out, "then": _plain(run_state(reader, mine["run"]))})
        self._count(inner, results[1]["answer"])
        return results[0], results[1]

    # -- JSON at the depth limit from any stack -------------------------------------
    def _do_deep_payload(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        run_id = f"deep-{index}"
        worker = step.get("worker", "w0")

        def deep(side: Side) -> Any:
            store = side.database.open(DEEP_TENANT, clock=side.clock)
            try:
                value = nested(v.MAX_JSON_DEPTH)
                digest = Side.definition_digest("v1")
                store.ensure_definition("wf", "1", digest, body_of("v1"))
                ref = DefinitionRef("wf", "1", digest)
                from_deep_stack(lambda: store.start_run(run_id, ref, value))
                claims = [c for c in store.claim_runs(worker, _LEASE, 10) if c.run_id == run_id]
                if not claims:
                    return "the deep run was not claimable"
                claim = claims[0]
                decision = Decision(RunStatus.PENDING, events=(NewEvent("deep", value),))
                outcome = from_deep_stack(lambda: store.commit_decision(claim, claim.revision, decision))
                again = [c for c in store.claim_runs(worker, _LEASE, 10) if c.run_id == run_id]
                reads: dict[str, Callable[[], Any]] = {
                    "get_run input": lambda: store.get_run(run_id).input,  # type: ignore[union-attr]
                    "get_history payload": lambda: store.get_history(run_id)[0].payload,
                }
                if again:
                    reads["load_claimed history payload"] = lambda: _history0(store.load_claimed(again[0]))
                changed = []
                for where, read in reads.items():  # each from a deep stack; history from a shallow one too
                    stacks: list[tuple[str, Callable[[], Any]]] = [("deep", partial(from_deep_stack, read))]
                    if where == "get_history payload":
                        stacks.append(("shallow", read))
                    for stack, got in stacks:
                        shape: tuple[Any, Any]
                        try:
                            shape = nesting_of(got())
                        except Exception as exc:  # noqa: BLE001 - a read that fails is the finding
                            shape = (type(exc).__name__, str(exc)[:60])
                        if shape != (v.MAX_JSON_DEPTH, "bottom"):
                            changed.append(f"{where} from a {stack} stack: {shape!r}")
                if again:  # close the run so it never waits in the deep tenant
                    store.commit_decision(again[0], again[0].revision, Decision(RunStatus.COMPLETED))
                return {"commit": normalize(outcome), "changed": changed}
            finally:
                store.close()

        return self._both_plain(index, step, deep)

    # -- a write beside another store's open unit of work ----------------------------
    def _do_beside_unit(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        if Capability.UNIT_OF_WORK not in self.capabilities:
            return "skipped: no unit_of_work", "skipped: no unit_of_work"
        holder_w, other_w, what = step["worker"], step["other"], step.get("what", "start")
        run = step["run"]
        digest = Side.definition_digest("v1")
        ref = DefinitionRef("wf", "1", digest)
        acked: list[bool] = []

        def beside(side: Side) -> Any:
            holder, other = side.store(holder_w), side.store(other_w)
            holder.ensure_definition("wf", "1", digest, body_of("v1"))
            answers: list[str] = []
            with holder.transaction():
                for i, when in enumerate(("first", "later")):
                    if when == "later":
                        holder.start_run(_derived_id(run, f"-unit-{index}"), ref, {"by": "unit"})
                    if side is self.reference and len(acked) > i and not acked[i]:
                        answers.append("refused")  # the adapter refused it: the reference does not write it
                        continue
                    try:
                        if what == "signal":
                            other.send_signal(run, "beside", {"n": i}, f"beside-{index}-{when}")
                        else:
                            other.start_run(_derived_id(run, f"-{when}-{index}"), ref, {"by": "other"})
                        answers.append("acknowledged")
                    except TransientError:
                        answers.append("refused")
                    if side is self.adapter:  # recorded as it happens: a later error must not hide it
                        acked.append(answers[-1] == "acknowledged")
            return answers

        return self._both_plain(index, step, beside)

    # -- a database nothing was migrated into ----------------------------------------
    def _do_fresh_schema(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        variant = step["variant"]
        if variant == "failed_migration" and Capability.STATEMENT_FAULTS not in self.capabilities:
            return "skipped: no statement_faults", "skipped: no statement_faults"
        if variant == "concurrent_migrate" and Capability.CONCURRENT_CONNECTIONS not in self.capabilities:
            return "skipped: no concurrent_connections", "skipped: no concurrent_connections"
        results = []
        for side in (self.adapter, self.reference):
            backend: Backend = self.backend if side is self.adapter else MemoryBackend()

            def fresh(s: Side, backend: Backend = backend) -> Any:
                database = backend.provision()
                try:
                    return _fresh_schema(database, variant, s.clock)
                finally:
                    database.drop()

            results.append(normalize(self._call(side, fresh, index, step)))
        return results[0], results[1]

    def _both_plain(self, index: int, step: dict[str, Any], fn: Callable[[Side], Any]) -> tuple[Any, Any]:
        adapter = normalize(self._call(self.adapter, fn, index, step))
        return adapter, normalize(self._call(self.reference, fn, index, step))




def _read_all(side: Side, worker: str, run: str) -> _Reads:
    store = side.store(worker)
    return _Reads(store.get_run(run), store.get_history(run), store.list_runs(limit=50),
                  store.list_signals(run), store.list_commands(run), store.list_timers(run))


@dataclasses.dataclass
class _Reads:
    """What ``read_back`` under ``poke`` read: the run, its history, the listing, its signals, commands, timers."""

    run: Any
    history: list[Any]
    listed: list[Any]
    signals: list[Any]
    commands: list[Any]
    timers: list[Any]

    def summary(self) -> Any:
        return {"run": normalize(self.run), "history": [e.seq for e in self.history],
                "listed": [r.run_id for r in self.listed], "signals": [x.dedup_key for x in self.signals],
                "commands": [c.operation_key for c in self.commands], "timers": [t.operation_key for t in self.timers]}


def _plain(state: Any) -> Any:
    """A run's state as compared JSON (timestamps as text)."""
    if isinstance(state, dict):
        return {str(k): _plain(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        return [_plain(v) for v in state]
    if hasattr(state, "isoformat"):
        return state.isoformat()
    return getattr(state, "value", state) if not isinstance(state, bool | int | float | str) else state


def _history0(snapshot: Any) -> Any:
    if not isinstance(snapshot, Snapshot):
        return snapshot
    return snapshot.history[0].payload


def _fresh_schema(database: Any, variant: str, clock: ClockMode) -> Any:
    """What a never-migrated database answers for ``variant`` (absent | concurrent_migrate | failed_migration)."""
    tenant = "kit-machine-schema"

    def attempt(fn: Callable[[Any], Any], migrations: Any = None, hook: Any = None) -> Any:
        store = database.open(tenant, clock=clock, migrations=migrations, statement_hook=hook)
        try:
            return normalize(fn(store))
        except (StorageError, SchemaError) as exc:
            return normalize(exc)
        finally:
            store.close()

    def verify(store: Any) -> str:
        store.verify_schema()
        return "schema verified"

    if variant == "absent":
        return attempt(verify)
    if variant == "concurrent_migrate":
        stores = [database.open(tenant, clock=clock) for _ in range(3)]
        try:
            applied: list[Any] = [None] * 3
            barrier = threading.Barrier(3)

            def migrate(i: int) -> None:
                try:
                    barrier.wait(_MIGRATE_TIMEOUT_S)
                    applied[i] = stores[i].migrate()
                except Exception as exc:  # noqa: BLE001 - reported as the answer
                    applied[i] = exc
            threads = [threading.Thread(target=migrate, args=(i,), daemon=True) for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(_MIGRATE_TIMEOUT_S)
            errors = [normalize(a) for a in applied if not isinstance(a, list)]
            names = sorted(n for a in applied if isinstance(a, list) for n in a)
            files = sorted(f"{m.version:03d}_{m.name}" for m in stores[0].migrations)
            return {"errors": errors, "each_file_once": names == files, "then": attempt(verify)}
        finally:
            for s in stores:
                s.close()
    # failed_migration: the shipped files, then a probe file whose statement fails: not recorded, reruns
    opened = database.open(tenant, clock=clock)
    try:
        shipped = [Migration(m.version, m.name, m.sql) for m in opened.migrations]
        opened.migrate()
    finally:
        opened.close()
    wanted = [*shipped, _PROBE]
    fired: list[str] = []

    def fail_probe(statement: str) -> None:
        if "kit_probe" in statement and not fired:
            fired.append(statement)
            raise InjectedFault(f"injected fault before: {statement[:60]}")

    failed = attempt(lambda store: store.migrate(), wanted, fail_probe)
    return {"fault_fired": bool(fired), "failed_migrate": failed, "then_verify": attempt(verify, wanted),
            "rerun": attempt(lambda store: store.migrate(), wanted), "finally": attempt(verify, wanted)}


def _derived_id(run: str, suffix: str) -> str:
    """A run id made from ``run`` and ``suffix`` that stays within the contract's run id length."""
    return run[: v.MAX_RUN_ID - len(suffix)] + suffix
