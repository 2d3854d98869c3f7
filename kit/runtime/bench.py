"""Decisions per second per backend, and issue 16's speed goals: ``python -m kit.runtime.bench`` (``nox -s bench``).

A benchmark prints figures, it asserts nothing. Each backend runs the same
workload (default: 200 ``order`` runs, 4 deciders + 4 workers + 1 timer loop,
database clock) in a fresh kit-owned database; unreachable backends are
listed with the reason instead. Every run is still checked for its expected
end, so a figure from a broken run is flagged, never silently printed.

Then every goal is printed as a ratio next to its target, both sides measured
in this run (the machine may be loaded: only ratios measured together mean
anything):

* decisions/s against a raw replay of exactly the statements the kit sent, on
  one raw connection, one round trip per transaction where the driver
  allows (:mod:`kit.runtime.ceiling`), on each server backend. The
  statements come from a recorded run; the kit's figure from plain runs (no
  recording or counting wrapper), each beside a replay: the median of
  ``--rounds`` rounds' ratios;
* statements per decision on PostgreSQL (a statement hook counts them);
* the memory backend's steady decisions/s with 800 runs in the store against 50
  (median of alternating rounds after a warm-up);
* ``kit check <server> --profile none`` now against before: with ``--baseline
  DIR`` the old commit's own code, else this code with one database per check
  (``KIT_DATABASE_PER_CHECK=1``), a stand-in that keeps every other speed-up;
  the median of ``--check-rounds`` alternating rounds' ratios, both sides with
  their bytecode cached as on a user's second run (each side's first, cold
  run is printed beside it);
* peak memory of checking a 10x longer stress run against a 1x run (each in a
  fresh process, :mod:`kit.workload.bench`): the median of ``--stress-rounds`` pairs;
* the reference fault machine's examples per second on SQLite (quick profile,
  fixed seeds, no shrinking) against "before": by default the same code with
  the whole state compared after every step (``full_compare``, what the machine
  did before it compared only what a step touched), a stand-in that keeps every
  other speed-up made since, so it understates the gain; with
  ``--baseline DIR`` a checkout of the old commit (with its own ``.venv``)
  runs instead. Each run is a fresh process; both sides alternate,
  seed by seed.

    python -m kit.runtime.bench [BACKEND...] [--runs 200] [--rounds 3] [--skip-checks] [--skip-stress]
                                [--stress-rounds 3] [--skip-scaling] [--skip-machines] [--baseline DIR] [--check-rounds 3]
                                [--machine-seeds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kit.backends import resolve
from kit.contract.errors import BackendUnavailable, ConfigurationError
from kit.runtime.ceiling import RecordingBackend, replay
from kit.runtime.counting import CountingBackend
from kit.runtime.driver import RunReport, pick_scenarios, run_scenarios
from kit.runtime.scenarios import Scenario
from kit.runtime.stats import RuntimeStats

__all__ = ["Goal", "machine_speed", "main", "steady_rate"]


@dataclass
class Goal:
    """One of the issue's figures: measured value, target, and which way is better."""

    figure: str
    value: float | None
    target: float
    at_most: bool
    detail: str = ""

    @property
    def met(self) -> str:
        if self.value is None:
            return "not measured"
        ok = self.value <= self.target if self.at_most else self.value >= self.target
        return "met" if ok else "NOT met"


RATE_ROUNDS = 3
"""Rounds of (the kit's plain workload, the raw replay) per server backend; the goal is the median round's
ratio (a loaded machine slows one side of a round, rarely the same side of most rounds)."""


@dataclass
class _Measured:
    """One backend's workload figures: the recorded run's report, statements and round trips per decision,
    and, on server backends, the rounds' plain decisions/s and raw-replay ceilings."""

    report: RunReport
    statements: float
    trips: float | None = None
    rates: list[float] = field(default_factory=list)
    ceilings: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def decisions_per_s(self) -> float:
        return statistics.median(self.rates) if self.rates else self.report.decisions_per_s

    @property
    def ceiling(self) -> float | None:
        return statistics.median(self.ceilings) if self.ceilings else None

    @property
    def ratio(self) -> float | None:
        ratios = [rate / ceiling for rate, ceiling in zip(self.rates, self.ceilings) if ceiling > 0]
        return statistics.median(ratios) if ratios else None


