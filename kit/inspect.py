"""The observable state of a store, built only from the protocol's reads.

Two stores that keep the same promises have equal observable states after the
same steps; that is how the suites prove "changed nothing" and how the fault
machines compare an adapter with the reference engine. Store-issued ids are
replaced by natural keys, so stores that number rows differently compare equal.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from kit.contract.protocol import Storage, iter_pages

__all__ = ["observable_state", "run_state"]


def run_state(store: Storage, run_id: str) -> dict[str, Any] | None:
    """One run and everything under it, keyed by natural keys."""
    run = store.get_run(run_id)
    if run is None:
        return None
    return {
        "run": asdict(run),
        "history": [asdict(e) for e in store.get_history(run_id)],
        "commands": {c.operation_key: _without(asdict(c), "command_id") for c in store.list_commands(run_id)},
        "signals": {s.dedup_key: _without(asdict(s), "signal_id") for s in store.list_signals(run_id)},
        "timers": {t.operation_key: _without(asdict(t), "timer_id") for t in store.list_timers(run_id)},
    }


def observable_state(store: Storage) -> dict[str, Any]:
    """Every run of the store's tenant, in run-id order, with all it owns."""
    return {run.run_id: run_state(store, run.run_id) for run in iter_pages(store)}


def _without(row: dict[str, Any], key: str) -> dict[str, Any]:
    row.pop(key, None)
    return row
