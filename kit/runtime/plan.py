"""What a decision may consume (:class:`Inputs`) and what it writes (:class:`Plan`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kit.contract import (
    JSON,
    CommandStatus,
    Decision,
    NewCommand,
    NewEvent,
    NewTimer,
    RunStatus,
    Snapshot,
)

__all__ = ["CommandResult", "Inputs", "Plan", "SignalInput"]


@dataclass(frozen=True, slots=True)
class CommandResult:
    ok: bool
    value: JSON
    command_id: str | None = None


@dataclass(frozen=True, slots=True)
class SignalInput:
    name: str
    payload: JSON
    signal_id: str | None = None


@dataclass(frozen=True)
class Inputs:
    """What a decision may consume: results, fired timers and signals, oldest signal first."""

    command_results: Mapping[str, CommandResult] = field(default_factory=dict)
    """By operation key (``op-<n>``)."""
    fired_timers: Mapping[str, str | None] = field(default_factory=dict)
    """Operation key -> timer id."""
    signals: Sequence[SignalInput] = ()
    cancel: bool = False
    """Cancellation was requested (delivered once per run, see :mod:`kit.runtime.abi`)."""
    cancel_reason: str | None = None
    open_timers: Mapping[str, str] = field(default_factory=dict)
    """Scheduled timers by operation key, to cancel when a cancellation pre-empts a sleep."""

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, open_timers: Mapping[str, str] | None = None) -> Inputs:
        run = snapshot.run
        signals = sorted(snapshot.signals, key=lambda s: (s.sent_at, len(s.signal_id), s.signal_id))
        return cls(
            command_results={
                c.operation_key: CommandResult(
                    c.status is CommandStatus.COMPLETED,
                    c.result if c.status is CommandStatus.COMPLETED else c.error,
                    c.command_id,
                )
                for c in snapshot.command_results
            },
            fired_timers={t.operation_key: t.timer_id for t in snapshot.timers},
            signals=[SignalInput(s.name, s.payload, s.signal_id) for s in signals],
            cancel=run.cancel_requested,
            cancel_reason=run.cancel_reason,
            open_timers=dict(open_timers or {}),
        )


@dataclass
class Plan:
    """One decision, ready to commit: ``decision()`` builds the contract's Decision."""

    status: RunStatus = RunStatus.BLOCKED
    events: list[NewEvent] = field(default_factory=list)
    commands: list[NewCommand] = field(default_factory=list)
    timers: list[NewTimer] = field(default_factory=list)
    consume_signals: list[str] = field(default_factory=list)
    consume_commands: list[str] = field(default_factory=list)
    consume_timers: list[str] = field(default_factory=list)
    cancel_timers: list[str] = field(default_factory=list)
    output: JSON = None
    error: JSON = None
    fuel_used: int = 0

    def decision(self) -> Decision:
        return Decision(
            next_status=self.status,
            events=tuple(self.events),
            commands=tuple(self.commands),
            timers=tuple(self.timers),
            consume_signals=tuple(self.consume_signals),
            consume_commands=tuple(self.consume_commands),
            consume_timers=tuple(self.consume_timers),
            cancel_timers=tuple(self.cancel_timers),
            output=self.output,
            error=self.error,
        )
