"""Time to kill with 1 and 2 workers: for every seeded bug, how long the fault machine takes to find it
when one exploration runs, and when two (seeds derived as ``kit check --workers 2`` derives them) run
at once on two processes; and machine examples per second on a correct SQLite (``nox -s swarm_bench``;
figures, not tests).

    python -m tests.seeded_bugs.swarm_bench [--bug NAME ...] [--profile quick] [BACKEND ...]

The time to kill is the time to the first failing example (Hypothesis stops there: shrinking, which
``kit check`` does next, is not counted; the table says how many examples it took). With 2 workers it
is the earlier of the two explorations' kills, from their common start. KIT_SEED fixes the printed
seed (default 20261129).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

__all__ = ["main"]


@dataclass(frozen=True)
class Exploration:
    """One exploration's result: when it started and ended (epoch seconds), and what it found."""

    started: float
    ended: float
    examples: int
    killed: bool
    first_failing_example: int | None
    error: str | None


def _explore(spec: str, profile: str, seed: int) -> Exploration:
    """Run the machine ``kit check`` would choose for ``spec`` (a seeded bug name, or a backend name) with
    ``seed``, stopping at the first failure."""
    from kit.backends import resolve
    from kit.machines.machine import run_machine
    from kit.machines.model_free import choose_machine
    from kit.machines.model_free_machine import run_model_free
    from tests.seeded_bugs.registry import all_bugs

    bug = next((b for b in all_bugs() if b.name == spec), None)
    backend = bug.make_backend() if bug is not None else resolve(spec, None)
    started = time.time()
    try:
        run = run_machine if choose_machine(backend, "auto") == "reference" else run_model_free
        outcome = run(backend, profile, seed, shrink=False)
    finally:
        backend.close()
    return Exploration(started, time.time(), outcome.examples, outcome.failure is not None,
                       outcome.first_failing_example, outcome.error)


def _round(pool: ProcessPoolExecutor, spec: str, profile: str, seeds: list[int]) -> tuple[float, list[Exploration]]:
    """Start one exploration per seed at once; (common start, their results)."""
    start = time.time()
    futures = [pool.submit(_explore, spec, profile, s) for s in seeds]
    return start, [f.result() for f in futures]


def _warm(pool: ProcessPoolExecutor, workers: int) -> None:
    """Start the worker processes and import the kit in each, so no figure counts interpreter start-up."""
    list(pool.map(_import_kit, range(workers)))


def _import_kit(_: int) -> None:
    import kit.machines.model_free_machine  # noqa: F401
    import tests.seeded_bugs.registry  # noqa: F401


def main(argv: list[str]) -> int:
    from kit.seeds import derive_seed
    from tests.seeded_bugs.registry import all_bugs

    parser = argparse.ArgumentParser(prog="python -m tests.seeded_bugs.swarm_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("backends", nargs="*", default=["sqlite"], metavar="BACKEND",
                        help="the seeded bugs of these backends (default sqlite)")
    parser.add_argument("--bug", action="append", default=[], metavar="NAME", help="only this bug (repeatable)")
    parser.add_argument("--profile", default="quick", choices=("quick", "thorough"))
    args = parser.parse_args(argv)
    try:
        seed = int(os.environ.get("KIT_SEED", "20261129"))
    except ValueError:
        print("KIT_SEED is not a whole number: set it to e.g. 20261129", file=sys.stderr)
        return 2
    bugs = [b for b in all_bugs() if b.backend in args.backends and (not args.bug or b.name in args.bug)]
    if not bugs:
        print(f"no seeded bug matches: choose --bug among {', '.join(b.name for b in all_bugs())}", file=sys.stderr)
        return 2
    console = Console()
    console.print(f"{os.cpu_count()} cores; seed {seed}, explorations' seeds {seed} and {derive_seed(seed, 1)}; "
                  f"{args.profile} profile; the time to the first failing example (no shrinking)", highlight=False)
    table = Table(title="time to kill: 1 worker (exploration 0) and 2 workers (explorations 0 and 1 at once)")
    for column in ("backend", "bug", "1 worker s", "examples", "2 workers s", "killed by", "speed-up"):
        table.add_column(column)
    ones: list[float] = []
    twos: list[float] = []
    with ProcessPoolExecutor(max_workers=2) as pool:
        _warm(pool, 2)
        for bug in bugs:
            start, (alone,) = _round(pool, bug.name, args.profile, [seed])
            one = alone.ended - start if alone.killed else None
            start, pair = _round(pool, bug.name, args.profile, [seed, derive_seed(seed, 1)])
            kills = [(e.ended - start, i) for i, e in enumerate(pair) if e.killed]
            two, by = min(kills) if kills else (None, None)
            if one is not None:
                ones.append(one)
            if two is not None:
                twos.append(two)
            ratio = f"{one / two:.2f}x" if one and two else ""
            table.add_row(bug.backend, bug.name, f"{one:.2f}" if one is not None else "[red]survived[/]",
                          str(alone.first_failing_example or alone.examples),
                          f"{two:.2f}" if two is not None else "[red]survived[/]",
                          f"exploration {by} (example {pair[by].first_failing_example})" if by is not None else "",
                          ratio)
            console.print(f"{bug.backend}/{bug.name}: 1 worker {one if one is None else round(one, 2)} s, "
                          f"2 workers {two if two is None else round(two, 2)} s", highlight=False)
        table.add_row("", "median", f"{statistics.median(ones):.2f}" if ones else "", "",
                      f"{statistics.median(twos):.2f}" if twos else "", f"killed {len(ones)}/{len(bugs)} and "
                      f"{len(twos)}/{len(bugs)}", "")
        console.print(table)
        rates = Table(title=f"machine examples per second on a correct {args.backends[0]} ({args.profile} profile, "
                            "whole explorations)")
        for column in ("workers", "examples", "wall s", "examples/s"):
            rates.add_column(column)
        for workers in (1, 2):
            start, runs = _round(pool, args.backends[0], args.profile, [derive_seed(seed, i) for i in range(workers)])
            wall = max(e.ended for e in runs) - start
            examples = sum(e.examples for e in runs)
            rates.add_row(str(workers), str(examples), f"{wall:.1f}", f"{examples / wall:.1f}")
        console.print(rates)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
