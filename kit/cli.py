"""``kit``: the command line.

Bad input (an unknown backend, a bad import path, a malformed or unreachable
URL) is one line naming the fix and a non-zero exit, never a traceback:
2 for bad input, 3 for a backend that cannot be reached, 1 for failed checks.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kit import __version__
from kit.contract.errors import BackendUnavailable, ConfigurationError
from kit.discovery import redact

__all__ = ["main"]

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNREACHABLE = 1, 2, 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kit",
        description="Conformance and fault-injection kit for durable-workflow storage layers.",
    )
    parser.add_argument("--version", action="version", version=f"kit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="run the conformance suite against a backend")
    check.add_argument(
        "backend", nargs="?", default="sqlite",
        help="memory, sqlite (default), postgres, mysql, mssql, or package.module:factory",
    )
    check.add_argument("--url", help="SQLAlchemy URL of the server (else KIT_<BACKEND>_URL, else discovery)")
    check.add_argument("-k", dest="keyword", help="only checks whose name matches this pytest -k expression")
    check.add_argument("--no-progress", action="store_true", help="no progress bar (CI logs)")

    sub.add_parser("backends", help="list backends and whether each is reachable here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console(highlight=False)
    try:
        if args.command == "check":
            return _check(console, args)
        if args.command == "backends":
            return _backends(console)
    except ConfigurationError as exc:
        console.print(f"[bold red]kit: error:[/] {escape(str(exc))}", soft_wrap=True)
        return EXIT_BAD_INPUT
    except BackendUnavailable as exc:
        console.print(f"[bold red]kit: {escape(exc.backend)} is not reachable:[/] {escape(exc.reason)}. {escape(exc.fix)}",
                      soft_wrap=True)
        return EXIT_UNREACHABLE
    return EXIT_BAD_INPUT


def _check(console: Console, args: argparse.Namespace) -> int:
    from kit.backends import resolve
    from kit.runner import run_suite

    backend = resolve(args.backend, args.url)
    try:
        console.print(f"kit {__version__}: conformance check of [bold]{escape(args.backend)}[/] ({escape(backend.describe())})")
        progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True, disable=args.no_progress,
        )
        with progress:
            task = progress.add_task("checking", total=None)

            def collected(n: int) -> None:
                progress.update(task, total=n)

            def advanced(result: object) -> None:
                progress.update(task, advance=1, description=getattr(result, "area", "checking"))

            run = run_suite(backend, keyword=args.keyword, on_result=advanced, on_collected=collected)
    finally:
        backend.close()
    _print_summary(console, run, args)
    return 0 if run.ok else EXIT_FAILED


def _print_summary(console: Console, run: object, args: argparse.Namespace) -> None:
    from kit.runner import SuiteRun

    assert isinstance(run, SuiteRun)
    for error in run.collection_errors:
        console.print(f"[bold red]collection error:[/] {escape(error)}")
    by_area: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: dict[str, set[str]] = defaultdict(set)
    for r in run.results:
        by_area[r.area][r.outcome] += 1
        if r.outcome in ("skipped", "xfailed"):
            reasons[r.area].add(r.message)
    table = Table(title=f"{run.backend}: {len(run.results)} checks in {run.duration_s:.1f} s")
    for column in ("area", "passed", "failed", "skipped", "why skipped"):
        table.add_column(column, justify="right" if column in ("passed", "failed", "skipped") else "left")
    for area in sorted(by_area):
        c = by_area[area]
        failed = c["failed"] + c["error"]
        table.add_row(
            area,
            str(c["passed"]),
            f"[red]{failed}[/]" if failed else "0",
            str(c["skipped"] + c["xfailed"]),
            escape("; ".join(sorted(reasons[area]))[:120]),
        )
    console.print(table)
    url = f" --url '{redact(args.url)}'" if args.url else ""
    for r in run.failed:
        name = r.nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        console.print(f"[bold red]FAILED[/] {escape(r.check)}")
        if r.guarantee:
            console.print(f"  guarantee: {escape(r.guarantee)}", soft_wrap=True)
        console.print(f"  error: {escape(r.message)}", soft_wrap=True)
        console.print(f"  reproduce: kit check {escape(args.backend)}{escape(url)} -k {escape(name)}", soft_wrap=True)
    totals = Counter(r.outcome for r in run.results)
    verdict = "[bold green]PASS[/]" if run.ok else "[bold red]FAIL[/]"
    console.print(
        f"{verdict}: {totals['passed']} passed, {totals['failed'] + totals['error']} failed, "
        f"{totals['skipped'] + totals['xfailed']} skipped"
    )


def _backends(console: Console) -> int:
    from kit.backends import BUILTIN, resolve

    table = Table(title="backends")
    for column in ("name", "what", "reachable", "details"):
        table.add_column(column)
    for spec in BUILTIN.values():
        try:
            backend = resolve(spec.name)
        except BackendUnavailable as exc:
            table.add_row(spec.name, spec.summary, "[red]no[/]", escape(f"{exc.reason}. {exc.fix}"))
            continue
        except ConfigurationError as exc:
            table.add_row(spec.name, spec.summary, "[red]no[/]", escape(str(exc)))
            continue
        try:
            table.add_row(spec.name, spec.summary, "[green]yes[/]", escape(backend.describe()))
        finally:
            backend.close()
    console.print(table)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
