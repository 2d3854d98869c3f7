"""The in-memory backend: each provisioned database is a fresh shared state."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from kit import __version__
from kit.contract.capabilities import Capabilities, Capability
from kit.contract.entities import ClockMode
from kit.contract.protocol import MigrationSpec, StatementHook, Storage
from kit.migrate import Migration
from kit.reference.store import LOCK_WAIT_SECONDS, MemoryStore, SharedState

__all__ = ["MEMORY_MIGRATIONS", "MemoryBackend", "MemoryDatabase"]

#: The in-memory "schema": recorded like SQL migrations so schema lifecycle checks apply.
MEMORY_MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "init", "-- the reference engine keeps its tables in Python dicts\n"),
)

_counter = itertools.count(1)


class MemoryDatabase:
    def __init__(self, lock_wait_s: float = LOCK_WAIT_SECONDS) -> None:
        self._lock_wait_s = lock_wait_s
        self.state = SharedState(lock_wait_s=lock_wait_s)
        self.label = f"memory #{next(_counter)}"

    def open(
        self,
        tenant_id: str = "default",
        *,
        clock: ClockMode = ClockMode.TEST,
        migrations: Sequence[MigrationSpec] | None = None,
        statement_hook: StatementHook | None = None,
    ) -> MemoryStore:
        return MemoryStore(
            self.state,
            tenant_id,
            clock,
            MEMORY_MIGRATIONS if migrations is None else migrations,
            statement_hook,
        )

    def kill_session(self, store: Storage) -> None:
        raise NotImplementedError("the memory backend does not declare kill_session")

    def reset(self) -> None:
        """Empty every table and rewind the test clock, keeping the applied migrations."""
        applied = self.state.tables.applied
        self.state = SharedState(lock_wait_s=self._lock_wait_s)
        self.state.tables.applied = applied

    def drop(self) -> None:
        self.state = SharedState(lock_wait_s=self._lock_wait_s)


class MemoryBackend:
    """The reference engine as a backend."""

    name = "memory"
    capabilities = Capabilities.of(
        Capability.TEST_CLOCK,
        Capability.DATABASE_CLOCK,
        Capability.TENANCY,
        Capability.UNIT_OF_WORK,
        Capability.CONCURRENT_CONNECTIONS,
        Capability.STATEMENT_FAULTS,
        clock_resolution_us=1,
    )

    def __init__(self, lock_wait_s: float = LOCK_WAIT_SECONDS) -> None:
        self.lock_wait_s = lock_wait_s
        """How long a unit of work waits for another thread's unit before it fails with ``LockTimeout``."""

    def describe(self) -> str:
        return f"reference engine (kit {__version__})"

    def provision(self) -> MemoryDatabase:
        return MemoryDatabase(self.lock_wait_s)

    def close(self) -> None:
        pass
