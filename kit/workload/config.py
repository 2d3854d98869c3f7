"""What a stress run is told (:class:`StressConfig`) and what its workers share (:class:`Context`)."""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kit.contract import Capabilities, Capability, Database
from kit.contract.errors import ConfigurationError
from kit.faults.nemesis import ALL_FAULTS, FaultKind
from kit.runtime.scenarios import SCENARIOS
from kit.workload.history import Recorder

if TYPE_CHECKING:
    from kit.runtime.module import Registry
    from kit.workload.virtual import Virtual

__all__ = ["DEFAULT_SCENARIOS", "MODES", "Context", "StressConfig"]

MODES: tuple[str, ...] = ("deterministic", "free")
"""``deterministic``: a seeded scheduler lets one actor move at a time (same seed, same interleaving);
``free``: real threads race freely (interleavings the scheduler's statement granularity cannot reach)."""

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
    mode: str = "free"
    """``deterministic`` or ``free`` (see :data:`MODES`); the command line's default is deterministic."""
    max_steps: int = 400_000
    """Deterministic mode: a bound on scheduling decisions (a safety net; the phases end the run first)."""

    def validate(self) -> StressConfig:
        if self.workers < 1 or self.runs < 1 or self.tenants < 1 or self.timer_loops < 1:
            raise ConfigurationError("--workers, --runs, --tenants and timer loops must each be at least 1")
        seconds = (self.duration_s, self.drain_s, self.lease_s, self.fault_interval_s)
        if not all(math.isfinite(x) and x > 0 for x in seconds):
            raise ConfigurationError(
                "--duration, --drain, --lease and --fault-interval must be finite positive numbers of seconds"
            )
        if self.mode not in MODES:
            raise ConfigurationError(f"unknown mode {self.mode!r}: use one of {', '.join(MODES)}")
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
            "scenarios": list(self.scenarios), "mode": self.mode,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StressConfig:
        """The config :meth:`to_json` wrote (a replay bundle's settings)."""
        return cls(seed=int(data["seed"]), workers=int(data["workers"]), runs=int(data["runs"]),
                   duration_s=float(data["duration_s"]), drain_s=float(data["drain_s"]),
                   lease_s=float(data["lease_s"]), faults=tuple(FaultKind(f) for f in data["faults"]),
                   fault_interval_s=float(data["fault_interval_s"]), tenants=int(data["tenants"]),
                   timer_loops=int(data["timer_loops"]), scenarios=tuple(data["scenarios"]),
                   mode=str(data.get("mode", "free"))).validate()


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
    det: Virtual | None = None
    """Deterministic mode's scheduler and virtual store clock (``None``: free-running threads)."""

    @property
    def tenants(self) -> tuple[str, ...]:
        return self.config.tenant_names()

    def can(self, capability: Capability) -> bool:
        return capability in self.capabilities

    def wait(self, seconds: float, until: threading.Event | None = None) -> bool:
        """Wait ``seconds`` (wall time, or store-clock time under the scheduler) or until ``until``
        (default: the stop event) is set; returns whether it was set."""
        event = until if until is not None else self.stopping
        if self.det is None:
            return event.wait(seconds)
        self.det.sleep(seconds, event)
        return event.is_set()

    def error(self, text: str) -> None:
        with self.lock:
            if len(self.errors) < 20:
                self.errors.append(text)

    def note(self, text: str) -> None:
        with self.lock:
            self.notes[text] += 1
