"""What a step touched: the runs whose state the interpreter compares after it.

After each step the interpreter compares only the runs the step touched; the
whole state is compared at the end of each example (and a bundle's replay), so
a write an adapter makes to any other run is still seen within the example.

A step touched a run when the reference engine changed one of the run's rows
(the run, its history, a command, signal or timer), found by comparing the
reference state before and after the step (:meth:`Table.differences`: rows are
immutable and replaced on write, so this costs what was written, whatever
the step did: units of work, races replayed in several orders, crashes), and
when the step names the run (in any tenant: a write an adapter lands in the
wrong tenant shows at once). Definitions are compared when the reference's
changed or the step defines one; the whole state when the applied migrations
changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kit.reference._tables import Tables

__all__ = ["Touched", "named_runs", "step_ops", "touched"]


@dataclass(frozen=True)
class Touched:
    """The part of the state a step changed on the reference engine."""

    runs: frozenset[tuple[str, str]]
    """(tenant, run id) of every run whose rows changed."""
    definitions: bool
    """Some definition row changed."""
    schema: bool
    """The applied migrations changed: compare everything."""


_CHILD_TABLES = ("commands", "signals", "timers")
"""Tables keyed by an id whose rows are (tenant, entity with ``run_id``)."""


def touched(before: Tables, after: Tables) -> Touched:
    """What changed from ``before`` (the published reference state when the step began) to ``after``."""
    runs: set[tuple[str, str]] = set()
    for table in ("runs", "history"):  # keyed by (tenant, run id)
        runs.update(key for key, _, _ in getattr(after, table).differences(getattr(before, table)))
    for table in _CHILD_TABLES:
        for _, old, new in getattr(after, table).differences(getattr(before, table)):
            for row in (old, new):
                if isinstance(row, tuple):  # not the marker of a missing row
                    runs.add((row[0], row[1].run_id))
    definitions = next(iter(after.definitions.differences(before.definitions)), None) is not None
    return Touched(frozenset(runs), definitions, after.applied != before.applied)


def _nested(step: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield step
    inner = step.get("inner")
    if isinstance(inner, dict):
        yield from _nested(inner)
    for op in step.get("ops") or ():
        if isinstance(op, dict):
            yield from _nested(op)


def named_runs(step: dict[str, Any]) -> set[str]:
    """The run ids ``step`` (or an operation inside it) names."""
    return {s["run"] for s in _nested(step) if isinstance(s.get("run"), str)}


def step_ops(step: dict[str, Any]) -> set[str]:
    """The ops of ``step`` and of the operations inside it (a race's, a crash's, a lost ack's)."""
    return {str(s.get("op")) for s in _nested(step)}
