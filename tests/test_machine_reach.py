"""The machine steps for guarantees the ordinary steps never touch (kit.machines.reach): a correct store passes
each of them, and a store breaking the guarantee diverges at that step and nowhere before it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from kit.contract import Backend, ClockMode, SchemaError, StartResult
from kit.machines.interpreter import Divergence, Interpreter
from kit.machines.side import body_of
from kit.pytest_plugin import use_backend
from kit.reference import MemoryBackend

PAYLOAD = {"tag": "x", "list": [1, {"n": 1}], "obj": {"inner": ["x"]}}

#: Every new step once, after the writes they need.
REACH_STEPS: list[dict[str, Any]] = [
    {"op": "define", "worker": "w0", "name": "wf", "body": "v1"},
    {"op": "poke", "inner": {"op": "start", "worker": "w0", "run": "r0", "input": PAYLOAD}},
    {"op": "poke", "inner": {"op": "signal", "worker": "w1", "run": "r0", "key": "k", "payload": PAYLOAD}},
    {"op": "claim_runs", "worker": "w0", "limit": 1},
    {"op": "poke", "inner": {"op": "load", "worker": "w0", "run": "r0"}},
    {"op": "poke", "inner": {"op": "commit", "worker": "w0", "run": "r0", "decision": {
        "status": "pending", "events": [{"kind": "s", "payload": PAYLOAD}], "commands": [{"key": "cp", "input": PAYLOAD}]}}},
    {"op": "claim_commands", "worker": "w1", "limit": 1},
    {"op": "poke", "inner": {"op": "fail", "worker": "w1", "run": "r0", "key": "cp", "error": PAYLOAD,
                             "retryable": True, "retry_after_ms": 0}},
    {"op": "claim_commands", "worker": "w1", "limit": 1},
    {"op": "poke", "inner": {"op": "complete", "worker": "w1", "run": "r0", "key": "cp", "result": PAYLOAD}},
    {"op": "poke", "inner": {"op": "read_back", "worker": "w2", "run": "r0"}},
    {"op": "deep_payload", "worker": "w0"},
    {"op": "beside_unit", "worker": "w0", "other": "w1", "what": "start", "run": "b0"},
    {"op": "beside_unit", "worker": "w0", "other": "w1", "what": "signal", "run": "r0"},
    {"op": "fresh_schema", "variant": "absent"},
    {"op": "fresh_schema", "variant": "concurrent_migrate"},
    {"op": "fresh_schema", "variant": "failed_migration"},
    {"op": "clock_probe"},
]


def _apply(backend: Backend, steps: list[dict[str, Any]]) -> Divergence | None:
    interpreter = Interpreter(backend)
    try:
        for step in steps:
            interpreter.apply(step)
    except Divergence as exc:
        return exc
    finally:
        interpreter.close()
    return None


@pytest.fixture
def sqlite() -> Iterator[Backend]:
    yield from use_backend("sqlite")


def test_a_correct_store_passes_every_reach_step(sqlite: Backend) -> None:
    assert _apply(sqlite, REACH_STEPS) is None


def test_a_write_beside_a_unit_on_a_run_id_at_the_length_limit_agrees(sqlite: Backend) -> None:
    """The ids the step derives from a run id stay within the contract's limit, and what the adapter
    refused is never written on the reference side, even when the unit then ends in an error (found at
    seed 20261201: a 128-character run id made the unit's own start invalid, after the adapter had
    refused the write beside it, and the reference wrote it anyway)."""
    longest = "R" * 127 + "a"
    steps: list[dict[str, Any]] = [
        {"op": "define", "worker": "w0", "name": "wf", "body": "v1"},
        {"op": "start", "worker": "w1", "run": longest},
        {"op": "beside_unit", "worker": "w0", "other": "w1", "what": "signal", "run": longest},
        {"op": "beside_unit", "worker": "w0", "other": "w1", "what": "start", "run": longest},
    ]
    assert _apply(sqlite, steps) is None


# -- broken stores: the reference engine with one guarantee broken --------------------
class _Proxy:
    """A store that forwards everything to a reference store, except what a subclass overrides."""

    def __init__(self, inner: Any, database: _Database) -> None:
        self._inner, self._database = inner, database

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Database:
    def __init__(self, store_cls: type[_Proxy]) -> None:
        self.inner = MemoryBackend().provision()
        self.store_cls = store_cls
        self.cache: dict[str, Any] = {}
        self.open_units = 0

    def open(self, tenant_id: str = "default", **kwargs: Any) -> Any:
        return self.store_cls(self.inner.open(tenant_id, **kwargs), self)

    def reset(self) -> None:
        self.inner.reset()

    def drop(self) -> None:
        self.inner.drop()


def _backend(store_cls: type[_Proxy]) -> Backend:
    class Broken(MemoryBackend):
        name = f"memory-{store_cls.__name__}"

        def provision(self) -> Any:  # type: ignore[override]
            return _Database(store_cls)

    return Broken()


class KeepsCallersInput(_Proxy):
    """Reads of a run hand back (and keep) the very input object the caller started it with."""

    def start_run(self, run_id: str, ref: Any, input: Any = None, idempotency_key: str | None = None) -> Any:
        self._database.cache[run_id] = input
        return self._inner.start_run(run_id, ref, input, idempotency_key)

    def get_run(self, run_id: str) -> Any:
        run = self._inner.get_run(run_id)
        if run is not None and run_id in self._database.cache:
            run = replace(run, input=self._database.cache[run_id])
        return run


class RecursiveHistoryCopy(_Proxy):
    """History payloads are copied with one call frame per level of nesting."""

    def get_history(self, *args: Any, **kwargs: Any) -> Any:
        def copy(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: copy(v) for k, v in value.items()}
            if isinstance(value, list):
                return [copy(v) for v in value]
            return value

        return [replace(e, payload=copy(e.payload)) for e in self._inner.get_history(*args, **kwargs)]


class ClockTwoHoursAhead(_Proxy):
    """The database clock reads a wrong zone's wall time as UTC (two hours ahead)."""

    def now(self) -> Any:
        shift = timedelta(hours=2) if self._inner.clock_mode is ClockMode.DATABASE else timedelta(0)
        return self._inner.now() + shift


