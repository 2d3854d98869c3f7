"""Count the statements a workload sends: a backend wrapper for benchmarks (figures, not checks).

:class:`CountingBackend` provisions databases whose stores announce every statement to one
shared counter (through the store's statement hook, the seam the fault layer uses), so a
benchmark can divide the statements by the decisions made. ``COMMITTED`` (a point after a
commit returned, not a statement) is not counted.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from kit.connections import COMMITTED_POINT
from kit.contract import Backend, ClockMode, Database, MigrationSpec, StatementHook, Storage

__all__ = ["CountingBackend", "CountingDatabase", "StatementCounter"]


class StatementCounter:
    """A thread-safe count of statements; ``stop()`` freezes it (later statements are not counted)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self._stopped = False

    def hook(self, point: str) -> None:
        """Count the statements of a point: one, or each of a batch sent as one (joined by ``"; "``)."""
        if point == COMMITTED_POINT:
            return
        with self._lock:
            if not self._stopped:
                self.count += point.count("; ") + 1

    def stop(self) -> int:
        with self._lock:
            self._stopped = True
            return self.count


class CountingDatabase:
    """``database`` whose every store counts its statements on ``counter``."""

    def __init__(self, database: Database, counter: StatementCounter) -> None:
        self._database = database
        self.counter = counter
        self.label = database.label

    def open(
        self,
        tenant_id: str = "default",
        *,
        clock: ClockMode = ClockMode.TEST,
        migrations: Sequence[MigrationSpec] | None = None,
        statement_hook: StatementHook | None = None,
    ) -> Storage:
        inner = statement_hook

        def hook(point: str) -> None:
            self.counter.hook(point)
            if inner is not None:
                inner(point)

        return self._database.open(tenant_id, clock=clock, migrations=migrations, statement_hook=hook)

    def kill_session(self, store: Storage) -> None:
        self._database.kill_session(store)

    def drop(self) -> None:
        self._database.drop()


class CountingBackend:
    """``backend`` whose provisioned databases count statements on one :class:`StatementCounter`."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.name = backend.name
        self.capabilities = backend.capabilities
        self.counter = StatementCounter()

    def describe(self) -> str:
        return self._backend.describe()

    def provision(self) -> CountingDatabase:
        return CountingDatabase(self._backend.provision(), self.counter)

    def close(self) -> None:
        self._backend.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)
