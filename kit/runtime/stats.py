"""Thread-safe counters of what the runtime's loops did, and latency percentiles."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["RuntimeStats", "percentile"]


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of ``samples``; 0.0 for none."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


@dataclass
class RuntimeStats:
    """Shared by every loop of one :class:`~kit.runtime.service.Runtime` (or given to one component).

    ``attempts`` counts each decision attempt's end: a commit outcome
    (``committed``, ``claim_lost``, ``revision_mismatch``, ``terminal``,
    ``not_found``), ``refused`` (digest mismatch / unknown definition) or
    ``error`` (a storage fault). ``latencies`` hold load-to-commit seconds of
    committed decisions; ``committed_at`` the ``time.perf_counter()`` of each
    committed decision, in the order they were counted (a benchmark measures
    the steady rate between two of them).
    """

    attempts: Counter[str] = field(default_factory=Counter)
    ended: Counter[str] = field(default_factory=Counter)
    commands: Counter[str] = field(default_factory=Counter)
    timers_fired: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    committed_at: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _changed: threading.Condition = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self._lock)

    def attempt(self, outcome: str, latency: float | None = None, ended: str | None = None) -> None:
        with self._lock:
            self.attempts[outcome] += 1
            if outcome == "committed":
                self.committed_at.append(time.perf_counter())
            if latency is not None:
                self.latencies.append(latency)
            if ended is not None:
                self.ended[ended] += 1
            self._changed.notify_all()

    def command(self, outcome: str) -> None:
        with self._lock:
            self.commands[outcome] += 1

    def fired(self, n: int) -> None:
        with self._lock:
            self.timers_fired += n

    def fault(self, where: str, message: str) -> None:
        with self._lock:
            self.faults[where] += 1
            if len(self.notes) < 20:
                self.notes.append(f"{where}: {message}")

    def note(self, message: str) -> None:
        with self._lock:
            if len(self.notes) < 20:
                self.notes.append(message)

    @property
    def decisions(self) -> int:
        return self.attempts["committed"]

    def terminal_runs(self) -> int:
        with self._lock:
            return sum(self.ended.values())

    def wait_terminal(self, at_least: int, timeout: float) -> int:
        """Block until ``at_least`` runs ended (or ``timeout`` s passed); return the count."""
        with self._changed:
            self._changed.wait_for(lambda: sum(self.ended.values()) >= at_least, timeout)
            return sum(self.ended.values())

    def latency_ms(self, q: float) -> float:
        with self._lock:
            return percentile(self.latencies, q) * 1000.0
