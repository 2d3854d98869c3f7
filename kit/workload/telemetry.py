"""What the stress run shows while it goes: counts, runs ended, throughput and latency, timelines.

A :class:`Tracker` listens to every history entry as it is written. It keeps
counters (constant memory), the set of runs seen ending (bounded by the runs
started) and, for the report, per-second series and a capped list of timeline
events that :meth:`Tracker.take_report` hands over (and forgets) once a second.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import Any

from kit.report.model import TimelineEvent
from kit.runtime.stats import percentile
from kit.workload.history import INVOKE, OK, Pending

__all__ = ["Tracker"]

_TERMINAL = frozenset({"completed", "failed", "cancelled"})
_PROGRESS = frozenset({"commit", "complete", "fail", "fire"})
_TIMELINE_KIND = {"claim_runs": "claim", "claim_commands": "claim", "commit": "commit", "complete": "complete",
                  "fail": "complete", "renew": "heartbeat", "heartbeat": "heartbeat", "fire": "timer"}
_THROUGHPUT = ("commit", "complete", "fire", "start")
_LATENCY = ("commit", "complete")


class Tracker:
    """Listens to a :class:`~kit.workload.history.Recorder` (see the module docstring)."""

    def __init__(self, max_events: int = 4000) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.faults: Counter[str] = Counter()
        self.delivered: Counter[str] = Counter()
        self.crashes = 0
        self.ended: set[tuple[str, str]] = set()
        self.last_progress = 0.0
        self.max_events = max_events
        self._lock = threading.Lock()
        self._events: list[TimelineEvent] = []
        self._kept = 0
        self._per_second: dict[int, Counter[str]] = defaultdict(Counter)
        self._latency: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))

    def __call__(self, entry: dict[str, Any], pending: Pending | None) -> None:
        kind, f, t = entry["type"], entry["f"], float(entry["t"])
        if kind == INVOKE:
            return
        with self._lock:
            if entry.get("process") == "nemesis":
                self.delivered[f] += 1
                return
            self.counts[(f, kind)] += 1
            if f == "fault" and isinstance(entry.get("value"), dict):
                self.faults[str(entry["value"].get("kind"))] += 1
                self._event(TimelineEvent(entry["process"], t, "fault", None, _fault_label(entry["value"])), True)
                return
            if f == "crash":
                self.crashes += 1
                self._event(TimelineEvent(entry["process"], t, "fault", None, "crash"), True)
                return
            if pending is None or kind not in (OK, "fail", "info"):
                return
            value = entry.get("value")
            busy = not (f in ("claim_runs", "claim_commands", "fire") and not value)
            if kind == OK and f in _PROGRESS and busy:
                self.last_progress = t
            if (kind == OK and f == "commit" and isinstance(pending.value, dict)
                    and pending.value.get("next_status") in _TERMINAL):
                self.ended.add((entry.get("tenant", ""), entry.get("run", "")))
            second = int(t)
            if kind == OK and f in _THROUGHPUT and busy:
                self._per_second[second][f] += 1
            if f in _LATENCY:
                self._latency[second][f].append((t - pending.t) * 1000.0)
            label = _TIMELINE_KIND.get(f, f)
            if busy and f in _TIMELINE_KIND:
                text = f"{f} {entry.get('run', '')} {kind}" + (f" {value}" if isinstance(value, str) else "")
                self._event(TimelineEvent(entry["process"], pending.t, label, t, text.strip()), False)

    def _event(self, event: TimelineEvent, always: bool) -> None:
        if always or self._kept < self.max_events:
            self._events.append(event)
            self._kept += 1

    def progress_at(self) -> float:
        with self._lock:
            return self.last_progress

    def ok(self, f: str) -> int:
        with self._lock:
            return self.counts[(f, OK)]

    def ended_count(self) -> int:
        with self._lock:
            return len(self.ended)

    def has_ended(self, tenant: str, run_id: str) -> bool:
        with self._lock:
            return (tenant, run_id) in self.ended

    def mark_ended(self, tenant: str, run_id: str) -> None:
        with self._lock:
            self.ended.add((tenant, run_id))

    def take_report(self, before_second: int) -> tuple[list[TimelineEvent], dict[str, list[tuple[float, float]]],
                                                       dict[str, list[tuple[float, float]]]]:
        """Timeline events so far, and throughput (ops/s) and latency (ms) points of whole seconds before
        ``before_second``; each is handed over once."""
        with self._lock:
            events, self._events = self._events, []
            seconds = sorted(s for s in set(self._per_second) | set(self._latency) if s < before_second)
            throughput: dict[str, list[tuple[float, float]]] = defaultdict(list)
            latency: dict[str, list[tuple[float, float]]] = defaultdict(list)
            for s in seconds:
                counts = self._per_second.pop(s, Counter())
                for f in _THROUGHPUT:
                    throughput[f"{f} ok/s"].append((float(s), float(counts[f])))
                for f, samples in self._latency.pop(s, {}).items():
                    latency[f"{f} p50"].append((float(s), percentile(samples, 50)))
                    latency[f"{f} p99"].append((float(s), percentile(samples, 99)))
        return events, dict(throughput), dict(latency)

    def summary(self) -> dict[str, Any]:
        with self._lock:
            by_f: dict[str, dict[str, int]] = defaultdict(dict)
            for (f, kind), n in self.counts.items():
                by_f[f][kind] = n
            return {"operations": dict(by_f), "faults_applied": dict(self.faults),
                    "faults_delivered": dict(self.delivered), "crashes": self.crashes, "runs_ended": len(self.ended)}


def _fault_label(value: dict[str, Any]) -> str:
    parts = [str(value.get("kind", "fault"))]
    for key in ("op", "point", "applied"):
        if value.get(key):
            parts.append(str(value[key]))
    return " ".join(parts)
