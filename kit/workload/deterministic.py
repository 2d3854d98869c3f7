"""``kit stress --mode deterministic``: the same workload, one actor moving at a time, chosen by the seed.

The deciders, command workers, timer loop and client are the free mode's
actors, each on its own thread with its own real connections; the store clock
is the test clock, advanced by the ``clock`` participant. A seeded
:class:`~kit.workload.scheduler.Scheduler` picks whose statement runs next;
the nemesis's faults are delivered between steps, when the store clock passes
their planned instant. Phases are the free mode's, timed by the store clock:
*faults* for ``duration_s``, then *heal* and *drain* (until every run ended,
nothing progressed for ``quiet_s``, or ``drain_s`` passed), then every
participant is halted in order and the checkers judge history and state.

Guarantee: given the backend, the settings and the schedule, the history (and
so every verdict and witness) is the same, run after run; a run that violates
an invariant saves ``bundle.json`` beside its history (see
:mod:`kit.workload.replay`). The one source of divergence left is a lock
wait that resolves on its own (a deadlock victim, a lock timeout): it is
reported as a harness note. Waits that end when a closed or dropped session
is rolled back are not among them: the closing actor ends its session on the
server before it moves on (:meth:`~kit.workload.actor.Actor._gone`).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from typing import Any

from kit.checkers import Status, merge
from kit.clock import to_micros
from kit.contract import Backend, ClockMode, Database
from kit.workload.config import StressConfig
from kit.workload.report import StressReport
from kit.workload.runner import Progress, StressResult, _Run
from kit.workload.scheduler import Scheduler, Stalled
from kit.workload.virtual import ClockTicker, Virtual, block_probe, session_of

__all__ = ["DeterministicRun", "require_schedulable"]

EXACT_BLOCK_S = 0.004
"""The short wait before asking the server whether a statement waits on a lock (the probe is exact)."""
GUESS_BLOCK_S = 0.05
"""Without a probe, a statement still running after this long, while another participant holds a
transaction open, is taken as blocked."""
FORCE_BOUND = 1000
"""Forced wake-ups in a row (nothing eligible) after which the run is declared stuck."""
REPORT_EVERY = 500
"""Steps between two report flushes and progress lines."""


def require_schedulable(backend: Backend) -> None:
    """Refuse, naming the fix, a backend the scheduler cannot interleave statement by statement."""
    from kit.contract import Capability
    from kit.contract.errors import ConfigurationError

    missing = [c.value for c in (Capability.TEST_CLOCK, Capability.STATEMENT_FAULTS) if c not in backend.capabilities]
    if missing:
        raise ConfigurationError(f"deterministic mode needs the {' and '.join(missing)} capabilities (a store clock "
                                 "the kit advances, statements it can hold): run with --mode free")
    if str(getattr(backend, "name", "")) == "memory":
        raise ConfigurationError("deterministic mode cannot schedule the memory engine (it locks in-process, "
                                 "outside any statement the scheduler sees): run with --mode free")


class DeterministicRun(_Run):
    """One deterministic stress run (see the module docstring)."""

    def __init__(self, database: Database, backend: Backend, config: StressConfig, report: StressReport,
                 on_progress: Callable[[Progress], None] | None, *, schedule: Sequence[str] | None = None,
                 spec: str = "", url: str | None = None, save_bundle: bool = True) -> None:
        probe = block_probe(backend, database)
        self.scheduler = Scheduler(config.seed, schedule=schedule, probe=probe, entries=lambda: self.recorder.entries,
                                   block_s=EXACT_BLOCK_S if probe is not None else GUESS_BLOCK_S,
                                   session_of=session_of)
        self.virtual = Virtual(self.scheduler)
        super().__init__(database, backend, config, report, on_progress, clock=self.virtual.seconds)
        self.ctx.det = self.virtual
        self.spec, self.url, self.save_bundle = spec, url, save_bundle
        self.replaying = schedule is not None
        self.ticker: ClockTicker | None = None

    def run(self) -> StressResult:
        cfg, rec, virtual = self.config, self.recorder, self.virtual
        started = time.monotonic()
        setup = self.database.open(self.ctx.tenants[0], clock=ClockMode.TEST)
        try:
            setup.migrate()
            virtual.start_us = virtual.now_us = to_micros(setup.now())
        finally:
            setup.close()
        rec.sampled(virtual.now_us)
        plan = self._plan_and_record(mode="deterministic", replay=self.replaying)
        self.client.register()
        self.ticker = ClockTicker(self.database, self.ctx.tenants[0], virtual, rec, cfg.seed, cfg.lease_s)
        by_name = {actor.name: actor for actor in self.actors}
        for actor in self.actors:
            actor.start()
        self.ticker.start()
        self._phase("faults")
        faults = collections.deque(plan)
        phase, drain_t0, steps, forced = "faults", 0.0, 0, 0
        at_start = self._transactions()
        wall_faults = time.monotonic()
        phase_tx, phase_ended, phase_wall = (0, 0), 0, 0.0
        drain: dict[str, Any] = {}
        try:
            while True:
                self.scheduler.settle()
                t = virtual.seconds()
                while phase == "faults" and faults and faults[0].at_s <= t:
                    fault = faults.popleft()
                    by_name[fault.target].deliver(fault)
                if phase == "faults" and t >= cfg.duration_s:
                    at_end = self._transactions()
                    phase_tx = (at_end[0] - at_start[0], at_end[1] - at_start[1])
                    phase_ended, phase_wall = self.tracker.ended_count(), time.monotonic() - wall_faults
                    self.ctx.healed.set()
                    for actor in self.actors:
                        actor.heal()
                    phase, drain_t0 = "drain", t
                    self._phase("drain")
                if phase == "drain":
                    drain = self._drain_state(drain_t0)
                    if drain:
                        break
                choice = self.scheduler.step()
                if choice is None:
                    if self.scheduler.exhausted:
                        drain = self._ended("the replayed schedule ended", drain_t0, phase)
                        break
                    waiting = self.scheduler.waiting()
                    if not waiting:
                        drain = self._ended("no participant left to run", drain_t0, phase)
                        break
                    # Nothing can move (e.g. a paused worker holds SQLite's write lock, which the clock needs):
                    # a sleeper holding a transaction open wakes early, else the earliest sleeper. A rule of
                    # the state, so a replay does the same.
                    wake = min(waiting, key=lambda p: (not p.in_tx, int(p.meta.get("wake", 1 << 62)), p.order))
                    self.scheduler.force(wake.name)
                    forced += 1
                    if forced > FORCE_BOUND:
                        self.ctx.error(f"the deterministic run could not move for {FORCE_BOUND} forced steps: "
                                       f"{', '.join(p.name + ' (' + p.label[:40] + ')' for p in waiting)}")
                        drain = self._ended("no participant can move", drain_t0, phase)
                        break
                else:
                    forced = 0
                steps += 1
                if steps >= cfg.max_steps:
                    self.ctx.error(f"the deterministic run reached its bound of {cfg.max_steps} steps")
                    drain = self._ended("step bound", drain_t0, phase)
                    break
                if steps % REPORT_EVERY == 0:
                    self._progress()
        except Stalled as exc:
            self.ctx.error(f"scheduler: {exc}")
            drain = self._ended("stalled", drain_t0, phase)
        except BaseException:  # Ctrl-C or a harness bug: end every participant (rolling back what they
            self.scheduler.halt(timeout=2.0)  # hold) before the database is dropped
            self._close_probe()
            raise
        if phase == "faults":
            at_end = self._transactions()
            phase_tx = (at_end[0] - at_start[0], at_end[1] - at_start[1])
            phase_ended, phase_wall = self.tracker.ended_count(), time.monotonic() - wall_faults
        rec.info("kit", "drain", value=drain)
        self._phase("stop")
        stuck = self.scheduler.halt()
        self._close_probe()
        if stuck:
            self.ctx.error(f"scheduler: {', '.join(stuck)} did not stop within 10 s of being halted")
        if self.scheduler.skipped:
            self.ctx.note(f"replay: {self.scheduler.skipped} recorded choices were not eligible at their turn")
        rec.close()
        self.report.flush(self.tracker, 1 << 30)
        verdicts = self._check(ClockMode.TEST)
        elapsed = time.monotonic() - started
        status = merge(v.status for v in verdicts)
        bundle = None
        names = [p.name for p in self.scheduler.participants()]
        if status is Status.INVALID and self.save_bundle:
            from kit.workload.replay import write_bundle

            bundle = write_bundle(self.report.folder, self.spec, self.url, cfg, names, self.scheduler.choices,
                                  (virtual.start_us, virtual.now_us), verdicts, rec.path,
                                  [step.entries_before for step in self.scheduler.steps])
        self.report.write_json("schedule.json", {"participants": names, "steps": len(self.scheduler.choices),
                                                 "blocks": self.scheduler.blocks, "skipped": self.scheduler.skipped,
                                                 "faults_phase_wall_s": round(phase_wall, 3)})
        folder = self.report.finish(verdicts, elapsed, 1 if status is Status.INVALID or self.ctx.errors else 0)
        result = StressResult(cfg, folder, rec.path, verdicts, plan, self.tracker.summary(), drain,
                              len(self.client.started), elapsed, self._transactions()[0], phase_tx, phase_ended,
                              list(self.ctx.errors), dict(self.ctx.notes), mode="deterministic",
                              schedule=list(self.scheduler.choices), skipped=self.scheduler.skipped, bundle=bundle,
                              clock_us=(virtual.start_us, virtual.now_us), faults_wall_s=phase_wall,
                              steps_log=list(self.scheduler.steps))
        return result

    def _close_probe(self) -> None:
        close = getattr(self.scheduler.probe, "close", None)
        if close is not None:
            close()

    # -- phases ----------------------------------------------------------------------------
    def _drain_state(self, drain_t0: float) -> dict[str, Any]:
        """The drain's outcome once it is over, else ``{}`` (judged on store-clock time)."""
        t = self.virtual.seconds()
        open_runs = [(tenant, run) for tenant, run, _ in self.client.started if not self.tracker.has_ended(tenant, run)]
        if not open_runs and not self.client.outstanding():
            return self._drained_at(True, open_runs, t - drain_t0, progressing=False)
        if t - max(self.tracker.progress_at(), drain_t0) >= self.config.quiet_s:
            return self._drained_at(True, open_runs, t - drain_t0, progressing=False)
        if t - drain_t0 >= self.config.drain_s:
            return self._drained_at(False, open_runs, t - drain_t0, progressing=True)
        return {}

    def _drained_at(self, quiescent: bool, open_runs: list[tuple[str, str]], seconds: float,
                    progressing: bool) -> dict[str, Any]:
        return {"quiescent": quiescent, "progressing": progressing, "open": len(open_runs),
                "open_sample": [f"{t}/{r}" for t, r in open_runs[:5]], "seconds": round(seconds, 2),
                "bound_s": self.config.drain_s, "quiet_s": self.config.quiet_s, "clock": "store"}

    def _ended(self, why: str, drain_t0: float, phase: str) -> dict[str, Any]:
        open_runs = [(tenant, run) for tenant, run, _ in self.client.started if not self.tracker.has_ended(tenant, run)]
        out = self._drained_at(False, open_runs, self.virtual.seconds() - drain_t0 if phase == "drain" else 0.0,
                               progressing=False)
        out["ended"] = why
        return out

    def _progress(self) -> None:
        now = int(self.recorder.now())
        if now > self._flushed_second:
            self._flushed_second = now
            self.report.flush(self.tracker, now)
        self._show()
