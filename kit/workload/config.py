"""What a stress run is told (:class:`StressConfig`) and what its workers share (:class:`Context`)."""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kit.contract import Capabilities, Capability, Database
from kit.contract.errors import ConfigurationError
from kit.faults.nemesis import ALL_FAULTS, FaultKind
from kit.runtime.module import Registry
from kit.runtime.scenarios import SCENARIOS
from kit.workload.history import Recorder

__all__ = ["DEFAULT_SCENARIOS", "Context", "StressConfig"]

DEFAULT_SCENARIOS: tuple[str, ...] = ("order", "approval", "sleep", "saga", "cancel")
"""Every scenario but ``loop`` (150 decisions in a row) and ``runaway`` (burns fuel): short runs, many of them."""


@dataclass(frozen=True)
class StressConfig:
    """One stress run. Everything random in it is drawn from ``seed``."""

    seed: int = 0
    workers: int = 4
    """Decider threads, and as many command-worker threads."""
    runs: int = 16
    """Runs kept in flight: the client starts another as soon as one ends."""
    duration_s: float = 20.0
    """How long faults are injected (and new runs started)."""
    drain_s: float = 60.0
    """The bound on healing and draining after the faults stop."""
    quiet_s: float = 8.0
    """Draining stops early when nothing was committed, completed or fired for this long."""
    lease_s: float = 1.0
    """Decision and command leases (store clock); pauses last 1.3-2x this."""
    faults: tuple[FaultKind, ...] = ALL_FAULTS
    fault_interval_s: float = 0.2
    """The mean gap between two injected faults."""
    tenants: int = 2
    timer_loops: int = 1
    scenarios: tuple[str, ...] = DEFAULT_SCENARIOS
    sample_s: float = 0.02
    """How often the store clock is sampled into the history."""
    replay_limit: int = 200
    """At most this many runs have their history replayed by the invariant-9 checker."""

    def validate(self) -> StressConfig:
        if self.workers < 1 or self.runs < 1 or self.tenants < 1 or self.timer_loops < 1:
            raise ConfigurationError("--workers, --runs, --tenants and timer loops must each be at least 1")
        seconds = (self.duration_s, self.drain_s, self.lease_s, self.fault_interval_s)
        if not all(math.isfinite(x) and x > 0 for x in seconds):
            raise ConfigurationError(
                "--duration, --drain, --lease and --fault-interval must be finite positive numbers of seconds"
            )
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown or not self.scenarios:
            raise ConfigurationError(
                f"unknown scenario(s) {unknown}: choose from {', '.join(SCENARIOS)}"
            )
        return self

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_s)

    def tenant_names(self) -> tuple[str, ...]:
        return tuple(f"t{i}" for i in range(self.tenants))

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed, "workers": self.workers, "runs": self.runs, "duration_s": self.duration_s,
            "drain_s": self.drain_s, "lease_s": self.lease_s, "faults": [f.value for f in self.faults],
            "fault_interval_s": self.fault_interval_s, "tenants": self.tenants, "timer_loops": self.timer_loops,
            "scenarios": list(self.scenarios),
        }


@dataclass
class Context:
    """What every worker thread of one stress run shares."""

    database: Database
    capabilities: Capabilities
    config: StressConfig
    recorder: Recorder
    registry: Registry
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set when every worker must stop (after draining)."""
    healed: threading.Event = field(default_factory=threading.Event)
    """Set when the faults are over: crashed workers restart at once, skews end, no new runs."""
    dead: set[str] = field(default_factory=set)
    """Worker incarnations that crashed (their claims, if any, are held by the dead)."""
    errors: list[str] = field(default_factory=list)
    """Harness bugs (unexpected exceptions in a worker loop): any makes the run fail."""
    notes: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def tenants(self) -> tuple[str, ...]:
        return self.config.tenant_names()

    def can(self, capability: Capability) -> bool:
        return capability in self.capabilities

    def error(self, text: str) -> None:
        with self.lock:
            if len(self.errors) < 20:
                self.errors.append(text)

    def note(self, text: str) -> None:
        with self.lock:
            self.notes[text] += 1
