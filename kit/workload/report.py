"""A stress run's report folder: the kit's report (:mod:`kit.report`) plus the history and verdicts.

``reports/<timestamp>-<backend>-stress/`` holds what every kit report holds
(``results.jsonl`` journal, ``results.json``, ``summary.md``, ``junit.xml``,
``index.html``: one check per invariant, per-second throughput and latency
series, per-worker timelines; the run's label and settings name its mode,
``deterministic`` or ``free``) and, beside it, ``history.jsonl`` (every
operation), ``plan.json`` (the nemesis schedule) and ``verdicts.json`` (each
verdict with its witness); a deterministic run adds ``schedule.json`` (its
participants and step count) and, on a violation, ``bundle.json`` (what
``kit replay`` needs).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.checkers.model import GUARANTEES, Status, Verdict
from kit.discovery import redact
from kit.report.results import CheckResult
from kit.report.writer import ReportWriter
from kit.workload.config import StressConfig
from kit.workload.telemetry import Tracker

__all__ = ["StressReport", "verdict_result"]

_OUTCOME = {Status.VALID: "passed", Status.INVALID: "failed", Status.UNKNOWN: "skipped"}


class _StressWriter(ReportWriter):
    """A report writer whose failed checks say how to repeat the *stress* run (not ``kit check -k``)."""

    reproduce = ""

    def add(self, result: CheckResult, run: str | None = None) -> None:
        record = result.to_json()
        if record.get("outcome") == "failed":
            record["reproduce"] = self.reproduce
        self._write({"type": "result", "run": self._run(run), "result": record})


def verdict_result(verdict: Verdict) -> CheckResult:
    """A verdict as a report check (valid: passed, invalid: failed, unknown: skipped)."""
    details = json.dumps({"witness": list(verdict.witness), "checked": verdict.checked, "more": verdict.more},
                         indent=1, default=str)
    return CheckResult(
        check=f"stress.invariant_{verdict.invariant:02d}_{verdict.name}", area="stress",
        nodeid=f"kit stress::invariant {verdict.invariant} {verdict.name}", outcome=_OUTCOME[verdict.status],
        guarantee=GUARANTEES.get(verdict.invariant, ""), message=verdict.explanation, details=details,
    )


class StressReport:
    """One stress run's folder (see the module docstring)."""

    def __init__(self, writer: _StressWriter) -> None:
        self.writer = writer

    @classmethod
    def open(cls, root: Path | str, backend: Any, config: StressConfig, spec: str, url: str | None,
             command: str) -> StressReport:
        writer = _StressWriter.create(root, f"{getattr(backend, 'name', spec)}-stress", kind="stress", urls=[url])
        assert isinstance(writer, _StressWriter)
        writer.reproduce = command
        writer.start_run(backend=str(getattr(backend, "name", spec)), spec=spec, label=f"{spec} stress ({config.mode} mode)", tool="stress",
                         backend_obj=backend, url=redact(url) if url else None, seed=config.seed, command=command,
                         extra={"stress": config.to_json()})
        return cls(writer)

    @property
    def folder(self) -> Path:
        return self.writer.folder

    def write_json(self, name: str, data: Any) -> Path:
        path = self.folder / name
        path.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
        return path

    def flush(self, tracker: Tracker, before_second: int) -> None:
        """Hand the tracker's timeline events and finished seconds of series to the report."""
        events, throughput, latency = tracker.take_report(before_second)
        self.writer.add_events(events)
        for name, points in throughput.items():
            self.writer.add_points(name, points, kind="throughput", unit="ops/s")
        for name, points in latency.items():
            self.writer.add_points(name, points, kind="latency", unit="ms")

    def finish(self, verdicts: Sequence[Verdict], duration_s: float, exit_code: int) -> Path:
        for verdict in verdicts:
            self.writer.add(verdict_result(verdict))
        self.write_json("verdicts.json", [v.to_json() for v in verdicts])
        self.writer.end_run(duration_s=duration_s, exit_code=exit_code)
        return self.writer.finish()

    def abort(self, reason: str) -> Path:
        return self.writer.abort(reason)
