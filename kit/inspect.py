"""The observable state of a store, as the protocol's reads show it.

Two stores that keep the same promises have equal observable states after the
same steps; that is how the suites prove "changed nothing" and how the fault
machines compare an adapter with the reference engine. Store-issued ids are
replaced by natural keys, so stores that number rows differently compare equal;
``raw_keys`` keeps the natural keys as listed, so a duplicate is still visible.

A store may offer ``export_state()`` returning exactly this structure in a few
queries (the SQL adapters and the reference engine do); the conformance suite
checks that it equals what the individual reads return. The state is an
:class:`~kit.contract.json_exact.ExactState`: its ``==`` compares payloads
exactly (``True`` is not ``1``, ``1.0`` is not ``1``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, fields, is_dataclass
from typing import Any

from kit.contract.capabilities import ALL_PROMISES, Promise
from kit.contract.entities import Command, Event, Run, Signal, Timer
from kit.contract.json_exact import ExactState
from kit.contract.protocol import Storage, iter_pages
from kit.contract.validation import copy_json

__all__ = ["assemble", "observable_state", "observable_state_from_reads", "row_of", "run_state"]


def assemble(
    run: Run, history: list[Event], commands: list[Command], signals: list[Signal], timers: list[Timer]
) -> dict[str, Any]:
    """One run's state from its parts (each list in creation order)."""
    return {
        "run": row_of(run),
        "history": [row_of(e) for e in history],
        "commands": {c.operation_key: _without(row_of(c), "command_id") for c in commands},
        "signals": {s.dedup_key: _without(row_of(s), "signal_id") for s in signals},
        "timers": {t.operation_key: _without(row_of(t), "timer_id") for t in timers},
        "raw_keys": {
            "commands": [c.operation_key for c in commands],
            "signals": [s.dedup_key for s in signals],
            "timers": [t.operation_key for t in timers],
        },
    }


_PAYLOADS = frozenset({"input", "output", "error", "payload", "result"})
"""The entities' JSON fields: the only values in them a caller could mutate."""


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def row_of(entity: Any) -> dict[str, Any]:
    """Exactly ``dataclasses.asdict(entity)`` for a stored entity, without its generic deep copy.

    The JSON payloads are copied (the result shares no list or dict with the store, as with
    ``asdict``), a nested reference (a run's definition) becomes a dict, and the immutable values
    (text, numbers, datetimes, enums) are kept as they are. The fault machines compare whole states
    after every step: ``asdict`` deep-copying every datetime and enum was most of that time.
    """
    out: dict[str, Any] = {}
    for name in _field_names(type(entity)):
        value = getattr(entity, name)
        if name in _PAYLOADS:
            value = copy_json(value)
        elif is_dataclass(value) and not isinstance(value, type):
            value = asdict(value)
        out[name] = value
    return out


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
    return ExactState({run.run_id: run_state(store, run.run_id, promises) for run in iter_pages(store)})


def observable_state(store: Storage, promises: Collection[Promise] = ALL_PROMISES) -> dict[str, Any]:
    """Every run of the store's tenant with all it owns (``export_state()`` when the store has it).

    ``promises`` are the families the store makes: the reads of the others are left out.
    """
    export = getattr(store, "export_state", None)
    if callable(export):
        return ExactState(export())
    return observable_state_from_reads(store, promises)


def _without(row: dict[str, Any], key: str) -> dict[str, Any]:
    row.pop(key, None)
    return row
