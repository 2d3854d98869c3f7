"""One migrated database per suite class (so per pytest process or xdist worker), reset between checks.

Provisioning, migrating and dropping a database per check was most of a server
suite's time. :class:`SharedDatabase` provisions and migrates one database the
first time a check needs it and hands the same database to every later check
after ``reset()`` (the adapter's own: it empties the kit's tables of every tenant
and rewinds the test clock, touching nothing the kit did not create). Checks
marked :func:`fresh_database` (schema lifecycle: they need an unmigrated
database) still get a database of their own, dropped after them.

Guarantee: a check handed the shared database never sees a row an earlier check
wrote. A database without ``reset()`` is never shared; a reset that fails drops
the shared database and the check gets a newly provisioned one.
``KIT_DATABASE_PER_CHECK=1`` turns sharing off (every check provisions its own, as
before): the baseline ``nox -s bench`` compares the shared database with.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any, TypeVar

from kit.contract import Backend, Capability, ClockMode, Database

__all__ = ["PER_CHECK_ENV", "SharedDatabase", "fresh_database", "needs_fresh_database"]

PER_CHECK_ENV = "KIT_DATABASE_PER_CHECK"
"""Set to 1: every check provisions (and drops) a database of its own, nothing is shared."""

F = TypeVar("F", bound=Callable[..., Any])

_GIVE_UP_AFTER = 2
"""Consecutive failed resets after which the checks go back to a database each."""


def fresh_database(fn: F) -> F:
    """Give a check (or every check of an area class) a newly provisioned, unmigrated database of
    its own instead of the shared one: for checks about the schema's life (absent, partial, newer)."""
    if isinstance(fn, type):
        for name, member in vars(fn).items():
            if name.startswith("test_") and callable(member):
                member.kit_fresh_database = True
        return fn
    fn.kit_fresh_database = True  # type: ignore[attr-defined]
    return fn


def needs_fresh_database(fn: Callable[..., Any]) -> bool:
    """Whether the check was marked with :func:`fresh_database`."""
    return bool(getattr(fn, "kit_fresh_database", False))


class SharedDatabase:
    """The one migrated database the checks of a suite class share (created on first use)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._database: Database | None = None
        self._used = False
        self._shareable = True
        self._failed_resets = 0

    def checkout(self) -> Database | None:
        """The shared database, empty and migrated; None when the backend's databases cannot be reset."""
        if not self._shareable or os.environ.get(PER_CHECK_ENV, "") == "1":
            return None
        if self._database is not None and self._used:
            try:
                self._database.reset()  # type: ignore[attr-defined]
                self._failed_resets = 0
            except Exception:  # noqa: BLE001 - a database a check broke is replaced, never reused
                self._discard()
                self._failed_resets += 1
                if self._failed_resets >= _GIVE_UP_AFTER:
                    self._shareable = False  # resetting never works here: one database per check
                    return None
        if self._database is None:
            database = self.backend.provision()
            if not hasattr(database, "reset") or not self._migrate(database):
                self._shareable = False
                database.drop()
                return None
            self._database = database
        self._used = True
        return self._database

    def holds(self, database: Database) -> bool:
        """Whether ``database`` is the shared (already migrated) database."""
        return database is not None and database is self._database

    def _migrate(self, database: Database) -> bool:
        """Migrate ``database`` once; False when it cannot serve as the shared database."""
        caps = self.backend.capabilities
        clock = ClockMode.TEST if Capability.TEST_CLOCK in caps else ClockMode.DATABASE
        try:
            store = database.open(clock=clock)
            try:
                store.migrate()
            finally:
                store.close()
        except Exception:  # noqa: BLE001 - the checks then provision their own and report the failure
            return False
        return True

    def _discard(self) -> None:
        database, self._database = self._database, None
        if database is not None:
            with contextlib.suppress(Exception):
                database.drop()

    def close(self) -> None:
        """Drop the shared database."""
        self._discard()
