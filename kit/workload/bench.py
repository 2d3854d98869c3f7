"""Stress benchmarks (figures, not assertions): ``nox -s stress_bench`` or ``python -m kit.workload.bench``.

1. *Transaction rate*: the stress loop in both modes (free-running threads,
   and the deterministic scheduler: one statement at a time, on the store
   clock) (recording every operation, fault
   plumbing armed but no faults) against a plain driver loop doing the same
   SQL -- the runtime's own :class:`~kit.runtime.Runtime` threads and a plain
   client keeping as many runs in flight -- on the same backend, in the same
   process, one after the other, for the same time. Committed transactions are
   counted by a statement hook on the workers' stores in both; the ratio says
   what the stress harness costs.
2. *Peak memory*: a stress run with every fault, and one ten times longer,
   each in a fresh process; peak RSS after the workload and after checking,
   and the checking phase's own peak (the Python heap allocated from the start
   of the check phase, by ``tracemalloc``). The history streams to disk, so the
   workload's peak should not grow with the run's length; checking spills the
   indexed history and the final state to a scratch file
   (:func:`kit.checkers.check_stress`), so its peak should not either. The
   process's peak RSS is set by the workload (a high-water mark): it cannot show
   what checking costs when checking costs less, hence the separate figure.

    python -m kit.workload.bench [--backend sqlite] [--seconds 5] [--workers 4] [--runs 16] [--skip-memory]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

from kit.backends import resolve
from kit.contract import Backend, ClockMode, Database, StatementHook, Storage
from kit.faults.points import StressFaults
from kit.runtime.module import load_workflows
from kit.runtime.scenarios import HANDLERS, SCENARIOS
from kit.runtime.service import Runtime, RuntimeConfig
from kit.workload.config import DEFAULT_SCENARIOS, StressConfig

__all__ = ["main", "plain_rate", "stress_rate"]


class _CountingDatabase:
    """A database whose stores count their transactions (the same hook class the stress run uses)."""

    def __init__(self, inner: Database) -> None:
        self.inner, self.label = inner, inner.label
        self.hooks: list[StressFaults] = []
        self._lock = threading.Lock()

    def open(self, tenant_id: str = "default", *, clock: ClockMode = ClockMode.TEST,
             migrations: Any = None, statement_hook: StatementHook | None = None) -> Storage:
        hook = StressFaults()
        with self._lock:
            self.hooks.append(hook)
        return self.inner.open(tenant_id, clock=clock, migrations=migrations, statement_hook=hook)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return sum(h.committed for h in self.hooks), sum(h.writes for h in self.hooks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def stress_rate(backend: Backend, seconds: float, workers: int, runs: int, mode: str = "free") -> dict[str, float]:
    """Transactions per wall-clock second of the stress loop, every operation recorded, no fault.

    ``mode="deterministic"``: the scheduler's run, whose faults phase lasts ``seconds`` of *store*
    clock; its rate is divided by the wall time that phase took.
    """
    import tempfile

    from kit.workload.runner import run_stress

    config = StressConfig(seed=1, workers=workers, runs=runs, duration_s=seconds, faults=(), tenants=1, mode=mode)
    with tempfile.TemporaryDirectory(prefix="kit-bench-") as root:
        result = run_stress(backend, config, report_root=root)
    committed, writes = result.phase_transactions
    wall = result.faults_wall_s if mode == "deterministic" else seconds
    wall = max(wall, 1e-9)
    ops = sum(sum(v for k, v in kinds.items() if k in ("ok", "fail", "info"))
              for kinds in result.summary["operations"].values())
    return {"tx_per_s": committed / wall, "write_tx_per_s": writes / wall,
            "runs_ended_per_s": result.phase_runs_ended / wall, "wall_s": wall,
            "operations_recorded": ops, "valid": float(result.ok), "steps": float(len(result.schedule))}


def plain_rate(backend: Backend, seconds: float, workers: int, runs: int) -> dict[str, float]:
    """Transactions per second of the runtime's own loops and a plain client, nothing recorded."""
    registry = load_workflows()
    database = backend.provision()
    counting = _CountingDatabase(database)
    try:
        client = counting.open("t0", clock=ClockMode.DATABASE)
        client.migrate()
        registry.register(client)
        config = RuntimeConfig(decision_lease=StressConfig().lease, command_lease=StressConfig().lease,
                               idle_max_s=0.05, timer_idle_max_s=0.01)
        runtime = Runtime(counting, registry, HANDLERS, tenant_id="t0", clock=ClockMode.DATABASE,
                          deciders=workers, workers=workers, timer_loops=1, config=config)
        scenarios = [SCENARIOS[name] for name in DEFAULT_SCENARIOS]
        with runtime:
            before = counting.counts()
            started, n, deadline = 0, 0, time.monotonic() + seconds
            while time.monotonic() < deadline:
                if started - runtime.stats.terminal_runs() < runs:
                    scenario = scenarios[n % len(scenarios)]
                    data = scenario.make_input(n)
                    run_id = f"t0-{scenario.name}-{n:06d}"
                    client.start_run(run_id, registry[scenario.workflow].ref, data,
                                     idempotency_key=f"{scenario.name}-{n:06d}")
                    for name, payload in scenario.signals(data):  # sent twice, as the stress client does
                        for _ in range(2):
                            client.send_signal(run_id, name, payload, f"{name}-{run_id}")
                    runtime.nudge()
                    started, n = started + 1, n + 1
                else:
                    runtime.stats.wait_terminal(runtime.stats.terminal_runs() + 1, 0.01)
            after = counting.counts()
            ended = runtime.stats.terminal_runs()
        client.close()
    finally:
        database.drop()
    return {"tx_per_s": (after[0] - before[0]) / seconds, "write_tx_per_s": (after[1] - before[1]) / seconds,
            "runs_ended_per_s": ended / seconds}


