"""Writing a report folder while a run goes: a durable journal first, rendered files at the end.

Guarantees:

* every record handed to the writer (run start, check result, series points,
  timeline event, run end) is appended to ``results.jsonl`` and fsynced
  before the call returns, so a crash or a kill later in the run loses
  nothing recorded so far: ``kit report FOLDER`` renders it, marked
  incomplete;
* ``results.json``, ``summary.md``, ``junit.xml`` and ``index.html`` are each
  replaced atomically (temp file + rename): a reader sees a whole file or none;
* nothing written holds a password (every record passes a :class:`Scrubber`).

A stress run adds per-worker timelines with :meth:`ReportWriter.add_event` /
:meth:`ReportWriter.add_events` and latency / throughput series with
:meth:`ReportWriter.add_points`, as it goes; the HTML plots whatever series
and events the runs provide. Each call is one fsynced line, so a run that
records thousands of events should batch them (say, once a second).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from kit.discovery import redact
from kit.report._atomic import append_line
from kit.report.meta import Scrubber, environment_versions, reproduce_command
from kit.report.model import FAILED, JOURNAL, TimelineEvent, now_iso
from kit.report.results import CheckResult

__all__ = ["JOURNAL_FORMAT", "ReportWriter", "new_folder", "safe_name"]

JOURNAL_FORMAT = "kit-report-journal/1"

_STOPPED = {2: "interrupted", 3: "internal error", 4: "usage error"}
"""pytest exit codes after which not every selected check ran."""


def safe_name(text: str) -> str:
    """``text`` as a folder-name fragment (``pkg.mod:factory`` -> ``pkg.mod_factory``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._")[-60:] or "run"


def new_folder(root: Path, name: str) -> Path:
    """A new, empty folder ``<root>/<UTC timestamp>-<name>`` (``-2``, ``-3``... if that exists)."""
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = f"{stamp}-{safe_name(name)}"
    for n in range(1, 1000):
        folder = root / (base if n == 1 else f"{base}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"could not make a fresh report folder under {root}: clean it up")  # pragma: no cover


class ReportWriter:
    """One report folder, written as results arrive; see the module docstring for the guarantees."""

    def __init__(self, folder: Path, name: str, kind: str = "run", scrubber: Scrubber | None = None) -> None:
        self.folder = folder
        self.name = name
        self.kind = kind
        self.scrub = scrubber or Scrubber.for_urls(())
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, Any]] = {}
        self._ended: set[str] = set()
        self._current: str | None = None
        self._finished = False
        folder.mkdir(parents=True, exist_ok=True)
        self._journal: IO[str] | None = open(folder / JOURNAL, "a", encoding="utf-8")  # noqa: SIM115
        self._write({"type": "report", "format": JOURNAL_FORMAT, "name": name, "kind": kind, "created_at": now_iso(),
                     "pid": os.getpid()})

    @classmethod
    def create(cls, root: Path | str, name: str, kind: str = "run", urls: Iterable[str | None] = ()) -> ReportWriter:
        """A writer on a fresh folder ``<root>/<UTC timestamp>-<name>/``, scrubbing the passwords of ``urls``."""
        return cls(new_folder(Path(root), name), name, kind, Scrubber.for_urls(urls))

    # -- recording -----------------------------------------------------------
    def _write(self, record: dict[str, Any]) -> None:
        with self._lock:
            if self._journal is None:
                raise RuntimeError(f"report {self.folder} is already finished: start a new ReportWriter")
            append_line(self._journal, self.scrub(record))

    def start_run(
        self, *, backend: str, spec: str | None = None, label: str | None = None, tool: str = "check",
        backend_obj: object | None = None, url: str | None = None, seed: int | None = None,
        profile: str | None = None, keyword: str | None = None, command: str = "", extra: dict[str, Any] | None = None,
    ) -> str:
        """Record that a run starts; returns its id (the current run for later calls)."""
        label = label or backend
        run_id = safe_name(label)
        while run_id in self._runs:
            run_id += "+"
        description = ""
        if backend_obj is not None and hasattr(backend_obj, "describe"):
            try:
                description = str(backend_obj.describe())
            except Exception as exc:  # noqa: BLE001 - a failing describe() must not cost the report
                description = f"(describe() failed: {type(exc).__name__})"
        meta: dict[str, Any] = {
            "backend": backend, "spec": spec or backend, "label": label, "tool": tool,
            "description": description, "url": redact(url) if url else None, "seed": seed, "profile": profile, "keyword": keyword,
            "command": command, "started_at": now_iso(),
            "versions": environment_versions(backend_obj, backend), **(extra or {}),
        }
        self._runs[run_id] = meta
        self._current = run_id
        self._write({"type": "run", "run": run_id, "meta": meta})
        return run_id

    def _run(self, run: str | None) -> str:
        run_id = run or self._current
        if run_id is None or run_id not in self._runs:
            raise RuntimeError("no run started: call start_run() before recording results")
        return run_id

    def add(self, result: CheckResult, run: str | None = None) -> None:
        """Record one check result (durable when this returns)."""
        run_id = self._run(run)
        meta = self._runs[run_id]
        record = result.to_json()
        if record.get("outcome") in FAILED:
            record["reproduce"] = reproduce_command(record, str(meta["spec"]), meta.get("url"), meta.get("seed"),
                                                    meta.get("profile"))
        self._write({"type": "result", "run": run_id, "result": record})

    def add_points(
        self, series: str, points: Iterable[tuple[float, float]], *, kind: str, unit: str, x_unit: str = "s",
        run: str | None = None,
    ) -> None:
        """Append points to a series (``kind`` ``latency`` or ``throughput`` for the stress plots)."""
        self._write({"type": "series", "run": self._run(run), "series": {
            "name": series, "kind": kind, "unit": unit, "x_unit": x_unit, "points": [[x, y] for x, y in points]}})

    def add_event(
        self, worker: str, start: float, kind: str, end: float | None = None, label: str = "", run: str | None = None,
    ) -> None:
        """Record a worker timeline event (claim, commit, fault injected, ...), in seconds since the run began."""
        self._write({"type": "event", "run": self._run(run), "event": {
            "worker": worker, "start": start, "end": end, "kind": kind, "label": label}})

    def add_events(self, events: Iterable[TimelineEvent], run: str | None = None) -> None:
        """Record many timeline events in one durable write (a stress run batches, e.g. once a second)."""
        batch = [e.to_json() for e in events]
        if batch:
            self._write({"type": "events", "run": self._run(run), "events": batch})

    def end_run(
        self, *, duration_s: float, exit_code: int = 0, collection_errors: Iterable[str] = (),
        unreachable: str | None = None, aborted: str | None = None, run: str | None = None,
    ) -> None:
        """Record that a run reached its end (what makes it complete, unless ``aborted`` says why not)."""
        run_id = self._run(run)
        self._ended.add(run_id)
        end: dict[str, Any] = {
            "finished_at": now_iso(), "duration_s": duration_s, "exit_code": exit_code,
            "collection_errors": list(collection_errors), "unreachable": unreachable}
        if aborted:
            end["aborted"] = aborted
        self._write({"type": "end", "run": run_id, "end": end})

    def end_suite(self, suite: object, run: str | None = None) -> None:
        """:meth:`end_run` from a :class:`kit.runner.SuiteRun`.

        A pytest session that was interrupted (Ctrl-C), hit an internal error
        or was misused did not run every check: the run is marked incomplete.
        """
        code = int(getattr(suite, "exit_code", 0))
        stopped = f"pytest stopped the session early: {_STOPPED[code]} (exit {code})" if code in _STOPPED else None
        self.end_run(duration_s=float(getattr(suite, "duration_s", 0.0)), exit_code=code,
                     collection_errors=list(getattr(suite, "collection_errors", [])), aborted=stopped, run=run)

    # -- closing -------------------------------------------------------------
    def abort(self, reason: str) -> Path:
        """Mark every run not yet ended as incomplete with ``reason``, then render what was recorded."""
        for run_id in self._runs:
            if run_id not in self._ended:
                self._ended.add(run_id)
                self._write({"type": "end", "run": run_id, "end": {"finished_at": now_iso(), "aborted": reason}})
        return self.finish()

    def finish(self) -> Path:
        """Close the journal and render results.json, summary.md, junit.xml and index.html; return the folder."""
        from kit.report.load import read_journal
        from kit.report.render import render_all

        with self._lock:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
        if not self._finished:
            self._finished = True
            render_all(read_journal(self.folder), self.folder)
        return self.folder

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._finished:
            return
        if exc is not None:
            self.abort(f"the kit stopped: {type(exc).__name__}: {exc}".rstrip(": "))
        else:
            self.finish()
