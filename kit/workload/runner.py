"""``kit stress``: the concurrent fault workload, from provisioning to verdicts.

Phases, each recorded in the history: *faults* (deciders, command workers,
timer loops and the client run for ``duration_s`` while the nemesis delivers
its seeded schedule), *heal* (no more faults; crashed workers restart, skews
end, no new runs), *drain* (until every started run ended, the workload went
quiet for ``quiet_s``, or ``drain_s`` passed), *stop*, then the final state is
read and every checker judges history and state. The database is the kit's
own, dropped at the end; the report folder keeps everything needed to explain
a verdict.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.checkers import Status, Verdict, check_stress, merge, read_final_state
from kit.contract import Backend, ClockMode, Database, Storage
from kit.faults.nemesis import Fault, Nemesis, plan_faults
from kit.runtime.module import load_workflows
from kit.workload.actor import Actor
from kit.workload.client import ClientActor, ClockSampler
from kit.workload.config import Context, StressConfig
from kit.workload.history import Recorder
from kit.workload.report import StressReport
from kit.workload.roles import DeciderActor, TimerActor, WorkerActor
from kit.workload.telemetry import Tracker

__all__ = ["Progress", "StressResult", "run_stress"]


@dataclass(frozen=True)
class Progress:
    """What the screen shows while a stress run goes."""

    phase: str
    t: float
    runs_started: int
    runs_ended: int
    commits: int
    completions: int
    faults: int
    crashes: int


@dataclass
class StressResult:
    """A finished stress run: its verdicts and where everything was written."""

    config: StressConfig
    folder: Path
    history: Path
    verdicts: list[Verdict]
    plan: list[Fault]
    summary: dict[str, Any]
    drain: dict[str, Any]
    runs_started: int
    elapsed_s: float
    transactions: int
    """Transactions the workload's own stores committed (the benchmark's figure)."""
    phase_transactions: tuple[int, int] = (0, 0)
    """(committed, of which wrote) transactions during the faults phase alone."""
    phase_runs_ended: int = 0
    """Runs seen ending during the faults phase."""
    errors: list[str] = field(default_factory=list)
    notes: dict[str, int] = field(default_factory=dict)
    mode: str = "free"
    """Which mode ran: ``deterministic`` (seeded scheduler) or ``free`` (threads race)."""
    schedule: list[str] = field(default_factory=list)
    """Deterministic mode: the participant chosen at each step (the schedule a bundle replays)."""
    skipped: int = 0
    """Replays: recorded choices that were not eligible at their turn (0 for a faithful replay)."""
    bundle: Path | None = None
    """Deterministic mode, on a violation: the saved replay bundle."""
    clock_us: tuple[int, int] = (0, 0)
    """Deterministic mode: the store clock at the start and at the end of the run."""
    faults_wall_s: float = 0.0
    steps_log: list[Any] = field(default_factory=list)
    """Deterministic mode: each step's participant, park label and history position (for narration)."""
    """Deterministic mode: wall-clock seconds the faults phase took (its length is store-clock time)."""

    @property
    def status(self) -> Status:
        return merge(v.status for v in self.verdicts)

    @property
    def ok(self) -> bool:
        return self.status is not Status.INVALID and not self.errors


def run_stress(
    backend: Backend,
    config: StressConfig,
    *,
    report_root: Path | str = "reports",
    spec: str | None = None,
    url: str | None = None,
    command: str = "",
    on_progress: Callable[[Progress], None] | None = None,
    schedule: Sequence[str] | None = None,
    save_bundle: bool = True,
) -> StressResult:
    """Run one stress workload on a fresh kit-owned database of ``backend`` (dropped afterwards).

    ``config.mode`` picks deterministic (a seeded scheduler; ``schedule`` replays a recorded one
    and ends the run where it ends) or free-running threads. A deterministic run that violates an
    invariant saves ``bundle.json`` in its report folder (unless ``save_bundle`` is false).
    """
    config.validate()
    if config.mode == "deterministic":
        from kit.workload.deterministic import require_schedulable

        require_schedulable(backend)
    spec = spec or str(getattr(backend, "name", "?"))
    report = StressReport.open(report_root, backend, config, spec, url, command)
    database = backend.provision()
    try:
        if config.mode == "deterministic":
            from kit.workload.deterministic import DeterministicRun

            return DeterministicRun(database, backend, config, report, on_progress, schedule=schedule,
                                    spec=spec, url=url, save_bundle=save_bundle).run()
        if schedule is not None:
            from kit.contract.errors import ConfigurationError

            raise ConfigurationError("a schedule replays only in deterministic mode: set mode='deterministic'")
        return _Run(database, backend, config, report, on_progress).run()
    except BaseException as exc:
        with contextlib.suppress(Exception):  # the original error matters more
            report.abort(f"the stress run stopped: {type(exc).__name__}: {exc}")
        raise
    finally:
        database.drop()


