"""The reference engine's whole state, and the copy-on-write that makes each write atomic.

An operation works on a shallow copy (entities are immutable, so copying the
dicts is enough) and the copy replaces the shared state only when the
operation returns normally. There is no undo log to get wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kit.contract.entities import Command, Definition, Event, Run, Signal, Timer
from kit.migrate import AppliedMigration

__all__ = ["Tables"]


@dataclass
class Tables:
    applied: dict[int, AppliedMigration] | None = None
    """``None`` until the first migration: the schema is absent."""
    definitions: dict[tuple[str, str, str], Definition] = field(default_factory=dict)
    runs: dict[tuple[str, str], Run] = field(default_factory=dict)
    history: dict[tuple[str, str], tuple[Event, ...]] = field(default_factory=dict)
    commands: dict[int, tuple[str, Command]] = field(default_factory=dict)
    signals: dict[int, tuple[str, Signal]] = field(default_factory=dict)
    timers: dict[int, tuple[str, Timer]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    """The last id issued per table: ids count up from 1 in each table, as SQL identities do."""

    def copy(self) -> Tables:
        return Tables(
            applied=None if self.applied is None else dict(self.applied),
            definitions=dict(self.definitions),
            runs=dict(self.runs),
            history=dict(self.history),
            commands=dict(self.commands),
            signals=dict(self.signals),
            timers=dict(self.timers),
            counters=dict(self.counters),
        )

    def new_id(self, table: str) -> int:
        self.counters[table] = self.counters.get(table, 0) + 1
        return self.counters[table]
