"""``kit stress``: real concurrent workers under a seeded nemesis, then one verdict per invariant.

Exit codes: 0 when no verdict is invalid (unknown verdicts are printed as
warnings), 1 when one is (or the harness itself failed), 2 for bad input, 3
for an unreachable backend.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections import Counter

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress as Bar
from rich.progress import TextColumn, TimeElapsedColumn
from rich.table import Table

from kit.contract.sections import invariant_section
from kit.discovery import redact

MODES = ("deterministic", "free")
DEFAULT_MODE = "deterministic"
"""Deterministic by default: it commits 0.2-0.8x the free mode's transactions per wall second (README,
"Stress modes": measured figures), and it is the mode whose failures can be replayed, shrunk and explained."""

NAME = "stress"
HELP = "run real concurrent deciders, workers and timers under a seeded nemesis; check every invariant"

_MARK = {"valid": "[green]valid[/]", "unknown": "[yellow]UNKNOWN[/]", "invalid": "[bold red]INVALID[/]"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kit.faults.nemesis import FaultKind
    from kit.seeds import count_type, seconds_type, seed_type
    from kit.workload.config import DEFAULT_SCENARIOS, StressConfig

    d = StressConfig()
    parser.add_argument("--backend", default="sqlite",
                        help="sqlite (default), postgres, mysql, mssql, memory, or package.module:factory")
    parser.add_argument("--url", help="SQLAlchemy URL of the server (else KIT_<BACKEND>_URL, else discovery)")
    parser.add_argument("--workers", type=count_type(1), default=d.workers,
                        help=f"decider threads, and as many command-worker threads (default {d.workers})")
    parser.add_argument("--runs", type=count_type(1), default=d.runs,
                        help=f"workflow runs kept in flight: a new one starts as one ends (default {d.runs})")
    parser.add_argument("--seed", type=seed_type, help="seed of the nemesis and the client (default: a fresh one, printed)")
    parser.add_argument("--duration", type=seconds_type(), default=d.duration_s,
                        help=f"seconds of faults and new runs (default {d.duration_s:.0f}; deterministic mode: "
                             "store-clock seconds, as are --drain, --lease and --fault-interval)")
    parser.add_argument("--drain", type=seconds_type(), default=d.drain_s,
                        help=f"bound, in seconds, on draining after the faults stop (default {d.drain_s:.0f})")
    parser.add_argument("--lease", type=seconds_type(), default=d.lease_s,
                        help=f"decision and command lease in seconds; pauses last 1.3-2x it (default {d.lease_s})")
    parser.add_argument("--faults", default="all",
                        help=f"all (default), none, or a comma-separated list of: {', '.join(k.value for k in FaultKind)}")
    parser.add_argument("--fault-interval", type=seconds_type(), default=d.fault_interval_s,
                        help=f"mean seconds between two faults (default {d.fault_interval_s})")
    parser.add_argument("--tenants", type=count_type(1), default=d.tenants, help=f"tenants sharing the database (default {d.tenants})")
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                        help=f"comma-separated scenarios, or all (default {','.join(DEFAULT_SCENARIOS)})")
    parser.add_argument("--report-dir", default=os.environ.get("KIT_REPORT_DIR") or "reports",
                        help="where <timestamp>-<backend>-stress/ is written (default: KIT_REPORT_DIR, else reports)")
    parser.add_argument("--mode", choices=MODES, default=DEFAULT_MODE,
                        help="deterministic (default): a seeded scheduler lets one actor move at a time on the "
                             "store clock, so the seed replays the same interleaving and a violation saves a "
                             "replayable bundle; free: real threads race on the server's clock (interleavings "
                             "finer than one statement, not replayable)")
    parser.add_argument("--no-progress", action="store_true", help="no live progress line (CI logs)")


def config_from(args: argparse.Namespace) -> object:
    from kit.faults.nemesis import parse_faults
    from kit.runtime.scenarios import SCENARIOS
    from kit.workload.config import StressConfig

    scenarios = tuple(SCENARIOS) if args.scenarios == "all" else tuple(s.strip() for s in args.scenarios.split(","))
    return StressConfig(
        seed=args.seed, workers=args.workers, runs=args.runs, duration_s=args.duration, drain_s=args.drain,
        lease_s=args.lease, faults=parse_faults(args.faults), fault_interval_s=args.fault_interval,
        tenants=args.tenants, scenarios=scenarios, mode=args.mode,
    ).validate()


def stress_command(args: argparse.Namespace) -> str:
    """The command line that repeats this run (same seed; URL password redacted)."""
    from kit.workload.config import DEFAULT_SCENARIOS

    parts = ["kit", "stress", "--backend", shlex.quote(str(args.backend)), "--seed", str(args.seed),
             "--workers", str(args.workers), "--runs", str(args.runs), "--duration", f"{args.duration:g}",
             "--mode", str(args.mode)]
    if args.url:
        parts += ["--url", shlex.quote(redact(args.url))]
    defaults = {"faults": "all", "lease": 1.0, "tenants": 2, "fault_interval": 0.2, "drain": 60.0,
                "scenarios": ",".join(DEFAULT_SCENARIOS)}
    for key, default in defaults.items():
        if getattr(args, key) != default:
            parts += [f"--{key.replace('_', '-')}", shlex.quote(str(getattr(args, key)))]
    return " ".join(parts)


MODE_NOTES = {
    "deterministic": "a seeded scheduler picks whose statement runs next; durations are store-clock seconds; "
                     "the same seed replays the same interleaving",
    "free": "real threads race; the seed fixes the faults and the client, not the interleaving",
}


def run(console: Console, args: argparse.Namespace) -> int:
    from kit.backends import resolve
    from kit.faults.nemesis import plan_faults  # noqa: F401 - imported for its errors before resolving
    from kit.seeds import env_seed, fresh_seed
    from kit.workload import Progress, StressConfig, run_stress

    if args.seed is None:
        args.seed = env_seed()
    if args.seed is None:
        args.seed = fresh_seed()
    config = config_from(args)
    assert isinstance(config, StressConfig)
    backend = resolve(args.backend, args.url)
    command = stress_command(args)
    try:
        if config.mode == "deterministic":
            from kit.workload.deterministic import require_schedulable

            require_schedulable(backend)
        console.print(f"kit stress on [bold]{escape(args.backend)}[/] ({escape(backend.describe())})", soft_wrap=True)
        console.print(f"seed [bold]{config.seed}[/] (repeat with: {escape(command)})", soft_wrap=True)
        console.print(f"mode: [bold]{config.mode}[/] - {MODE_NOTES[config.mode]}", soft_wrap=True)
        console.print(
            f"{config.workers} deciders + {config.workers} command workers + {config.timer_loops} timer loop, "
            f"{config.runs} runs in flight over {config.tenants} tenants, lease {config.lease_s:g} s; "
            f"faults for {config.duration_s:g} s: {', '.join(f.value for f in config.faults) or 'none'}",
            soft_wrap=True)
        bar = Bar(TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True,
                  disable=args.no_progress)
        with bar:
            task = bar.add_task("setting up", total=None)

            phases: list[str] = []

            def show(p: Progress) -> None:
                if args.no_progress and (not phases or phases[-1] != p.phase):
                    phases.append(p.phase)
                    console.print(f"[{p.t:5.1f} s] {p.phase}: {p.runs_ended}/{p.runs_started} runs ended, "
                                  f"{p.commits} commits, {p.faults} faults applied, {p.crashes} crashes", soft_wrap=True)
                bar.update(task, description=(
                    f"{p.phase:<6} t={p.t:5.1f}s  runs {p.runs_ended}/{p.runs_started} ended  "
                    f"commits {p.commits}  completions {p.completions}  faults {p.faults}  crashes {p.crashes}"))

            result = run_stress(backend, config, report_root=args.report_dir, spec=args.backend, url=args.url,
                                command=command, on_progress=show)
    finally:
        backend.close()
    return print_result(console, result, command)


def print_result(console: Console, result: object, command: str) -> int:
    from kit.checkers import Status
    from kit.workload import StressResult

    assert isinstance(result, StressResult)
    planned = Counter(f.kind.value for f in result.plan)
    summary = result.summary
    drain = result.drain
    console.print(f"nemesis: {len(result.plan)} faults planned "
                  f"({', '.join(f'{n} {k}' for k, n in sorted(planned.items())) or 'none'}); applied: "
                  f"{', '.join(f'{n} {k}' for k, n in sorted(summary['faults_applied'].items())) or 'none'}; "
                  f"{summary['crashes']} worker lives crashed", soft_wrap=True)
    ended = "every run ended" if drain.get("open") == 0 else f"{drain.get('open')} runs still open"
    console.print(f"{result.runs_started} runs started; drained in {drain.get('seconds')} s ({ended}); "
                  f"{result.transactions} transactions in {result.elapsed_s:.1f} s", soft_wrap=True)
    if result.mode == "deterministic":
        start, end = result.clock_us
        console.print(f"mode: deterministic - {len(result.schedule)} scheduler steps, store clock advanced "
                      f"{(end - start) / 1e6:.2f} s", soft_wrap=True)
    else:
        console.print("mode: free - threads raced (the interleaving is not replayable)")
    table = Table(title="operations (ok / fail / info)", show_header=True)
    for column in ("operation", "ok", "fail", "info"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for f, kinds in sorted(summary["operations"].items()):
        if f in ("fault", "crash", "start", "stop", "phase", "config", "drain", "heal") or not kinds.get("ok", 0) + \
                kinds.get("fail", 0) + kinds.get("info", 0):
            continue
        label = {"now": "store clock sample", "probe": "probe (other tenant: not_found is a fail)"}.get(f, f)
        table.add_row(label, str(kinds.get("ok", 0)), str(kinds.get("fail", 0)), str(kinds.get("info", 0)))
    console.print(table)
    for verdict in result.verdicts:
        line = (f"  {verdict.invariant:>2}. {escape(verdict.name.replace('_', ' '))} "
                f"({invariant_section(verdict.invariant)}): {_MARK[verdict.status.value]}")
        console.print(f"{line} - {escape(verdict.explanation)}", soft_wrap=True)
        if verdict.status is not Status.VALID and verdict.witness:
            refs = [w for w in verdict.witness if "history" in w]
            if refs:
                shown = "; ".join(f"#{'/#'.join(map(str, w['history']))} {w.get('process')} {w.get('f')} "
                                  f"{w.get('type')}" for w in refs)
                console.print(f"      witness (history.jsonl): {escape(shown)}", soft_wrap=True)
            if verdict.more:
                console.print(f"      and {verdict.more} more like it (verdicts.json)")
    for error in result.errors[:5]:
        console.print(f"[bold red]harness error:[/] {escape(error)}", soft_wrap=True)
    for note, n in sorted(result.notes.items())[:5]:
        console.print(f"[yellow]note:[/] {escape(note)} (x{n})", soft_wrap=True)
    console.print(f"report: {escape(str(result.folder / 'index.html'))}", soft_wrap=True)
    console.print(f"history: {escape(str(result.history))}", soft_wrap=True)
    status = result.status
    if result.bundle is not None:
        console.print(f"replay bundle: {escape(str(result.bundle))} (replay, shrink and narrate with: "
                      f"kit replay {escape(shlex.quote(str(result.bundle)))})", soft_wrap=True)
    if status is Status.INVALID or result.errors:
        console.print(f"[bold red]FAIL[/]: {sum(v.status is Status.INVALID for v in result.verdicts)} invariant(s) "
                      f"violated{' (and harness errors)' if result.errors else ''}; repeat with: {escape(command)}",
                      soft_wrap=True)
        return 1
    if status is Status.UNKNOWN:
        console.print("[yellow]PASS with unknowns[/]: nothing was violated, but some verdicts could not be decided")
        return 0
    console.print("[bold green]PASS[/]: every invariant held")
    return 0
