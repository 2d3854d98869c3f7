"""One side of a lock-step comparison: a database, its logical workers, and what they hold.

The interpreter runs every step on two sides, the adapter under test and the
reference engine. A side turns a step's natural keys (run ids, operation keys,
dedup keys, "the worker's latest claim on r1") into that store's own objects,
calls the store, and remembers what the worker now holds (claims, snapshots).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kit.contract import (
    ClockMode,
    CommandClaim,
    Database,
    Decision,
    NewCommand,
    NewEvent,
    NewTimer,
    RunClaim,
    RunStatus,
    Snapshot,
    Storage,
    digest_of,
)
from kit.faults import StatementFaults

__all__ = ["WORKERS", "Side", "body_of"]

#: The logical workers: name -> tenant. ``w3`` is another tenant, to probe isolation.
WORKERS: dict[str, str] = {"w0": "tenant-a", "w1": "tenant-a", "w2": "tenant-a", "w3": "tenant-b"}
CLOCK_WORKER = "w0"


def body_of(label: str) -> bytes:
    """The definition body a step's short label stands for."""
    return f"(module ;; {label})".encode()


def ms(value: Any) -> timedelta:
    return timedelta(microseconds=round(float(value) * 1000))


@dataclass
class Worker:
    name: str
    tenant: str
    faults: StatementFaults = field(default_factory=StatementFaults)
    store: Storage | None = None
    run_claims: dict[str, list[RunClaim]] = field(default_factory=dict)
    command_claims: dict[tuple[str, str], list[CommandClaim]] = field(default_factory=dict)
    snapshots: dict[str, Snapshot] = field(default_factory=dict)


class Side:
    """The adapter (or the reference engine) as the steps see it."""

    def __init__(self, label: str, database: Database, migrate: bool = True, clock: ClockMode = ClockMode.TEST) -> None:
        self.label = label
        self.clock = clock
        self.database = database
        self.workers = {name: Worker(name, tenant) for name, tenant in WORKERS.items()}
        self._observers: dict[str, Storage] = {}
        if migrate:
            self.store(CLOCK_WORKER).migrate()

    # -- stores -------------------------------------------------------------
    def store(self, worker: str) -> Storage:
        """The worker's store, reopened after a crash (a restarted process keeps its memory)."""
        w = self.workers[worker]
        if w.store is None:
            w.store = self.database.open(w.tenant, clock=self.clock, statement_hook=w.faults)
        return w.store

    def crash(self, worker: str) -> None:
        w = self.workers[worker]
        if w.store is not None:
            w.store.close()
            w.store = None

    def observer(self, tenant: str) -> Storage:
        """A store per tenant used only to read state: no faults, never crashed."""
        if tenant not in self._observers:
            self._observers[tenant] = self.database.open(tenant, clock=self.clock)
        return self._observers[tenant]

    def reader(self, worker: str) -> Storage:
        """A fault-free store of the worker's tenant that only this worker's steps read through."""
        key = f"reader:{worker}"
        if key not in self._observers:
            self._observers[key] = self.database.open(self.workers[worker].tenant, clock=self.clock)
        return self._observers[key]

    def close(self) -> None:
        for name in self.workers:
            self.crash(name)
        for store in self._observers.values():
            store.close()
        self._observers.clear()

    def tenants(self) -> dict[str, str]:
        """A worker per tenant, to read each tenant's state."""
        seen: dict[str, str] = {}
        for name, w in self.workers.items():
            seen.setdefault(w.tenant, name)
        return seen

    # -- what workers hold --------------------------------------------------
    def run_claim(self, worker: str, run_id: str, which: str) -> RunClaim | None:
        claims = self.workers[worker].run_claims.get(run_id) or []
        if not claims:
            return None
        return claims[0] if which == "oldest" else claims[-1]

    def command_claim(self, worker: str, run_id: str, key: str, which: str) -> CommandClaim | None:
        claims = self.workers[worker].command_claims.get((run_id, key)) or []
        if not claims:
            return None
        return claims[0] if which == "oldest" else claims[-1]

    def remember_run_claims(self, worker: str, claims: list[RunClaim]) -> None:
        for claim in claims:
            self.workers[worker].run_claims.setdefault(claim.run_id, []).append(claim)

    def remember_command_claims(self, worker: str, claims: list[CommandClaim]) -> None:
        for claim in claims:
            self.workers[worker].command_claims.setdefault((claim.run_id, claim.operation_key), []).append(claim)

    # -- building decisions -------------------------------------------------
    def decision(self, worker: str, run_id: str, spec: dict[str, Any]) -> Decision:
        """A decision from a step's JSON, consuming what the worker's last snapshot showed."""
        snapshot = self.workers[worker].snapshots.get(run_id) if spec.get("consume", True) else None
        # Read through the worker's fault-free reader: its own store carries its fault hook, and
        # a read here must not take a fault meant for the commit that follows. (Per worker, not
        # shared: racing workers build decisions on their own threads.)
        store = self.reader(worker)
        cancel = tuple(
            t.timer_id for t in store.list_timers(run_id)
            if t.operation_key in set(spec.get("cancel_timers", ())) and t.status.value in ("scheduled", "fired")
        ) if spec.get("cancel_timers") else ()
        consumed_timers = tuple(t.timer_id for t in snapshot.timers) if snapshot else ()
        consumed_commands = tuple(c.command_id for c in snapshot.command_results) if snapshot else ()
        if spec.get("consume_commands"):  # a decider consuming commands by key, whatever their state
            wanted = set(spec["consume_commands"])
            consumed_commands += tuple(c.command_id for c in store.list_commands(run_id)
                                       if c.operation_key in wanted and c.command_id not in consumed_commands)
        return Decision(
            next_status=RunStatus(spec["status"]),
            events=tuple(NewEvent(e["kind"], e.get("payload"), e.get("key")) for e in spec.get("events", ())),
            commands=tuple(
                NewCommand(c["key"], c.get("name", "work"), c.get("input"), c.get("queue", "default"),
                           c.get("max_attempts", 2), ms(c.get("delay_ms", 0)))
                for c in spec.get("commands", ())
            ),
            timers=tuple(_timer(t) for t in spec.get("timers", ())),
            consume_signals=tuple(s.signal_id for s in snapshot.signals) if snapshot else (),
            consume_commands=consumed_commands,
            consume_timers=tuple(t for t in consumed_timers if t not in cancel),
            cancel_timers=cancel,
            wake_at=datetime.fromisoformat(spec["wake_at"]) if spec.get("wake_at") is not None else None,
            wake_after=ms(spec["wake_after_ms"]) if spec.get("wake_after_ms") is not None else None,
            output=spec.get("output"),
            error=spec.get("error"),
        )

    @staticmethod
    def definition_digest(label: str) -> str:
        return digest_of(body_of(label))

    @staticmethod
    def fingerprint(value: Any) -> str:
        return hashlib.sha256(repr(value).encode()).hexdigest()[:12]


def _timer(spec: dict[str, Any]) -> NewTimer:
    """A timer from a step: ``fire_at`` (an ISO timestamp, any offset) or ``delay_ms`` from store now."""
    if spec.get("fire_at") is not None:
        return NewTimer(spec["key"], fire_at=datetime.fromisoformat(spec["fire_at"]))
    return NewTimer(spec["key"], delay=ms(spec.get("delay_ms", 0)))
