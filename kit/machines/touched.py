"""What a step touched: the runs whose state the interpreter compares after it.

After each step the interpreter compares only the runs the step touched; the
whole state is compared at the end of each example (and a bundle's replay), so
a write an adapter makes to any other run is still seen within the example.

A step touched a run when the reference engine changed one of the run's rows
(the run, its history, a command, signal or timer), found by comparing the
reference state before and after the step (:meth:`Table.differences`: rows are
immutable and replaced on write, so this costs what was written, whatever
the step did: units of work, races replayed in several orders, crashes), and
when the step writes (or tries to write) a run it names (in the tenants of the
workers that name it; a read or a clock move names runs it must not change:
they are compared when a write touches them, or at the end).
A tenant's definitions are compared when the reference's changed there; a
version a step ensures without changing the reference's, with its name's
listing; the whole state when the applied migrations changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kit.reference._tables import Tables

__all__ = ["NOTHING", "READS", "Touched", "defined_versions", "named_runs", "step_tenants", "touched"]


@dataclass(frozen=True)
class Touched:
    """The part of the state a step changed on the reference engine."""

    runs: frozenset[tuple[str, str]]
    """(tenant, run id) of every run whose rows changed."""
    definitions: frozenset[str]
    """The tenants whose definition rows changed."""
    schema: bool
    """The applied migrations changed: compare everything."""


NOTHING = Touched(frozenset(), frozenset(), False)

_CHILD_TABLES = ("commands", "signals", "timers")
"""Tables keyed by an id whose rows are (tenant, entity with ``run_id``)."""

_WORKER_FIELDS = ("worker", "holder", "other", "claim_of")


def touched(before: Tables, after: Tables) -> Touched:
    """What changed from ``before`` (the published reference state when the step began) to ``after``."""
    if after is before:  # nothing was published: the step wrote nothing
        return NOTHING
    runs: set[tuple[str, str]] = set()
    for table in ("runs", "history"):  # keyed by (tenant, run id)
        runs.update(key for key, _, _ in getattr(after, table).differences(getattr(before, table)))
    for table in _CHILD_TABLES:
        for _, old, new in getattr(after, table).differences(getattr(before, table)):
            for row in (old, new):
                if isinstance(row, tuple):  # not the marker of a missing row
                    runs.add((row[0], row[1].run_id))
    definitions = frozenset(key[0] for key, _, _ in after.definitions.differences(before.definitions))
    return Touched(frozenset(runs), definitions, after.applied != before.applied)


def _nested(step: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield step
    inner = step.get("inner")
    if isinstance(inner, dict):
        yield from _nested(inner)
    for op in step.get("ops") or ():
        if isinstance(op, dict):
            yield from _nested(op)


def step_tenants(step: dict[str, Any], tenant_of: Mapping[str, str]) -> set[str]:
    """The tenants of the workers ``step`` (or an operation inside it) names; every tenant when it names none
    (``tenant_of``: worker -> tenant)."""
    named = {tenant_of[w] for s in _nested(step) for f in _WORKER_FIELDS
             if isinstance(w := s.get(f), str) and w in tenant_of}
    return named or set(tenant_of.values())


READS = frozenset({"load", "read_back", "list_page", "advance", "advance_to"})
"""Ops that write no run by contract (reads, clock moves): the runs they name are compared when a write
touches them, or at the end of the example."""


def named_runs(step: dict[str, Any], tenant_of: Mapping[str, str]) -> set[tuple[str, str]]:
    """(tenant, run id) of each run ``step`` (or an operation inside it, not one of :data:`READS`) names, in
    the tenants of the workers that name it (in every tenant when the operation names no worker)."""
    found: set[tuple[str, str]] = set()
    for s in _nested(step):
        run = s.get("run")
        if isinstance(run, str) and s.get("op") not in READS:
            found.update((tenant, run) for tenant in step_tenants({k: s.get(k) for k in _WORKER_FIELDS}, tenant_of))
    return found


def defined_versions(step: dict[str, Any], tenant_of: Mapping[str, str]) -> set[tuple[str, str, str]]:
    """(tenant, name, version) of each definition ``step`` (or an operation inside it) ensures."""
    return {(tenant_of[s["worker"]], str(s["name"]), str(s.get("version", "1"))) for s in _nested(step)
            if s.get("op") == "define" and s.get("worker") in tenant_of and "name" in s}
