"""Check results as plain records, collected from a pytest run of the suite."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

from kit.contract.capabilities import SkipKind

__all__ = ["CheckResult", "ResultCollector", "skip_kind"]


@dataclass
class CheckResult:
    """One check's outcome: ``passed``, ``failed``, ``skipped``, ``xfailed`` or ``error``."""

    check: str
    area: str
    nodeid: str
    outcome: str
    duration_s: float = 0.0
    guarantee: str = ""
    message: str = ""
    skip_kind: str | None = None
    details: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def skip_kind(message: str) -> str:
    """The typed kind of a skip or expected failure, from the reason's prefix."""
    for kind in SkipKind:
        if message.startswith(kind.value + ":") or f" {kind.value}:" in message[:40]:
            return kind.value
    return SkipKind.UNSUPPORTED.value


def _check_of(nodeid: str, props: dict[str, Any]) -> tuple[str, str]:
    check = props.get("kit_check") or nodeid.rsplit("::", 1)[-1]
    area = check.split(".", 1)[0] if "." in check else "other"
    return check, area


def _message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0][:400] if crash.message else ""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2])
    return str(report.longrepr or "")[:400]


@dataclass
class ResultCollector:
    """A pytest plugin object that turns reports into :class:`CheckResult` records."""

    on_result: Callable[[CheckResult], None] | None = None
    on_collected: Callable[[int], None] | None = None
    results: list[CheckResult] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    collection_errors: list[str] = field(default_factory=list)
    _setup_failed: set[str] = field(default_factory=set)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.on_collected is not None:
            self.on_collected(len(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        """Under pytest-xdist the controller collects nothing itself: the first worker's count stands in."""
        if self.on_collected is not None and not getattr(self, "_xdist_counted", False):
            self._xdist_counted = True
            self.on_collected(len(ids))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collection_errors.append(f"{report.nodeid}: {report.longreprtext[:2000]}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props: dict[str, Any] = dict(report.user_properties)
        check, area = _check_of(report.nodeid, props)
        result: CheckResult | None = None
        wasxfail = getattr(report, "wasxfail", None)
        if report.when == "setup":
            if report.skipped:
                reason = _message(report).removeprefix("Skipped: ")
                result = CheckResult(check, area, report.nodeid, "skipped", report.duration,
                                     props.get("kit_guarantee", ""), reason, skip_kind(reason))
            elif report.failed:
                self._setup_failed.add(report.nodeid)
                result = CheckResult(check, area, report.nodeid, "error", report.duration,
                                     props.get("kit_guarantee", ""), _message(report), None, report.longreprtext)
        elif report.when == "call":
            if wasxfail is not None and report.skipped:
                result = CheckResult(check, area, report.nodeid, "xfailed", report.duration,
                                     props.get("kit_guarantee", ""), str(wasxfail), SkipKind.EXPECTED_FAILURE.value)
            elif report.failed:
                details = report.longreprtext
                message = _message(report)
                if wasxfail is None and "XPASS(strict)" in details:
                    message = f"unexpected success: declared as an expected failure but passed ({message})"
                result = CheckResult(check, area, report.nodeid, "failed", report.duration,
                                     props.get("kit_guarantee", ""), message, None, details)
            elif report.skipped:
                reason = _message(report).removeprefix("Skipped: ")
                result = CheckResult(check, area, report.nodeid, "skipped", report.duration,
                                     props.get("kit_guarantee", ""), reason, skip_kind(reason))
            else:
                result = CheckResult(check, area, report.nodeid, "passed", report.duration,
                                     props.get("kit_guarantee", ""))
        elif report.when == "teardown" and report.failed and report.nodeid not in self._setup_failed:
            result = CheckResult(check, area, report.nodeid, "error", report.duration,
                                 props.get("kit_guarantee", ""), _message(report), None, report.longreprtext)
        if result is not None:
            self.results.append(result)
            if self.on_result is not None:
                self.on_result(result)
