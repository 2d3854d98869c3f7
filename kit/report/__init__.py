"""Results and reports of kit runs.

A run writes ``reports/<timestamp>-<backend>/``: ``results.jsonl`` (the
durable journal, appended as results arrive), then ``results.json``,
``summary.md``, ``junit.xml`` and ``index.html``. ``kit report DIR...``
re-renders a folder (a crashed run's too, marked incomplete) or merges
several into one matrix.
"""

from kit.report.load import ReportInputError, load_report, merge_reports
from kit.report.model import Report, RunRecord, Series, TimelineEvent
from kit.report.render import render_all
from kit.report.results import CheckResult, ResultCollector
from kit.report.writer import ReportWriter

__all__ = [
    "CheckResult",
    "Report",
    "ReportInputError",
    "ReportWriter",
    "ResultCollector",
    "RunRecord",
    "Series",
    "TimelineEvent",
    "load_report",
    "merge_reports",
    "render_all",
]