class _Run:
    def __init__(self, database: Database, backend: Backend, config: StressConfig, report: StressReport,
                 on_progress: Callable[[Progress], None] | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.database, self.backend, self.config, self.report = database, backend, config, report
        self.on_progress = on_progress
        self.recorder = Recorder(report.folder / "history.jsonl", clock=clock)
        self.tracker = Tracker()
        self.recorder.listeners.append(self.tracker)
        self.registry = load_workflows()
        self.ctx = Context(database, backend.capabilities, config, self.recorder, self.registry)
        self.client = ClientActor(self.ctx, self.tracker)
        self.actors: list[Actor] = [
            *(DeciderActor(self.ctx, i) for i in range(config.workers)),
            *(WorkerActor(self.ctx, i) for i in range(config.workers)),
            *(TimerActor(self.ctx, i) for i in range(config.timer_loops)),
            self.client,
        ]
        self.sampler = ClockSampler(self.ctx)
        self.phase = "setup"
        self._flushed_second = 0

    def run(self) -> StressResult:
        cfg, rec = self.config, self.recorder
        started = time.monotonic()
        setup = self.database.open(self.ctx.tenants[0], clock=ClockMode.DATABASE)
        try:
            setup.migrate()
        finally:
            setup.close()
        plan = self._plan_and_record()
        self.sampler.start()
        self._wait_for_first_sample()
        self.client.register()
        by_name = {actor.name: actor for actor in self.actors}
        for actor in self.actors:
            actor.start()
        self._phase("faults")
        nemesis = Nemesis(plan, lambda fault: by_name[fault.target].deliver(fault), time.monotonic()).start()
        at_start = self._transactions()
        phase_end = time.monotonic() + cfg.duration_s
        while time.monotonic() < phase_end:
            self._tick(min(0.25, phase_end - time.monotonic()))
        nemesis.stop()
        at_end = self._transactions()
        phase = (at_end[0] - at_start[0], at_end[1] - at_start[1])
        phase_ended = self.tracker.ended_count()
        self.ctx.healed.set()
        for actor in self.actors:
            actor.heal()
        self._phase("drain")
        drain = self._drain()
        rec.info("kit", "drain", value=drain)
        self._phase("stop")
        self.ctx.stopping.set()
        for actor in self.actors:
            if not actor.join(30):
                self.ctx.error(f"{actor.name} did not stop within 30 s of the end of the run")
        self.sampler.stop()
        rec.close()
        self.report.flush(self.tracker, 1 << 30)
        verdicts = self._check(ClockMode.DATABASE)
        elapsed = time.monotonic() - started
        status = merge(v.status for v in verdicts)
        folder = self.report.finish(verdicts, elapsed, 1 if status is Status.INVALID or self.ctx.errors else 0)
        return StressResult(cfg, folder, rec.path, verdicts, plan, self.tracker.summary(), drain,
                            len(self.client.started), elapsed, self._transactions()[0], phase, phase_ended,
                            list(self.ctx.errors), dict(self.ctx.notes))

    # -- shared by both modes ----------------------------------------------------------
    def _plan_and_record(self, **extra: Any) -> list[Fault]:
        """The nemesis's seeded plan, written to ``plan.json``, and the run's config as the history's first
        record (``extra``: what the mode adds, e.g. ``mode``, ``replay``)."""
        cfg = self.config
        slots: dict[str, list[str]] = {}
        for actor in self.actors:
            slots.setdefault(actor.role, []).append(actor.name)
        plan = plan_faults(cfg.seed, cfg.duration_s, cfg.faults, slots, cfg.lease_s, cfg.fault_interval_s)
        self.report.write_json("plan.json", [f.to_json() for f in plan])
        self.recorder.info("kit", "config", value={
            "config": cfg.to_json(), "backend": getattr(self.backend, "name", "?"),
            "capabilities": sorted(c.value for c in self.backend.capabilities.supported),
            "faults_planned": len(plan), **extra})
        return plan

    def _check(self, clock: ClockMode) -> list[Verdict]:
        """The *check* phase: every checker over the closed history and the final state read with ``clock``
        (streamed, see :func:`~kit.checkers.check_stress`)."""
        self._phase("check")
        definitions = [(m.name, m.version) for m in self.registry]
        return check_stress(self.recorder.path,
                            lambda spill: read_final_state(self.database, self.ctx.tenants, definitions, clock=clock,
                                                           spill=spill),
                            self.registry, self.config.replay_limit)

    # -- phases ---------------------------------------------------------------------
    def _phase(self, name: str) -> None:
        self.phase = name
        if name != "check":
            self.recorder.info("kit", "phase", value=name)
        self._show()

    def _show(self) -> None:
        if self.on_progress is None:
            return
        t = self.tracker
        self.on_progress(Progress(self.phase, self.recorder.now(), len(self.client.started), t.ended_count(),
                                  t.ok("commit"), t.ok("complete"), sum(t.faults.values()), t.crashes))

    def _tick(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))
        now = int(self.recorder.now())
        if now > self._flushed_second:
            self._flushed_second = now
            self.report.flush(self.tracker, now)
        self._show()

    def _wait_for_first_sample(self) -> None:
        deadline = time.monotonic() + 5.0
        while self.recorder.store_us is None and time.monotonic() < deadline:
            time.sleep(0.005)

    def _drain(self) -> dict[str, Any]:
        cfg = self.config
        began = time.monotonic()
        drain_t0 = self.recorder.now()
        deadline = began + cfg.drain_s
        observers: dict[str, Storage] = {}
        open_runs: list[tuple[str, str]] = []
        try:
            while True:
                self._tick(0.25)
                open_runs = self._open_runs(observers)
                quiet = self.recorder.now() - max(self.tracker.progress_at(), drain_t0)
                if not open_runs and not self.client.outstanding():
                    return self._drained(True, open_runs, began, progressing=False)
                if quiet >= cfg.quiet_s:
                    return self._drained(True, open_runs, began, progressing=False)
                if time.monotonic() >= deadline:
                    return self._drained(False, open_runs, began, progressing=True)
        finally:
            for store in observers.values():
                with contextlib.suppress(Exception):
                    store.close()

    def _drained(self, quiescent: bool, open_runs: list[tuple[str, str]], began: float,
                 progressing: bool) -> dict[str, Any]:
        return {"quiescent": quiescent, "progressing": progressing, "open": len(open_runs),
                "open_sample": [f"{t}/{r}" for t, r in open_runs[:5]], "seconds": round(time.monotonic() - began, 2),
                "bound_s": self.config.drain_s, "quiet_s": self.config.quiet_s}

    def _open_runs(self, observers: dict[str, Storage]) -> list[tuple[str, str]]:
        """Started runs not yet seen ending (confirmed with the store, at most 200 reads a call)."""
        candidates = [(t, r) for t, r, _ in self.client.started if not self.tracker.has_ended(t, r)]
        for tenant, run_id in candidates[:200]:
            try:
                store = observers.get(tenant) or self.database.open(tenant, clock=ClockMode.DATABASE)
                observers[tenant] = store
                run = store.get_run(run_id)
            except Exception:  # noqa: BLE001 - counted as open; the next round asks again
                observers.pop(tenant, None)
                continue
            if run is not None and run.status.terminal:
                self.tracker.mark_ended(tenant, run_id)
        return [(t, r) for t, r in candidates if not self.tracker.has_ended(t, r)]

    def _transactions(self) -> tuple[int, int]:
        counts = [a.transactions() for a in self.actors]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)
