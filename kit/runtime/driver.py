"""Run N workflows to completion on a database and check every end: what ``kit run`` does.

:func:`run_workload` migrates, registers the definitions, starts a
:class:`~kit.runtime.service.Runtime`, starts the runs (sending each
scenario's signals from a separate thread, every one twice to exercise
deduplication), waits for every run to end, then checks that each ended as
its scenario says and that a sample replays to exactly its recorded
decisions. :func:`run_scenarios` wraps it in a kit-owned database that is
dropped afterwards.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.contract import Backend, ClockMode, Database, Outcome, Storage, iter_pages
from kit.contract.errors import ConfigurationError, KitError
from kit.runtime.determinism import check_replay
from kit.runtime.module import Registry, load_workflows
from kit.runtime.scenarios import HANDLERS, SCENARIOS, Scenario, verify
from kit.runtime.service import Runtime, RuntimeConfig
from kit.runtime.stats import RuntimeStats

__all__ = ["RunReport", "pick_scenarios", "run_scenarios", "run_workload"]

Progress = Callable[[int, RuntimeStats], None]


@dataclass
class RunReport:
    """What a workload did; ``ok`` when every run ended as expected and every replay matched."""

    label: str
    scenarios: list[str]
    runs: int
    workers: int
    elapsed_s: float = 0.0
    stats: RuntimeStats = field(default_factory=RuntimeStats)
    statuses: Counter[str] = field(default_factory=Counter)
    signals: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    replay_checked: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.errors

    @property
    def decisions(self) -> int:
        return self.stats.decisions

    @property
    def decisions_per_s(self) -> float:
        return self.decisions / self.elapsed_s if self.elapsed_s > 0 else 0.0


def pick_scenarios(name: str) -> list[Scenario]:
    """``all`` or one scenario name (comma-separated names mix them)."""
    if name == "all":
        return list(SCENARIOS.values())
    picked = []
    for part in name.split(","):
        if part not in SCENARIOS:
            raise ConfigurationError(
                f"unknown scenario {part!r}: choose all or one of {', '.join(SCENARIOS)}"
            )
        picked.append(SCENARIOS[part])
    return picked


def _send_signals(
    store: Storage,
    work: queue.Queue[tuple[str, str, object] | None],
    counts: Counter[str],
    nudge: Callable[[], None],
) -> None:
    try:
        while (item := work.get()) is not None:
            run_id, name, payload = item
            for label in ("", "resent "):
                try:
                    receipt = store.send_signal(run_id, name, payload, dedup_key=f"{name}-{run_id}")
                except KitError as exc:  # reported as a problem; the other runs go on
                    counts[f"{label}error: {exc}"] += 1
                    continue
                counts[label + receipt.outcome.value] += 1
                nudge()
    finally:
        store.close()


def run_workload(
    database: Database,
    scenarios: Sequence[Scenario],
    runs: int,
    *,
    workers: int = 4,
    clock: ClockMode = ClockMode.DATABASE,
    timeout_s: float = 300.0,
    registry: Registry | None = None,
    config: RuntimeConfig | None = None,
    replay_sample: int = 2,
    on_progress: Progress | None = None,
    label: str = "",
    tenant_id: str = "default",
) -> RunReport:
    """Run ``runs`` workflows (scenarios round robin) with ``workers`` deciders and command workers."""
    registry = registry or load_workflows()
    report = RunReport(label, [s.name for s in scenarios], runs, workers)
    store = database.open(tenant_id, clock=clock)
    try:
        store.migrate()
        registry.register(store)
        runtime = Runtime(
            database,
            registry,
            HANDLERS,
            tenant_id=tenant_id,
            clock=clock,
            deciders=workers,
            workers=workers,
            config=config or RuntimeConfig(),
            stats=report.stats,
        )
        signals: queue.Queue[tuple[str, str, object] | None] = queue.Queue()
        sender = threading.Thread(
            target=_send_signals,
            name="kit-signals",
            daemon=True,
            args=(database.open(tenant_id, clock=clock), signals, report.signals, runtime.nudge),
        )
        started: dict[str, Scenario] = {}
        runtime.start()
        sender.start()
        t0 = time.perf_counter()
        try:
            for i in range(runs):
                scenario = scenarios[i % len(scenarios)]
                run_id = f"{scenario.name}-{i:06d}"
                data = scenario.make_input(i)
                store.start_run(run_id, registry[scenario.workflow].ref, data, idempotency_key=run_id)
                started[run_id] = scenario
                runtime.nudge()
                for name, payload in scenario.signals(data):
                    signals.put((run_id, name, payload))
            deadline = time.monotonic() + timeout_s
            done, recount = 0, time.monotonic() + 2.0
            while done < runs and time.monotonic() < deadline:
                done = report.stats.wait_terminal(runs, min(0.1, max(0.0, deadline - time.monotonic())))
                if time.monotonic() >= recount:  # a terminal commit whose ack was lost is not counted
                    done, recount = max(done, runs - _open_runs(store)), time.monotonic() + 2.0
                if on_progress is not None:
                    on_progress(done, report.stats)
            report.elapsed_s = time.perf_counter() - t0
        finally:
            signals.put(None)
            runtime.stop()
            sender.join(timeout=30)
        report.errors = list(runtime.errors)
        _check(store, registry, started, report, replay_sample, timeout_s)
    finally:
        store.close()
    return report


def _open_runs(store: Storage) -> int:
    """How many runs of this tenant are not terminal. One pass over all runs: filtering by status
    in separate queries would let a run that moves between them dodge every one."""
    return sum(1 for run in iter_pages(store, page=500) if not run.status.terminal)


def _check(
    store: Storage,
    registry: Registry,
    started: dict[str, Scenario],
    report: RunReport,
    replay_sample: int,
    timeout_s: float,
) -> None:
    sampled: Counter[str] = Counter()
    for run_id, scenario in started.items():
        run = store.get_run(run_id)
        if run is None:
            report.problems.append(f"run {run_id} was acknowledged by start_run but is gone")
            continue
        report.statuses[run.status.value] += 1
        if not run.status.terminal:
            report.problems.append(
                f"run {run_id} did not end within {timeout_s:.0f} s (it is {run.status.value})"
            )
            continue
        problem = verify(scenario, run, store.list_commands(run_id))
        if problem:
            report.problems.append(problem)
        if sampled[scenario.name] < replay_sample:
            sampled[scenario.name] += 1
            report.replay_checked += 1
            check = check_replay(registry.for_run(run), run, store.get_history(run_id))
            report.problems.extend(f"replay of {run_id}: {p}" for p in check.problems)
    unexpected = {
        k: v
        for k, v in report.signals.items()
        if k not in (Outcome.COMMITTED.value, "resent " + Outcome.DUPLICATE.value)
    }
    if unexpected:
        report.problems.append(f"signal sends answered unexpectedly: {unexpected}")


def run_scenarios(
    backend: Backend,
    scenarios: Sequence[Scenario],
    runs: int,
    *,
    workers: int = 4,
    **options: Any,
) -> RunReport:
    """:func:`run_workload` on a fresh kit-owned database of ``backend``, dropped afterwards."""
    database = backend.provision()
    try:
        return run_workload(
            database, scenarios, runs, workers=workers, label=getattr(backend, "name", "?"), **options
        )
    finally:
        database.drop()