MEMORY_FAULT_INTERVAL_S = 1.0
"""The memory runs inject every fault kind, one every second on average (the default is 0.2 s). At 0.2 s
the pauses (1.3-2 leases, some holding SQLite's write lock) overlap so densely that a run makes little
progress after its first seconds: a 50 s run recorded only 1.8-2.3x the history of a 5 s one, so the
10x/1x ratio would prove nothing; at 1 s it records 6.5-7.7x."""


def _child_memory(spec: str, seconds: float, workers: int, runs: int) -> dict[str, Any]:
    import tempfile

    from kit.workload.runner import Progress, run_stress

    peaks: dict[str, int] = {}

    def progress(p: Progress) -> None:
        if p.phase == "check" and "workload_kb" not in peaks:
            peaks["workload_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            # check_stress begins with a full collection (the workload's garbage, the free lists it
            # filled), so both runs' checking starts from the same allocator state
            tracemalloc.start()

    backend = resolve(spec)
    try:
        with tempfile.TemporaryDirectory(prefix="kit-bench-") as root:
            result = run_stress(backend, StressConfig(seed=7, workers=workers, runs=runs, duration_s=seconds,
                                                      fault_interval_s=MEMORY_FAULT_INTERVAL_S),
                                report_root=root, on_progress=progress)
            check_peak = tracemalloc.get_traced_memory()[1] if tracemalloc.is_tracing() else 0
            tracemalloc.stop()
            with open(result.history, encoding="utf-8") as history:
                entries = sum(1 for _ in history)
    finally:
        backend.close()
    return {"seconds": seconds, "workload_peak_kb": peaks.get("workload_kb", 0),
            "total_peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "check_heap_peak_kb": check_peak // 1024, "history_entries": entries,
            "runs": result.runs_started, "valid": result.ok}


def _memory_in_child(spec: str, seconds: float, workers: int, runs: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "kit.workload.bench", "--child-memory", "--backend", spec, "--seconds", str(seconds),
         "--workers", str(workers), "--runs", str(runs)],
        check=True, capture_output=True, text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.workload.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="sqlite")
    parser.add_argument("--seconds", type=float, default=5.0, help="1x duration (the memory run does 10x)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--child-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_memory:
        print(json.dumps(_child_memory(args.backend, args.seconds, args.workers, args.runs)))
        return 0
    backend = resolve(args.backend)
    try:
        print(f"stress benchmark on {args.backend} ({backend.describe()}), {args.workers} workers, "
              f"{args.runs} runs in flight, {args.seconds:g} s each", flush=True)
        plain = plain_rate(backend, args.seconds, args.workers, args.runs)
        stress = stress_rate(backend, args.seconds, args.workers, args.runs)
        det = stress_rate(backend, args.seconds, args.workers, args.runs, mode="deterministic")
    finally:
        backend.close()
    print(f"  plain driver loop: {plain['tx_per_s']:8.0f} tx/s ({plain['write_tx_per_s']:.0f} writing), "
          f"{plain['runs_ended_per_s']:.1f} runs/s")
    print(f"  stress loop:       {stress['tx_per_s']:8.0f} tx/s ({stress['write_tx_per_s']:.0f} writing), "
          f"{stress['runs_ended_per_s']:.1f} runs/s, {stress['operations_recorded']:.0f} operations recorded")
    print(f"  stress loop, deterministic: {det['tx_per_s']:8.0f} tx/s ({det['write_tx_per_s']:.0f} writing), "
          f"{det['runs_ended_per_s']:.1f} runs/s per wall second ({det['steps']:.0f} scheduler steps in "
          f"{det['wall_s']:.2f} s wall for {args.seconds:g} s of store clock)")
    print(f"  ratio deterministic/free: {det['tx_per_s'] / max(stress['tx_per_s'], 1e-9):.2f} (all transactions), "
          f"{det['runs_ended_per_s'] / max(stress['runs_ended_per_s'], 1e-9):.2f} (runs ended)")
    print(f"  ratio stress/plain: {stress['tx_per_s'] / max(plain['tx_per_s'], 1e-9):.2f} (all transactions), "
          f"{stress['write_tx_per_s'] / max(plain['write_tx_per_s'], 1e-9):.2f} (writing transactions), "
          f"{stress['runs_ended_per_s'] / max(plain['runs_ended_per_s'], 1e-9):.2f} (runs ended)", flush=True)
    if args.skip_memory:
        return 0
    one = _memory_in_child(args.backend, args.seconds, args.workers, args.runs)
    ten = _memory_in_child(args.backend, args.seconds * 10, args.workers, args.runs)
    for label, m in (("1x", one), ("10x", ten)):
        print(f"  memory {label:>3} ({m['seconds']:g} s, {m['runs']} runs, {m['history_entries']} history entries): "
              f"peak RSS {m['workload_peak_kb'] / 1024:.0f} MiB after the workload, "
              f"{m['total_peak_kb'] / 1024:.0f} MiB after checking (tracemalloc on); checking's own heap peak "
              f"{m['check_heap_peak_kb'] / 1024:.1f} MiB")
    print(f"  ratio 10x/1x: {ten['workload_peak_kb'] / max(one['workload_peak_kb'], 1):.2f} (workload), "
          f"{ten['total_peak_kb'] / max(one['total_peak_kb'], 1):.2f} (process peak RSS), "
          f"{ten['check_heap_peak_kb'] / max(one['check_heap_peak_kb'], 1):.2f} (checking heap)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
