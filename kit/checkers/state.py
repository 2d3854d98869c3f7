"""The database's state after a stress run, read through the protocol only.

Per tenant and run, the same shape as :func:`kit.inspect.run_state` (``run``,
``history``, ``commands``, ``signals``, ``timers`` by natural key) plus
``raw_keys`` (every stored key, duplicates kept) as the fault machines' state
has it, so :func:`kit.machines.invariants.violations` applies unchanged, and
``*_rows`` lists (every stored row, duplicates kept) for the stress checkers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kit.contract import ClockMode, Database, Storage, iter_pages
from kit.inspect import as_dict

__all__ = ["FinalState", "read_final_state", "read_run"]


@dataclass
class FinalState:
    """Every run of every tenant after the workload, plus the definitions and the store clock."""

    tenants: Mapping[str, Mapping[str, dict[str, Any]]] = field(default_factory=dict)
    """tenant -> run id -> the run's state (see the module docstring); in memory, or on disk
    (:class:`kit.checkers.spill.SpilledRuns`) when read with ``spill``."""
    definitions: dict[tuple[str, str, str], tuple[str, str] | None] = field(default_factory=dict)
    """(tenant, name, version) -> (digest, sha256 of the body), or None if it is gone."""
    now: datetime | None = None
    error: str | None = None
    """Why the state could not be read in full (every state-based check is then unknown)."""

    def run(self, tenant: str, run_id: str) -> dict[str, Any] | None:
        return self.tenants.get(tenant, {}).get(run_id)

    def runs(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for tenant, runs in self.tenants.items():
            for run_id, state in runs.items():
                yield tenant, run_id, state

    @property
    def run_count(self) -> int:
        return sum(len(runs) for runs in self.tenants.values())


def _row(obj: Any, drop: str) -> dict[str, Any]:
    row = as_dict(obj)
    row.pop(drop, None)
    return row


def read_run(store: Storage, run: Any) -> dict[str, Any]:
    """One run and everything under it (see the module docstring for the shape)."""
    commands = store.list_commands(run.run_id)
    signals = store.list_signals(run.run_id)
    timers = store.list_timers(run.run_id)
    return {
        "run": as_dict(run),
        "history": [as_dict(e) for e in store.get_history(run.run_id)],
        "commands": {c.operation_key: _row(c, "command_id") for c in commands},
        "signals": {s.dedup_key: _row(s, "signal_id") for s in signals},
        "timers": {t.operation_key: _row(t, "timer_id") for t in timers},
        "raw_keys": {"signals": [s.dedup_key for s in signals], "commands": [c.operation_key for c in commands],
                     "timers": [t.operation_key for t in timers]},
        "command_rows": [as_dict(c) for c in commands],
        "signal_rows": [as_dict(s) for s in signals],
        "timer_rows": [as_dict(t) for t in timers],
    }


def read_final_state(
    database: Database, tenants: Iterable[str], definitions: Iterable[tuple[str, str]] = (),
    clock: ClockMode = ClockMode.DATABASE, spill: Path | None = None,
) -> FinalState:
    """Read everything; a failure leaves what was read and ``error`` saying why the rest is missing.

    ``clock`` is the clock the workload ran on (``TEST`` under the deterministic scheduler), so
    ``now`` is comparable with the stored leases and due times. With ``spill`` (a file that does
    not exist yet) each run's state goes to that SQLite file as it is read and is read back when
    a checker asks for it, so memory does not grow with the number of runs; the caller deletes it.
    """
    state = FinalState()
    wanted = list(definitions)
    in_memory: dict[str, dict[str, dict[str, Any]]] = {}
    on_disk = None
    if spill is not None:
        from kit.checkers.spill import SpilledRuns

        on_disk = SpilledRuns(spill)
        state.tenants = on_disk
    else:
        state.tenants = in_memory
    try:
        for tenant in tenants:
            store = database.open(tenant, clock=clock)
            try:
                state.now = store.now()
                if on_disk is None:
                    in_memory[tenant] = {run.run_id: read_run(store, run) for run in iter_pages(store, page=200)}
                else:
                    on_disk.tenant(tenant)
                    for run in iter_pages(store, page=200):
                        on_disk.put(tenant, run.run_id, read_run(store, run))
                    on_disk.done(tenant)
                for name, version in wanted:
                    found = store.get_definition(name, version)
                    state.definitions[(tenant, name, version)] = (
                        None if found is None else (found.digest, hashlib.sha256(found.body).hexdigest())
                    )
            finally:
                store.close()
    except Exception as exc:  # noqa: BLE001 - reported as every state-based verdict being unknown
        if on_disk is not None:
            on_disk.drop()
        state.error = f"reading the final state failed: {type(exc).__name__}: {exc}"
    return state
