"""Capability and promise declarations (CONTRACT.md section 4).

Suites name capabilities and promises, never backends.

* A :class:`Capability` is something the kit can do *with* a store's
  environment: run it on a test clock or the server clock, kill its session,
  fail one of its statements, use it from several threads, expect SKIP LOCKED.
  A check needing an undeclared capability is skipped as ``unsupported``.
* A :class:`Promise` is one family of guarantees the store *makes* to the
  engine on top of it: time-bounded leases, generation fencing, decisions with
  an expected revision, wake-up on input, commands, signals, timers... A check
  needing a promise the store does not make is skipped as ``not-promised``: the
  store was never meant to keep it, which is neither a failure nor a missing
  feature of the kit's environment.

By default a store promises every family (the built-in adapters do); a
third-party adapter names what it promises (``promises=``) or what it withholds
(``withhold=``). A check the adapter declares as an expected failure and that
passes is reported as an error (an unexpected success), so declarations cannot
silently go stale.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["ALL_PROMISES", "Capabilities", "Capability", "Promise", "SkipKind"]


class Capability(str, enum.Enum):
    """One optional feature; the docstring of each member is its specification."""

    SKIP_LOCKED = "skip_locked"
    """Concurrent claimers do not block each other: a claim skips rows another
    transaction holds locked and returns at once with other rows."""

    TEST_CLOCK = "test_clock"
    """The store can run on the kit's test clock (a single-row clock table the
    kit sets and advances) so leases and timers are deterministic."""

    DATABASE_CLOCK = "database_clock"
    """The store can run on the server's own current time. Checks with no time
    in them run on it when the store has no test clock."""

    TENANCY = "tenancy"
    """Same as :attr:`Promise.TENANCY`, which it follows; kept so adapters written
    before promises existed declare it unchanged."""

    UNIT_OF_WORK = "unit_of_work"
    """Same as :attr:`Promise.UNIT_OF_WORK`, which it follows; kept so adapters
    written before promises existed declare it unchanged."""

    KILL_SESSION = "kill_session"
    """The kit can end a store's server session from another connection to
    simulate a crash inside a transaction."""

    CONCURRENT_CONNECTIONS = "concurrent_connections"
    """Several stores opened on one database may be used from several threads
    at once, each with its own connection."""

    STATEMENT_FAULTS = "statement_faults"
    """The store issues every statement through the kit's connection factory,
    so the kit can fail any single statement of an operation."""


class Promise(str, enum.Enum):
    """One family of guarantees a store makes; the docstring of each member is its specification.

    Starting a run, reading it back and claiming it for a decision are the core
    every store keeps; everything else is a family a store may withhold.
    """

    LEASES = "leases"
    """A claim lasts a time-bounded lease measured on the store clock: it is
    live until exactly ``expires_at``, renewal extends it, and once it expires
    the run or command is claimable by someone else."""

    GENERATION_FENCING = "generation_fencing"
    """Every claim gets a fresh generation (or opaque token); a fenced call with
    a superseded claim is refused as ``claim_lost`` and changes nothing."""

    EXPECTED_REVISION = "expected_revision"
    """``commit_decision`` takes the revision the decision was computed from and
    refuses (``conflict``) when the run has moved on; every commit bumps it by one."""

    ATOMIC_DECISION = "atomic_decision"
    """One decision (events, commands, timers, consumptions, status) lands
    whole or not at all, also under a fault at any statement; a store that
    writes one step at a time does not make this promise."""

    WAKE_ON_INPUT = "wake_on_input"
    """A run may block (status ``blocked``); a store write that gives it input
    (a command result, a signal, a fired timer, a cancel request) makes it
    claimable again, and input landing while it runs is honoured by its commit."""

    COMMANDS = "commands"
    """Decisions schedule commands (first wins per operation key) that workers
    claim, heartbeat, complete and fail with retries and backoff."""

    SIGNALS = "signals"
    """External signals are delivered once per dedup key and consumed by a decision."""

    TIMERS = "timers"
    """Decisions schedule durable timers; ``fire_due_timers`` fires them at
    their store-clock instant, once."""

    DEFINITIONS = "definitions"
    """Workflow definitions are stored by (name, version) with a digest; a run
    names the definition it was started from and a mismatched digest is refused."""

    CANCEL_REQUESTS = "cancel_requests"
    """``request_cancel`` records a cancel request the next decision sees."""

    TENANCY = "tenancy"
    """A store is opened for one tenant; every read and write is scoped to it."""

    UNIT_OF_WORK = "unit_of_work"
    """``transaction()`` nests by reusing the outer transaction, rolls back
    together, runs after-commit callbacks once in order; ``lock_run`` exists."""

    SCHEMA_CHECKSUMS = "schema_checksums"
    """Numbered migrations are recorded with checksums; ``verify_schema`` refuses
    a schema that is behind, ahead or edited."""


#: Every promise family: what a store promises unless it says otherwise.
ALL_PROMISES: frozenset[Promise] = frozenset(Promise)

#: Promise families that were capabilities before promises existed.
_TWINS: dict[Promise, Capability] = {
    Promise.TENANCY: Capability.TENANCY,
    Promise.UNIT_OF_WORK: Capability.UNIT_OF_WORK,
}


class SkipKind(str, enum.Enum):
    """Why a check did not run, as reports type it."""

    UNSUPPORTED = "unsupported"
    NOT_PROMISED = "not-promised"
    EXPECTED_FAILURE = "expected-failure"
    NOT_REACHABLE = "not-reachable"


@dataclass(frozen=True)
class Capabilities:
    """What one adapter declares.

    ``supported`` are the capabilities, ``promises`` the promise families the
    store makes (every family unless the adapter says otherwise).
    ``expected_failures`` maps a check id (``area.check_name``) to the reason
    the adapter is known not to meet it. Build it with :meth:`of`.
    """

    supported: frozenset[Capability] = frozenset()
    clock_resolution_us: int = 1
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    promises: frozenset[Promise] = ALL_PROMISES

    @classmethod
    def of(
        cls,
        *capabilities: Capability,
        clock_resolution_us: int = 1,
        expected_failures: Mapping[str, str] | None = None,
        promises: Iterable[Promise] | None = None,
        withhold: Iterable[Promise] = (),
    ) -> Capabilities:
        """Declare capabilities and promises.

        ``promises`` lists every family the store makes; leave it out to promise
        them all. ``withhold`` then removes families. ``Capability.TENANCY`` and
        ``Capability.UNIT_OF_WORK`` follow ``Promise.TENANCY`` and
        ``Promise.UNIT_OF_WORK`` (declared when promised, dropped when withheld).
        """
        made = (ALL_PROMISES if promises is None else frozenset(promises)) - frozenset(withhold)
        supported = frozenset(capabilities) | {c for p, c in _TWINS.items() if p in made}
        supported -= {c for p, c in _TWINS.items() if p not in made}
        return cls(supported, clock_resolution_us, dict(expected_failures or {}), made)

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Promise):
            return item in self.promises
        return item in self.supported

    def missing(self, needed: Iterable[Capability | Promise]) -> list[Capability]:
        """The capabilities in ``needed`` this adapter does not declare, in order (promises are ignored)."""
        return [c for c in needed if isinstance(c, Capability) and c not in self.supported]

    def not_promised(self, needed: Iterable[Capability | Promise]) -> list[Promise]:
        """The promises in ``needed`` this store does not make, in order (capabilities are ignored)."""
        return [p for p in needed if isinstance(p, Promise) and p not in self.promises]

    def without(self, *items: Capability | Promise) -> Capabilities:
        """The same declaration less some capabilities and promises (a twin goes with its twin)."""
        gone_c = {i for i in items if isinstance(i, Capability)}
        gone_p = {i for i in items if isinstance(i, Promise)}
        gone_c |= {_TWINS[p] for p in gone_p if p in _TWINS}
        gone_p |= {p for p, c in _TWINS.items() if c in gone_c}
        return Capabilities(
            self.supported - frozenset(gone_c),
            self.clock_resolution_us,
            self.expected_failures,
            self.promises - frozenset(gone_p),
        )
