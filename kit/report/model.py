"""The report data model: runs with their check results, plot series and worker timelines.

A report folder holds one or more runs (one per backend for ``kit check``,
one per seeded bug for the mutant table, one per backend and source for a
merge). ``results.json`` is :meth:`Report.to_json`; a merge of reports is a
report whose runs are theirs, so merges merge again.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FAILED",
    "FORMAT",
    "HTML",
    "JOURNAL",
    "JUNIT",
    "NOT_PROMISED",
    "RESULTS",
    "SUMMARY",
    "TALLY",
    "Report",
    "RunRecord",
    "Series",
    "TimelineEvent",
    "column_of",
    "not_promised_of",
    "now_iso",
    "result_key",
]

FORMAT = "kit-report/1"
JOURNAL = "results.jsonl"
RESULTS = "results.json"
SUMMARY = "summary.md"
JUNIT = "junit.xml"
HTML = "index.html"

FAILED = ("failed", "error")
"""Outcomes that mean a guarantee was not kept (or the check could not run)."""


NOT_PROMISED = "not-promised"

#: The columns every rendering counts a run's results in, in order.
TALLY = ("passed", "failed", NOT_PROMISED, "skipped")


def column_of(result: dict[str, Any]) -> str:
    """The tally column of one result: ``passed``, ``failed`` (errors too), ``not-promised`` (the store does
    not make a promise the check needs) or ``skipped`` (unsupported, not reachable, expected failures)."""
    outcome = str(result.get("outcome"))
    if outcome in FAILED:
        return "failed"
    if outcome in ("skipped", "xfailed"):
        return NOT_PROMISED if result.get("skip_kind") == NOT_PROMISED else "skipped"
    return outcome


def not_promised_of(result: dict[str, Any]) -> str:
    """The promises a not-promised skip names (``timers, leases``), from its reason."""
    message = str(result.get("message", ""))
    marker = " does not promise "
    if marker in message:
        return message.split(marker, 1)[1].strip()
    marker = "promises none of "
    return message.split(marker, 1)[1].strip() if marker in message else message


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def result_key(result: dict[str, Any]) -> str:
    """A check's identity across backends: its id, plus pytest parameters if it has any."""
    nodeid = str(result.get("nodeid", ""))
    params = nodeid[nodeid.index("["):] if "[" in nodeid else ""
    return f"{result.get('check') or nodeid}{params}"


@dataclass
class Series:
    """One plotted series: ``points`` are (x, y); x is seconds since the run started unless ``x_unit`` says.

    ``kind`` groups series into plots: ``latency`` and ``throughput`` get
    their own charts; any other kind gets a chart of its own name.
    """

    name: str
    kind: str
    unit: str
    points: list[tuple[float, float]] = field(default_factory=list)
    x_unit: str = "s"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "unit": self.unit, "x_unit": self.x_unit,
                "points": [[x, y] for x, y in self.points]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Series:
        return cls(str(data["name"]), str(data.get("kind", "other")), str(data.get("unit", "")),
                   [(float(x), float(y)) for x, y in data.get("points", [])], str(data.get("x_unit", "s")))


@dataclass(slots=True)
class TimelineEvent:
    """Something one worker did or suffered, from ``start`` to ``end`` (None: an instant), in run seconds.

    ``kind`` is free text; the HTML colours ``claim``, ``commit``, ``complete``,
    ``heartbeat`` and ``fault`` consistently.

    A report holds thousands (a stress run's timeline, more in a merged report): the events have no
    ``__dict__``, and the few worker names and kinds read back are shared, not one string per event.
    """

    worker: str
    start: float
    kind: str
    end: float | None = None
    label: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "start": self.start, "end": self.end, "kind": self.kind, "label": self.label}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TimelineEvent:
        end = data.get("end")
        return cls(sys.intern(str(data["worker"])), float(data["start"]), sys.intern(str(data.get("kind", ""))),
                   None if end is None else float(end), str(data.get("label", "")))


