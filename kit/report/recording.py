"""The report of a ``kit check`` run: opened before the first check, finished (or aborted) at the end.

Guarantees: with a report folder open, each check result is durable on disk
as soon as it arrives; an exception or interrupt during the run still leaves
rendered files marked incomplete; no URL is written with its password. A
backend that cannot be reached writes no report: ``kit check`` stays one line
naming the fix, exit 3.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kit.contract.errors import ConfigurationError
from kit.discovery import redact
from kit.report.results import CheckResult
from kit.report.writer import ReportWriter

__all__ = ["CheckReport", "check_command"]


def check_command(args: argparse.Namespace) -> str:
    """The ``kit check`` command line that repeats this run (URL redacted)."""
    parts = ["kit", "check", shlex.quote(str(args.backend))]
    if getattr(args, "url", None):
        parts += ["--url", shlex.quote(redact(args.url))]
    if getattr(args, "keyword", None):
        parts += ["-k", shlex.quote(args.keyword)]
    if getattr(args, "seed", None) is not None:
        parts += ["--seed", str(args.seed)]
    if getattr(args, "profile", None):
        parts += ["--profile", str(args.profile)]
    if getattr(args, "workers", 1) > 1:
        parts += ["--workers", str(args.workers)]
    if getattr(args, "shard", None) not in (None, "1/1"):
        parts += ["--shard", str(args.shard)]
    return " ".join(parts)


def _swarm_meta(args: argparse.Namespace) -> dict[str, object]:
    """The shard and workers of a run, so ``kit report`` can merge a CI matrix's shards into one run."""
    if not hasattr(args, "workers"):
        return {}
    example_db = getattr(args, "example_db", None)
    return {"shard": str(getattr(args, "shard", None) or "1/1"), "workers": int(args.workers),
            "example_db": redact(str(example_db)) if example_db else None}


def _open(args: argparse.Namespace) -> ReportWriter:
    root = Path(getattr(args, "report_dir", None) or "reports")
    try:
        return ReportWriter.create(root, str(args.backend), urls=[getattr(args, "url", None)])
    except OSError as exc:
        raise ConfigurationError(
            f"cannot write a report under {root} ({exc.strerror or exc}): pass --report-dir DIR, or --no-report"
        ) from None


def _start(writer: ReportWriter, args: argparse.Namespace, backend: object | None) -> None:
    url = getattr(args, "url", None)
    writer.start_run(
        backend=str(getattr(backend, "name", None) or args.backend), spec=str(args.backend), label=str(args.backend),
        tool="check", backend_obj=backend, url=redact(url) if url else None, seed=getattr(args, "seed", None),
        profile=getattr(args, "profile", None), keyword=getattr(args, "keyword", None), command=check_command(args),
        extra=_swarm_meta(args),
    )


class CheckReport:
    """The report of one ``kit check`` run; every method is a no-op with ``--no-report``.

    The folder is made by :meth:`start`, after the backend resolved, so bad
    input leaves no empty report behind.
    """

    def __init__(self, console: Console, args: argparse.Namespace) -> None:
        self.console = console
        self.args = args
        self.enabled = not getattr(args, "no_report", False)
        self.writer: ReportWriter | None = None

    @property
    def folder(self) -> Path | None:
        return self.writer.folder if self.writer is not None else None

    def start(self, backend: object) -> None:
        """Open ``<report-dir>/<timestamp>-<backend>/`` and record the run's meta and versions."""
        if self.enabled and self.writer is None:
            self.writer = _open(self.args)
            _start(self.writer, self.args, backend)

    def add(self, result: object) -> None:
        """Record one result as it arrives (durable when this returns).

        A report that cannot be written (disk full, folder removed) never
        stops the checks: the report is dropped with one warning.
        """
        if self.writer is not None and isinstance(result, CheckResult):
            try:
                self.writer.add(result)
            except OSError as exc:
                self.console.print(f"[bold yellow]report dropped:[/] cannot write {escape(str(self.writer.folder))} "
                                   f"({escape(exc.strerror or str(exc))}); the checks go on", soft_wrap=True)
                self.writer = None

    def finish(self, suite: object) -> Path | None:
        """Record the end of the suite, render the files and print where they are."""
        if self.writer is None:
            return None
        self.writer.end_suite(suite)
        return self._finish()

    def _finish(self) -> Path:
        assert self.writer is not None
        folder = self.writer.finish()
        self.console.print(f"report: {escape(str(folder / 'index.html'))}", soft_wrap=True)
        return folder

    def abort(self, exc: BaseException) -> Path | None:
        """Render what was recorded, marked incomplete because of ``exc``; never raises."""
        if self.writer is None:
            return None
        try:
            folder = self.writer.abort(f"the kit stopped: {type(exc).__name__}: {exc}".rstrip(": "))
        except Exception:  # noqa: BLE001 - the original error matters more; the journal is already on disk
            return None
        self.console.print(f"partial report (incomplete): {escape(str(folder / 'index.html'))}", soft_wrap=True)
        return folder