def _run(backend_name: str, scenarios: list[Scenario], runs: int, workers: int, console: Console,
         rounds: int = RATE_ROUNDS) -> _Measured:
    """One recorded workload (its report; statements and, on server backends, round trips per decision;
    the statements it sent), then on server backends ``rounds`` rounds of the same workload run plain (no
    recording or counting wrapper: the kit as it runs anywhere) beside a raw replay of the recorded
    statements (the ceiling, decisions/s)."""
    backend = resolve(backend_name)
    recording = RecordingBackend(backend) if hasattr(backend, "_connect") else None
    counting = CountingBackend(recording if recording is not None else backend)

    def progress(done: int, _stats: RuntimeStats) -> None:
        if done >= runs:  # every run ended: the checks that follow are not the workload's statements
            counting.counter.stop()
            if recording is not None:
                recording.stop()

    try:
        console.print(f"{backend_name}: {backend.describe()}", soft_wrap=True)
        report = run_scenarios(counting, scenarios, runs, workers=workers, replay_sample=1, on_progress=progress)
        measured = _Measured(report, counting.counter.stop() / max(report.decisions, 1))
        if recording is None:
            return measured
        units = recording.stop()
        measured.trips = recording.round_trips / max(report.decisions, 1)
        failed = 0
        for i in range(max(rounds, 1)):
            console.print(f"{backend_name}: round {i + 1} of {rounds}: the kit, then the raw replay", soft_wrap=True)
            plain = run_scenarios(backend, scenarios, runs, workers=workers, replay_sample=0)
            replayed = replay(backend, units)
            if not plain.ok or replayed.seconds <= 0:
                continue
            measured.rates.append(plain.decisions_per_s)
            measured.ceilings.append(report.decisions / replayed.seconds)
            failed = max(failed, replayed.failed_units)
            measured.note = (f"median of {len(measured.rates)} rounds; round ratios "
                             + ", ".join(f"{r / c:.2f}" for r, c in zip(measured.rates, measured.ceilings))
                             + f"; each replay: {replayed.units} transactions, {replayed.statements} statement strings")
            if replayed.failed_units:
                measured.note += f"; {replayed.failed_units} failed on replay (first: {replayed.first_failure})"
        return measured
    finally:
        backend.close()


def _check_seconds(backend: str, per_check: bool, baseline: str | None = None,
                   pycache: str | None = None) -> float | None:
    """Wall seconds of ``kit check BACKEND --profile none`` in a fresh process; None if it did not pass.

    ``baseline``: a checkout of an older commit with its own ``.venv``; its code runs instead of this one.
    ``pycache``: the child writes and reads its bytecode (and pytest's rewritten test modules) there
    (``PYTHONPYCACHEPREFIX``), even where ``PYTHONDONTWRITEBYTECODE`` is set, and nowhere else.
    """
    env = dict(os.environ)
    env["KIT_DATABASE_PER_CHECK"] = "1" if per_check else "0"
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    python = sys.executable if baseline is None else str(Path(baseline) / ".venv" / "bin" / "python")
    started = time.perf_counter()
    done = subprocess.run(
        [python, "-m", "kit.cli", "check", backend, "--profile", "none", "--no-progress", "--no-report"],
        capture_output=True, text=True, env=env, check=False, cwd=baseline,
    )
    return time.perf_counter() - started if done.returncode == 0 else None


STRESS_ROUNDS = 3
"""Pairs of (1x, 10x) stress runs for the memory goal; the goal is the median pair's ratio, so no one
pair decides it: each run records its own history, so pairs differ a little."""