class AbsentSchemaVerifies(_Proxy):
    """verify_schema() passes on a database nothing was migrated into."""

    def verify_schema(self) -> None:
        try:
            self._inner.verify_schema()
        except SchemaError as exc:
            if exc.problem != "absent":
                raise


class DropsWritesBesideUnits(_Proxy):
    """A start made while another store's unit of work is open is acknowledged and never written."""

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        self._database.open_units += 1
        self._holding = True
        try:
            with self._inner.transaction() as tx:
                yield tx
        finally:
            self._holding = False
            self._database.open_units -= 1

    def start_run(self, run_id: str, ref: Any, input: Any = None, idempotency_key: str | None = None) -> Any:
        if self._database.open_units and not getattr(self, "_holding", False):
            scratch = MemoryBackend().provision().open("x")
            scratch.migrate()
            scratch.ensure_definition(ref.name, ref.version, ref.digest, body_of("v1"))
            return StartResult(scratch.start_run(run_id, ref, input, idempotency_key).run, True)
        return self._inner.start_run(run_id, ref, input, idempotency_key)


BROKEN: dict[str, tuple[type[_Proxy], Callable[[dict[str, Any]], bool]]] = {
    "mutated argument changes what is stored": (KeepsCallersInput, lambda s: s["op"] == "poke"),
    "reading depends on the caller's stack": (RecursiveHistoryCopy, lambda s: s["op"] == "deep_payload"),
    "database clock is not the server's": (ClockTwoHoursAhead, lambda s: s["op"] == "clock_probe"),
    "absent schema verifies": (AbsentSchemaVerifies, lambda s: s == {"op": "fresh_schema", "variant": "absent"}),
    "write beside a unit is lost": (DropsWritesBesideUnits, lambda s: s["op"] == "beside_unit"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_a_store_breaking_the_guarantee_diverges_at_its_step(name: str) -> None:
    """Each broken store passes every step but the one reaching the guarantee it breaks (the steps before it
    and the ordinary steps cannot see it), and diverges there."""
    store_cls, reaches = BROKEN[name]
    first = next(i for i, step in enumerate(REACH_STEPS) if reaches(step))
    found = _apply(_backend(store_cls), REACH_STEPS)
    assert found is not None, f"{name}: no step diverged"
    assert found.index == first, f"{name}: diverged at step {found.index} ({found}), expected {first}"
    plain = [s["inner"] if s["op"] == "poke" else s for s in REACH_STEPS if not reaches(s) or s["op"] == "poke"]
    assert _apply(_backend(store_cls), plain) is None, f"{name}: the ordinary steps already see it"
