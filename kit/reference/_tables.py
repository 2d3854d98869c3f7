"""The reference engine's whole state, and the copy-on-write that makes each write atomic.

An operation works on a shallow copy (entities are immutable, so copying the
dicts is enough) and the copy replaces the shared state only when the
operation returns normally. There is no undo log to get wrong.

Row locks are the rows a unit of work has changed or locked: :meth:`Tables.changes`
names them (a row is a key of one table), so a commit of one store while another
store's unit of work is open on the same thread can be checked against them and
carried into the open unit (:meth:`Tables.absorb`), as row-locking databases do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kit.contract.entities import Command, Definition, Event, Run, Signal, Timer
from kit.migrate import AppliedMigration

__all__ = ["ROW_TABLES", "Row", "Tables"]

ROW_TABLES = ("definitions", "runs", "history", "commands", "signals", "timers")
"""The tables whose keys are rows (``applied``, the migration record, is one row on its own)."""

Row = tuple[str, Any]
"""(table, key): one row of the reference state."""

_GONE = object()


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
    """The last id issued per table: ids count up from 1 in each table, as SQL identities do.

    Shared by every copy (never rolled back), like a SQL sequence: two units of work open
    at once never issue the same id."""

    def copy(self) -> Tables:
        return Tables(
            applied=None if self.applied is None else dict(self.applied),
            definitions=dict(self.definitions),
            runs=dict(self.runs),
            history=dict(self.history),
            commands=dict(self.commands),
            signals=dict(self.signals),
            timers=dict(self.timers),
            counters=self.counters,
        )

    def new_id(self, table: str) -> int:
        self.counters[table] = self.counters.get(table, 0) + 1
        return self.counters[table]

    def changes(self, base: Tables) -> dict[Row, Any]:
        """Every row this copy changed since ``base`` (the state it was copied from), with its new value.

        Entities are immutable and writers replace them, so a changed row is one whose
        value is no longer the very object ``base`` holds.
        """
        changed: dict[Row, Any] = {}
        if self.applied != base.applied:
            changed[("applied", None)] = self.applied
        for table in ROW_TABLES:
            mine, theirs = getattr(self, table), getattr(base, table)
            for key, value in mine.items():
                if theirs.get(key, _GONE) is not value:
                    changed[(table, key)] = value
            for key in theirs.keys() - mine.keys():
                changed[(table, key)] = _GONE
        return changed

    def absorb(self, committed: dict[Row, Any]) -> None:
        """Carry rows another unit committed into this open copy (rows this copy changed are never among
        them: the committer would have waited for this unit's locks)."""
        for (table, key), value in committed.items():
            if table == "applied":
                self.applied = None if value is None else dict(value)
                continue
            rows = getattr(self, table)
            if value is _GONE:
                rows.pop(key, None)
            else:
                rows[key] = value
