"""The observable state of a store, as the protocol's reads show it.

Two stores that keep the same promises have equal observable states after the
same steps; that is how the suites prove "changed nothing" and how the fault
machines compare an adapter with the reference engine. Store-issued ids are
replaced by natural keys, so stores that number rows differently compare equal;
``raw_keys`` keeps the natural keys as listed, so a duplicate is still visible.

A store may offer ``export_state()`` returning exactly this structure in a few
queries (the SQL adapters and the reference engine do); the conformance suite
checks that it equals what the individual reads return.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict
from typing import Any

from kit.contract.capabilities import ALL_PROMISES, Promise
from kit.contract.entities import Command, Event, Run, Signal, Timer
from kit.contract.protocol import Storage, iter_pages

__all__ = ["assemble", "observable_state", "observable_state_from_reads", "run_state"]


def assemble(
    run: Run, history: list[Event], commands: list[Command], signals: list[Signal], timers: list[Timer]
) -> dict[str, Any]:
    """One run's state from its parts (each list in creation order)."""
    return {
        "run": asdict(run),
        "history": [asdict(e) for e in history],
        "commands": {c.operation_key: _without(asdict(c), "command_id") for c in commands},
        "signals": {s.dedup_key: _without(asdict(s), "signal_id") for s in signals},
        "timers": {t.operation_key: _without(asdict(t), "timer_id") for t in timers},
        "raw_keys": {
            "commands": [c.operation_key for c in commands],
            "signals": [s.dedup_key for s in signals],
            "timers": [t.operation_key for t in timers],
        },
    }


def run_state(store: Storage, run_id: str, promises: Collection[Promise] = ALL_PROMISES) -> dict[str, Any] | None:
    """One run and everything under it, through the protocol's reads.

    Commands, signals and timers are read only when the store promises that family
    (a store that makes no such promise need not implement their reads): else empty.
    """
    run = store.get_run(run_id)
    if run is None:
        return None
    commands = store.list_commands(run_id) if Promise.COMMANDS in promises else []
    signals = store.list_signals(run_id) if Promise.SIGNALS in promises else []
    timers = store.list_timers(run_id) if Promise.TIMERS in promises else []
    return assemble(run, store.get_history(run_id), commands, signals, timers)


def observable_state_from_reads(store: Storage, promises: Collection[Promise] = ALL_PROMISES) -> dict[str, Any]:
    """Every run of the store's tenant, in run-id order, built from the individual reads."""
    return {run.run_id: run_state(store, run.run_id, promises) for run in iter_pages(store)}


def observable_state(store: Storage, promises: Collection[Promise] = ALL_PROMISES) -> dict[str, Any]:
    """Every run of the store's tenant with all it owns (``export_state()`` when the store has it).

    ``promises`` are the families the store makes: the reads of the others are left out.
    """
    export = getattr(store, "export_state", None)
    if callable(export):
        return export()  # type: ignore[no-any-return]
    return observable_state_from_reads(store, promises)


def _without(row: dict[str, Any], key: str) -> dict[str, Any]:
    row.pop(key, None)
    return row