def _stress_memory(rounds: int = STRESS_ROUNDS,
                   measure: Callable[[str, float, int, int], dict[str, Any]] | None = None) -> tuple[float | None, str]:
    """Checking's own peak memory (the Python heap allocated from the start of the check phase) of a
    10x longer stress run over a 1x run, on SQLite: the median over ``rounds`` pairs, each run in a fresh
    process. A pair whose 10x run did not record at least 5x the history proves nothing and is left out
    (None when no pair is left); a pair with a run that found a violation is flagged in the detail. The
    process's peak RSS is shown beside it: it is a high-water mark set by the workload, so it hides what
    checking costs."""
    if measure is None:
        from kit.workload.bench import _memory_in_child

        measure = _memory_in_child
    ratios: list[float] = []
    details: list[str] = []
    for i in range(max(rounds, 1)):
        one = measure("sqlite", 5.0, 4, 16)
        ten = measure("sqlite", 50.0, 4, 16)
        grown = ten["history_entries"] / max(one["history_entries"], 1)
        pair = ", ".join(
            f"{label} {m['history_entries']} entries: checking {m['check_heap_peak_kb'] / 1024:.1f} MiB, "
            f"process peak RSS {m['total_peak_kb'] / 1024:.0f} MiB"
            + ("" if m.get("valid", True) else " (the run found a violation)")
            for label, m in (("1x", one), ("10x", ten)))
        if grown < 5:
            details.append(f"pair {i + 1}: left out, the 10x run recorded only {grown:.1f}x the history ({pair})")
            continue
        ratio = ten["check_heap_peak_kb"] / max(one["check_heap_peak_kb"], 1)
        ratios.append(ratio)
        # the ratio's complement: a small fixed cost makes any bounded growth a large ratio
        added = (ten["check_heap_peak_kb"] - one["check_heap_peak_kb"]) * 1024 / max(
            ten["history_entries"] - one["history_entries"], 1)
        details.append(f"pair {i + 1}: {ratio:.2f}, {added:.1f} B of peak per added history entry ({pair})")
    detail = (f"median of {len(ratios)} pairs (tracemalloc on while checking); " if ratios else "no verdict; ") \
        + "; ".join(details)
    return (statistics.median(ratios) if ratios else None), detail


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.runtime.bench", description=__doc__.split("\n")[0])
    parser.add_argument("backends", nargs="*", default=["memory", "sqlite", "postgres", "mysql"])
    parser.add_argument("--scenario", default="order", help="a scenario name, a comma list, or all")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--skip-checks", action="store_true", help="do not time kit check (shared vs per-check)")
    parser.add_argument("--skip-stress", action="store_true", help="do not measure stress checking memory")
    parser.add_argument("--stress-rounds", type=int, default=STRESS_ROUNDS,
                        help="pairs of (1x, 10x) stress runs for the memory goal; the goal is the median pair's ratio")
    parser.add_argument("--skip-scaling", action="store_true", help="do not measure memory backend scaling")
    parser.add_argument("--skip-machines", action="store_true", help="do not time the fault machine on SQLite")
    parser.add_argument("--baseline", "--machine-baseline", metavar="DIR", default=None, dest="baseline",
                        help="a checkout of the commit to compare with (its .venv runs it), for the kit check "
                             "timings and the fault machine; default: stand-ins in this code (one database per "
                             "check; the whole state compared after every step)")
    parser.add_argument("--rounds", type=int, default=RATE_ROUNDS,
                        help="rounds of the plain workload beside the raw replay, per server backend")
    parser.add_argument("--check-rounds", type=int, default=CHECK_ROUNDS,
                        help="rounds of (before, now) kit check timings; the goal is the median round's ratio")
    parser.add_argument("--machine-seeds", type=int, default=2, help="seeds per side for the fault-machine figure")
    args = parser.parse_args(argv)
    console = Console(highlight=False, width=max(110, Console().width))
    table = Table(title=f"kit runtime benchmark: {args.runs} x {args.scenario}, {args.workers} workers")
    columns = ("backend", "runs", "decisions", "elapsed s", "decisions/s", "replay ceiling/s", "stmts/decision",
               "trips/decision", "p50 ms", "p99 ms", "verdict")
    for column in columns:
        table.add_column(column, justify="left" if column in ("backend", "verdict") else "right")
    scenarios = pick_scenarios(args.scenario)
    goals: list[Goal] = []
    for name in args.backends:
        try:
            m = _run(name, scenarios, args.runs, args.workers, console, args.rounds)
        except (BackendUnavailable, ConfigurationError) as exc:
            table.add_row(name, *[""] * (len(columns) - 2), f"skipped: {exc}")
            continue
        r = m.report
        verdict = "ok" if r.ok else f"FAILED: {(r.problems + r.errors)[0]}"
        table.add_row(
            name, str(r.runs), str(r.decisions), f"{r.elapsed_s:.2f}", f"{m.decisions_per_s:.0f}",
            "" if m.ceiling is None else f"{m.ceiling:.0f}", f"{m.statements:.1f}",
            "" if m.trips is None else f"{m.trips:.1f}",
            f"{r.stats.latency_ms(50):.1f}", f"{r.stats.latency_ms(99):.1f}", verdict,
        )
        if m.ceiling is not None:
            goals.append(Goal(f"decisions/s / raw replay ({name})", m.ratio, 0.9, False, m.note))
        if name == "postgres":
            goals.append(Goal("statements per decision (postgres)", m.statements, 36, True))
    console.print(table)
    if not args.skip_scaling:
        goals.append(_scaling(scenarios, args.workers))
    if not args.skip_checks:
        for name, target in (("postgres", 0.5), ("mysql", 0.35)):
            if name in args.backends:
                goals.append(_checks(name, target, console.print, args.baseline, args.check_rounds))
    if not args.skip_stress:
        ratio, detail = _stress_memory(args.stress_rounds)
        goals.append(Goal("stress checking peak memory, 10x run / 1x run", ratio, 1.2, True, detail))
    if not args.skip_machines:
        goals.append(machine_speed(args.baseline, args.machine_seeds, console.print))
    summary = Table(title="issue 16 goals (both sides measured in this run)")
    for column in ("figure", "measured", "goal", "verdict", "how"):
        summary.add_column(column, justify="right" if column in ("measured", "goal") else "left")
    for g in goals:
        summary.add_row(g.figure, "" if g.value is None else f"{g.value:.2f}",
                        f"{'<=' if g.at_most else '>='} {g.target:g}", g.met, g.detail)
    console.print(summary)
    return 0


