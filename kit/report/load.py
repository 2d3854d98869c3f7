"""Reading report folders back (whole or partial) and merging several into one.

Guarantees: a folder whose run crashed still loads from its journal, every
result recorded before the crash included and the run marked incomplete; a
torn last journal line (a write cut by the crash) is dropped with a note;
anything that is not a report is a :class:`ReportInputError` naming the fix.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.contract.errors import ConfigurationError
from kit.report.model import FORMAT, JOURNAL, RESULTS, Report, RunRecord, Series, TimelineEvent

__all__ = ["ReportInputError", "load_report", "merge_reports", "read_journal"]


class ReportInputError(ConfigurationError):
    """A path given as a report is not one; the message names the fix."""


def _run_of(runs: dict[str, RunRecord], record: dict[str, Any]) -> RunRecord:
    run_id = str(record.get("run", ""))
    if run_id not in runs:  # a record whose run line was lost: keep it under a placeholder run
        runs[run_id] = RunRecord(id=run_id, meta={"label": run_id or "unknown", "backend": "?"})
    return runs[run_id]


def read_journal(folder: Path) -> Report:
    """The report recorded in ``folder/results.jsonl``, however far the run got."""
    path = folder / JOURNAL
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError as exc:
        raise ReportInputError(f"cannot read {path} ({exc.strerror}): check the path and its permissions") from None
    header: dict[str, Any] = {}
    runs: dict[str, RunRecord] = {}
    series: dict[tuple[str, str], Series] = {}
    notes: list[str] = []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            if number == last:
                notes.append("the last journal line was cut short (the run stopped while writing it): dropped")
            else:
                notes.append(f"journal line {number + 1} is unreadable: skipped")
            continue
        kind = record.get("type")
        if kind == "report":
            header = record
        elif kind == "run":
            run_id = str(record.get("run", ""))
            previous = runs.get(run_id)
            runs[run_id] = RunRecord(id=run_id, meta=dict(record.get("meta") or {}), source=str(folder))
            if previous is not None:  # records that arrived before their run line (should not happen)
                runs[run_id].results.extend(previous.results)
        elif kind == "result" and isinstance(record.get("result"), dict):
            _run_of(runs, record).results.append(record["result"])
        elif kind == "series" and isinstance(record.get("series"), dict):
            data = record["series"]
            run = _run_of(runs, record)
            key = (run.id, str(data.get("name")))
            if key not in series:
                series[key] = Series.from_json({**data, "points": []})
                run.series.append(series[key])
            series[key].points.extend((float(x), float(y)) for x, y in data.get("points", []))
        elif kind == "event" and isinstance(record.get("event"), dict):
            _run_of(runs, record).events.append(TimelineEvent.from_json(record["event"]))
        elif kind == "events" and isinstance(record.get("events"), list):
            _run_of(runs, record).events.extend(TimelineEvent.from_json(e) for e in record["events"])
        elif kind == "end":
            _run_of(runs, record).end = dict(record.get("end") or {})
    if not header and not runs:
        raise ReportInputError(f"{path} holds no kit records: give a folder that a kit run wrote")
    for run in runs.values():
        run.source = str(folder)
    return Report(name=str(header.get("name") or folder.name), kind=str(header.get("kind") or "run"),
                  runs=list(runs.values()), created_at=str(header.get("created_at", "")), sources=[str(folder)],
                  notes=notes)


def _read_results(path: Path) -> Report:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportInputError(f"{path} is not readable JSON ({exc}): give a report folder kit wrote") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ReportInputError(f"{path} is not a kit report (format {found!r}, expected {FORMAT!r}): "
                               "give a folder that kit check or kit report wrote")
    report = Report.from_json(data, str(path.parent))
    report.sources = report.sources or [str(path.parent)]
    return report


def load_report(path: Path | str) -> Report:
    """The report in folder ``path`` (its journal if it has one, else its results.json)."""
    folder = Path(path)
    if folder.is_file() and folder.name in (JOURNAL, RESULTS, "index.html", "summary.md", "junit.xml"):
        folder = folder.parent
    if not folder.exists():
        raise ReportInputError(f"no report at {folder}: give a folder that kit check wrote, like reports/<timestamp>-<backend>")
    if not folder.is_dir():
        raise ReportInputError(f"{folder} is a file, not a report folder: give the folder that holds results.json")
    if (folder / JOURNAL).is_file():
        return read_journal(folder)
    if (folder / RESULTS).is_file():
        return _read_results(folder / RESULTS)
    inner = sorted(p.name for p in folder.iterdir() if (p / JOURNAL).is_file() or (p / RESULTS).is_file())
    if inner:
        raise ReportInputError(
            f"{folder} holds {len(inner)} report folders, not a report: pass them instead, e.g. kit report {folder}/*"
        )
    raise ReportInputError(f"{folder} is not a kit report (no {JOURNAL} or {RESULTS}): give a folder that kit check wrote")


def merge_reports(reports: Sequence[Report], name: str = "merge") -> Report:
    """One report holding every run of ``reports``; the shards of one sharded run (``kit check --shard``)
    merged into one run (:mod:`kit.report.shards`); labels made unique (``sqlite``, ``sqlite (2)``, ...)."""
    from kit.report.shards import merge_shards

    merged = Report(name=name, kind="merge", runs=[])
    seen_labels: set[str] = set()
    seen_ids: set[str] = set()
    for report in reports:
        merged.sources.extend(report.sources)
        merged.notes.extend(f"{', '.join(report.sources) or report.name}: {note}" for note in report.notes)
    runs, notes = merge_shards([run for report in reports for run in report.runs])
    merged.notes.extend(notes)
    for run in runs:
        copy = RunRecord(id=run.id, meta=dict(run.meta), results=list(run.results), series=list(run.series),
                         events=list(run.events), end=run.end, source=run.source)
        label, n = copy.label, 1
        while label in seen_labels:
            n += 1
            label = f"{copy.label} ({n})"
        copy.meta["label"] = label
        seen_labels.add(label)
        run_id, n = copy.id, 1
        while run_id in seen_ids:
            n += 1
            run_id = f"{copy.id}-{n}"
        copy.id = run_id
        seen_ids.add(run_id)
        merged.runs.append(copy)
    return merged
