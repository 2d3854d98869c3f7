"""Decisions per second per backend: ``python -m kit.runtime.bench [BACKEND...]`` (or ``nox -s bench``).

A benchmark prints figures, it asserts nothing. Each backend runs the same
workload (default: 200 ``order`` runs, 4 deciders + 4 workers + 1 timer loop,
database clock) in a fresh kit-owned database; unreachable backends are
listed with the reason instead. Every run is still checked for its expected
end, so a figure from a broken run is flagged, never silently printed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from kit.backends import resolve
from kit.contract.errors import BackendUnavailable, ConfigurationError
from kit.runtime.counting import CountingBackend
from kit.runtime.driver import pick_scenarios, run_scenarios
from kit.runtime.stats import RuntimeStats

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.runtime.bench", description=__doc__.split("\n")[0])
    parser.add_argument("backends", nargs="*", default=["memory", "sqlite", "postgres", "mysql"])
    parser.add_argument("--scenario", default="order", help="a scenario name, a comma list, or all")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)
    console = Console(highlight=False, width=max(110, Console().width))
    table = Table(title=f"kit runtime benchmark: {args.runs} x {args.scenario}, {args.workers} workers")
    columns = ("backend", "runs", "decisions", "elapsed s", "decisions/s", "stmts/decision", "p50 ms", "p99 ms",
               "verdict")
    for column in columns:
        table.add_column(column, justify="left" if column in ("backend", "verdict") else "right")
    scenarios = pick_scenarios(args.scenario)
    for name in args.backends:
        try:
            backend = resolve(name)
        except (BackendUnavailable, ConfigurationError) as exc:
            table.add_row(name, "", "", "", "", "", "", "", f"skipped: {exc}")
            continue
        counting = CountingBackend(backend)
        runs = args.runs

        def progress(done: int, _stats: RuntimeStats, counter=counting.counter, runs=runs) -> None:  # type: ignore[no-untyped-def]
            if done >= runs:  # every run ended: the checks that follow are not the workload's statements
                counter.stop()

        try:
            console.print(f"{name}: {backend.describe()}", soft_wrap=True)
            r = run_scenarios(counting, scenarios, runs, workers=args.workers, replay_sample=1, on_progress=progress)
        finally:
            backend.close()
        statements = counting.counter.stop()
        verdict = "ok" if r.ok else f"FAILED: {(r.problems + r.errors)[0]}"
        table.add_row(
            name,
            str(r.runs),
            str(r.decisions),
            f"{r.elapsed_s:.2f}",
            f"{r.decisions_per_s:.0f}",
            f"{statements / r.decisions:.1f}" if r.decisions else "",
            f"{r.stats.latency_ms(50):.1f}",
            f"{r.stats.latency_ms(99):.1f}",
            verdict,
        )
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