SCALING_SIZES = (50, 800)
"""Runs in the memory store: the small and the large size the scaling goal compares."""

SCALING_ROUNDS = 5
"""Rounds of both sizes, back to back (the order alternating); the goal is the median round's ratio."""


def steady_rate(committed_at: Sequence[float], trim: float = 0.1) -> float:
    """Decisions/s between the commits at the ``trim`` and ``1 - trim`` quantiles: the steady rate, without
    the start (threads starting, the first runs loading) and the tail (the last runs' chains of commands and
    retries, whose latency is the same at any size). 0.0 with fewer than 10 commits."""
    times = sorted(committed_at)
    if len(times) < 10:
        return 0.0
    lo, hi = int(len(times) * trim), len(times) - 1 - int(len(times) * trim)
    span = times[hi] - times[lo]
    return (hi - lo) / span if span > 0 else 0.0


def _scaling(scenarios: list[Scenario], workers: int) -> Goal:
    """Memory backend decisions/s with 800 runs in the store over 50, same workload otherwise.

    Each run makes the same decisions whatever the size, so the rates compare the cost of one decision
    with 50 and with 800 runs in the store. Each rate is the steady rate (:func:`steady_rate`); one
    unmeasured warm-up, then :data:`SCALING_ROUNDS` rounds of both sizes back to back, the median round's
    ratio is the figure (a loaded machine slows a round, rarely both of its halves unequally twice).
    """
    small, large = SCALING_SIZES

    def rate(runs: int) -> float:
        backend = resolve("memory")
        try:
            report = run_scenarios(backend, scenarios, runs, workers=workers, replay_sample=1)
        finally:
            backend.close()
        return steady_rate(report.stats.committed_at) if report.ok else 0.0

    rate(small)  # warm-up: imports, compiled workflow modules, allocator
    ratios: list[float] = []
    rates: dict[int, list[float]] = {small: [], large: []}
    for i in range(SCALING_ROUNDS):
        order = (small, large) if i % 2 == 0 else (large, small)
        measured = {runs: rate(runs) for runs in order}
        for runs, value in measured.items():
            rates[runs].append(value)
        ratios.append(measured[large] / max(measured[small], 1e-9))
    ratio = statistics.median(ratios)
    return Goal(f"memory decisions/s, {large} runs / {small} runs", ratio, 0.85, False,
                f"steady rate, median of {SCALING_ROUNDS} rounds: {statistics.median(rates[small]):.0f} at "
                f"{small}, {statistics.median(rates[large]):.0f} at {large}; round ratios "
                + ", ".join(f"{r:.2f}" for r in ratios))


CHECK_ROUNDS = 3
"""Rounds of (before, now) ``kit check`` timings, the order alternating; the goal is the median round's ratio
(one run of either side swung 5.3-7.7 s on a loaded 2-core machine)."""


