"""The entities of the storage contract (CONTRACT.md section 1), as values.

Every entity is a frozen dataclass: what a store returns is a snapshot, never a
live handle. Timestamps are timezone-aware UTC with microsecond precision; JSON
payloads are plain Python values (``None``, ``bool``, ``int``, ``float``,
``str``, ``list``, ``dict``) compared as values, never as text.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from kit.contract.outcomes import Outcome

__all__ = [
    "JSON",
    "ClockMode",
    "Command",
    "CommandClaim",
    "CommandStatus",
    "Decision",
    "Definition",
    "DefinitionRef",
    "Event",
    "NewCommand",
    "NewEvent",
    "NewTimer",
    "Run",
    "RunClaim",
    "RunStatus",
    "Signal",
    "SignalReceipt",
    "SignalStatus",
    "Snapshot",
    "StartResult",
    "Timer",
    "TimerStatus",
]

#: A JSON value: ``None | bool | int | float | str | list[JSON] | dict[str, JSON]``.
JSON: TypeAlias = Any


class ClockMode(str, enum.Enum):
    """Where the store clock comes from (CONTRACT.md section 2)."""

    DATABASE = "database"
    """The server's own current time, read inside the database."""
    TEST = "test"
    """A single-row clock table that the kit sets and advances."""


class RunStatus(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """A terminal run never changes again."""
        return self in _TERMINAL_RUN


_TERMINAL_RUN = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


class CommandStatus(str, enum.Enum):
    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (CommandStatus.COMPLETED, CommandStatus.FAILED, CommandStatus.CANCELLED)


class SignalStatus(str, enum.Enum):
    PENDING = "pending"
    CONSUMED = "consumed"


class TimerStatus(str, enum.Enum):
    SCHEDULED = "scheduled"
    FIRED = "fired"
    CONSUMED = "consumed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class DefinitionRef:
    """Names one definition version and the digest the caller expects it to have."""

    name: str
    version: str
    digest: str


@dataclass(frozen=True, slots=True)
class Definition:
    name: str
    version: str
    digest: str
    body: bytes
    created_at: datetime

    @property
    def ref(self) -> DefinitionRef:
        return DefinitionRef(self.name, self.version, self.digest)


@dataclass(frozen=True, slots=True)
class Run:
    """A workflow run.

    ``wake_at`` is when a ``pending`` run becomes claimable (set to the store
    time it became runnable when no later time was asked for) or the optional
    deadline of a ``blocked`` run. ``wakeup_pending`` is the mark left when
    input lands on a ``running`` run: the current claim's commit must honour it.
    """

    run_id: str
    tenant_id: str
    definition: DefinitionRef
    status: RunStatus
    revision: int
    claim_owner: str | None
    claim_generation: int
    claim_expires_at: datetime | None
    wake_at: datetime | None
    wakeup_pending: bool
    cancel_requested: bool
    cancel_reason: str | None
    input: JSON
    output: JSON
    error: JSON
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Event:
    """One history entry; ``seq`` runs 1..n per run without gaps."""

    run_id: str
    seq: int
    kind: str
    operation_key: str | None
    payload: JSON
    revision: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Command:
    command_id: str
    run_id: str
    operation_key: str
    name: str
    queue: str
    input: JSON
    status: CommandStatus
    attempt: int
    max_attempts: int
    not_before: datetime
    claim_owner: str | None
    claim_generation: int
    claim_expires_at: datetime | None
    result: JSON
    error: JSON
    consumed: bool


@dataclass(frozen=True, slots=True)
class Signal:
    signal_id: str
    run_id: str
    name: str
    payload: JSON
    dedup_key: str
    status: SignalStatus
    consumed_revision: int | None
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class Timer:
    timer_id: str
    run_id: str
    operation_key: str
    fire_at: datetime
    status: TimerStatus


@dataclass(frozen=True, slots=True)
class RunClaim:
    """A decision claim: proof of ownership of one run for one generation.

    Every fenced call checks owner, generation and a live lease against the
    store, never against this object's ``expires_at`` (which is informational).
    ``token`` is an optional store-defined fencing token (for stores fenced by a
    token rather than by worker + generation): the kit never reads, builds or
    changes it, it only passes the claim back, token included, on every fenced call.
    """

    run_id: str
    worker_id: str
    generation: int
    expires_at: datetime
    revision: int
    token: str | None = None


@dataclass(frozen=True, slots=True)
class CommandClaim:
    """A worker's claim on one command attempt.

    ``token`` is an optional store-defined fencing token, passed back untouched
    on every fenced call (see :class:`RunClaim`).
    """

    command_id: str
    run_id: str
    worker_id: str
    generation: int
    expires_at: datetime
    attempt: int
    name: str
    queue: str
    input: JSON
    operation_key: str
    token: str | None = None


@dataclass(frozen=True, slots=True)
class NewEvent:
    kind: str
    payload: JSON = None
    operation_key: str | None = None


@dataclass(frozen=True, slots=True)
class NewCommand:
    """A command to schedule; first wins per (run, ``operation_key``)."""

    operation_key: str
    name: str
    input: JSON = None
    queue: str = "default"
    max_attempts: int = 3
    delay: timedelta = timedelta(0)


@dataclass(frozen=True, slots=True)
class NewTimer:
    """A durable timer; give exactly one of ``delay`` (from store now) or ``fire_at``."""

    operation_key: str
    delay: timedelta | None = None
    fire_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """Everything one fenced decision commit writes, all or nothing.

    ``next_status`` is ``pending``, ``blocked`` or a terminal status. A
    terminal decision may append events and consume items but schedules no
    commands or timers. ``wake_at`` / ``wake_after`` (at most one) set when a
    ``pending`` run is claimable again, or a ``blocked`` run's deadline.
    """

    next_status: RunStatus
    events: tuple[NewEvent, ...] = ()
    commands: tuple[NewCommand, ...] = ()
    timers: tuple[NewTimer, ...] = ()
    consume_signals: tuple[str, ...] = ()
    consume_commands: tuple[str, ...] = ()
    consume_timers: tuple[str, ...] = ()
    cancel_timers: tuple[str, ...] = ()
    wake_at: datetime | None = None
    wake_after: timedelta | None = None
    output: JSON = None
    error: JSON = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One consistent view of a claimed run and all the input waiting for it."""

    run: Run
    history: tuple[Event, ...]
    command_results: tuple[Command, ...]
    signals: tuple[Signal, ...]
    timers: tuple[Timer, ...]


@dataclass(frozen=True, slots=True)
class StartResult:
    run: Run
    created: bool


@dataclass(frozen=True, slots=True)
class SignalReceipt:
    """What ``send_signal`` did: ``outcome`` is committed, duplicate, terminal or not_found."""

    outcome: Outcome
    signal: Signal | None = field(default=None)

    @property
    def created(self) -> bool:
        return self.outcome is Outcome.COMMITTED
