"""Results and reports of kit runs."""

from kit.report.results import CheckResult, ResultCollector

__all__ = ["CheckResult", "ResultCollector"]