@dataclass
class RunRecord:
    """One run of the kit against one backend: meta, results as JSON records, series, timeline, end."""

    id: str
    meta: dict[str, Any]
    results: list[dict[str, Any]] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    events: list[TimelineEvent] = field(default_factory=list)
    end: dict[str, Any] | None = None
    source: str = ""

    @property
    def label(self) -> str:
        return str(self.meta.get("label") or self.id)

    @property
    def backend(self) -> str:
        return str(self.meta.get("backend") or "?")

    @property
    def complete(self) -> bool:
        """Whether the run reached its end (a crash or an interrupt leaves it incomplete)."""
        return self.end is not None and not self.end.get("aborted")

    @property
    def unreachable(self) -> str | None:
        """Why the backend could not be reached, for a run that never started its checks."""
        value = (self.end or {}).get("unreachable")
        return str(value) if value else None

    @property
    def incomplete_reason(self) -> str | None:
        if self.complete:
            return None
        if self.end is not None:
            return str(self.end.get("aborted") or "aborted")
        return "the run stopped before its end (crash or kill): results are those recorded until then"

    def counts(self) -> Counter[str]:
        return Counter(str(r.get("outcome")) for r in self.results)

    def tally(self) -> dict[str, int]:
        """Results per column of :data:`TALLY`: not-promised skips counted apart from the other skips."""
        counts = Counter(column_of(r) for r in self.results)
        return {column: counts[column] for column in TALLY}

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r.get("outcome") in FAILED]

    def series_by(self, plot: str) -> list[Series]:
        return [s for s in self.series if s.kind == plot]

    def to_json(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "id": self.id,
            **self.meta,
            "complete": self.complete,
            "incomplete_reason": self.incomplete_reason,
            "unreachable": self.unreachable,
            "end": self.end,
            "counts": {k: counts[k] for k in sorted(counts)},
            "tally": self.tally(),
            "results": self.results,
            "series": [s.to_json() for s in self.series],
            "timeline": [e.to_json() for e in self.events],
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "") -> RunRecord:
        derived = {"id", "complete", "incomplete_reason", "unreachable", "end", "counts", "tally", "results", "series",
                   "timeline", "source"}
        meta = {k: v for k, v in data.items() if k not in derived}
        return cls(
            id=str(data["id"]), meta=meta, results=list(data.get("results", [])),
            series=[Series.from_json(s) for s in data.get("series", [])],
            events=[TimelineEvent.from_json(e) for e in data.get("timeline", [])],
            end=data.get("end"), source=source or str(data.get("source", "")),
        )


@dataclass
class Report:
    """Runs rendered together: one report folder, or a merge of several."""

    name: str
    kind: str
    runs: list[RunRecord]
    created_at: str = field(default_factory=now_iso)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return bool(self.runs) and all(run.complete for run in self.runs)

    @property
    def ok(self) -> bool:
        """Complete, every backend reached, and no check failed."""
        return self.complete and all(not run.failed and not run.unreachable for run in self.runs)

    def to_json(self) -> dict[str, Any]:
        totals: Counter[str] = Counter()
        tally: Counter[str] = Counter({column: 0 for column in TALLY})
        for run in self.runs:
            totals.update(run.counts())
            tally.update(run.tally())
        return {
            "format": FORMAT,
            "name": self.name,
            "kind": self.kind,
            "created_at": self.created_at,
            "complete": self.complete,
            "ok": self.ok,
            "sources": self.sources,
            "notes": self.notes,
            "totals": {k: totals[k] for k in sorted(totals)},
            "tally": {column: tally[column] for column in TALLY},
            "runs": [run.to_json() for run in self.runs],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "") -> Report:
        return cls(
            name=str(data.get("name", "")), kind=str(data.get("kind", "run")),
            runs=[RunRecord.from_json(r, source) for r in data.get("runs", [])],
            created_at=str(data.get("created_at", "")), sources=[str(s) for s in data.get("sources", [])],
            notes=[str(n) for n in data.get("notes", [])],
        )
