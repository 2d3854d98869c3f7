"""``kit run SCENARIO``: run N WASM workflows to completion on a backend and report throughput."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

NAME = "run"
HELP = "run N workflows of a scenario (WASM, wasmtime) to completion on a backend; print throughput"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kit.runtime.scenarios import SCENARIOS
    from kit.seeds import count_type, seconds_type

    parser.add_argument(
        "scenario",
        help=f"all, or one of {', '.join(SCENARIOS)} (comma-separated names are mixed round robin)",
    )
    parser.add_argument(
        "--backend",
        default="sqlite",
        help="memory, sqlite (default), postgres, mysql, mssql, or package.module:factory",
    )
    parser.add_argument("--url", help="SQLAlchemy URL of the server (else KIT_<BACKEND>_URL, else discovery)")
    parser.add_argument("--runs", type=count_type(1), default=20, help="how many runs to start (default 20)")
    parser.add_argument(
        "--workers",
        type=count_type(1),
        default=4,
        help="decider threads, and as many command-worker threads (default 4); plus one timer loop",
    )
    parser.add_argument("--timeout", type=seconds_type(), default=300.0, help="seconds to wait for every run to end")
    parser.add_argument(
        "--replay-sample",
        type=count_type(0),
        default=2,
        help="runs per scenario whose history is replayed to check determinism (default 2)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (CI logs)")


def run(console: Console, args: argparse.Namespace) -> int:
    from kit.backends import resolve
    from kit.contract.errors import ConfigurationError
    from kit.runtime.driver import pick_scenarios, run_scenarios
    from kit.runtime.stats import RuntimeStats

    if args.runs < 1 or args.workers < 1:
        raise ConfigurationError("--runs and --workers must be at least 1")
    scenarios = pick_scenarios(args.scenario)
    backend = resolve(args.backend, args.url)
    try:
        console.print(
            f"kit run [bold]{escape(args.scenario)}[/]: {args.runs} runs, {args.workers} deciders + "
            f"{args.workers} workers + 1 timer loop on [bold]{escape(args.backend)}[/] "
            f"({escape(backend.describe())})",
            soft_wrap=True,
        )
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[rate]}"),
            console=console,
            transient=True,
            disable=args.no_progress,
        )
        with progress:
            task = progress.add_task("runs ended", total=args.runs, rate="")

            def advanced(done: int, stats: RuntimeStats) -> None:
                progress.update(task, completed=done, rate=f"{stats.decisions} decisions")

            report = run_scenarios(
                backend,
                scenarios,
                args.runs,
                workers=args.workers,
                timeout_s=args.timeout,
                replay_sample=args.replay_sample,
                on_progress=advanced,
            )
    finally:
        backend.close()
    stats = report.stats
    table = Table(title=f"kit run {args.scenario} on {args.backend}", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("runs", f"{args.runs} ({run_statuses(report.statuses, report.ok)})")
    table.add_row("decisions", str(report.decisions))
    others = {k: v for k, v in stats.attempts.items() if k != "committed"}
    table.add_row("other attempt ends", ", ".join(f"{v} {k}" for k, v in sorted(others.items())) or "none")
    c = stats.commands
    table.add_row(
        "commands", f"{c['completed']} completed, {c['retry_scheduled']} retried, {c['failed']} failed"
    )
    table.add_row("timers fired", str(stats.timers_fired))
    if report.signals:
        table.add_row("signals", ", ".join(f"{v} {k}" for k, v in sorted(report.signals.items())))
    table.add_row(
        "decision latency p50 / p99", f"{stats.latency_ms(50):.1f} ms / {stats.latency_ms(99):.1f} ms"
    )
    table.add_row("elapsed", f"{report.elapsed_s:.2f} s")
    table.add_row("decisions per second", f"{report.decisions_per_s:.0f}")
    table.add_row(
        "replay check",
        f"{report.replay_checked} runs replayed to their recorded decisions"
        if not any(p.startswith("replay") for p in report.problems)
        else "[red]diverged[/]",
    )
    console.print(table)
    for note in stats.notes[:5]:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    for problem in (report.problems + report.errors)[:10]:
        console.print(f"[bold red]problem:[/] {escape(problem)}", soft_wrap=True)
    if report.ok:
        console.print("[bold green]PASS[/]: every run ended as its scenario determines")
        return 0
    console.print(f"[bold red]FAIL[/]: {len(report.problems) + len(report.errors)} problems")
    return 1


def run_statuses(statuses: dict[str, int], ok: bool) -> str:
    """``1 cancelled, 6 completed, 1 failed``; on a passing run the failed and cancelled ones are marked as
    expected (their scenario ends them so), so they never read as failures next to PASS."""
    parts = []
    for status, n in sorted(statuses.items()):
        expected = ok and status in ("failed", "cancelled")
        parts.append(f"{n} {status}" + (" as their scenario expects" if expected else ""))
    return ", ".join(parts)
