"""The observable state of a store, as the protocol's reads show it.

Two stores that keep the same promises have equal observable states after the
same steps; that is how the suites prove "changed nothing" and how the fault
machines compare an adapter with the reference engine. Store-issued ids are
replaced by natural keys, so stores that number rows differently compare equal;
``raw_keys`` keeps the natural keys as listed, so a duplicate is still visible.

A store may offer ``export_state()`` returning exactly this structure in a few
queries (the SQL adapters and the reference engine do), and may accept
``export_state(run_ids=...)`` for only the runs named (the fault machines read
the runs a step touched that way); the conformance suite checks that both
equal what the individual reads return. The state is an
:class:`~kit.contract.json_exact.ExactState`: its ``==`` compares payloads
exactly (``True`` is not ``1``, ``1.0`` is not ``1``).
"""

from __future__ import annotations

import copy
import datetime as dt
import enum
import inspect
from collections.abc import Collection
from dataclasses import fields, is_dataclass
from decimal import Decimal
from typing import Any

from kit.contract.capabilities import ALL_PROMISES, Promise
from kit.contract.entities import Command, Event, Run, Signal, Timer
from kit.contract.json_exact import ExactState
from kit.contract.protocol import Storage, iter_pages

__all__ = ["as_dict", "assemble", "exports_runs", "observable_state", "observable_state_from_reads", "run_state",
           "runs_state"]


def assemble(
    run: Run, history: list[Event], commands: list[Command], signals: list[Signal], timers: list[Timer]
) -> dict[str, Any]:
    """One run's state from its parts (each list in creation order)."""
    return {
        "run": as_dict(run),
        "history": [as_dict(e) for e in history],
        "commands": {c.operation_key: _without(as_dict(c), "command_id") for c in commands},
        "signals": {s.dedup_key: _without(as_dict(s), "signal_id") for s in signals},
        "timers": {t.operation_key: _without(as_dict(t), "timer_id") for t in timers},
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
    return ExactState({run.run_id: run_state(store, run.run_id, promises) for run in iter_pages(store)})


def observable_state(store: Storage, promises: Collection[Promise] = ALL_PROMISES) -> dict[str, Any]:
    """Every run of the store's tenant with all it owns (``export_state()`` when the store has it).

    ``promises`` are the families the store makes: the reads of the others are left out.
    """
    export = getattr(store, "export_state", None)
    if callable(export):
        return ExactState(export())
    return observable_state_from_reads(store, promises)


def runs_state(store: Storage, run_ids: Collection[str], promises: Collection[Promise] = ALL_PROMISES) -> dict[str, Any]:
    """The runs ``run_ids`` names that exist, each with all it owns, in run-id order: one
    ``export_state(run_ids=...)`` when the store takes it (:func:`exports_runs`), else the reads of each run."""
    if exports_runs(store):
        return ExactState(store.export_state(run_ids=run_ids))  # type: ignore[attr-defined]
    found = ((run_id, run_state(store, run_id, promises)) for run_id in sorted(set(run_ids)))
    return ExactState({run_id: state for run_id, state in found if state is not None})


_EXPORTS_RUNS: dict[type, bool] = {}


def exports_runs(store: Storage) -> bool:
    """Whether ``store`` has an ``export_state`` taking ``run_ids`` (the optional form for some runs)."""
    kind = type(store)
    known = _EXPORTS_RUNS.get(kind)
    if known is None:
        export = getattr(store, "export_state", None)
        try:
            known = callable(export) and "run_ids" in inspect.signature(export).parameters
        except (TypeError, ValueError):  # a callable without a signature: use the reads
            known = False
        _EXPORTS_RUNS[kind] = known
    return known


_IMMUTABLE = (str, int, float, bytes, type(None), dt.datetime, dt.date, dt.time, dt.timedelta, enum.Enum, Decimal)


def as_dict(entity: Any) -> dict[str, Any]:
    """``dataclasses.asdict(entity)``: equal, and as detached (no list, dict or set of the result is shared
    with the entity, so a store's later writes never show in a state already taken), in a fraction of the time.

    ``asdict`` deep-copies every leaf; values that cannot change (text, numbers, times, enums) are shared here
    instead, and only an unknown leaf type is deep-copied. The fault machines read the whole state twice per
    step, and ``asdict`` was a quarter of their time.
    """
    return {name: _plain(getattr(entity, name)) for name in _field_names(type(entity))}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _plain(value: Any) -> Any:
    if isinstance(value, _IMMUTABLE):
        return value
    kind = type(value)
    if kind is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    if kind is list:
        return [_plain(v) for v in value]
    if kind is tuple:
        return tuple(_plain(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return as_dict(value)
    return copy.deepcopy(value)  # sets, subclasses of dict, list or tuple, anything else: a detached copy


def _without(row: dict[str, Any], key: str) -> dict[str, Any]:
    row.pop(key, None)
    return row