def _checks(name: str, target: float, say: Callable[[str], None], baseline: str | None = None,
            rounds: int = CHECK_ROUNDS) -> Goal:
    """``kit check NAME --profile none`` now over before, back to back, ``rounds`` times with the order
    alternating; the median round's ratio. Before: ``baseline``'s own code (a checkout of the older commit),
    or by default this code with one database per check (``KIT_DATABASE_PER_CHECK=1``), a stand-in that
    keeps every other speed-up made since.

    Both sides run as on a user's second run: with their bytecode cached, in a temporary folder of the
    bench's own, filled by one first (cold) run of each side that is timed apart. Without a cache (where
    ``PYTHONDONTWRITEBYTECODE`` is set) every run compiles the kit and pytest rewrites the suites first,
    the same 0.6-0.8 s on both sides here: a cost of the interpreter's set-up, not of checking."""
    what = f"{baseline}'s code" if baseline else "one database per check"
    say(f"timing kit check {name} --profile none: before ({what}) and now, a first run each, then {rounds} rounds")
    figure = f"kit check {name} --profile none, now / before"
    befores: list[float] = []
    nows: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kit-bench-pycache-") as pycache:

        def timed(side: str) -> float | None:
            if side == "before":
                return _check_seconds(name, per_check=baseline is None, baseline=baseline, pycache=pycache)
            return _check_seconds(name, per_check=False, pycache=pycache)

        cold_before, cold_now = timed("before"), timed("now")
        if cold_before is None or cold_now is None:
            return Goal(figure, None, target, True, "a run did not pass or the backend is unreachable")
        for i in range(max(rounds, 1)):
            sides = ("before", "now") if i % 2 == 0 else ("now", "before")
            times = {side: timed(side) for side in sides}
            before, now = times["before"], times["now"]
            if before is None or now is None:
                return Goal(figure, None, target, True, "a run did not pass or the backend is unreachable")
            befores.append(before)
            nows.append(now)
    ratios = [n / b for n, b in zip(nows, befores)]
    return Goal(figure, statistics.median(ratios), target, True,
                f"median of {len(ratios)} rounds, bytecode cached: {statistics.median(befores):.1f} s before ({what}), "
                f"{statistics.median(nows):.1f} s now; round ratios " + ", ".join(f"{r:.2f}" for r in ratios)
                + f"; first runs, compiling everything: {cold_before:.1f} s before, {cold_now:.1f} s now "
                f"({cold_now / cold_before:.2f})")


_MACHINE_RUN = """
import json, sys, time
from kit.backends import resolve
from kit.machines.machine import run_machine
seed, full = int(sys.argv[1]), sys.argv[2] == "full"
backend = resolve("sqlite")
wall, cpu = time.perf_counter(), time.process_time()
try:
    outcome = run_machine(backend, "quick", seed, shrink=False, **({"full_compare": True} if full else {}))
finally:
    backend.close()
print(json.dumps({"examples": outcome.examples, "seconds": time.perf_counter() - wall,
                  "cpu": time.process_time() - cpu, "ok": outcome.ok}))
"""
"""One reference-machine run on SQLite in a fresh process (``seed``, ``full`` or ``touched``): one JSON line. It
uses only what every version of the kit has, so an old checkout runs it too."""

MACHINE_SEEDS = 20261129
"""The first seed of the fault-machine figure (the kit's pinned seed; further seeds count up)."""


def _machine_run(python: str, cwd: str | None, seed: int, mode: str) -> dict[str, float] | None:
    """One fault-machine run; None if it failed or did not pass (a figure from a broken run means nothing)."""
    done = subprocess.run([python, "-c", _MACHINE_RUN, str(seed), mode], capture_output=True, text=True,
                          cwd=cwd, check=False)
    try:
        result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None
    return result if done.returncode == 0 and result.get("ok") else None


def machine_speed(baseline: str | None, seeds: int, say: Callable[[str], None]) -> Goal:
    """Reference fault-machine examples/s on SQLite, this code over "before" (see the module docstring):
    both sides alternate seed by seed, each run in a fresh process; the ratio of examples per wall second
    (examples per CPU second in the detail)."""
    if baseline is not None:
        python = str(Path(baseline) / ".venv" / "bin" / "python")
        before: tuple[str, str | None, str] = (python, baseline, "touched")
        how = f"before: {baseline} (its own code)"
    else:
        before = (sys.executable, None, "full")
        how = "before: this code comparing the whole state after every step (understates the gain)"
    say(f"timing the reference fault machine on SQLite, {seeds} seed(s) per side; {how}")
    totals = {"before": [0.0, 0.0, 0.0], "now": [0.0, 0.0, 0.0]}
    for seed in range(MACHINE_SEEDS, MACHINE_SEEDS + max(seeds, 1)):
        for side, (python, cwd, mode) in (("before", before), ("now", (sys.executable, None, "touched"))):
            run = _machine_run(python, cwd, seed, mode)
            if run is None:
                return Goal("fault-machine examples/s on SQLite, now / before", None, 2.0, False,
                            f"the {side} run of seed {seed} failed or did not pass; {how}")
            for i, key in enumerate(("examples", "seconds", "cpu")):
                totals[side][i] += run[key]
    (ex_b, s_b, c_b), (ex_n, s_n, c_n) = totals["before"], totals["now"]
    ratio = (ex_n / s_n) / (ex_b / s_b)
    return Goal("fault-machine examples/s on SQLite, now / before", ratio, 2.0, False,
                f"{ex_n / s_n:.1f} vs {ex_b / s_b:.1f} examples/s (per CPU second {ex_n / c_n:.1f} vs "
                f"{ex_b / c_b:.1f}: {(ex_n / c_n) / (ex_b / c_b):.2f}x); {how}")


if __name__ == "__main__":
    sys.exit(main())
