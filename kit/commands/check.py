"""``kit check``: the conformance suite (and the fault machines) against one backend."""

from __future__ import annotations

import argparse
import os
from collections import Counter, defaultdict

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kit import __version__
from kit.contract.errors import ConfigurationError
from kit.discovery import redact

EXIT_INTERRUPTED = 130
"""Stopped by Ctrl-C or SIGTERM: no verdict (the shell's code for SIGINT)."""

NAME = "check"
HELP = "run the conformance suite against a backend"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kit.seeds import seed_type

    parser.add_argument(
        "backend", nargs="?", default="sqlite",
        help="memory, sqlite (default), postgres, mysql, mssql, or package.module:factory",
    )
    parser.add_argument("--url", help="SQLAlchemy URL of the server (else KIT_<BACKEND>_URL, else discovery)")
    parser.add_argument("-k", dest="keyword", help="only checks whose name (or area) matches this pytest -k expression")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (CI logs)")
    parser.add_argument("--profile", choices=("quick", "thorough", "none"), default="quick",
                        help="fault-machine profile: quick (CI, default), thorough (nightly), none")
    parser.add_argument("--seed", type=seed_type, help="seed of the fault machines (default: KIT_SEED, else a fresh one, printed)")
    parser.add_argument("--seeds-dir", default="scenarios/seeds", help="where failing scenarios are saved")
    parser.add_argument("--report-dir", default=os.environ.get("KIT_REPORT_DIR") or "reports",
                        help="where the run's report folder <timestamp>-<backend>/ is written "
                             "(default: KIT_REPORT_DIR, else reports)")
    parser.add_argument("--no-report", action="store_true", help="write no report folder")


def run(console: Console, args: argparse.Namespace) -> int:
    from kit.backends import resolve
    from kit.report.recording import CheckReport
    from kit.runner import check_keyword, run_suite
    from kit.seeds import env_seed, fresh_seed

    if args.keyword:
        check_keyword(args.keyword)
    if args.seed is None:
        args.seed = env_seed()
    if args.seed is None:
        args.seed = fresh_seed()
    backend = resolve(args.backend, args.url)
    report = CheckReport(console, args)
    try:
        report.start(backend)
        console.print(f"kit {__version__}: conformance check of [bold]{escape(args.backend)}[/] ({escape(backend.describe())})")
        console.print(f"seed {args.seed}, machine profile {args.profile} (repeat with --seed {args.seed})")
        progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True, disable=args.no_progress,
        )
        with progress:
            task = progress.add_task("checking", total=None)

            def collected(n: int) -> None:
                progress.update(task, total=n)

            def advanced(result: object) -> None:
                report.add(result)
                progress.update(task, advance=1, description=getattr(result, "area", "checking"))

            suite = run_suite(backend, keyword=args.keyword, extra_args=_extra_args(args),
                              on_result=advanced, on_collected=collected)
    except BaseException as exc:
        report.abort(exc)
        raise
    finally:
        backend.close()
    if suite.interrupted:
        report.finish(suite)  # marked incomplete: pytest stopped the session early
        console.print(f"[bold yellow]interrupted[/]: stopped after {len(suite.results)} checks; no verdict "
                      f"(repeat with --seed {args.seed})")
        return EXIT_INTERRUPTED
    if not suite.results and not suite.collection_errors:
        report.abort(ConfigurationError("no check matched"))
        raise ConfigurationError(
            f"no check matches -k {args.keyword!r}: name an area (claims, commit, runs, ...) or part of a "
            "check's name" if args.keyword else "no check was collected: reinstall the kit"
        )
    print_summary(console, suite, args)
    report.finish(suite)
    return 0 if suite.ok else 1


def _extra_args(args: argparse.Namespace) -> list[str]:
    extra = ["--kit-seed", str(args.seed), "--kit-profile", args.profile, "--kit-seeds-dir", args.seeds_dir,
             "--kit-backend", args.backend]
    return extra + (["--kit-url", args.url] if getattr(args, "url", None) else [])  # named (redacted) in replay lines


def reproduce_lines(result: object, args: argparse.Namespace, name: str, url: str) -> list[str]:
    """How to repeat a failed check: the saved bundle's replay command and the seed for a fault-machine
    failure (re-running the check explores scenarios only with the same seed), else the check itself."""
    details = str(getattr(result, "details", "") or "")
    replay = next((line.split("replay: ", 1)[1].strip() for line in details.splitlines()
                   if line.strip().startswith("replay: kit replay ")), None)
    again = f"kit check {args.backend}{url} --seed {args.seed} --profile {args.profile} -k {name}"
    if replay is not None:
        return [f"reproduce: {replay}", f"seed {args.seed} (explore the same scenarios again: {again})"]
    if "fault_machine" in name:
        return [f"reproduce: {again}"]
    return [f"reproduce: kit check {args.backend}{url} -k {name}"]


def print_summary(console: Console, run: object, args: argparse.Namespace) -> None:
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
            area, str(c["passed"]), f"[red]{failed}[/]" if failed else "0", str(c["skipped"] + c["xfailed"]),
            escape("; ".join(sorted(reasons[area]))[:120]),
        )
    console.print(table)
    url = f" --url '{redact(args.url)}'" if getattr(args, "url", None) else ""
    for r in run.failed:
        name = r.nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        console.print(f"[bold red]FAILED[/] {escape(r.check)}")
        if r.guarantee:
            console.print(f"  guarantee: {escape(r.guarantee)}", soft_wrap=True)
        console.print(f"  error: {escape(r.message)}", soft_wrap=True)
        for line in reproduce_lines(r, args, name, url):
            console.print(f"  {escape(line)}", soft_wrap=True)
    totals = Counter(r.outcome for r in run.results)
    verdict = "[bold green]PASS[/]" if run.ok else "[bold red]FAIL[/]"
    console.print(
        f"{verdict}: {totals['passed']} passed, {totals['failed'] + totals['error']} failed, "
        f"{totals['skipped'] + totals['xfailed']} skipped"
    )
