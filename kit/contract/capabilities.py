"""Capability declarations (CONTRACT.md section 4).

Suites name capabilities, never backends. A check that needs an undeclared
capability is skipped with a typed reason; a check the adapter declares as an
expected failure and that passes is reported as an error (an unexpected
success), so declarations cannot silently go stale.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Capabilities", "Capability", "SkipKind"]


class Capability(str, enum.Enum):
    """One optional feature; the docstring of each member is its specification."""

    SKIP_LOCKED = "skip_locked"
    """Concurrent claimers do not block each other: a claim skips rows another
    transaction holds locked and returns at once with other rows."""

    TEST_CLOCK = "test_clock"
    """The store can run on the kit's test clock (a single-row clock table the
    kit sets and advances) so leases and timers are deterministic."""

    DATABASE_CLOCK = "database_clock"
    """The store can run on the server's own current time."""

    TENANCY = "tenancy"
    """A store is opened for one tenant; every read and write is scoped to it."""

    UNIT_OF_WORK = "unit_of_work"
    """``transaction()`` nests by reusing the outer transaction, rolls back
    together, runs after-commit callbacks once in order; ``lock_run`` exists."""

    KILL_SESSION = "kill_session"
    """The kit can end a store's server session from another connection to
    simulate a crash inside a transaction."""

    CONCURRENT_CONNECTIONS = "concurrent_connections"
    """Several stores opened on one database may be used from several threads
    at once, each with its own connection."""

    STATEMENT_FAULTS = "statement_faults"
    """The store issues every statement through the kit's connection factory,
    so the kit can fail any single statement of an operation."""


class SkipKind(str, enum.Enum):
    """Why a check did not run, as reports type it."""

    UNSUPPORTED = "unsupported"
    EXPECTED_FAILURE = "expected-failure"
    NOT_REACHABLE = "not-reachable"
    NOT_PROMISED = "not-promised"
    """The store does not make the promise the check needs (a different store, not a failure)."""


@dataclass(frozen=True)
class Capabilities:
    """What one adapter declares.

    ``expected_failures`` maps a check id (``area.check_name``) to the reason
    the adapter is known not to meet it.
    """

    supported: frozenset[Capability] = frozenset()
    clock_resolution_us: int = 1
    expected_failures: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        *capabilities: Capability,
        clock_resolution_us: int = 1,
        expected_failures: Mapping[str, str] | None = None,
    ) -> Capabilities:
        return cls(frozenset(capabilities), clock_resolution_us, dict(expected_failures or {}))

    def __contains__(self, capability: object) -> bool:
        return capability in self.supported

    def missing(self, needed: Iterable[Capability]) -> list[Capability]:
        """The capabilities in ``needed`` this adapter does not declare, in order."""
        return [c for c in needed if c not in self.supported]

    def without(self, *capabilities: Capability) -> Capabilities:
        return Capabilities(
            self.supported - frozenset(capabilities),
            self.clock_resolution_us,
            self.expected_failures,
        )
