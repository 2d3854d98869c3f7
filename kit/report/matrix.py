"""The matrices every rendering shares: contract area x run, and check x run.

A cell's status is ``fail`` if any check in it failed or errored, else
``pass`` if any passed, else ``skip`` if every check was skipped or is an
expected failure; a run with no result for the area shows ``not-reachable``
(its backend could not be reached), ``not-run`` (the run stopped first) or
``none`` (not selected, e.g. by ``-k``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kit.report.model import FAILED, NOT_PROMISED, Report, RunRecord, result_key

__all__ = ["Cell", "CheckRow", "area_matrix", "areas", "check_rows", "outcome_status"]


def outcome_status(outcome: str) -> str:
    """``pass``, ``fail`` or ``skip`` for a check outcome (``xfailed`` is a typed skip)."""
    if outcome in FAILED:
        return "fail"
    return "pass" if outcome == "passed" else "skip"


@dataclass(frozen=True)
class Cell:
    status: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    reasons: tuple[str, ...] = ()
    """Typed skip reasons (``unsupported: ...``), most frequent first."""
    not_promised: int = 0
    """How many of the skipped checks were skipped as not promised."""

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped

    def text(self) -> str:
        """Short cell text for Markdown and HTML: ``pass 9``, ``FAIL 2/27``, ``skip 1 (unsupported)``."""
        if self.status == "fail":
            return f"FAIL {self.failed}/{self.total}"
        other = self.skipped - self.not_promised
        if self.status == "pass":
            return (f"pass {self.passed}" + (f" · not promised {self.not_promised}" if self.not_promised else "")
                    + (f" · skip {other}" if other else ""))
        if self.status == "skip" and self.not_promised == self.skipped:
            return f"not promised {self.skipped}"
        if self.status == "skip":
            kinds = sorted({r.split(":", 1)[0] for r in self.reasons})
            return f"skip {self.skipped}" + (f" ({', '.join(kinds)})" if kinds else "")
        return {"not-reachable": "not reachable", "not-run": "not run", "none": "—"}.get(self.status, self.status)


def _reason(result: dict[str, Any]) -> str:
    kind = result.get("skip_kind") or ("expected-failure" if result.get("outcome") == "xfailed" else "unsupported")
    message = str(result.get("message", ""))
    return message if message.startswith(f"{kind}:") else f"{kind}: {message}"


def cell_of(run: RunRecord, results: list[dict[str, Any]]) -> Cell:
    if not results:
        if run.unreachable:
            return Cell("not-reachable", reasons=(f"not-reachable: {run.unreachable}",))
        return Cell("none" if run.complete else "not-run")
    counts = Counter(outcome_status(str(r.get("outcome"))) for r in results)
    reasons = Counter(_reason(r) for r in results if outcome_status(str(r.get("outcome"))) == "skip")
    status = "fail" if counts["fail"] else "pass" if counts["pass"] else "skip"
    not_promised = sum(1 for r in results if r.get("skip_kind") == NOT_PROMISED and outcome_status(str(r.get("outcome"))) == "skip")
    return Cell(status, counts["pass"], counts["fail"], counts["skip"], tuple(r for r, _ in reasons.most_common()),
                not_promised)


def areas(report: Report) -> list[str]:
    return sorted({str(r.get("area", "other")) for run in report.runs for r in run.results})


def area_matrix(report: Report) -> list[tuple[str, list[Cell]]]:
    """Rows of (area, one cell per run in report order)."""
    rows = []
    for area in areas(report):
        rows.append((area, [cell_of(run, [r for r in run.results if r.get("area") == area]) for run in report.runs]))
    return rows


@dataclass
class CheckRow:
    """One check across runs: its guarantee and each run's result (None: not run there)."""

    key: str
    area: str
    guarantee: str
    results: list[dict[str, Any] | None] = field(default_factory=list)

    def statuses(self) -> list[str | None]:
        return [outcome_status(str(r.get("outcome"))) if r else None for r in self.results]

    @property
    def differs(self) -> bool:
        """Whether runs that ran this check disagree (one passes where another fails or skips)."""
        return len({s for s in self.statuses() if s is not None}) > 1


def check_rows(report: Report) -> list[CheckRow]:
    """Every check of every run, by area then id, with each run's result."""
    rows: dict[str, CheckRow] = {}
    for index, run in enumerate(report.runs):
        for result in run.results:
            key = result_key(result)
            row = rows.get(key)
            if row is None:
                row = rows[key] = CheckRow(key, str(result.get("area", "other")), str(result.get("guarantee", "")),
                                           [None] * len(report.runs))
            row.guarantee = row.guarantee or str(result.get("guarantee", ""))
            previous = row.results[index]
            if previous is None or outcome_status(str(result.get("outcome"))) == "fail":
                row.results[index] = result  # a teardown error after a pass counts as the outcome
    return sorted(rows.values(), key=lambda r: (r.area, r.key))
